"""vLLM's own offline throughput benchmark beside the workflow's vLLM ``llm_load`` cells: the yardstick for a
cell's capacity (its request throughput with a run's requests all queued at once, the batch size of them running).

For every vLLM ``llm_load`` cell ``ok`` among the records, a fresh process builds the engine from the cell's
engine arguments parsed by ``vllm bench throughput``'s own argument parser (``max_num_seqs`` is the cell's
batch size: at most that many requests run at once), then times ``LLM.generate`` over the capacity run's
requests with the benchmark's own function (``vllm.benchmarks.throughput._run_vllm_requests``, what
``run_vllm`` calls), once as a warm-up and ``--runs`` times after it. Requests per second and output tokens
per second per run; beside them the cell's capacity (pooled over its processes, and each process's) and
cell / benchmark.

The requests are the capacity run's own: the same seed, prompt and output lengths
(inferbench.scenarios.llm_load.arrivals), given as token ids, where ``vllm bench throughput`` would draw its random
dataset through a tokenizer (the checkpoints here have none). Both submit every request at once to vLLM's
scheduler, which admits the next as one finishes. One difference stays by design: the benchmark samples at
temperature 1 (the cells pick greedily).
A cell's capacity run lasts 1-2 s on an H100; the host's pace at small batches moves on that scale
(experiments/vllm_host_pace), so each figure comes with its runs' and processes' spread.

    python benchmarks/tools/vllm_bench_throughput.py results/cells [--out F.json] [--md F.md] [--runs 3]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path
from typing import Any

from vllm_bench_latency import engine_flags, in_fresh_process, load_section, side_by_side_all, vllm_cells

from inferbench.scenarios.llm_load.arrivals import LoadSettings
from inferbench.scenarios.llm_load.measure import WARMUP_SEED

#: runs in the fresh process: sys.argv = [-c, requests.json, out.json, runs, engine flags...]
RUN_THROUGHPUT = """
import argparse, json, sys
from vllm import LLM
from vllm.benchmarks import throughput
from vllm.benchmarks.datasets import SampleRequest
from vllm.engine.arg_utils import EngineArgs

planned = json.load(open(sys.argv[1]))
runs = int(sys.argv[3])
parser = argparse.ArgumentParser()
throughput.add_cli_args(parser)
args = parser.parse_args(sys.argv[4:])
def samples(requests):
    return [SampleRequest(prompt={"prompt_token_ids": r["prompt"]}, prompt_len=len(r["prompt"]),
                          expected_output_len=r["max_tokens"]) for r in requests]
llm = LLM.from_engine_args(EngineArgs.from_cli_args(args))
timed = []
for index, requests in enumerate([planned["warmup"]] + [planned["requests"]] * runs):
    elapsed, outputs = throughput._run_vllm_requests(
        llm, samples(requests), 1, True, do_profile=False, prequeue_requests=False, enable_lora=False)
    tokens = sum(len(o.token_ids) for out in outputs for o in out.outputs)
    if index:
        timed.append({"elapsed_s": elapsed, "requests": len(outputs), "output_tokens": tokens})
json.dump(timed, open(sys.argv[2], "w"))
"""


def capacity_requests(record: dict[str, Any]) -> dict[str, list[dict[str, Any]]]:
    """The cell's capacity run's requests and its first warm-up wave's, as the scenario planned them."""
    serving = load_section(record)
    settings = LoadSettings.from_dict(serving["settings"])
    config = json.loads((Path(record["engine"]["checkpoint_dir"]) / "config.json").read_text())

    def plan(seed: int) -> list[dict[str, Any]]:
        requests = settings.plan(
            settings.requests,
            rate=None,
            seed=seed,
            prompt_tokens=serving["prompt_tokens"],
            output_tokens=serving["output_tokens"],
            vocab=int(config["vocab_size"]),
        )
        return [{"prompt": list(r.prompt), "max_tokens": r.max_tokens} for r in requests]

    return {"requests": plan(settings.seed), "warmup": plan(settings.seed + WARMUP_SEED)}


def run_bench(record: dict[str, Any], runs: int) -> list[dict[str, Any]]:
    """The benchmark's timed runs in a fresh process."""

    def arguments(folder: Path) -> list[str]:
        planned = folder / "requests.json"
        planned.write_text(json.dumps(capacity_requests(record)))
        return [str(planned), str(folder / "out.json"), str(runs), *engine_flags(record)]

    timed = in_fresh_process(record, RUN_THROUGHPUT, arguments, "vLLM's throughput benchmark")
    return [
        run | {"request_per_s": run["requests"] / run["elapsed_s"], "output_tokens_per_s": run["output_tokens"]
               / run["elapsed_s"]} for run in timed
    ]  # fmt: skip


def side_by_side(record: dict[str, Any], runs: list[dict[str, Any]]) -> dict[str, Any]:
    """The cell's capacity against the benchmark's median run, per request and per output token."""
    serving = load_section(record)
    capacity = serving["capacity"]
    bench = {k: statistics.median(run[k] for run in runs) for k in ("request_per_s", "output_tokens_per_s")}
    cell = {k: capacity[k] for k in bench}
    return {
        "cell": record["cell"]["cell_id"],
        "max_running": serving["max_running"],
        "requests": capacity["requests"],
        "bench_throughput": bench,
        "bench_runs": runs,
        "inferbench": cell,
        "inferbench_by_process": capacity.get("by_process"),
        "cell_over_bench": {k: cell[k] / bench[k] for k in bench},
        "vllm": record["engine"]["vllm"],
    }


def markdown(rows: list[dict[str, Any]]) -> str:
    lines = [
        "| cell | running | requests/s: cell / bench | ratio | output tokens/s: cell / bench | ratio |",
        "| --- | ---: | ---: | ---: | ---: | ---: |",
    ]
    for row in rows:
        cell, bench, ratio = row["inferbench"], row["bench_throughput"], row["cell_over_bench"]
        lines.append(
            f"| {row['cell']} | {row['max_running']} "
            + "".join(
                f"| {cell[k]:.2f} / {bench[k]:.2f} | {ratio[k]:.3f} " for k in ("request_per_s", "output_tokens_per_s")
            )
            + "|"
        )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("cells", type=Path, help="a run's results/cells")
    parser.add_argument("--runs", type=int, default=3, help="timed runs after one warm-up run")
    parser.add_argument("--out", type=Path, default=Path("vllm_bench_throughput.json"))
    parser.add_argument("--md", type=Path, help="the side-by-side table as Markdown")
    args = parser.parse_args(argv)

    def row(record: dict[str, Any]) -> dict[str, Any]:
        return side_by_side(record, run_bench(record, args.runs))

    return side_by_side_all(vllm_cells(args.cells, llm_load=True), row, args, markdown)


if __name__ == "__main__":
    sys.exit(main())
