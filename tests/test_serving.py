"""Serving scenarios through MLPerf LoadGen (inferbench.scenarios.serving): a fake engine with a known service
time must show the queueing that queueing theory predicts, LoadGen's validity rules must reach the
record, and a serving cell runs through the same cell runner as every cell."""

from __future__ import annotations

import copy
import json
import threading
import time
from dataclasses import asdict, replace
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch

from inferbench.analysis.summary import summary_row
from inferbench.core.cells import CellKey, CellRecord
from inferbench.core.settings import MeasureSettings
from inferbench.core.storage import loadgen_dir
from inferbench.launch.cell_job import measure_cell
from inferbench.machine.lock import MachineLock
from inferbench.models import create_model
from inferbench.scenarios.prepare import CellInputs, CellRequest
from inferbench.scenarios.serving.measure import (
    BATCH_PHASES,
    BatchPath,
    DynamicBatcher,
    Gather,
    batch_ladder,
    measure_serving,
    next_target,
    padded_size,
)
from inferbench.scenarios.serving.settings import ServingSettings

pytest.importorskip("mlperf_loadgen")

SERVICE_S = 0.004  # the fake engine's service time per batch


def fake_engine(service_s: float = SERVICE_S, calls: list[int] | None = None):
    """A batch takes ``service_s`` whatever its size (a sleep: the GIL is free for LoadGen's thread)."""

    def run_batch(indices: np.ndarray) -> None:
        if calls is not None:
            calls.append(len(indices))
        time.sleep(service_s)

    return run_batch


def batcher_latencies_s(
    arrival_qps: float, service_s: float, max_batch: int, delay_s: float, n: int = 200_000, seed: int = 0
) -> np.ndarray:
    """Time in system of each query under the batcher's own rule, simulated: Poisson arrivals; the
    worker takes a batch's first query once the engine is free, then waits until ``delay_s`` after that
    query arrived (none if already past) or until the batch is full, takes every query arrived by then
    (up to ``max_batch``) and serves them together in ``service_s``. At largest batch 1 with no delay
    this is an M/D/1 queue (Poisson arrivals, one server, constant service)."""
    arrivals = np.cumsum(np.random.default_rng(seed).exponential(1 / arrival_qps, n))
    latencies = np.empty(n)
    free, i = 0.0, 0
    while i < n:
        taken = max(free, arrivals[i])
        close = max(taken, arrivals[i] + delay_s)
        last = min(n, i + max_batch, int(np.searchsorted(arrivals, close, side="right")))
        if last - i == max_batch:  # full before the wait ended
            close = max(taken, arrivals[last - 1])
        free = close + service_s
        latencies[i:last] = free - arrivals[i:last]
        i = last
    return latencies[n // 10 :]


def measured_service_s() -> float:
    """What the fake's sleep really takes here (the OS wakes a sleeper late by tens of µs)."""
    run = fake_engine()
    start = time.perf_counter()
    for _ in range(50):
        run(np.zeros(1, dtype=int))
    return (time.perf_counter() - start) / 50


def test_a_server_run_at_half_capacity_queues_as_m_d_1(tmp_path):
    service = measured_service_s()
    rate = 0.5 / service  # utilisation 0.5
    settings = ServingSettings(latency_bound_ms=100, max_queue_delay_ms=0, min_duration_s=1, target_qps=rate)
    result = measure_serving("server", fake_engine(), 1, 64, settings, tmp_path / "logs")
    answer = result["result"]
    assert answer["valid"], answer
    expected_p99_ms = np.quantile(batcher_latencies_s(rate, service, 1, 0.0), 0.99) * 1e3
    # M/D/1 at rho 0.5: mean time in system 1.5 D, p99 about 4.6 D; the harness adds little
    assert answer["latency_ms"]["p99"] == pytest.approx(expected_p99_ms, rel=0.35), (answer, expected_p99_ms)
    assert answer["latency_ms"]["mean"] == pytest.approx(1.5 * service * 1e3, rel=0.25)
    assert answer["completed_qps"] == pytest.approx(rate, rel=0.15)
    assert answer["query_count"] >= settings.min_query_count
    assert result["capacity_qps"] == pytest.approx(1 / service, rel=0.25)
    assert result["qps_at_bound"] == rate
    assert (tmp_path / "logs" / "server-0" / "mlperf_log_detail.txt").exists(), "LoadGen's own logs are kept"


def test_a_server_run_above_capacity_is_not_valid(tmp_path):
    settings = ServingSettings(latency_bound_ms=20, max_queue_delay_ms=0, min_duration_s=1, target_qps=1.5 / SERVICE_S)
    result = measure_serving("server", fake_engine(), 1, 64, settings, tmp_path / "logs")
    answer = result["result"]
    assert not answer["valid"]
    assert answer["conditions"]["latency_within_bound"] is False
    assert answer["latency_ms"]["p99"] > 20
    assert result["qps_at_bound"] is None
    assert result["search"][0]["why_invalid"].startswith("the p99 latency exceeded the bound")


def test_the_search_finds_the_highest_qps_within_the_bound(tmp_path):
    # batch 1, constant service: capacity 1/D = 250 QPS; M/D/1's p99 is ~4 D at rho 0.5 and ~8 D at
    # rho 0.71, so a bound of 25 ms (~6 D) lies near the first steps of the search. Which runs are valid
    # depends on how busy the machine is; how the search moves on from them does not.
    settings = ServingSettings(latency_bound_ms=25, max_queue_delay_ms=0, min_duration_s=0.5, search_runs=3,
                               min_query_count=500)  # fmt: skip
    result = measure_serving("server", fake_engine(), 1, 64, settings, tmp_path / "logs")
    steps, capacity = result["search"], result["capacity_qps"]
    assert len(steps) == 3
    for i, step in enumerate(steps):  # each target follows from the runs before it
        below = [s["target_qps"] for s in steps[:i] if s["valid"]]
        above = [s["target_qps"] for s in steps[:i] if not s["valid"]]
        expected = next_target(capacity, max(below, default=None), min(above, default=None))
        assert step["target_qps"] == pytest.approx(expected), steps
    valid = [s["target_qps"] for s in steps if s["valid"]]
    invalid = [s["target_qps"] for s in steps if not s["valid"]]
    assert valid, f"a 25 ms bound holds at some target down to 1/32 of the capacity: {steps}"
    assert not invalid or max(valid) < min(invalid), "every valid target below every invalid one"
    assert result["qps_at_bound"] == max(valid)
    assert result["result"]["valid"] and result["result"]["latency_ms"]["p99"] <= 25
    assert all(s["p99_ms"] > 25 or not s["why_invalid"].startswith("the p99") for s in steps if not s["valid"])


def test_a_lone_query_is_served_at_once_unless_the_batcher_is_told_to_wait(tmp_path):
    """Low load, largest batch 8: with no queue delay (the default) a query that finds the engine idle
    runs at once, so the p50 is about one call; with a 20 ms delay it waits for a batch that does not
    fill. Both as the batcher's rule predicts."""
    service = measured_service_s()
    rate = 0.1 / service
    p50_ms = {}
    for delay_ms in (0, 20):
        settings = ServingSettings(latency_bound_ms=200, max_queue_delay_ms=delay_ms, min_duration_s=1,
                                   min_query_count=50, target_qps=rate)  # fmt: skip
        answer = measure_serving("server", fake_engine(), 8, 64, settings, tmp_path / f"d{delay_ms}")["result"]
        expected = np.quantile(batcher_latencies_s(rate, service, 8, delay_ms / 1e3), 0.5) * 1e3
        p50_ms[delay_ms] = answer["latency_ms"]["p50"]
        assert p50_ms[delay_ms] == pytest.approx(expected, rel=0.35), (delay_ms, answer, expected)
    assert p50_ms[0] < 2 * service * 1e3 < p50_ms[20]


def test_under_load_the_batcher_runs_what_queued_while_the_engine_was_busy(tmp_path):
    """1.5x the capacity of batch-1 calls, largest batch 8, no delay: each batch takes what arrived
    during the previous one (about 1.5 queries), so the run stays valid at a load that batch-1 calls
    could not carry, with the median latency the batcher's rule predicts."""
    service = measured_service_s()
    rate = 1.5 / service
    settings = ServingSettings(latency_bound_ms=100, max_queue_delay_ms=0, min_duration_s=1,
                               min_query_count=1000, target_qps=rate)  # fmt: skip
    result = measure_serving("server", fake_engine(), 8, 64, settings, tmp_path / "logs")
    answer = result["result"]
    assert answer["valid"], answer
    predicted = batcher_latencies_s(rate, service, 8, 0.0)
    # the median follows the rule; the tail also follows how busy this machine is (a stalled host)
    assert answer["latency_ms"]["p50"] == pytest.approx(np.quantile(predicted, 0.5) * 1e3, rel=0.35)
    assert answer["latency_ms"]["p99"] >= np.quantile(predicted, 0.9) * 1e3
    assert 1.2 < result["batches"]["mean_size"] < 3, result["batches"]


def test_the_search_brackets_on_a_log_scale_then_bisects_geometrically():
    assert next_target(100, None, None) == 50  # half the capacity first
    assert next_target(100, None, 50) == 12.5  # invalid: a quarter as much
    assert next_target(100, 12.5, 50) == 25  # bracketed: the geometric mean
    assert next_target(100, 50, None) == pytest.approx(70.71, rel=1e-3)  # valid at once: toward the capacity


def test_the_search_stops_once_its_bracket_is_within_the_resolution(tmp_path, monkeypatch):
    """LoadGen stood in for by a rule (a run is valid up to 0.3x the capacity): the search brackets the
    threshold, stops as soon as its highest valid and lowest invalid targets are within 1.25x (not
    after all its runs), and reports both."""
    from inferbench.scenarios.serving import measure as serving

    threshold: list[float] = []

    def fake_loadgen(scenario, batcher_factory, sample_count, settings, log_dir, target_qps):
        valid = target_qps <= threshold[0]
        result = {"valid": valid, "completed_qps": target_qps, "target_qps": target_qps,
                  "latency_ms": {"p99": 1.0}, "conditions": {"latency_within_bound": valid},
                  "validity": "VALID" if valid else "INVALID"}  # fmt: skip
        return result, {"mean_size": 1.0}

    monkeypatch.setattr(serving, "capacity_qps", lambda *args: 1000.0)
    threshold.append(300.0)
    monkeypatch.setattr(serving, "run_loadgen", fake_loadgen)
    settings = ServingSettings(latency_bound_ms=10, search_runs=20)
    result = measure_serving("server", fake_engine(), 1, 64, settings, tmp_path / "logs")
    low, high = result["qps_at_bound"], result["lowest_invalid_qps"]
    assert low <= 300 < high and high / low <= serving.BRACKET_RESOLUTION
    targets = [s["target_qps"] for s in result["search"]]
    assert len(targets) < 20, "it stopped on the bracket, not on its run count"
    lows = [t for t in targets[:-1] if t <= 300]
    highs = [t for t in targets[:-1] if t > 300]
    assert not (lows and highs and min(highs) / max(lows) <= serving.BRACKET_RESOLUTION), "no run after the bracket"


def test_the_search_goes_no_lower_than_its_share_of_the_capacity(tmp_path, monkeypatch):
    """An engine whose p99 misses the bound at every load (a tail, not queueing): the search steps down
    from half the capacity and stops before a target below min_load_share of it whose run would last
    over 30 s, saying why (2,000 queries at 15 QPS: 135 s a run in an H100 lease)."""
    from inferbench.scenarios.serving import measure as serving

    targets: list[float] = []

    def fake_loadgen(scenario, batcher_factory, sample_count, settings, log_dir, target_qps):
        targets.append(target_qps)
        result = {"valid": False, "completed_qps": target_qps, "target_qps": target_qps,
                  "latency_ms": {"p99": 16.0}, "conditions": {"latency_within_bound": False},
                  "validity": "INVALID"}  # fmt: skip
        return result, {"mean_size": 1.0}

    monkeypatch.setattr(serving, "capacity_qps", lambda *args: 480.0)
    monkeypatch.setattr(serving, "run_loadgen", fake_loadgen)
    settings = ServingSettings(latency_bound_ms=10, search_runs=6, min_load_share=1 / 16)
    result = measure_serving("server", fake_engine(), 1, 64, settings, tmp_path / "logs")
    assert targets == [240.0, 60.0], "the next step, 15 QPS, is below 480 / 16 = 30 QPS, and 133 s long"
    assert "no lower than 0.0625 of the capacity in runs over 30 s (30 QPS)" in result["stopped"]
    assert result["qps_at_bound"] is None and result["lowest_invalid_qps"] == 60.0
    targets.clear()
    unbounded = ServingSettings(latency_bound_ms=10, search_runs=6, min_load_share=0, max_duration_s=300)
    measure_serving("server", fake_engine(), 1, 64, unbounded, tmp_path / "logs2")
    assert targets == [240.0, 60.0, 15.0], "without the share, only a run's longest duration stops it"
    # a cell held by the harness, far below its engine's rate: short runs go on below the share
    targets.clear()
    monkeypatch.setattr(serving, "capacity_qps", lambda *args: 1_000_000.0)
    measure_serving("server", fake_engine(), 1, 64, settings, tmp_path / "logs3")
    assert len(targets) == 6 and min(targets) < 1_000_000 / 16


def test_each_batch_s_phases_say_where_a_slow_query_s_time_went(tmp_path):
    """An engine that takes 2 ms, and 40 ms once every 50 calls (a tail of the engine's own), at a light
    load: the call phase's p50 is the 2 ms, and the slowest batches spent their time in the call (or
    queued behind one), not completing."""
    count = [0]

    def sometimes_slow(indices: np.ndarray) -> None:
        count[0] += 1
        time.sleep(0.04 if count[0] % 50 == 0 else 0.002)

    settings = ServingSettings(latency_bound_ms=200, min_duration_s=0.5, min_query_count=300, target_qps=50)
    result = measure_serving("server", sometimes_slow, 1, 64, settings, tmp_path / "logs")
    batches = result["batches"]
    assert set(batches["phases_ms"]) == {"wait", "stage", "call", "fetch", "complete"}
    assert 1.5 < batches["phases_ms"]["call"]["p50"] < 20
    assert batches["phases_ms"]["fetch"]["p99"] < 1, "a plain callable's call does it all"
    slowest = batches["slowest"]
    assert slowest["batches"] >= 3
    # among the slowest: the slow calls themselves, and queries queued behind one (their time is `wait`)
    assert slowest["call_ms"] > 5 * batches["phases_ms"]["call"]["p50"], "the slowest batches ran long"
    # most of their time, not all: on a busy 2-core machine the other phases took 25% of it (CI, 2026-11-27)
    assert slowest["call_ms"] + slowest["wait_ms"] > 0.5 * slowest["total_ms"]
    assert slowest["longest"] in ("call", "wait")
    # each query timed from the issue callback too: at least the call, within LoadGen's own latency
    queries = batches["query_ms"]
    assert 1.5 < queries["p50"] <= result["result"]["latency_ms"]["p50"] + 0.05
    assert queries["p99"] <= result["result"]["latency_ms"]["p99"] + 0.05
    assert queries["max"] >= 40, "the 40-ms calls are among them"
    # at largest batch 1, what queueing alone allows with the run's own median service (~2 ms)
    queueing = result["queueing"]
    assert 1.5 < queueing["service_ms"] < 20
    assert 0 < queueing["md1_qps"] < 1e3 / queueing["service_ms"]
    # a phase's p99 from fewer batches than a latency p99 needs is not reported (core.percentiles)
    from inferbench.scenarios.serving.measure import phase_summary

    few = phase_summary([(0.001, 0.0, 0.002, 0.0, 0.0)] * 50)["phases_ms"]["call"]
    assert few["p50"] == pytest.approx(2.0) and few["p99"] is None

    # a path whose call queues the work and whose fetch waits for it: the time lands in `fetch`
    path = BatchPath(lambda rows: rows, lambda rows: rows, fetch=lambda ran: time.sleep(0.002))
    fetched = measure_serving("server", path, 1, 64, settings, tmp_path / "logs2")["batches"]["phases_ms"]
    assert fetched["fetch"]["p50"] > 1.5 and fetched["call"]["p50"] < 1
    assert result["search"] is None or all("slowest" in run for run in result["search"])


def test_a_ladder_of_batch_sizes_and_the_rung_a_batch_is_padded_to():
    assert batch_ladder(1) == [1]
    assert batch_ladder(8) == [1, 2, 4, 8]
    assert batch_ladder(12) == [1, 2, 4, 8, 12]
    assert batch_ladder(32) == [1, 2, 4, 8, 16, 32]
    assert padded_size(3, None) == 3, "an engine that takes any batch runs it as it is"
    assert padded_size(3, [1, 2, 4, 8]) == 4 and padded_size(1, [1, 2, 4, 8]) == 1 and padded_size(8, [1, 8]) == 8
    with pytest.raises(ValueError, match="larger than the largest prepared batch 8"):
        padded_size(9, [1, 2, 4, 8])


def test_engines_slower_at_other_shapes_serve_from_the_ladder_and_the_others_as_they_are():
    from inferbench.engines.registry import load_engine_class

    def takes_any_batch(impl: str, device: str, **options: object) -> bool:
        return load_engine_class(impl)(device, "fp32", 0, {"engine": impl, **options}).takes_any_batch

    assert takes_any_batch("ort_cpu", "cpu") and takes_any_batch("torch_eager", "cuda")
    # ONNX Runtime's CUDA provider sets cuDNN's convolutions up again at each new shape: one session per rung
    assert not takes_any_batch("ort_cuda", "cuda") and not takes_any_batch("ort_cuda", "cuda", cuda_graph=True)
    assert not takes_any_batch("torch_cudagraph", "cuda")


@pytest.mark.parametrize("rungs", [None, [1, 2, 4, 8]])
def test_a_batch_runs_as_it_is_or_padded_to_its_rung_never_to_the_largest(tmp_path, rungs):
    """Low load, largest batch 8: a query that finds the engine idle runs alone. Without rungs (an engine
    that takes any batch) every batch runs as many rows as it has queries; with them, each runs at a
    rung, and a batch of one is never padded to 8 (before, every batch ran as 8 rows)."""
    calls: list[int] = []
    service = measured_service_s()
    settings = ServingSettings(latency_bound_ms=200, min_duration_s=0.5, min_query_count=100, target_qps=0.2 / service)
    result = measure_serving("server", fake_engine(calls=calls), 8, 64, settings, tmp_path / "logs", rungs)
    batches = result["batches"]
    served = calls[-batches["count"] :]  # the LoadGen run's batches, after the capacity's calls
    assert batches["rungs"] == rungs
    if rungs is None:
        assert batches["padded_share"] == 0 and batches["mean_run_size"] == batches["mean_size"]
    else:
        assert set(served) <= set(rungs)
        assert batches["mean_run_size"] >= batches["mean_size"]
    assert batches["mean_run_size"] < 2, "mostly lone queries, run alone"
    assert served.count(1) > len(served) / 2


def test_the_harness_floor_is_the_no_op_engine_through_the_same_path_at_the_answer_s_target(tmp_path):
    settings = ServingSettings(latency_bound_ms=100, min_duration_s=0.3, min_query_count=200, target_qps=100)
    harness_calls: list[int] = []
    result = measure_serving(
        "server", fake_engine(0.004), 4, 64, settings, tmp_path / "logs", [1, 2, 4],
        harness_batch=lambda rows: harness_calls.append(len(rows)),
    )  # fmt: skip
    harness = result["harness"]
    assert harness["target_qps"] == result["result"]["target_qps"] == 100
    assert harness["query_count"] >= 200 and set(harness_calls) <= {1, 2, 4}, "the same batcher, the same padding"
    assert harness["latency_ms"]["p50"] < result["result"]["latency_ms"]["p50"], "no engine: only the harness"
    assert (tmp_path / "logs" / "harness" / "mlperf_log_detail.txt").exists()
    # what the host did during each LoadGen run, beside its latencies: a tail's cause may be the host's
    for run in (harness, result["result"]):
        assert run["host"]["involuntary_switches"] >= 0 and run["host"]["process_cpu_s"] > 0


def test_a_spinning_batcher_serves_as_the_blocking_one_and_the_record_says_which(tmp_path):
    service = measured_service_s()
    settings = ServingSettings(latency_bound_ms=200, min_duration_s=0.5, min_query_count=200,
                               target_qps=0.1 / service, batcher_wait="spin")  # fmt: skip
    result = measure_serving("server", fake_engine(), 8, 64, settings, tmp_path / "logs")
    assert result["settings"]["batcher_wait"] == "spin"
    assert result["result"]["latency_ms"]["p50"] < 2 * service * 1e3, "a lone query runs at once"
    with pytest.raises(ValueError, match=r"serving\.batcher_wait is 'nap': block or spin"):
        measure_serving("server", fake_engine(), 8, 64, ServingSettings(batcher_wait="nap"), tmp_path / "x")


def test_the_batcher_fills_batches_up_to_the_largest(tmp_path):
    calls: list[int] = []
    settings = ServingSettings(latency_bound_ms=100, max_queue_delay_ms=5, min_duration_s=0.5, min_query_count=400)
    result = measure_serving("offline", fake_engine(calls=calls), 8, 64, settings, tmp_path / "logs")
    assert result["result"]["valid"] and result["result"]["scenario"] == "Offline"
    assert result["batches"]["mean_size"] > 7.5, "offline: the queue is full, every batch is whole"
    assert all(size <= 8 for size in calls)
    # 8 samples per 4 ms batch: 2,000 samples per second
    assert result["result"]["completed_qps"] == pytest.approx(8 / SERVICE_S, rel=0.25)


def with_serving(measure: MeasureSettings, serving: ServingSettings) -> MeasureSettings:
    """The measure settings of a serving cell: LoadGen's in them, as the workflow passes them."""
    return replace(measure, scenario_settings=asdict(serving))


def cell_inputs(tmp_path: Path) -> CellInputs:
    spec = create_model("mlp_heart", in_features=13, hidden=[8])
    meta = tmp_path / "mlp_heart.json"
    meta.write_text(json.dumps({"inputs": [asdict(i) for i in spec.inputs]}))
    return CellInputs(model_meta=meta)


def test_a_run_with_too_few_queries_is_recorded_invalid_not_ok(tmp_path):
    key = CellKey("mlp_heart", "noop", "fp32", "cpu", 1, 0, 1, "server")
    out = tmp_path / "cells" / key.relpath
    # 100,000 queries cannot be issued at 200 QPS within 1 s
    settings = ServingSettings(latency_bound_ms=50, min_duration_s=0.2, max_duration_s=1, min_query_count=100_000)
    measure = MeasureSettings(warmup_s=0, min_time_s=0, min_iters=1, repeats=2)
    serving = ServingSettings(**{**asdict(settings), "target_qps": 200})
    request = CellRequest(key, {"engine": "noop"}, cell_inputs(tmp_path), with_serving(measure, serving))
    record = measure_cell(request, out, MachineLock(tmp_path / "lock"))
    assert record.status == "invalid"
    assert "minimum query count was not reached" in record.reason
    assert record.sections["serving"]["result"]["conditions"]["min_queries"] is False
    assert (record.repeats or {}).get("n") == 1, "a serving cell is one process: its LoadGen runs are long"
    saved = CellRecord.load(out)
    assert saved.key.scenario == "server" and saved.status == "invalid"
    assert (loadgen_dir(out) / "server-0" / "mlperf_log_summary.txt").exists()
    row = summary_row(saved)
    assert row["scenario"] == "server" and row["serving_valid"] is False and row["latency_p50_ms"] is None


def test_a_serving_cell_that_stops_before_any_loadgen_run_writes_every_output_of_its_rule(tmp_path):
    """On a busy machine the capacity can put the bound out of reach before any LoadGen run: the record
    says so and the rule's folder of LoadGen logs still exists (a missing output stopped the preset)."""
    key = CellKey("mlp_heart", "noop", "fp32", "cpu", 64, 0, 1, "server")
    out = tmp_path / "cells" / key.relpath
    measure = MeasureSettings(warmup_s=0, min_time_s=0, min_iters=1)
    serving = ServingSettings(latency_bound_ms=1e-6, min_duration_s=0.2, min_query_count=100)
    request = CellRequest(key, {"engine": "noop"}, cell_inputs(tmp_path), with_serving(measure, serving))
    record = measure_cell(request, out, MachineLock(tmp_path / "lock"))
    assert record.status != "ok" and "above the 1e-06 ms bound" in record.reason
    assert record.sections["serving"]["search"] == [], "no LoadGen run"
    note = loadgen_dir(out) / "no_loadgen_run.txt"
    assert note.exists() and f"status: {record.status}" in note.read_text()
    assert CellRecord.load(out).status == record.status


def test_a_serving_cell_through_the_runner_is_ok_with_loadgen_s_numbers(tmp_path):
    key = CellKey("mlp_heart", "noop", "fp32", "cpu", 4, 0, 1, "offline")
    out = tmp_path / "cells" / key.relpath
    measure = MeasureSettings(warmup_s=0, min_time_s=0, min_iters=1)
    serving = ServingSettings(latency_bound_ms=50, min_duration_s=0.3, min_query_count=200)
    request = CellRequest(key, {"engine": "noop"}, cell_inputs(tmp_path), with_serving(measure, serving))
    record = measure_cell(request, out, MachineLock(tmp_path / "lock"))
    assert record.status == "ok", record.reason
    assert record.timing == "loadgen_offline"
    row = summary_row(record)
    assert row["serving_qps"] > 1000 and row["serving_valid"] is True
    assert row["serving_mean_batch"] == pytest.approx(4, rel=0.1)
    assert out.with_suffix(".loadgen").is_dir() and out.name.endswith("-offline.json")
    # offline: the harness's floor is its throughput through the same path, far above the engine's
    assert record.sections["serving"]["harness"]["completed_qps"] > 0 and row["serving_harness_p99_ms"] is not None


def test_an_engine_fixed_to_its_shapes_serves_from_a_ladder_of_prepared_engines(tmp_path, monkeypatch):
    """A server cell of largest batch 8 whose engine cannot take other batches (as a CUDA graph) is
    prepared at 1, 2, 4 and 8, and its batches run at those sizes."""
    from inferbench.engines.noop.engine import NoopEngine

    monkeypatch.setattr(NoopEngine, "takes_any_batch", property(lambda self: False))
    key = CellKey("mlp_heart", "noop", "fp32", "cpu", 8, 0, 1, "server")
    out = tmp_path / "cells" / key.relpath
    measure = MeasureSettings(warmup_s=0, min_time_s=0, min_iters=1)
    # 500 queries: LoadGen's early stopping needs ~460 to confirm a p99 (a loose bound: a busy machine)
    serving = ServingSettings(latency_bound_ms=1000, min_duration_s=0.2, min_query_count=500, target_qps=400)
    request = CellRequest(key, {"engine": "noop"}, cell_inputs(tmp_path), with_serving(measure, serving))
    record = measure_cell(request, out, MachineLock(tmp_path / "lock"))
    assert record.status == "ok", record.reason
    assert record.sections["serving"]["batches"]["rungs"] == [1, 2, 4, 8]
    batches = record.sections["serving"]["batches"]
    assert batches["mean_size"] <= batches["mean_run_size"] < 8, "padded to rungs, not to the largest batch"
    row = summary_row(record)
    assert row["serving_padded_share"] >= 0
    assert row["serving_overlapped"] is False  # a CPU cell: nothing to overlap
    # the summary says where the slowest batches' time went, and the report's serving table shows it
    assert row["serving_slowest_phase"] in BATCH_PHASES
    assert 0 < row["serving_slowest_phase_ms"] <= row["serving_slowest_ms"]
    assert 0 < row["serving_batcher_p99_ms"] <= row["serving_p99_ms"] + 0.05
    assert record.sections["serving"]["queueing"] is None and pd.isna(row["serving_md1_qps"]), "batching: no M/D/1"
    from inferbench.scenarios.serving.answer import slowest_phase

    assert slowest_phase(pd.Series(row)).startswith(f"{row['serving_slowest_phase']} ")


def test_a_misspelled_serving_setting_is_named():
    with pytest.raises(ValueError, match=r"unknown serving settings \['latency_bound'\]; known: latency_bound_ms"):
        ServingSettings.from_dict({"latency_bound": 10})


def test_a_serving_cell_reads_loadgen_s_settings_from_its_measure_settings_and_names_them_when_missing():
    from types import SimpleNamespace

    from inferbench.scenarios.serving.settings import serving_settings

    key = CellKey("mlp_heart", "noop", "fp32", "cpu", 1, 0, 1, "server")
    given = with_serving(MeasureSettings(), ServingSettings(latency_bound_ms=7))
    assert serving_settings(SimpleNamespace(key=key, settings=given)) == ServingSettings(latency_bound_ms=7)
    with pytest.raises(ValueError, match=r"a server cell needs its LoadGen settings in measure.scenario_settings"):
        serving_settings(SimpleNamespace(key=key, settings=MeasureSettings()))


def test_the_serving_plot_draws_every_run_of_the_search(tmp_path):
    from inferbench.report.plots import plot_declared

    runs = [
        {"target_qps": q, "completed_qps": q, "p99_ms": p99, "valid": p99 <= 10}
        for q, p99 in ((100, 4.0), (200, 6.0), (400, 25.0))
    ]
    records = [
        CellRecord(
            key=CellKey("resnet50", engine, "fp16", "cuda", batch, 0, 0, "server"),
            status="ok",
            engine_impl="torch_cudagraph",
            sections={"serving": {"search": runs, "latency_bound_ms": 10}},
        )
        for engine in ("torch_cudagraph", "ort_cuda")
        for batch in (1, 8)
    ]
    out = plot_declared(records, "resnet50", tmp_path / "serving.png", ["torch_cudagraph", "ort_cuda"])
    import matplotlib.image

    image = matplotlib.image.imread(out)
    assert image.shape[0] > 200 and image.std() > 0.05, "a drawn plot, not a blank canvas"
    # a plot no scenario of these cells declares is refused by name, with the scenarios that draw it
    with pytest.raises(ValueError, match=r"no cell of resnet50 .* draws throughput\.png \(no scenario\)"):
        plot_declared(records, "resnet50", tmp_path / "throughput.png")


class Query:
    def __init__(self, query_id: int) -> None:
        self.id, self.index = query_id, query_id


def test_an_overlapped_path_stages_the_next_batch_while_this_one_runs_and_completes_every_query_once():
    # the first batch's run waits until the second batch's staging has begun: served in series this
    # could never happen (the run would time out); overlapped it must
    second_staging = threading.Event()
    staged_rows, completed, timed_out = [], [], []

    def stage(rows: np.ndarray) -> np.ndarray:
        staged_rows.append(int(rows[0]))
        if len(staged_rows) == 2:
            second_staging.set()
        return rows

    def run(rows: np.ndarray) -> None:
        if int(rows[0]) == 0 and not second_staging.wait(timeout=20):
            timed_out.append(True)

    batcher = DynamicBatcher(BatchPath(stage, run, overlapped=True), 1, 0.0, completed.extend)
    for query_id in range(6):
        batcher.issue([Query(query_id)])
    deadline = time.monotonic() + 30
    while len(completed) < 6 and time.monotonic() < deadline:
        time.sleep(0.01)
    batcher.stop()
    assert not timed_out and batcher.error is None
    assert sorted(completed) == list(range(6)) and sorted(staged_rows) == list(range(6))
    assert [t.name for t in batcher.threads] == ["inferbench-server-0", "inferbench-server-1"]


def test_an_overlapped_batch_runs_on_the_thread_that_formed_it_in_the_order_batches_were_formed():
    # two server threads pass the engine hand over hand: no batch is handed to another thread (a query
    # that finds the engine idle wakes one thread only), and runs never overtake one another
    stagers: dict[int, str] = {}
    runners: dict[int, str] = {}
    staged_order: list[int] = []
    run_order: list[int] = []
    running = threading.Lock()
    overlapping_runs: list[int] = []

    def stage(rows: np.ndarray) -> np.ndarray:
        stagers[int(rows[0])] = threading.current_thread().name
        staged_order.append(int(rows[0]))
        time.sleep(0.001)
        return rows

    def run(rows: np.ndarray) -> None:
        if not running.acquire(blocking=False):
            overlapping_runs.append(int(rows[0]))
            return
        try:
            runners[int(rows[0])] = threading.current_thread().name
            run_order.append(int(rows[0]))
            time.sleep(0.002)
        finally:
            running.release()

    completed: list[int] = []
    batcher = DynamicBatcher(BatchPath(stage, run, overlapped=True), 1, 0.0, completed.extend)
    batcher.issue([Query(i) for i in range(30)])
    for query_id in range(30, 40):  # and some one at a time, the engine idle between them
        deadline = time.monotonic() + 30
        while len(completed) < query_id and time.monotonic() < deadline:
            time.sleep(0.001)
        batcher.issue([Query(query_id)])
    deadline = time.monotonic() + 30
    while len(completed) < 40 and time.monotonic() < deadline:
        time.sleep(0.01)
    batcher.stop()
    assert batcher.error is None and not overlapping_runs
    assert sorted(completed) == list(range(40))
    assert run_order == staged_order == list(range(40))
    assert runners == stagers  # each batch ran on the thread that formed and staged it
    assert set(runners.values()) == {"inferbench-server-0", "inferbench-server-1"}  # and both took turns


def test_an_overlapped_path_keeps_at_most_one_staged_batch_waiting_and_reports_a_failure():
    running = threading.Lock()
    waiting_most, staged_not_run = [0], [0]
    guard = threading.Lock()

    def stage(rows: np.ndarray) -> np.ndarray:
        with guard:
            staged_not_run[0] += 1
            waiting_most[0] = max(waiting_most[0], staged_not_run[0])
        return rows

    def run(rows: np.ndarray) -> None:
        with guard:
            staged_not_run[0] -= 1
        with running:  # one run at a time
            time.sleep(0.002)
        if int(rows[0]) == 5:
            raise RuntimeError("engine failed on batch 5")

    completed: list[int] = []
    batcher = DynamicBatcher(BatchPath(stage, run, overlapped=True), 1, 0.0, completed.extend)
    batcher.issue([Query(i) for i in range(20)])  # all at once: the pipeline is kept full
    deadline = time.monotonic() + 30
    while len(completed) < 20 and time.monotonic() < deadline:
        time.sleep(0.01)
    batcher.stop()
    # the batch being run and the one staged behind it: at most two staged but not yet finished running
    assert waiting_most[0] <= 2
    assert sorted(completed) == list(range(20))  # after the failure, queries are completed unserved
    assert isinstance(batcher.error, RuntimeError)


def test_gather_fills_one_reused_buffer_per_input_and_batch_size():
    library = {"x": np.arange(40, dtype=np.float32).reshape(10, 4), "ids": np.arange(10, dtype=np.int64)}
    gather = Gather(library, pinned=False)
    first = gather(np.array([3, 1, 3]))
    np.testing.assert_array_equal(first["x"], library["x"][[3, 1, 3]])
    np.testing.assert_array_equal(first["ids"], [3, 1, 3])
    again = gather(np.array([0, 9, 2]))
    assert again["x"] is first["x"]  # the same buffer, refilled: no allocation per batch
    np.testing.assert_array_equal(again["x"], library["x"][[0, 9, 2]])
    assert gather(np.array([5]))["x"].shape == (1, 4)


def test_only_engines_that_stage_apart_overlap_and_the_record_says_so(tmp_path):
    from inferbench.engines.noop.engine import NoopEngine
    from inferbench.engines.pytorch.compile import TorchCompile
    from inferbench.engines.pytorch.eager import TorchEager

    assert TorchEager("cuda", "fp16", 0, {"engine": "torch_eager"}).stages_apart
    assert not TorchEager("cpu", "fp32", 2, {"engine": "torch_eager"}).stages_apart
    assert not TorchCompile("cuda", "fp16", 0, {"engine": "torch_compile"}).stages_apart
    assert not NoopEngine("cpu", "fp32", 2, {"engine": "noop"}).stages_apart
    settings = ServingSettings(latency_bound_ms=50, min_duration_s=0.2, min_query_count=50, target_qps=100)
    path = BatchPath(lambda rows: rows, lambda rows: time.sleep(0.001), overlapped=True)
    result = measure_serving("server", path, 1, 64, settings, tmp_path / "logs")
    assert result["overlapped"] is True
    assert result["result"]["query_count"] >= 50 and result["batches"]["count"] >= 50  # every query served
    assert measure_serving("server", fake_engine(), 1, 64, settings, tmp_path / "l2")["overlapped"] is False


def test_a_cell_whose_engine_stages_apart_is_served_overlapped_and_the_setting_turns_it_off(tmp_path, monkeypatch):
    """The cell path with the staging on its own thread (a CPU cell here: no stream, the same threads)."""
    from inferbench.engines.noop.engine import NoopEngine

    monkeypatch.setattr(NoopEngine, "stages_apart", property(lambda self: True))
    key = CellKey("mlp_heart", "noop", "fp32", "cpu", 4, 0, 1, "server")
    measure = MeasureSettings(warmup_s=0, min_time_s=0, min_iters=1)
    lock = MachineLock(tmp_path / "lock")  # one per process: a second would wait for this one's shared hold
    for overlap in (True, False):
        serving = ServingSettings(latency_bound_ms=1000, min_duration_s=0.2, min_query_count=500, target_qps=400,
                                  overlap_copies=overlap)  # fmt: skip
        request = CellRequest(key, {"engine": "noop"}, cell_inputs(tmp_path), with_serving(measure, serving))
        record = measure_cell(request, tmp_path / f"cells{overlap}" / key.relpath, lock)
        assert record.status == "ok", record.reason
        section = record.sections["serving"]
        assert section["overlapped"] is overlap and section["settings"]["overlap_copies"] is overlap
        assert section["result"]["query_count"] >= 500


@pytest.mark.slow
def test_serving_cells_of_every_status_write_every_output_of_their_rule_through_snakemake(tmp_path):
    """Through Snakemake, whatever the status: an invalid cell (its bound out of reach), a failed one (a
    damaged ONNX file) and an unavailable one (TensorRT) each leave a record and their LoadGen folder, and
    the run goes on to the summary (a missing output once made Snakemake delete the record and stop)."""
    from tests.test_workflow import TINY, snakemake

    config = copy.deepcopy(TINY)
    config["run"] = ["srv"]
    config["studies"] = {
        "srv": {
            "layout": "serving",
            "workloads": ["mlp_heart"],
            "engines": ["noop", "ort_cpu", "tensorrt"],
            "precisions": ["fp32"],
            "devices": ["cpu", "cuda"],
            "batch_sizes": [4],
            "threads": [1],
            "scenarios": ["server"],
            "latency_bound_ms": 1e-6,
        }
    }
    config["serving"] = {"min_duration_s": 0.2, "min_query_count": 100, "search_runs": 2}
    onnx = tmp_path / "results" / "onnx" / "mlp_heart.onnx"
    snakemake(tmp_path, config, dryrun=False, targets=["results/onnx/mlp_heart.onnx"])
    onnx.write_bytes(b"not an onnx model")  # newer than what made it: Snakemake keeps it
    snakemake(tmp_path, config, dryrun=False)
    cells = tmp_path / "results" / "cells" / "mlp_heart"
    statuses = {}
    for record_path in sorted(cells.rglob("*-server.json")):
        record = CellRecord.load(record_path)
        statuses[record.key.engine, record.key.device] = record.status
        assert record_path.with_suffix(".loadgen").is_dir(), record_path
    assert statuses == {
        ("noop", "cpu"): "invalid",
        ("noop", "cuda"): "invalid" if torch.cuda.is_available() else "unavailable",
        ("ort_cpu", "cpu"): "failed",
        ("tensorrt", "cuda"): "unavailable",
    }
    summary = pd.read_csv(tmp_path / "results" / "summary.csv")
    assert len(summary) == len(statuses)


def test_what_is_alive_before_a_loadgen_run_is_frozen_out_of_the_collector_during_it(tmp_path):
    # a full collection over torch's objects stalls every thread for tens of ms: it must not fall in a run
    import gc

    frozen_while_serving: list[int] = []

    def run_batch(rows: np.ndarray) -> None:
        frozen_while_serving.append(gc.get_freeze_count())

    settings = ServingSettings(latency_bound_ms=100, min_duration_s=0.2, min_query_count=50, target_qps=200)
    measure_serving("server", run_batch, 1, 64, settings, tmp_path / "logs")
    # the capacity's calls come before any run; the run's calls see the frozen heap; afterwards it is thawed
    assert max(frozen_while_serving) > 1000 and frozen_while_serving[-1] > 1000
    assert gc.get_freeze_count() == 0 and gc.isenabled()


def test_the_serving_table_puts_each_slowest_phase_on_its_own_row():
    """Server cells in another order than the union of keys, and a configuration with an offline cell
    and no server cell (a run cut off): each row shows its own server cell's slowest phase."""
    from inferbench.scenarios.serving.answer import side_by_side

    def cell(engine: str, scenario: str, phase: str | None) -> dict:
        return {"workload": "w", "engine": engine, "precision": "fp16", "device": "cuda", "seq_len": 0,
                "threads": 0, "batch_size": 1, "scenario": scenario, "status": "ok", "serving_qps": 100.0,
                "serving_p99_ms": 5.0, "serving_p50_ms": 1.0, "serving_mean_batch": 1.0,
                "serving_latency_bound_ms": 10.0, "serving_max_queue_delay_ms": 0.0, "serving_capacity_qps": 900.0,
                "serving_slowest_phase": phase, "serving_slowest_phase_ms": 4.0 if phase else None,
                "serving_slowest_ms": 5.0 if phase else None}  # fmt: skip

    cells = pd.DataFrame([cell("b", "server", "call"), cell("a", "server", "wait"), cell("a", "offline", None),
                          cell("c", "offline", None)])  # fmt: skip
    table = side_by_side(cells).set_index("engine")
    assert table.loc["a", "server_slowest"] == "wait 4 of 5 ms"
    assert table.loc["b", "server_slowest"] == "call 4 of 5 ms"
    assert pd.isna(table.loc["c", "server_slowest"]), "no server cell: nothing to say"
