"""The workflow's peak vision cells against timm's own benchmark.py, measured in the same lease (not a test).

    python benchmarks/tools/peak_ratios.py --summary results/summary.csv TIMM_RESULT.json [...] [--out-json F]

Each TIMM_RESULT.json is what ``timm_benchmark.py --bench inference --results-format json`` wrote
for one model. Both sides time a batch resident on the GPU, one forward call then a synchronise,
and report items over the summed time of the timed calls (the workflow's ``throughput_per_s``:
batch x calls / their total device time; timm's ``infer_samples_per_sec``: samples / the timed
loop's wall time), so the ratio compares like with like. Prints a Markdown table: every workflow
cell of the model at timm's batch (status, parity, the spread between its processes) and the ratio
of the best parity-valid one.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pandas as pd

#: timm model name -> the workflow's workload
WORKLOADS = {"resnet50": "resnet50", "vit_base_patch16_224": "vit_b16"}


#: the flags benchmarks/gpu_machine/peak_side_by_side.sh gives timm_benchmark.py (its result file does not repeat them)
TIMM_FLAGS = "--precision float16 --channels-last --torchcompile"


def ratios(summary: pd.DataFrame, timm_results: list[dict]) -> tuple[str, list[dict]]:
    lines, rows = [], []
    for timm in timm_results:
        workload, batch = WORKLOADS[timm["model"]], int(timm["infer_batch_size"])
        timm_rate = float(timm["infer_samples_per_sec"])
        cells = summary[(summary.workload == workload) & (summary.batch_size == batch) & (summary.device == "cuda")]
        lines += [
            f"### {workload}, batch {batch}: timm benchmark.py {timm_rate:,.0f} img/s "
            f"({timm.get('infer_step_time')} ms/step; {TIMM_FLAGS})",
            "",
            "| engine | precision | status | img/s | × timm | p50 ms | process spread % | parity rel. L2 | bound |",
            "| --- | --- | --- | ---: | ---: | ---: | ---: | ---: | --- |",
        ]
        for _, cell in cells.sort_values("throughput_per_s", ascending=False, na_position="last").iterrows():
            rate = cell.get("throughput_per_s")
            ratio = rate / timm_rate if pd.notna(rate) else None
            lines.append(
                f"| {cell.engine} | {cell.precision} | {cell.status} | {_num(rate, ',.0f')} | {_num(ratio, '.3f')} "
                f"| {_num(cell.get('latency_p50_ms'), '.3f')} | {_num(cell.get('repeat_p50_spread_pct'), '.1f')} "
                f"| {_num(cell.get('parity_rel_l2'), '.2e')} | {cell.get('bound', '')} |"
            )
        # like with like: timm ran fp16 weights; bf16 and fp8 cells are listed but not the headline
        ok = cells[(cells.status == "ok") & (cells.precision == "fp16")].dropna(subset=["throughput_per_s"])
        best = ok.loc[ok.throughput_per_s.idxmax()] if len(ok) else None
        row = {"workload": workload, "batch": batch, "timm_img_s": timm_rate}
        if best is not None:
            row |= {"best_engine": best.engine, "best_img_s": float(best.throughput_per_s)}
            row["ratio"] = row["best_img_s"] / timm_rate
            lines += ["", f"Best parity-valid fp16 cell: {best.engine}, {row['ratio']:.3f}× timm benchmark.py.", ""]
        else:
            lines += ["", "No parity-valid cell at this batch.", ""]
        rows.append(row)
    return "\n".join(lines), rows


def _num(value: object, spec: str) -> str:
    return format(value, spec) if isinstance(value, int | float) and pd.notna(value) else "–"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("timm_results", nargs="+", type=Path)
    parser.add_argument("--summary", type=Path, default=Path("results/summary.csv"))
    parser.add_argument("--out-json", type=Path)
    args = parser.parse_args()
    timm_results = [json.loads(p.read_text()) for p in args.timm_results]
    text, rows = ratios(pd.read_csv(args.summary), timm_results)
    print(text)
    if args.out_json:
        args.out_json.write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
