"""vLLM's own client, `vllm bench serve`, beside the workflow's `vllm_serve` cells: the same server, started with
the cell's command (its checkpoint, word vocabulary and engine arguments), the same request count, rate, lengths
and seed; the yardstick an endpoint cell's figures are held to.

For every `vllm_serve` cell of `llm_load` measured `ok` among the records, and for each load of its sweep that was
VALID, the server is started again on a free loopback port (inferbench.engines.endpoint.server: it ends with this
tool) and `vllm bench serve` sends that load's requests: the random dataset (prompt and output lengths uniform
within the cell's range ratio around its prompt and new tokens; the server's tokenizer is the saved word
vocabulary, so the lengths are exact), the cell's offered rate with Poisson arrivals, at most the cell's batch size
in flight (``--max-concurrency``, as the cell's client holds them), EOS ignored, greedy. Its request throughput
and TTFT / TPOT / ITL p50 stand beside the cell's at that load, with the cell's client floor at that load (the same
requests at the same rate against the null server), which says how much of a difference the client alone can make.

Two differences stay by design: the benchmark's prompts are its own random tokens (the cell's: seeded from the
workload's vocabulary), and it times every request of its run, where the cell judges a steady window after a ramp.

    python benchmarks/tools/vllm_bench_serve.py results/cells [--out vllm_bench_serve.json] [--md F.md]
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
import tempfile
from pathlib import Path
from typing import Any

from vllm_bench_latency import vllm_cells

from inferbench.engines.endpoint.server import ServerProcess, free_port, loopback_url
from inferbench.scenarios.llm_load.arrivals import LoadSettings

#: seconds vllm serve may take to become healthy (its start compiles: a minute or more)
START_S = 900.0
#: figures compared, as `vllm bench serve` names their medians, and as the cell's load names them
FIGURES = {"ttft": "median_ttft_ms", "tpot": "median_tpot_ms", "itl": "median_itl_ms"}


def server_command(record: dict[str, Any], port: int) -> list[str]:
    """The cell's own `vllm serve` command, on another port."""
    command = shlex.split(record["engine"]["server_command"])
    command[command.index("--port") + 1] = str(port)
    return command


def bench_command(record: dict[str, Any], load: dict[str, Any], url: str, out: Path) -> list[str]:
    """`vllm bench serve` at one load of the cell: its requests, rate, lengths, range ratio and seed."""
    serving, key = record["serving"], record["cell"]
    settings, model = serving["settings"], record["engine"]["model"]
    ratio = max(settings.get("prompt_range", 0.0), settings.get("output_range", 0.0))
    # as many requests as the cell planned at that rate: its ramp, steady window and the ramp after
    count = LoadSettings.from_dict({**settings, "objective": serving["objective"]}).planned_count(load["offered_per_s"])
    return [
        sys.executable, "-m", "vllm.entrypoints.cli.main", "bench", "serve", "--backend", "openai",
        "--base-url", url, "--endpoint", "/v1/completions", "--model", model, "--tokenizer", model,
        "--dataset-name", "random", "--num-prompts", str(count),
        "--random-input-len", str(serving["prompt_tokens"]), "--random-output-len", str(serving["output_tokens"]),
        "--random-range-ratio", str(ratio), "--request-rate", str(load["offered_per_s"]),
        "--max-concurrency", str(key["batch_size"]), "--seed", str(settings.get("seed", 0)), "--ignore-eos",
        "--temperature", "0", "--percentile-metrics", "ttft,tpot,itl,e2el", "--metric-percentiles", "50,90,99",
        "--save-result", "--result-dir", str(out.parent), "--result-filename", out.name,
    ]  # fmt: skip


def side_by_side(record: dict[str, Any], load: dict[str, Any], bench: dict[str, Any]) -> dict[str, Any]:
    """The cell's load against the benchmark's run: request throughput and the p50s, and their ratios."""
    cell = {"request_per_s": load["request_per_s"], **{f: (load.get(f"{f}_ms") or {}).get("p50") for f in FIGURES}}
    theirs = {"request_per_s": bench["request_throughput"], **{f: bench.get(name) for f, name in FIGURES.items()}}
    floor = record["serving"].get("client_floor") or {}
    # the floor at this load's rate, where the record has it; else the capacity's burst (a queue's TTFT)
    floor = next((at for at in floor.get("sweep") or [] if at.get("load") == load.get("load")), floor)
    return {
        "cell": record["cell"]["cell_id"],
        "load": load.get("load"),
        "offered_per_s": load["offered_per_s"],
        "inferbench": cell,
        "vllm_bench_serve": theirs,
        "cell_over_bench": {k: cell[k] / theirs[k] if cell[k] and theirs[k] else None for k in cell},
        "client_floor_ms": {f: (floor.get(f"{f}_ms") or {}).get("p50") for f in ("ttft", "itl")},
        "vllm": record["engine"].get("vllm"),
    }


def measure(record: dict[str, Any]) -> list[dict[str, Any]]:
    """Each VALID load of the cell's sweep through `vllm bench serve` against its server, started once."""
    import subprocess

    port = free_port()
    with tempfile.TemporaryDirectory() as name:
        folder = Path(name)
        # the cell's environment too: its compile cache, so that the server starts as the cell's later processes did
        environment = record["engine"].get("server_environment")
        server = ServerProcess(server_command(record, port), loopback_url(port), folder / "server.log", environment)
        try:
            server.wait_healthy(START_S)
            rows = []
            for load in record["serving"]["sweep"]:
                if not load.get("valid"):
                    continue
                out = folder / f"bench-{len(rows)}.json"
                done = subprocess.run(bench_command(record, load, server.url, out), capture_output=True, text=True)
                if done.returncode != 0 or not out.exists():
                    raise RuntimeError(f"vllm bench serve failed ({done.returncode}): {done.stderr[-2000:]}")
                rows.append(side_by_side(record, load, json.loads(out.read_text())))
                print(json.dumps(rows[-1]["cell_over_bench"]), flush=True)
            return rows
        finally:
            server.stop()


def markdown(rows: list[dict[str, Any]]) -> str:
    lines = [
        "| load | offered /s | requests/s: cell / bench | TTFT p50 ms: cell / bench | TPOT p50 ms: cell / bench "
        "| ITL p50 ms: cell / bench | client floor: TTFT, ITL ms |",
        "| ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]

    def pair(row: dict[str, Any], name: str) -> str:
        cell, bench, ratio = row["inferbench"][name], row["vllm_bench_serve"][name], row["cell_over_bench"][name]
        return f"{cell:.3g} / {bench:.3g} ({ratio:.3f}×)" if ratio is not None else "–"

    for row in rows:
        floor = row["client_floor_ms"]
        lines.append(
            f"| {row['load']} | {row['offered_per_s']:.3g} | {pair(row, 'request_per_s')} | {pair(row, 'ttft')} "
            f"| {pair(row, 'tpot')} | {pair(row, 'itl')} | {floor['ttft']}, {floor['itl']} |"
        )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("cells", type=Path, help="the records' folder (results/cells)")
    parser.add_argument("--out", type=Path, default=Path("vllm_bench_serve.json"))
    parser.add_argument("--md", type=Path, default=None)
    args = parser.parse_args(argv)
    records = vllm_cells(args.cells, llm_load=True, impl="vllm_serve")
    if not records:
        print(f"no vllm_serve cell of llm_load measured ok under {args.cells}", file=sys.stderr)
        return 2
    rows = [row for record in records for row in measure(record)]
    args.out.write_text(json.dumps(rows, indent=1))
    table = markdown(rows)
    if args.md:
        args.md.write_text(table)
    print(table)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
