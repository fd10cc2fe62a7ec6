"""The client side of an OpenAI-compatible server (inferbench.engines.endpoint), against the null server on
loopback: a correct stream yields its tokens event by event, every way a server can go wrong is a clear
reason, and a server the run starts ends with it."""

from __future__ import annotations

import asyncio
import math
import os
import signal
import socket
import subprocess
import sys
import time

import pytest

from inferbench.engines.endpoint.client import Completion, EndpointError, completion_tokens
from inferbench.engines.endpoint.null_server import Misbehaviour, NullServer, Pace
from inferbench.engines.endpoint.server import ServerProcess, free_port, loopback_url, wait_healthy

pytestmark = pytest.mark.fast


def _complete(url: str, asked: int = 16, prompt: object = (1, 2, 3)) -> tuple[Completion, list[int]]:
    """One streamed completion: what the client saw, and what it yielded after each event."""
    import aiohttp

    done = Completion(asked)

    async def read() -> list[int]:
        async with aiohttp.ClientSession() as session:
            body = {"prompt": list(prompt) if isinstance(prompt, tuple) else prompt, "max_tokens": asked}
            return [made async for made in completion_tokens(session, url, body, done)]

    return done, asyncio.run(read())


def test_a_stream_yields_the_tokens_made_after_each_event():
    with NullServer() as server:
        assert wait_healthy(server.url, timeout_s=10) >= 0
        done, yielded = _complete(f"{server.url}/v1/completions")
    assert done.problem() is None and yielded == list(range(1, 17)), "one event per token, each yielded"
    assert done.tokens == done.usage_tokens == 16 and done.prompt_tokens == 3 and done.finish_reason == "length"
    assert done.ids() == list(range(16))


def test_a_paced_null_server_waits_before_its_first_token_and_between_tokens():
    """Paced as a model would be: a client's figures above the pace are its own cost (vllm_bench_serve --pace)."""
    with NullServer(pace=Pace(first_token_s=0.05, token_s=0.01)) as server:
        started = time.perf_counter()
        done, yielded = _complete(f"{server.url}/v1/completions", asked=5)
        took = time.perf_counter() - started
    assert done.problem() is None and yielded == [1, 2, 3, 4, 5]
    assert took >= 0.05 + 4 * 0.01, "never sooner than the pace (a busy machine may be later)"


def test_the_word_vocabulary_maps_a_text_reply_back_to_its_ids():
    done = Completion(3)
    for word in ("w7", " w12", " w0"):
        done.add({"choices": [{"text": word}]})
    assert done.tokens == 3 and done.ids() == [7, 12, 0]
    done.add({"choices": [{"text": " hello"}]})  # a word outside the vocabulary: no ids to give
    assert done.ids() is None


def test_an_event_holding_several_words_counts_each_as_a_token():
    # vLLM, behind its engine under load, sends the text of several tokens in one event
    done = Completion(4)
    for text in ("w3", " w5 w8", " w1"):
        done.add({"choices": [{"text": text}]})
    assert done.event_tokens == [1, 2, 1] and done.problem() is None and done.ids() == [3, 5, 8, 1]


@pytest.mark.parametrize(
    ("misbehaviour", "reason"),
    [
        (Misbehaviour(stop_after=5), "the stream stopped after 5 of 16 tokens (finish_reason stop)"),
        (Misbehaviour(break_after=3), "the stream broke after 3 of 16 tokens"),
        (Misbehaviour(usage_tokens=20), "the server reported 20 completion tokens, for 16 asked and 16 streamed"),
    ],
)
def test_a_stream_that_is_not_the_one_asked_for_says_why(misbehaviour, reason):
    with NullServer(misbehaviour=misbehaviour) as server, pytest.raises(EndpointError) as error:
        _complete(f"{server.url}/v1/completions")
    assert reason in str(error.value)


def test_a_server_that_never_becomes_healthy_is_named_with_its_last_answer():
    with NullServer(misbehaviour=Misbehaviour(unhealthy=True)) as server, pytest.raises(EndpointError) as error:
        wait_healthy(server.url, timeout_s=0.5, poll_s=0.05)
    assert "did not answer /health with 200 within 0.5 s (last: 503 Service Unavailable)" in str(error.value)


def test_a_refused_connection_and_a_refused_request_name_the_server_and_its_answer():
    url = f"{loopback_url(free_port())}/v1/completions"  # nothing listens there
    with pytest.raises(EndpointError, match=r"127.0.0.1:\d+/v1/completions: ClientConnectorError"):
        _complete(url, 2, "w1")
    with NullServer() as server, pytest.raises(EndpointError, match="answered 404 Not Found"):
        _complete(f"{server.url}/v1/chat", 2, "w1")


def test_a_started_server_that_exits_before_it_is_healthy_is_named_with_its_code_and_its_log(tmp_path):
    command = [sys.executable, "-c", "print('no model here', flush=True); raise SystemExit(3)"]
    server = ServerProcess(command, loopback_url(free_port()), tmp_path / "server.log")
    with pytest.raises(EndpointError) as error:
        server.wait_healthy(30)
    assert "exited with code 3 before /health answered 200" in str(error.value)
    assert "The server's log ends: no model here" in str(error.value)
    assert server.exited() == "exited with code 3"


def test_a_started_server_is_stopped_with_its_own_children(tmp_path):
    # a server whose child ignores SIGTERM (as an engine core busy in a kernel may): both end
    child = (
        "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); print('child', flush=True); "
        "time.sleep(600)"
    )
    parent = f"import subprocess, sys, time; subprocess.Popen([sys.executable, '-c', {child!r}]); time.sleep(600)"
    server = ServerProcess([sys.executable, "-c", parent], loopback_url(free_port()), tmp_path / "server.log")
    deadline = time.monotonic() + 30
    while "child" not in server.log.read_text() and time.monotonic() < deadline:
        time.sleep(0.05)
    group = server.process.pid
    assert len(_running_in_group(group)) == 2
    server.stop()
    assert server.exited() is not None
    deadline = time.monotonic() + 10
    while _running_in_group(group) and time.monotonic() < deadline:  # SIGKILL is delivered, not waited for
        time.sleep(0.05)
    assert _running_in_group(group) == []


def test_a_started_server_ends_when_the_process_that_started_it_is_killed(tmp_path):
    """The parent killed outright (SIGKILL: no clean-up of its own runs): the kernel ends its server."""
    log = tmp_path / "server.log"
    script = (
        "import sys, time; from pathlib import Path; from inferbench.engines.endpoint.server import ServerProcess; "
        "s = ServerProcess([sys.executable, '-c', 'import time; time.sleep(600)'], 'http://127.0.0.1:1', "
        f"Path({str(log)!r})); "
        "print(s.process.pid, flush=True); time.sleep(600)"
    )
    parent = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    server_pid = int(parent.stdout.readline())
    parent.send_signal(signal.SIGKILL)
    parent.wait()
    deadline = time.monotonic() + 30
    while _alive(server_pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _alive(server_pid)


def _stat(pid: int | str) -> list[str] | None:
    """The fields of /proc/<pid>/stat after the command's name (state, parent, group, ...), None once gone."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()
    except (FileNotFoundError, ProcessLookupError):
        return None


def _alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie, ended but not yet reaped by its new parent, counts as ended)."""
    fields = _stat(pid)
    return fields is not None and fields[0] != "Z"


def _running_in_group(group: int) -> list[int]:
    """The processes of process group ``group`` that have not ended."""
    running = []
    for entry in os.listdir("/proc"):
        fields = _stat(entry) if entry.isdigit() else None
        if fields is not None and fields[0] != "Z" and int(fields[2]) == group:
            running.append(int(entry))
    return running


def test_free_ports_are_free():
    port = free_port()
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", port))


def test_the_config_check_wants_a_server_url_on_this_machine_unless_the_variant_allows_a_remote_one():
    from inferbench.engines.registry import option_problems

    assert option_problems("endpoint", {"engine": "endpoint"}) == [
        "url: required (the running server's base URL, such as http://127.0.0.1:8000)"
    ]
    assert "is not a server's URL" in option_problems("endpoint", {"engine": "endpoint", "url": "127.0.0.1:80"})[0]
    remote = {"engine": "endpoint", "url": "http://203.0.113.7:8000"}
    assert option_problems("endpoint", remote) == [
        "url: http://203.0.113.7:8000 is not on this machine, and a remote server's figures include the network: "
        "set allow_remote: true to measure it anyway"
    ]
    assert option_problems("endpoint", {**remote, "allow_remote": True}) == []
    assert option_problems("endpoint", {"engine": "endpoint", "url": "http://localhost:8000"}) == []


def test_vllm_s_own_serving_benchmark_gets_the_cell_s_server_load_and_lengths_and_is_set_beside_it(
    tmp_path, monkeypatch
):
    import importlib.util

    from tests.conftest import REPO

    monkeypatch.syspath_prepend(str(REPO / "benchmarks/tools"))
    spec = importlib.util.spec_from_file_location("vllm_bench_serve", REPO / "benchmarks/tools/vllm_bench_serve.py")
    tool = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tool)
    settings = {"requests": 200, "steady_s": 10, "ramp_s": 2, "prompt_range": 0.25, "output_range": 0.25, "seed": 3}
    load = {"load": 0.5, "offered_per_s": 20.0, "valid": True, "request_per_s": 19.0,
            "ttft_ms": {"p50": 30.0}, "tpot_ms": {"p50": 8.0}, "itl_ms": {"p50": 7.5}}  # fmt: skip
    command = (
        "python -m vllm.entrypoints.cli.main serve results/engines/vllm_serve/abc-fp16 --host 127.0.0.1 --port 41000 "
        "--max-num-seqs 32"
    )
    engine = {"impl": "vllm_serve", "vllm": "0.24.0", "model": "results/engines/vllm_serve/abc-fp16",
              "server_command": command}  # fmt: skip
    serving = {"settings": settings, "objective": {"ttft_ms": 450, "tpot_ms": 40, "percentile": "p99"},
               "prompt_tokens": 128, "output_tokens": 32, "sweep": [load],
               # the burst's TTFT is a queue's; the floor at the load's rate is the one beside it
               "client_floor": {"ttft_ms": {"p50": 90.0}, "itl_ms": {"p50": 0.01}, "sweep": [
                   {"load": 0.5, "ttft_ms": {"p50": 2.0}, "itl_ms": {"p50": 0.01}}]}}  # fmt: skip
    cell = {"cell_id": "llm:llama/vllm_serve-fp16/cuda/b32-s128-t0-llm_load", "batch_size": 32}
    record = {"cell": cell, "engine": engine, "sections": {"llm_load": serving}}
    served = tool.server_command(record, 5555)  # the cell's own command, on another port
    assert served[served.index("--port") + 1] == "5555" and served[-2:] == ["--max-num-seqs", "32"]
    bench_command = tool.bench_command(record, load, "http://127.0.0.1:5555", tmp_path / "b.json")
    flags = ("--request-rate", "--max-concurrency", "--seed", "--random-input-len", "--random-output-len",
             "--random-range-ratio", "--num-prompts", "--tokenizer")  # fmt: skip
    value = {flag: bench_command[bench_command.index(flag) + 1] for flag in flags}
    assert value == {"--request-rate": "20.0", "--max-concurrency": "32", "--seed": "3", "--random-input-len": "128",
                     "--random-output-len": "32", "--random-range-ratio": "0.25",
                     # the cell's plan at 20/s: two ramps of 2 s and a window for 200 arrivals and 3 SD
                     "--num-prompts": str(math.ceil(20.0 * (2 * 2 + (200 + 3 * 200**0.5) / 20)) + 1),
                     "--tokenizer": "results/engines/vllm_serve/abc-fp16"}  # fmt: skip
    assert "--ignore-eos" in bench_command
    bench = {"request_throughput": 20.0, "median_ttft_ms": 25.0, "median_tpot_ms": 8.0, "median_itl_ms": 7.5}
    row = tool.side_by_side(record, load, bench)
    assert row["cell_over_bench"] == {"request_per_s": 0.95, "ttft": 1.2, "tpot": 1.0, "itl": 1.0}
    assert row["client_floor_ms"] == {"ttft": 2.0, "itl": 0.01}, "the floor at the same load"
    assert "| 0.5 | 20 | 19 / 20 (0.950×) | 30 / 25 (1.200×)" in tool.markdown([row])
    # each tool reads its own engine's records: a vllm_serve cell's record names vLLM too
    import json

    in_process = {**record, "engine": {"impl": "vllm", "vllm": "0.24.0"}}
    for name, kept in (("served.json", record), ("in_process.json", in_process)):
        under_load = {**kept, "status": "ok"}
        (tmp_path / name).write_text(json.dumps(under_load))
    assert [r["engine"]["impl"] for r in tool.vllm_cells(tmp_path, llm_load=True, impl="vllm_serve")] == ["vllm_serve"]
    assert [r["engine"]["impl"] for r in tool.vllm_cells(tmp_path, llm_load=True)] == ["vllm"]


def test_the_project_s_client_and_vllm_s_take_turns_against_one_server_at_the_cell_s_rate(
    tmp_path, monkeypatch, capsys
):
    import importlib.util
    import json

    import yaml

    from inferbench.plan.config import validate_config
    from inferbench.plan.jobs import RunPlan
    from tests.conftest import REPO

    monkeypatch.syspath_prepend(str(REPO / "benchmarks/tools"))
    spec = importlib.util.spec_from_file_location("vllm_bench_serve", REPO / "benchmarks/tools/vllm_bench_serve.py")
    tool = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tool)
    settings = {"requests": 40, "steady_s": 6, "ramp_s": 2, "prompt_range": 0.5, "output_range": 0.5, "seed": 3,
                "load_shares": [0.5, 1.0, 1.5], "arrivals": "poisson"}  # fmt: skip
    serving = {"settings": settings, "objective": {"ttft_ms": 500, "tpot_ms": 50, "percentile": "p90"},
               "offered_from": {"capacity_per_s": 30.0, "process": "first"}}  # fmt: skip
    record = {
        "cell": {
            "cell_id": "llama_mini/vllm_serve-fp32/cpu/b4-s64-t2-llm_load",
            "workload": "llama_mini",
            "precision": "fp32",
            "device": "cpu",
            "batch_size": 4,
            "seq_len": 64,
            "threads": 2,
        },
        "engine": {"model": "results/engines/x/abc-fp32", "options": {"new_tokens": 32}},
        "sections": {"llm_load": serving},
    }
    load = {"load": 0.5, "offered_per_s": 15.0, "valid": True}  # fmt: skip
    config = yaml.safe_load((REPO / "config/config.yaml").read_text())
    narrowed = tool.client_config(config, record, load, "http://127.0.0.1:5555")
    plan = RunPlan.of(validate_config(narrowed))
    # one cell: the project's client at the server's URL, at the cell's shape, one process, the same rate
    (cell,) = plan.cells
    assert (cell.engine, cell.scenario, cell.batch_size, cell.seq_len, cell.threads) == (
        tool.CLIENT,
        "llm_load",
        4,
        64,
        2,
    )
    argv = plan.run_cell_argv(cell, str(tmp_path / "c.json"))
    variant = json.loads(argv[argv.index("--engine-options") + 1])
    assert variant["url"] == "http://127.0.0.1:5555" and variant["model"] == "results/engines/x/abc-fp32"
    measure = json.loads(argv[argv.index("--measure") + 1])
    load_settings = measure["scenario_settings"]
    assert measure["repeats"] == 1 and load_settings["load_shares"] == [0.5] and load_settings["search_steps"] == 0
    assert load_settings["capacity_per_s"] * load_settings["load_shares"][0] == load["offered_per_s"]
    assert load_settings["seed"] == 3 and load_settings["objective"]["percentile"] == "p90"
    # what the client's cell reads is checked before any server starts: a clear reason, and how to make it
    monkeypatch.chdir(tmp_path)
    models = "results/models/llama_mini"
    expected = [f"{models}.json", f"{models}.pt", "results/reference/llama_mini-s64.npz"]
    assert sorted(tool.missing_inputs(narrowed)) == expected
    cells = tmp_path / "cells"
    cells.mkdir()
    served = {**record, "status": "ok", "engine": {**record["engine"], "impl": "vllm_serve", "vllm": "0.24.0"}}
    served["sections"] = {"llm_load": {**serving, "sweep": [load]}}
    (cells / "served.json").write_text(json.dumps(served))
    started = []
    monkeypatch.setattr(tool, "ServerProcess", lambda *args, **kwargs: started.append(args))
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(config))
    code = tool.main([str(cells), "--in-turn", "1", "--configfile", str(tmp_path / "config.yaml")])
    assert code == 2 and not started
    assert "snakemake --cores 8 results/models/llama_mini.json" in capsys.readouterr().err
    for path in expected:
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / path).write_text("")
    assert tool.missing_inputs(narrowed) == []
    # the rounds alternate which client goes first; the medians stand side by side with each side's range
    calls = []

    def bench(n):  # its run, and its steady window judged as the cell judges its own
        calls.append(f"bench{n}")
        window = {"request_throughput": 15.0, "median_ttft_ms": 38.0 + n, "median_tpot_ms": 5.0, "median_itl_ms": 2.5}
        return {"request_throughput": 15.0, "median_ttft_ms": 40.0 + n, "median_tpot_ms": 5.0, "median_itl_ms": 2.5,
                "window": window}  # fmt: skip

    def client(n):
        calls.append(f"client{n}")
        return {"request_throughput": 15.3, "median_ttft_ms": 42.0, "median_tpot_ms": 5.0 + n, "median_itl_ms": 2.5}

    def client_words(n):  # the same client sending text, as the benchmark does: the server tokenizes it
        calls.append(f"words{n}")
        return {"request_throughput": 15.1, "median_ttft_ms": 44.0, "median_tpot_ms": 5.0, "median_itl_ms": 2.5}

    rounds = tool.in_turn(3, {"bench": bench, "client": client, "client_words": client_words})
    assert calls == ["bench0", "client0", "words0", "words1", "client1", "bench1", "bench2", "client2", "words2"]
    row = tool.rounds_row(record, load, rounds)
    assert row["bench"]["ttft"] == {"median": 41.0, "min": 40.0, "max": 42.0}
    assert row["client_over_bench"]["tpot"] == pytest.approx(6.0 / 5.0)
    assert row["client_over_bench"]["request_per_s"] == pytest.approx(15.3 / 15.0)
    assert row["client_words_over_bench"]["ttft"] == pytest.approx(44.0 / 41.0)
    # each round's ratio, its median: 42/40, 42/41, 42/42
    assert row["client_paired_bench"]["ttft"] == pytest.approx(42.0 / 41.0)
    assert row["bench_window"]["ttft"]["median"] == 39.0
    assert row["client_over_window"]["ttft"] == pytest.approx(42.0 / 39.0)
    table = tool.rounds_markdown([row])
    assert "| token_ids | tpot | 6 (5–7) | 5 (5–5) | 1.200×, 1.200× | 5 (5–5) | 1.200×, 1.200× |" in table
    assert "| words | ttft | 44 (44–44) | 41 (40–42) | 1.073×, 1.073× | 39 (38–40) | 1.128×, 1.128× |" in table

    # the benchmark replaying the client's own requests: a side of its own, each client held to its window too
    def replayed(n):  # the clients are held to its window, not its whole run
        calls.append(f"trace{n}")
        window = {"request_throughput": 15.2, "median_ttft_ms": 42.0, "median_tpot_ms": 5.0, "median_itl_ms": 2.5}
        return {**window, "median_ttft_ms": 50.0, "median_tpot_ms": 9.0, "window": window}

    row = tool.rounds_row(record, load, tool.in_turn(2, {"bench": bench, tool.TRACE: replayed, "client": client}))
    assert calls[-6:] == ["bench0", "trace0", "client0", "client1", "trace1", "bench1"]
    assert row["client_paired_trace"]["ttft"] == pytest.approx(1.0)
    assert row["client_over_trace"]["tpot"] == pytest.approx(1.1)
    table = tool.rounds_markdown([row])
    assert "| token_ids | ttft | 42 (42–42) | 40.5 (40–41) | 1.037×, 1.037× | 38.5 (38–39) " in table
    assert "| 42 (42–42) | 1.000×, 1.000× |" in table
    # its trace: the client's arrivals and lengths, each prompt's chunks its own (no prefix cache hit between two)
    requests = tool.client_requests(narrowed)
    assert len(requests) == tool.load_settings(record).planned_count(15.0) and requests[0].arrival_s == 0.0
    trace = tool.write_trace(requests, tmp_path / "trace.jsonl")
    entries = [json.loads(line) for line in trace.read_text().splitlines()]
    assert [(e["timestamp"], e["input_length"], e["output_length"]) for e in entries] == [
        (r.arrival_s, len(r.prompt), r.max_tokens) for r in requests
    ]
    chunks = [i for e in entries for i in e["hash_ids"]]
    assert len(chunks) == len(set(chunks)) == sum(-(-e["input_length"] // tool.TRACE_CHUNK) for e in entries)
    command = tool.bench_command(record, load, "http://127.0.0.1:5555", tmp_path / "t.json", trace=trace)
    assert command[command.index("--dataset-name") + 1 :][:4] == ["timed_trace", "--dataset-path", str(trace),
                                                                   "--num-prompts"]  # fmt: skip
    assert command[command.index("--num-prompts") + 1] == str(len(requests))
    assert command[command.index("--timed-trace-chunk-hash-size") + 1] == str(tool.TRACE_CHUNK)
    # the trace's arrivals set the pace: no rate, no random dataset's lengths
    assert "--random-input-len" not in command and "--request-rate" not in command
    capsys.readouterr()
    with pytest.raises(SystemExit):
        tool.main([str(tmp_path), "--replay"])
    assert "--replay is a side of the rounds in turn" in capsys.readouterr().err
    # the benchmark's per-request lists judged over the cell's window: 2 s of ramp, then 6 s (40 requests at 15/s
    # arrive sooner); one request a second, each 50 ms to its first token and 10 ms to each of its 3 others
    starts = [100.0 + t for t in range(12)]
    result = {"start_times": starts, "ttfts": [0.05] * 12, "itls": [[0.01] * 3] * 12, "output_lens": [4] * 12,
              "errors": [""] * 11 + ["the server closed the stream"]}  # fmt: skip
    window = tool.bench_window(result, record, load)
    assert window["arrived_per_s"] == pytest.approx(1.0) and window["request_throughput"] == pytest.approx(1.0)
    assert window["median_ttft_ms"] == pytest.approx(50.0) and window["median_itl_ms"] == pytest.approx(10.0)
    assert window["median_tpot_ms"] == pytest.approx(10.0)
    assert tool.bench_window({"start_times": []}, record, load) is None
    # --loads N: the N lowest of the VALID rates
    serving["sweep"] = [{"offered_per_s": r, "valid": r < 40} for r in (30.0, 45.0, 15.0)]
    assert [s["offered_per_s"] for s in tool.valid_loads(record, 1)] == [15.0]
    assert [s["offered_per_s"] for s in tool.valid_loads(record)] == [15.0, 30.0]
    # the null server's pace: two waits in ms, and only where the null server stands in
    import argparse

    assert tool.pace_ms("25,3.5") == (25.0, 3.5)
    for bad in ("25", "a,b", "-1,2", "nan,1"):
        with pytest.raises(argparse.ArgumentTypeError, match=r"FIRST_MS,TOKEN_MS|at least 0"):
            tool.pace_ms(bad)
    with pytest.raises(SystemExit):
        tool.main([str(tmp_path), "--pace", "25,3.5"])
