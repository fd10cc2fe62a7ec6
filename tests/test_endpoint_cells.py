"""Endpoint cells through the runner (inferbench.engines.endpoint): a tiny Llama behind `transformers serve`,
started by the cell's process and stopped at its end, served under load with its tokens held to FP32 eager's
and the client's floor beside; and every way a started server can fail (never healthy, dying mid-run, a stream
that stops early, a count that differs) a clear reason in the record, with no process left behind."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from inferbench.core.cells import CellKey, CellRecord
from inferbench.core.settings import MeasureSettings
from inferbench.engines.endpoint.null_server import Misbehaviour
from inferbench.scenarios.prepare import CellInputs, CellRequest
from tests.conftest import run_as_job

pytestmark = pytest.mark.slow

LOAD = {"requests": 16, "load_shares": [0.5, 1.0], "prompt_range": 0.5, "output_range": 0.5, "steady_s": 1.0,
        "ramp_s": 0.2, "served_tolerance": 0.5, "search_steps": 0,
        "objective": {"ttft_ms": 10_000, "tpot_ms": 1_000, "percentile": "p90"}}  # fmt: skip
FAST = MeasureSettings(warmup_s=0, min_time_s=0, min_iters=3, repeats=1)


@pytest.fixture
def workdir(tmp_path, monkeypatch):
    """The cell's working directory (its engine files under results/engines/), checked for processes left."""
    monkeypatch.chdir(tmp_path)
    yield tmp_path
    assert _left_in(tmp_path) == [], "a process the cell started is still running"


def _left_in(folder: Path) -> list[str]:
    """The command lines of processes, other than this one, running in ``folder`` (a server inherits its cwd)."""
    left = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            if Path(f"/proc/{entry}/cwd").resolve() != folder.resolve():
                continue
            if Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z":
                continue  # ended, not yet reaped
            left.append(Path(f"/proc/{entry}/cmdline").read_text().replace("\0", " "))
        except OSError:
            continue  # gone meanwhile, or not ours to read
    return left


def _run(workdir: Path, llama: Path, engine: str, scenario: str = "single", reference: bool = True,
         settings: MeasureSettings = FAST, **options: object) -> CellRecord:  # fmt: skip
    key = CellKey("llm:llama", engine, "fp32", "cpu", 2, 16, 1, scenario)
    inputs = CellInputs(llama / "m.json", llama / "m.pt", llama / "ref.npz" if reference else None)
    request = CellRequest(key, {"engine": engine, "new_tokens": 8, **options}, inputs, settings, {"max_rel_l2": 0.05})
    return run_as_job(request, workdir / key.relpath)


def test_a_tiny_llama_behind_transformers_serve_serves_a_sweep_with_fp32_eager_s_tokens_and_the_client_floor(
    llama, workdir
):
    settings = MeasureSettings(warmup_s=0, repeats=1, scenario_settings=LOAD)
    record = _run(workdir, llama, "transformers_serve", "llm_load", settings=settings)
    assert record.status == "ok", record.reason
    serving = record.sections["llm_load"]
    assert serving["driven"] == "stream" and serving["max_running"] == 2
    # the reference prompts sent as words, the words streamed back mapped to ids: FP32 eager's greedy tokens
    assert serving["token_parity"]["equal"] and serving["token_parity"]["checked"]
    assert all(step["short_requests"] == 0 and step["itl_ms"]["p50"] > 0 for step in serving["sweep"])
    floor = serving["client_floor"]
    assert floor["requests"] == LOAD["requests"] and "null server" in floor["server"]
    assert floor["ttft_ms"]["p50"] < serving["capacity"]["ttft_ms"]["p50"], "the client alone is faster than a model"
    # and each load again at its rate: no model, no queue behind it
    assert [at["offered_per_s"] for at in floor["sweep"]] == [step["offered_per_s"] for step in serving["sweep"]]
    pairs = zip(floor["sweep"], serving["sweep"], strict=True)
    assert all(at["ttft_ms"]["p50"] < step["ttft_ms"]["p50"] for at, step in pairs)
    assert record.cold_start_s["server_start"] > 0 and record.engine["url"].startswith("http://127.0.0.1:")
    assert "--continuous-batching" in record.engine["server_command"]
    # what starts the same server again: its command and its environment (the cell's threads)
    assert record.engine["server_environment"] == {"OMP_NUM_THREADS": str(record.key.threads)}


def test_the_generation_scenario_sends_one_stream_per_row_and_times_each_token(llama, workdir):
    record = _run(workdir, llama, "transformers_serve")
    assert record.status == "ok", record.reason
    gen = record.sections["generation"]
    assert gen["token_parity"] == {"equal": True, "compared": 8, "agreeing": 8, "first_difference": None}
    assert gen["decode_steps"] == gen["requests"] * 7 and record.parity is None  # tokens, not logits
    floor = gen["client_floor"]  # the same requests against the null server: the client alone
    assert floor["requests"] == 10 and 0 < floor["tpot_p50_ms"] < gen["tpot_ms"]["p50"]


@pytest.mark.parametrize(
    ("misbehaviour", "reason"),
    [
        (Misbehaviour(unhealthy=True), "did not answer /health with 200 within 2 s (last: 503 Service Unavailable)"),
        (Misbehaviour(exit_in_request=4), "the server exited with code 1, its log ends"),
        (Misbehaviour(stop_after=3), "the stream stopped after 3 of 8 tokens (finish_reason stop)"),
        (Misbehaviour(usage_tokens=5), "the server reported 5 completion tokens, for 1 asked and 1 streamed"),
    ],
)
def test_a_started_server_that_fails_fails_its_cell_with_the_reason_and_leaves_no_process(
    llama, workdir, monkeypatch, misbehaviour, reason
):
    monkeypatch.setenv(*next(iter(misbehaviour.to_environment().items())))
    # 2 s for the server that never becomes healthy; a minute for the others to start on a busy machine
    record = _run(workdir, llama, "null_endpoint", reference=False, start_timeout_s=2 if misbehaviour.unhealthy else 60)
    assert record.status == "failed" and reason in record.reason, record.reason


def test_a_url_off_this_machine_is_refused_unless_the_variant_allows_it(llama, workdir):
    record = _run(workdir, llama, "endpoint", reference=False, url="http://203.0.113.7:8000")
    assert record.status == "failed" and "is not on this machine" in record.reason
    assert "allow_remote: true" in record.reason
    record = _run(workdir, llama, "endpoint", reference=False)
    assert record.status == "failed" and "is not a server's URL: give one such as http" in record.reason


def test_the_project_s_client_in_turn_measures_one_cell_at_the_given_rate_in_a_fresh_process(tmp_path, monkeypatch):
    """The client's side of the rounds, for real: run-cell of an endpoint variant against a running server (the null
    server stands in for vllm serve), one process, offered the cell's rate."""
    import importlib.util
    import json
    import subprocess
    import sys

    import yaml

    from inferbench.engines.endpoint.engine import null_server_command
    from inferbench.engines.endpoint.server import ServerProcess, free_port, loopback_url
    from tests.conftest import REPO

    monkeypatch.syspath_prepend(str(REPO / "benchmarks/tools"))
    spec = importlib.util.spec_from_file_location("vllm_bench_serve", REPO / "benchmarks/tools/vllm_bench_serve.py")
    tool = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tool)
    monkeypatch.chdir(tmp_path)
    model, meta = "results/models/llama_mini.pt", "results/models/llama_mini.json"
    subprocess.run([sys.executable, "-m", "inferbench", "build-model", "--workload", "llama_mini", "--out", model,
                    "--meta", meta], check=True, capture_output=True)  # fmt: skip
    reference = "results/reference/llama_mini-s64.npz"
    subprocess.run([sys.executable, "-m", "inferbench", "reference", "--checkpoint", model, "--model-meta", meta,
                    "--seq", "64", "--out", reference], check=True, capture_output=True)  # fmt: skip
    # lengths spread, so that the replay's check below meets each request's own output length
    settings = {"requests": 20, "steady_s": 2, "ramp_s": 0.5, "seed": 3, "load_shares": [0.5, 1.0], "output_range": 0.5}
    record = {"cell": {"cell_id": "x", "workload": "llama_mini", "precision": "fp32", "device": "cpu", "batch_size": 4,
                       "seq_len": 64, "threads": 1},
              "engine": {"model": "mini", "options": {"new_tokens": 8}},
              "sections": {"llm_load": {
                  "settings": settings, "offered_from": {"capacity_per_s": 30.0},
                  "objective": {"ttft_ms": 500, "tpot_ms": 50, "percentile": "p90"}}}}  # fmt: skip
    port = free_port()
    server = ServerProcess(null_server_command(port), loopback_url(port), tmp_path / "null.log")
    try:
        server.wait_healthy(60)
        config = yaml.safe_load((REPO / "config/config.yaml").read_text())
        narrowed = tool.client_config(config, record, {"load": 0.5, "offered_per_s": 15.0}, server.url)
        figures = tool.client_figures(narrowed, tmp_path / "client.json")
    finally:
        server.stop()
    measured = json.loads((tmp_path / "client.json").read_text())
    (step,) = measured["sections"]["llm_load"]["sweep"]
    assert step["offered_per_s"] == 15.0 and measured["sections"]["llm_load"]["offered_from"]["process"] == "settings"
    assert measured["repeats"]["n"] == 1 and measured["engine"]["url"] == server.url
    assert figures["request_throughput"] == step["request_per_s"] > 0
    assert figures["median_ttft_ms"] == step["ttft_ms"]["p50"] > 0 and figures["median_tpot_ms"] > 0
    # the requests the benchmark replays (--replay) are the ones the client sent: every token of its run, and the
    # arrivals its steady window counted, as far apart as it measured them
    requests = tool.client_requests(narrowed)
    assert len({request.max_tokens for request in requests}) > 1, "lengths that differ from one request to the next"
    assert sum(request.max_tokens for request in requests) == step["run_output_tokens"]
    window = [r.arrival_s for r in requests if 0.5 <= r.arrival_s < 0.5 + step["window_s"]]
    assert len(window) == round(step["arrived_per_s"] * step["window_s"])
    assert max(window) - min(window) == pytest.approx(step["arrival_span_s"])
