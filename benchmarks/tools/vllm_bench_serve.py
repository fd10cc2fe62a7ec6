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
Its per-request lists (``--save-detailed``) give its figures over the cell's window too (``bench_window``), judged
by the cell's own arithmetic: like with like.

Each start of a server differs (on an H200, three starts' TPOT p50s 13% apart:
docs/results/h200/llm_endpoint/2026-11-30-yardstick), and so does the machine over minutes. ``--in-turn R`` holds
both clients to one running server instead: for each VALID load, R rounds, each `vllm bench serve` and the
project's own client (a run-cell of an ``endpoint`` variant at the server's URL, one process, offered the same
rate: the cell's load share of the capacity it was offered, ``capacity_per_s``), every other round in reverse
order. The medians of the rounds stand side by side, with each side's range over its rounds, and the median of
each round's client / bench ratio: a server can move between runs more than the clients differ (docs/generation.md).
``--replay`` adds a side: `vllm bench serve` sending the client's own requests (a timed trace of their arrivals and
lengths, ``write_trace``), so that both tools meet the same arrivals and lengths; the prompts' tokens still differ.

``--floor`` (with ``--in-turn``) puts the null server in the vLLM server's place (inferbench.engines.endpoint.
null_server: canned tokens at once): each client's own floor at each load, the same rounds in turn, so that a
difference between the two clients against vLLM can be held to the difference of their floors. The benchmark's
tokenizer is then the word vocabulary the null server counts. ``--pace FIRST_MS,TOKEN_MS`` paces its streams as a
model would (a first token after FIRST_MS, the next ones TOKEN_MS apart): as many streams run at once as against
vLLM, and each client's figures above the pace are its own cost under that load. ``--loads N`` keeps each cell's N
lowest VALID rates, where a lease's time does not allow them all.

    python benchmarks/tools/vllm_bench_serve.py results/cells [--out vllm_bench_serve.json] [--md F.md]
        [--in-turn 3 [--configfile config/config.yaml] [--replay] [--floor [--pace 25,3.5]]] [--loads N]
"""

from __future__ import annotations

import argparse
import json
import shlex
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import yaml
from vllm_bench_latency import load_section, vllm_cells

from inferbench.core.settings import schema_defaults
from inferbench.engines.endpoint.engine import null_server_command, word_tokenizer
from inferbench.engines.endpoint.server import ServerProcess, free_port, loopback_url
from inferbench.plan.config import validate_config
from inferbench.plan.jobs import RunPlan
from inferbench.scenarios.llm_load.arrivals import LoadSettings, PlannedRequest
from inferbench.scenarios.llm_load.metrics import RequestTrace, window_figures

#: the word vocabulary the benchmark's prompts are drawn from against the null server, which counts words: any size
#: gives exact lengths
FLOOR_VOCAB = 32_000
#: seconds vllm serve may take to become healthy (its start compiles: a minute or more)
START_S = 900.0
#: figures compared, as `vllm bench serve` names their medians, and as the cell's load names them
FIGURES = {"ttft": "median_ttft_ms", "tpot": "median_tpot_ms", "itl": "median_itl_ms"}


def server_command(record: dict[str, Any], port: int) -> list[str]:
    """The cell's own `vllm serve` command, on another port."""
    command = shlex.split(record["engine"]["server_command"])
    command[command.index("--port") + 1] = str(port)
    return command


def bench_command(
    record: dict[str, Any],
    load: dict[str, Any],
    url: str,
    out: Path,
    tokenizer: str | None = None,
    trace: Path | None = None,
) -> list[str]:
    """`vllm bench serve` at one load of the cell: its requests, rate, lengths, range ratio and seed (``tokenizer``:
    another than the cell's model's); with ``trace`` (``write_trace``), the requests of that timed trace instead,
    sent at its arrivals: its lengths, prompts of the benchmark's own tokens."""
    serving, key = load_section(record), record["cell"]
    settings, model = serving["settings"], record["engine"]["model"]
    if trace:
        requests = len(trace.read_text().splitlines())
        dataset = ["--dataset-name", "timed_trace", "--dataset-path", str(trace), "--num-prompts", str(requests),
                   "--timed-trace-chunk-hash-size", str(TRACE_CHUNK)]  # fmt: skip
    else:
        ratio = max(settings.get("prompt_range", 0.0), settings.get("output_range", 0.0))
        # as many requests as the cell planned at that rate: its ramp, steady window and the ramp after
        count = load_settings(record).planned_count(load["offered_per_s"])
        dataset = [
            "--dataset-name", "random", "--num-prompts", str(count),
            "--random-input-len", str(serving["prompt_tokens"]), "--random-output-len", str(serving["output_tokens"]),
            "--random-range-ratio", str(ratio), "--request-rate", str(load["offered_per_s"]),
        ]  # fmt: skip
    return [
        sys.executable, "-m", "vllm.entrypoints.cli.main", "bench", "serve", "--backend", "openai",
        "--base-url", url, "--endpoint", "/v1/completions", "--model", model, "--tokenizer", tokenizer or model,
        *dataset, "--max-concurrency", str(key["batch_size"]), "--seed", str(settings.get("seed", 0)), "--ignore-eos",
        "--temperature", "0", "--percentile-metrics", "ttft,tpot,itl,e2el", "--metric-percentiles", "50,90,99",
        "--save-result", "--save-detailed", "--result-dir", str(out.parent), "--result-filename", out.name,
    ]  # fmt: skip


def side_by_side(record: dict[str, Any], load: dict[str, Any], bench: dict[str, Any]) -> dict[str, Any]:
    """The cell's load against the benchmark's run: request throughput and the p50s, and their ratios."""
    cell = {"request_per_s": load["request_per_s"], **{f: (load.get(f"{f}_ms") or {}).get("p50") for f in FIGURES}}
    theirs = {"request_per_s": bench["request_throughput"], **{f: bench.get(name) for f, name in FIGURES.items()}}
    floor = load_section(record).get("client_floor") or {}
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


def bench_figures(
    record: dict[str, Any],
    load: dict[str, Any],
    url: str,
    out: Path,
    tokenizer: str | None = None,
    trace: Path | None = None,
) -> dict[str, Any]:
    """`vllm bench serve` at one load of the cell against the server at ``url``: its result file's figures."""
    done = subprocess.run(bench_command(record, load, url, out, tokenizer, trace), capture_output=True, text=True)
    if done.returncode != 0 or not out.exists():
        raise RuntimeError(f"vllm bench serve failed ({done.returncode}): {done.stderr[-2000:]}")
    result = json.loads(out.read_text())
    window = bench_window(result, record, load)
    # the run's summary and its window's figures; the per-request lists only served the window
    return {k: v for k, v in result.items() if k not in PER_REQUEST} | ({"window": window} if window else {})


#: the per-request lists of a `vllm bench serve` result (``--save-detailed``)
PER_REQUEST = ("input_lens", "output_lens", "ttfts", "itls", "start_times", "generated_texts", "errors")


def bench_window(result: dict[str, Any], record: dict[str, Any], load: dict[str, Any]) -> dict[str, Any] | None:
    """The benchmark's requests judged as the cell judges its own (``window_figures``): those sent within the
    cell's steady window after its ramp, the run counted from its first request; figures named as the benchmark
    names its own. None without the per-request lists (a benchmark run without ``--save-detailed``).

    The benchmark counts every request of its run, its first and last seconds too; the cell a steady window. The
    window's figures compare like with like. The benchmark times from the moment a request was sent, the cell from
    its scheduled arrival; at a load below capacity the two are within the client's own lag."""
    starts = result.get("start_times")
    if not starts:
        return None
    settings = load_settings(record)
    traces = []
    requests = zip(starts, result["ttfts"], result["itls"], result["output_lens"], result["errors"], strict=True)
    for number, (sent_s, ttft_s, itls_s, tokens, error) in enumerate(requests):
        if error or not tokens:
            continue
        trace = RequestTrace(str(number), sent_s, tokens)
        # one token an arrival, the last arrival holding the rest: the benchmark's ITL is a gap between chunks
        at_s = sent_s + ttft_s
        for made, gap_s in enumerate([0.0, *itls_s], start=1):
            at_s += gap_s
            trace.observe(at_s, tokens if made == len(itls_s) + 1 else min(made, tokens), made == len(itls_s) + 1)
        traces.append(trace)
    if not traces:
        return None
    ramp_s = settings.ramp_s
    window = (ramp_s, ramp_s + settings.window_s(load["offered_per_s"]))
    return bench_named(window_figures(traces, min(starts), window, settings.objective))


def bench_named(step: dict[str, Any]) -> dict[str, Any]:
    """A load's figures as the cell's arithmetic makes them (``window_figures``), named as `vllm bench serve`
    names its own."""
    return {"request_throughput": step["request_per_s"], "arrived_per_s": step["arrived_per_s"],
            **{name: (step.get(f"{f}_ms") or {}).get("p50") for f, name in FIGURES.items()}}  # fmt: skip


def load_settings(record: dict[str, Any]) -> LoadSettings:
    """The cell's load settings, with its objective, as its record keeps them."""
    serving = load_section(record)
    return LoadSettings.from_dict({**serving["settings"], "objective": serving["objective"]})


#: the engine variant and the study of the project's own client in turn with the benchmark (``--in-turn``)
CLIENT, STUDY = "yardstick_client", "yardstick"
#: the side of the rounds each way of sending prompts is (``--client-prompts``): token ids, or text as the benchmark
CLIENT_SIDES = {"token_ids": "client", "words": "client_words"}
#: the side of the rounds where the benchmark replays the client's own requests (``--replay``)
TRACE = "bench_trace"


def client_config(
    config: dict[str, Any], record: dict[str, Any], load: dict[str, Any], url: str, prompts: str = "token_ids"
) -> dict[str, Any]:
    """``config`` (the run's, unvalidated) narrowed to one cell: the project's client (an ``endpoint`` variant) at
    ``url``, in one process, at the cell's shape, lengths, seed and objective, offered ``load``'s rate (its share of
    the capacity the cell was offered) and no search; its prompts sent as ``prompts`` (token ids, or text, as the
    benchmark sends them: the server tokenizes it)."""
    key, serving = record["cell"], load_section(record)
    known = set(schema_defaults("llm_load"))
    capacity = (serving.get("offered_from") or {}).get("capacity_per_s") or load["offered_per_s"] / load["load"]
    llm_load = {k: v for k, v in serving["settings"].items() if k in known}
    llm_load |= {"objective": serving["objective"], "load_shares": [load["load"]], "capacity_per_s": capacity,
                 "search_steps": 0}  # fmt: skip
    variant = {"engine": "endpoint", "url": url, "model": record["engine"]["model"], "prompt_format": prompts,
               "new_tokens": record["engine"]["options"]["new_tokens"]}  # fmt: skip
    study = {"description": "the project's client against a running vLLM server, in turn with vllm bench serve",
             "layout": "llm_load", "scenarios": ["llm_load"], "workloads": [key["workload"]], "engines": [CLIENT],
             "precisions": [key["precision"]], "devices": [key["device"]], "batch_sizes": [key["batch_size"]],
             "seq_lens": [key["seq_len"]], "llm_load": llm_load}  # fmt: skip
    measure = {**(config.get("measure") or {}), "repeats": 1}
    return {**config, "engines": {**config.get("engines", {}), CLIENT: variant}, "studies": {STUDY: study},
            "run": [STUDY], "measure": measure}  # fmt: skip


class MissingInputs(RuntimeError):
    """The project's client's cell would read files that are not there."""


def client_plan(config: dict[str, Any]) -> RunPlan:
    """The plan of ``config`` (``client_config``'s): one cell, the project's client."""
    return RunPlan.of(validate_config(config))


def missing_inputs(config: dict[str, Any]) -> list[str]:
    """The files the project's client's cell reads (its model's description, the parity reference...) that are not
    there yet: the workflow's own cell makes them; without them the client fails only after the server's start and
    the benchmark's first run."""
    plan = client_plan(config)
    return [path for path in plan.inputs(plan.cells[0]).values() if not Path(path).exists()]


def client_requests(config: dict[str, Any]) -> list[PlannedRequest]:
    """The requests the project's client's cell (``client_config``'s) sends at its one load, as its sweep plans
    them: their arrivals, prompt lengths and output lengths."""
    plan = client_plan(config)
    cell = plan.cells[0]
    settings = LoadSettings.from_dict(plan.scenario_settings[cell])
    if settings.capacity_per_s is None:
        raise ValueError("the client's cell offers shares of a given capacity: its config needs capacity_per_s")
    rate = settings.load_shares[0] * settings.capacity_per_s
    # arrivals and lengths are drawn before the prompts' tokens: any vocabulary gives the same ones
    new_tokens = int(plan.variant(cell)["new_tokens"])
    return settings.plan(settings.planned_count(rate), rate=rate, seed=settings.load_seed(0),
                         prompt_tokens=cell.seq_len, output_tokens=new_tokens, vocab=1)  # fmt: skip


#: tokens a timed trace's hash id stands for (`vllm bench serve`'s --timed-trace-chunk-hash-size default)
TRACE_CHUNK = 16


def write_trace(requests: Sequence[PlannedRequest], path: Path) -> Path:
    """``requests`` as a `vllm bench serve` timed trace (``--dataset-name timed_trace``): one JSON line each, its
    arrival, prompt length and output length. Its hash ids are its own: no two prompts share a chunk, as the
    client's random prompts share none. The benchmark decodes each prompt's ids to text; the served word vocabulary
    encodes that text back to as many tokens, so the lengths hold (a subword tokenizer's need not)."""
    lines, next_id = [], 0
    for request in requests:
        chunks = -(-len(request.prompt) // TRACE_CHUNK)
        entry = {"timestamp": request.arrival_s, "input_length": len(request.prompt),
                 "output_length": request.max_tokens, "hash_ids": list(range(next_id, next_id + chunks))}  # fmt: skip
        lines.append(json.dumps(entry))
        next_id += chunks
    path.write_text("\n".join(lines) + "\n")
    return path


def client_figures(config: dict[str, Any], out: Path) -> dict[str, Any]:
    """The project's client: the one cell of ``config`` measured by run-cell in a fresh process; its load's figures,
    named as `vllm bench serve` names its own."""
    plan = client_plan(config)
    argv = [sys.executable, "-m", "inferbench", "run-cell", *plan.run_cell_argv(plan.cells[0], str(out))]
    done = subprocess.run(argv, capture_output=True, text=True)
    record = json.loads(out.read_text()) if out.exists() else {}
    if done.returncode != 0 or record.get("status") != "ok":
        why = record.get("reason") or done.stderr[-2000:]
        raise RuntimeError(f"the client's cell failed ({done.returncode}): {why}")
    return bench_named(load_section(record)["sweep"][0])


def in_turn(rounds: int, sides: dict[str, Callable[[int], dict[str, Any]]]) -> list[dict[str, Any]]:
    """``rounds`` rounds of every side (the benchmark, the project's client...), every other one in reverse order
    (bench, client; client, bench; ...): what drifts over the rounds meets all alike. Each round's figures of each."""
    out = []
    for number in range(rounds):
        order = list(sides) if number % 2 == 0 else list(sides)[::-1]
        figures = {name: sides[name](number) for name in order}
        out.append({"round": number + 1, "first": order[0], **figures})
    return out


def rounds_row(record: dict[str, Any], load: dict[str, Any], rounds: list[dict[str, Any]]) -> dict[str, Any]:
    """The rounds of one load: each side's median and range over its rounds, the benchmark's steady window
    (``bench_window``) a side too where its runs kept one. For each client, against the benchmark's whole runs
    (``_bench``) and against their windows (``_window``): the ratio of the medians (``over``), and the median of
    each round's ratio (``paired``: what drifts from one round to the next meets both sides of a round alike); where
    the benchmark replayed the client's own requests too (``TRACE``), against that run's window (``_trace``)."""
    runs = [{k: v for k, v in r.items() if k not in ("round", "first")} for r in rounds]
    for run in runs:
        for bench in ("bench", TRACE):
            if "window" in run.get(bench, {}):
                run[f"{bench}_window"] = run[bench]["window"]
    keys = {"request_per_s": "request_throughput", **FIGURES}

    def values(name: str, key: str) -> list[float]:
        return [run[name][keys[key]] for run in runs if run.get(name, {}).get(keys[key]) is not None]

    def side(name: str) -> dict[str, Any]:
        return {k: {"median": statistics.median(v), "min": min(v), "max": max(v)} if (v := values(name, k)) else None
                for k in keys}  # fmt: skip

    sides = {name: side(name) for name in runs[0]}
    row = {"cell": record["cell"]["cell_id"], "load": load.get("load"), "offered_per_s": load["offered_per_s"],
           "rounds": rounds, **sides}  # fmt: skip
    yardsticks = {"bench": "bench", "window": "bench_window", "trace": f"{TRACE}_window"}
    for name in CLIENT_SIDES.values():
        for suffix, bench in yardsticks.items():
            if name not in sides or bench not in sides:
                continue
            ours, theirs = sides[name], sides[bench]
            row[f"{name}_over_{suffix}"] = {
                k: ours[k]["median"] / theirs[k]["median"] if ours[k] and theirs[k] else None for k in keys
            }
            paired = {k: [run[name][n] / run[bench][n] for run in runs if run[name].get(n) and run[bench].get(n)]
                      for k, n in keys.items()}  # fmt: skip
            row[f"{name}_paired_{suffix}"] = {k: statistics.median(v) if v else None for k, v in paired.items()}
    return row


def measure(
    record: dict[str, Any],
    rounds: int = 0,
    config: dict[str, Any] | None = None,
    floor: bool = False,
    pace_ms: tuple[float, float] = (0.0, 0.0),
    client_prompts: Sequence[str] = ("token_ids",),
    most_loads: int | None = None,
    replay: bool = False,
) -> list[dict[str, Any]]:
    """Each VALID load of the cell's sweep through `vllm bench serve` against its server, started once; with
    ``rounds``, the project's client too, in turn with it (``in_turn``), from ``config`` (the run's), once for each
    way of sending prompts in ``client_prompts``; with ``replay``, the benchmark a second time, sending the client's
    own requests (``write_trace``): the same arrivals and lengths; with ``floor``, against the null server instead;
    at most ``most_loads`` loads (``valid_loads``)."""
    port = free_port()
    loads = valid_loads(record, most_loads)
    if rounds and loads:
        checked = client_config(config or {}, record, loads[0], loopback_url(port), client_prompts[0])
        if missing := missing_inputs(checked):
            raise MissingInputs(
                f"the project's client reads {', '.join(missing)}, which are not there: make them first "
                f"(snakemake --cores 8 {' '.join(missing)}), or run the workflow's cell, which makes them"
            )
    with tempfile.TemporaryDirectory() as name:
        folder = Path(name)
        tokenizer = None
        if floor:
            tokenizer = str(folder / "words")
            word_tokenizer(FLOOR_VOCAB).save_pretrained(tokenizer)
            paced = ["--first-token-ms", str(pace_ms[0]), "--token-ms", str(pace_ms[1])]
            command, environment = [*null_server_command(port), *paced], None
        else:
            # the cell's environment too: its compile cache, so that the server starts as the cell's later ones did
            command, environment = server_command(record, port), record["engine"].get("server_environment")
        server = ServerProcess(command, loopback_url(port), folder / "server.log", environment)
        try:
            server.wait_healthy(START_S)
            rows = []
            for index, load in enumerate(loads):
                if not rounds:
                    rows.append(side_by_side(record, load, bench_figures(record, load, server.url, folder / "b.json")))
                    print(json.dumps(rows[-1]["cell_over_bench"]), flush=True)
                    continue
                sides = {
                    "bench": lambda n, load=load, i=index: bench_figures(
                        record, load, server.url, folder / f"b{i}-{n}.json", tokenizer
                    )
                }
                if replay:  # every way of sending prompts sends the same requests: the first's
                    trace = write_trace(
                        client_requests(client_config(config or {}, record, load, server.url, client_prompts[0])),
                        folder / f"trace{index}.jsonl",
                    )
                    sides[TRACE] = lambda n, load=load, i=index, trace=trace: bench_figures(
                        record, load, server.url, folder / f"t{i}-{n}.json", tokenizer, trace
                    )
                for prompts in client_prompts:
                    settings = client_config(config or {}, record, load, server.url, prompts)
                    sides[CLIENT_SIDES[prompts]] = lambda n, settings=settings, i=index, p=prompts: client_figures(
                        settings, folder / f"c{i}-{n}-{p}.json"
                    )
                rows.append(rounds_row(record, load, in_turn(rounds, sides)))
                print(json.dumps({k: v for k, v in rows[-1].items() if k.startswith("client")}), flush=True)
            return rows
        finally:
            server.stop()


def valid_loads(record: dict[str, Any], most: int | None = None) -> list[dict[str, Any]]:
    """The loads of the cell's sweep that were VALID, the lowest offered rate first; at most ``most`` of them
    (None: all)."""
    valid = sorted((s for s in load_section(record)["sweep"] if s.get("valid")), key=lambda s: s["offered_per_s"])
    return valid[:most]


def rounds_markdown(rows: list[dict[str, Any]]) -> str:
    """Each load's rounds in turn: the project's client (each way it sent prompts) and `vllm bench serve` against
    one running server, over its whole runs and, where they kept one, over the cell's steady window; and the
    benchmark replaying the client's requests, over that window, where it ran."""
    lines = [
        "| load | offered /s | rounds | client | figure | client: median (range) | bench: median (range) "
        "| client / bench: medians, paired | bench's window: median (range) | client / window: medians, paired "
        "| client's requests replayed: window | client / replayed: medians, paired |",
        "| ---: | ---: | ---: | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]

    def cell(side: dict[str, Any] | None) -> str:
        return f"{side['median']:.3g} ({side['min']:.3g}–{side['max']:.3g})" if side else "–"

    def ratios(row: dict[str, Any], name: str, suffix: str, figure: str) -> str:
        over, paired = (row.get(f"{name}_{kind}_{suffix}", {}).get(figure) for kind in ("over", "paired"))
        return f"{over:.3f}×, {paired:.3f}×" if over is not None and paired is not None else "–"

    for row in rows:
        for prompts, name in CLIENT_SIDES.items():
            if name not in row:
                continue
            for figure in ("request_per_s", *FIGURES):
                lines.append(
                    f"| {row['load']} | {row['offered_per_s']:.3g} | {len(row['rounds'])} | {prompts} | {figure} "
                    f"| {cell(row[name][figure])} | {cell(row['bench'][figure])} "
                    f"| {ratios(row, name, 'bench', figure)} | {cell((row.get('bench_window') or {}).get(figure))} "
                    f"| {ratios(row, name, 'window', figure)} | {cell((row.get(f'{TRACE}_window') or {}).get(figure))} "
                    f"| {ratios(row, name, 'trace', figure)} |"
                )
    return "\n".join(lines) + "\n"


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


def pace_ms(text: str) -> tuple[float, float]:
    """``--pace``'s value: two waits in ms, at least 0, comma-separated."""
    try:
        first, token = (float(v) for v in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: two waits in ms, FIRST_MS,TOKEN_MS (e.g. 25,3.5)") from None
    if not (first >= 0 and token >= 0):  # NaN too
        raise argparse.ArgumentTypeError(f"{text!r}: waits are at least 0 ms")
    return first, token


def positive(text: str) -> int:
    """``--loads``'s value: a whole number, at least 1."""
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: a whole number of loads, at least 1")
    return int(text)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("cells", type=Path, help="the records' folder (results/cells)")
    parser.add_argument("--out", type=Path, default=Path("vllm_bench_serve.json"))
    parser.add_argument("--md", type=Path, default=None)
    parser.add_argument(
        "--in-turn",
        type=int,
        default=0,
        metavar="ROUNDS",
        help="rounds of the project's client and the benchmark in turn against one server (0: none)",
    )
    parser.add_argument("--configfile", type=Path, default=Path("config/config.yaml"),
                        help="with --in-turn: the run's config, for the client's measure settings")  # fmt: skip
    parser.add_argument("--client-prompts", nargs="+", choices=list(CLIENT_SIDES), default=["token_ids"],
                        help="with --in-turn: how the project's client sends prompts, a side each")  # fmt: skip
    parser.add_argument("--loads", type=positive, default=None, metavar="N",
                        help="at most N of each cell's VALID loads, the lowest rates first (default: all)")  # fmt: skip
    parser.add_argument(
        "--replay",
        action="store_true",
        help="with --in-turn: the benchmark replays the client's requests too, a side of its own",
    )
    parser.add_argument("--floor", action="store_true", help="with --in-turn: against the null server (each floor)")
    parser.add_argument("--pace", type=pace_ms, default=(0.0, 0.0), metavar="FIRST_MS,TOKEN_MS",
                        help="with --floor: the null server's wait before a first token and between two")  # fmt: skip
    args = parser.parse_args(argv)
    if args.floor and not args.in_turn:
        parser.error("--floor compares the two clients in turn: give --in-turn ROUNDS too")
    if args.replay and not args.in_turn:
        parser.error("--replay is a side of the rounds in turn: give --in-turn ROUNDS too")
    if any(args.pace) and not args.floor:
        parser.error("--pace paces the null server: give --floor too")
    records = vllm_cells(args.cells, llm_load=True, impl="vllm_serve")
    if not records:
        print(f"no vllm_serve cell of llm_load measured ok under {args.cells}", file=sys.stderr)
        return 2
    config = yaml.safe_load(args.configfile.read_text()) if args.in_turn else None
    try:
        rows = [
            row
            for record in records
            for row in measure(
                record, args.in_turn, config, args.floor, args.pace, args.client_prompts, args.loads, args.replay
            )
        ]
    except MissingInputs as missing:
        print(missing, file=sys.stderr)
        return 2
    args.out.write_text(json.dumps(rows, indent=1))
    table = rounds_markdown(rows) if args.in_turn else markdown(rows)
    if args.md:
        args.md.write_text(table)
    print(table)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
