"""vLLM's own `vllm bench latency` beside the workflow's vLLM cells: same machine, same checkpoint, same engine
arguments, batch and prompt length; the yardstick a harness around vLLM is held to.

For every vLLM cell `ok` among the records, vLLM's benchmark (the module ``vllm.benchmarks.latency``, run with
its own argument parser: the ``vllm`` command also imports its OpenAI server) runs in fresh processes at the
engine arguments the cell's record holds: once at output length 1 (the prefill), and ``--processes`` times at
the cell's ``new_tokens``. Each run times ``LLM.generate`` over the batch, ``--num-iters`` times after
``--num-iters-warmup``. The request's latency is the median of the full runs' p50s, beside each run's; the time
to the first token is output 1's p50; the time per further token (p50(N) - p50(1)) / (N - 1). Beside them the
cell's own request p50 (and each of its processes'), TTFT p50, TPOT p50 and request mean, and cell / vLLM.
Each run times as many requests as each of the cell's processes did (at least 30), so both sides average over
about as long.

Why several processes: at batch 1 on the lent H100s, vLLM's own request p50 moved between 57 and 98 ms from one
0.4-s block of requests to the next in one process (experiments/vllm_host_pace). A ratio read from one short
run of each side says which pace each met; the runs' spread says how far the ratio can be trusted.

Two differences stay by design: the benchmark samples at temperature 1 (the cells pick greedily), and its
prompts are random ids below 10,000 (the cells': the workload's seeded prompts).

    python benchmarks/tools/vllm_bench_latency.py results/cells [--out vllm_bench_latency.json] [--md F.md]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from inferbench.core.cells import record_section
from inferbench.engines.generation.vllm_engine import compile_cache_dir
from inferbench.scenarios.generation import SECTION as GENERATION_SECTION
from inferbench.scenarios.llm_load import SECTION as LOAD_SECTION
from inferbench.scenarios.llm_load.metrics import spread_pct

#: the benchmark's own entry point, with its own parser (as `vllm bench latency` calls it)
RUN_LATENCY = (
    "import argparse, sys\n"
    "from vllm.benchmarks import latency\n"
    "parser = argparse.ArgumentParser()\n"
    "latency.add_cli_args(parser)\n"
    "latency.main(parser.parse_args(sys.argv[1:]))\n"
)


def vllm_cells(cells_dir: Path, llm_load: bool = False, impl: str = "vllm") -> list[dict[str, Any]]:
    """The records of the vLLM cells of engine ``impl`` that measured (status ok): the in-process engine's by
    default (``vllm_serve``: behind vllm serve); the generation cells, or (``llm_load``) the cells served under
    load. A record from before engines named themselves counts as the in-process engine's."""
    records = []
    for path in sorted(cells_dir.glob("**/*.json")):
        try:
            record = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        if not (isinstance(record, dict) and record.get("status") == "ok" and "vllm" in (record.get("engine") or {})):
            continue
        if record["engine"].get("impl", "vllm") != impl:
            continue
        if (record_section(record, LOAD_SECTION) is not None) == llm_load:
            records.append(record)
    return records


def load_section(record: dict[str, Any]) -> dict[str, Any]:
    """The load sweep of a cell served under load, read from its record of any readable schema."""
    section = record_section(record, LOAD_SECTION)
    if section is None:
        raise ValueError(f"{record['cell'].get('cell_id')} has no {LOAD_SECTION} section: not a cell served under load")
    return section


def side_by_side_all(
    records: list[dict[str, Any]],
    row: Callable[[dict[str, Any]], dict[str, Any]],
    args: argparse.Namespace,
    markdown: Callable[[list[dict[str, Any]]], str],
) -> int:
    """Each record's row (its benchmark run and the ratio), printed as it comes; all of them in ``args.out``
    and, as a Markdown table, in ``args.md``."""
    if not records:
        print(f"no vLLM cell of this kind measured ok under {args.cells}", file=sys.stderr)
        return 2
    rows = []
    for record in records:
        rows.append(row(record))
        print(json.dumps(rows[-1]["cell_over_bench"]), flush=True)
    args.out.write_text(json.dumps(rows, indent=1))
    table = markdown(rows)
    if args.md:
        args.md.write_text(table)
    print(table)
    return 0


def engine_flags(record: dict[str, Any]) -> list[str]:
    """A vLLM cell's engine arguments as vLLM's command-line flags (its benchmarks parse them with
    ``EngineArgs.add_cli_args``): the checkpoint, no tokenizer, and every argument the record holds."""
    engine = record["engine"]
    args = ["--model", engine["checkpoint_dir"], "--skip-tokenizer-init", "--disable-detokenize"]
    for name, value in engine["engine_args"].items():
        flag = "--" + name.replace("_", "-")
        if isinstance(value, bool):
            args.append(flag if value else f"--no-{name.replace('_', '-')}")
        else:
            args += [flag, str(value)]
    return args


def bench_args(record: dict[str, Any], output_len: int, out_json: Path, iters: int, warmup: int) -> list[str]:
    """The benchmark's command-line arguments for a cell: its engine arguments, batch and prompt length."""
    key = record["cell"]
    return [
        *engine_flags(record),
        "--batch-size", str(key["batch_size"]), "--input-len", str(key["seq_len"]),
        "--output-len", str(output_len), "--num-iters", str(iters), "--num-iters-warmup", str(warmup),
        "--output-json", str(out_json),
    ]  # fmt: skip


def in_fresh_process(record: dict[str, Any], script: str, arguments: Callable[[Path], list[str]], what: str) -> Any:
    """``script`` in a fresh Python process with the compile cache the cell's processes used and the thread
    settings they ran with (the engine core inherits them); ``arguments(folder)``: its arguments, which have it
    write its result as JSON to ``folder / "out.json"``; that result."""
    threads = (record.get("environment") or {}).get("thread_env") or {}
    env = dict(os.environ, **{name: str(value) for name, value in threads.items() if value is not None})
    env["VLLM_CACHE_ROOT"] = str(compile_cache_dir(record["engine"]["checkpoint_dir"]))
    with tempfile.TemporaryDirectory() as name:
        folder = Path(name)
        done = subprocess.run(
            [sys.executable, "-c", script, *arguments(folder)], env=env, capture_output=True, text=True
        )
        out = folder / "out.json"
        if done.returncode != 0 or not out.exists():
            raise RuntimeError(f"{what} failed ({done.returncode}): {done.stderr[-2000:]}")
        return json.loads(out.read_text())


def cell_processes(record: dict[str, Any]) -> list[dict[str, Any]]:
    """Each of the cell's timed processes' own figures (its record's repeats; a priming one is timed for none)."""
    return [process for process in (record.get("repeats") or {}).get("per_repeat") or [] if not process.get("prime")]


def matching_iters(record: dict[str, Any], least: int = 30) -> int:
    """As many timed iterations as the cell's longest process timed requests (a GPU cell times 5 s of them),
    at least ``least``: vLLM's pace moves within a second, so both sides should average over as long."""
    return max([least, *(process.get("n_iters") or 0 for process in cell_processes(record))])


def run_bench(record: dict[str, Any], output_len: int, iters: int, warmup: int) -> dict[str, Any]:
    """One run of vLLM's benchmark in a fresh process."""
    result = in_fresh_process(
        record, RUN_LATENCY, lambda folder: bench_args(record, output_len, folder / "out.json", iters, warmup),
        "vllm bench latency",
    )  # fmt: skip
    return {"output_len": output_len, "p50_ms": result["percentiles"]["50"] * 1e3, "mean_ms": result["avg_latency"]
            * 1e3, "iters": len(result["latencies"])}  # fmt: skip


def side_by_side(record: dict[str, Any], one: dict[str, Any], fulls: list[dict[str, Any]]) -> dict[str, Any]:
    """The cell's figures against the benchmark's, per request, first token and further token; the request's
    p50 by process on both sides, with their spreads."""
    key, gen = record["cell"], record_section(record, GENERATION_SECTION) or {}
    tokens = fulls[0]["output_len"]
    full_p50s = [run["p50_ms"] for run in fulls]
    request_ms = statistics.median(full_p50s)
    bench = {
        "request_ms": request_ms,
        "ttft_ms": one["p50_ms"],
        "per_token_ms": (request_ms - one["p50_ms"]) / (tokens - 1),
        # the runs time equally many requests: the mean of their means is the pooled mean
        "request_mean_ms": statistics.fmean(run["mean_ms"] for run in fulls),
    }
    cell_p50s = [process["p50_ms"] for process in cell_processes(record) if process.get("p50_ms")]
    cell = {
        "request_ms": record["latency_ms"]["p50"],
        "ttft_ms": gen["ttft_ms"]["p50"],
        "per_token_ms": gen["tpot_ms"]["p50"],
        "request_mean_ms": record["latency_ms"]["mean"],
    }
    return {
        "cell": key["cell_id"],
        "batch_size": key["batch_size"],
        "prompt": key["seq_len"],
        "new_tokens": tokens,
        "bench_latency": bench,
        "bench_runs": [one, *fulls],
        "inferbench": cell,
        "cell_over_bench": {k: cell[k] / bench[k] for k in bench},
        "request_p50_by_process_ms": {"inferbench": cell_p50s, "bench_latency": full_p50s},
        "request_p50_spread_pct": {"inferbench": spread_pct(cell_p50s), "bench_latency": spread_pct(full_p50s)},
        "vllm": record["engine"]["vllm"],
    }


def markdown(rows: list[dict[str, Any]]) -> str:
    lines = [
        "| batch | prompt | new tokens | request p50: cell / bench | ratio | TTFT p50: cell / bench | ratio "
        "| per token: cell TPOT p50 / bench | ratio | request mean: cell / bench | ratio "
        "| request p50 by process: cell; bench |",
        "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |",
    ]
    for row in rows:
        cell, bench, ratio = row["inferbench"], row["bench_latency"], row["cell_over_bench"]
        by_process = "; ".join(
            ", ".join(f"{v:.1f}" for v in row["request_p50_by_process_ms"][side]) or "–"
            for side in ("inferbench", "bench_latency")
        )
        lines.append(
            f"| {row['batch_size']} | {row['prompt']} | {row['new_tokens']} "
            + "".join(
                f"| {cell[k]:.3f} / {bench[k]:.3f} ms | {ratio[k]:.3f} "
                for k in ("request_ms", "ttft_ms", "per_token_ms", "request_mean_ms")
            )
            + f"| {by_process} ms |"
        )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("cells", type=Path, help="a run's results/cells")
    parser.add_argument(
        "--iters",
        type=int,
        help="timed iterations per run; default: as many requests as each of the cell's "
        "processes timed, at least the benchmark's default 30, so that both sides time about as long",
    )
    parser.add_argument("--warmup", type=int, default=10, help="warm-up iterations per run (the benchmark's default)")
    parser.add_argument("--processes", type=int, default=2, help="fresh processes of the full-length run")
    parser.add_argument("--out", type=Path, default=Path("vllm_bench_latency.json"))
    parser.add_argument("--md", type=Path, help="the side-by-side table as Markdown")
    args = parser.parse_args(argv)

    def row(record: dict[str, Any]) -> dict[str, Any]:
        tokens = (record_section(record, GENERATION_SECTION) or {})["new_tokens"]
        iters = args.iters or matching_iters(record)
        one = run_bench(record, 1, iters, args.warmup)
        return side_by_side(record, one, [run_bench(record, tokens, iters, args.warmup)
                                          for _ in range(args.processes)])  # fmt: skip

    return side_by_side_all(vllm_cells(args.cells), row, args, markdown)


if __name__ == "__main__":
    sys.exit(main())
