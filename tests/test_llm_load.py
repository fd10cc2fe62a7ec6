"""LLM serving under load (issue 58): the seeded arrival and length process, the per-request and per-run
arithmetic against hand-computed cases, both drivers (step- and stream-driven) on fake engines with a virtual
clock, the cell's measurement and the pooling of its processes, the config checks, the grid and the report.
Fake engines only: the real tiny Llama runs in tests/test_llm_load_workflow.py."""

from __future__ import annotations

import asyncio
import copy
import dataclasses
import heapq
import itertools
import json
import re
import time
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any, ClassVar

import numpy as np
import pandas as pd
import pytest
import yaml

from inferbench.analysis.summary import summary_row
from inferbench.catalog.scenarios import SCENARIOS, drives, scenario_info
from inferbench.core.cells import CellKey, CellRecord
from inferbench.core.settings import MeasureSettings
from inferbench.machine.lock import MachineLock
from inferbench.models.registry import InputSpec
from inferbench.plan.code import cell_code_roots
from inferbench.plan.config import ConfigError, validate_config
from inferbench.plan.grid import SettingsConflict, cell_scenario_settings, config_cells, no_cells_message
from inferbench.scenarios.llm_load.arrivals import (
    LoadSettings,
    PlannedRequest,
    arrival_offsets,
    length_bounds,
    plan_requests,
)
from inferbench.scenarios.llm_load.measure import (
    CannotServe,
    LoadRuns,
    WindowEnergy,
    bisected,
    drive_steps,
    drive_stream,
    measure,
    merged_fields,
    merged_search,
    merged_serving,
    replayed,
    searched,
    serving_mode,
    token_agreement,
    unavailable_reason,
)
from inferbench.scenarios.llm_load.metrics import (
    Objective,
    RequestTrace,
    energy_figures,
    load_verdict,
    pooled_run,
    run_figures,
    spread_pct,
    sweep_answer,
    traces_figures,
    window_figures,
)
from inferbench.scenarios.prepare import CellRequest, PreparedCell
from tests.conftest import REPO

pytestmark = pytest.mark.fast


# -- the requests sent --


def test_arrivals_start_at_once_and_their_gaps_have_the_rate_s_mean_at_any_burstiness():
    for burstiness in (0.25, 1.0, 4.0):
        offsets = arrival_offsets(20_001, 5.0, burstiness, np.random.default_rng(3))
        gaps = np.diff(offsets)
        assert offsets[0] == 0.0 and (gaps >= 0).all()
        assert gaps.mean() == pytest.approx(1 / 5.0, rel=0.05)
        # a gamma of shape k has a coefficient of variation of 1 / sqrt(k): burstier below 1, evener above
        assert gaps.std() / gaps.mean() == pytest.approx(burstiness**-0.5, rel=0.08)


def test_the_same_seed_sends_the_same_requests_and_a_rate_twice_as_high_halves_every_gap():
    kwargs = dict(burstiness=1.0, prompt_tokens=32, prompt_range=0.5, output_tokens=8, output_range=0.5, vocab=100)
    once = plan_requests(50, rate=2.0, seed=7, **kwargs)
    assert once == plan_requests(50, rate=2.0, seed=7, **kwargs)
    assert once != plan_requests(50, rate=2.0, seed=8, **kwargs)
    faster = plan_requests(50, rate=4.0, seed=7, **kwargs)
    assert [r.arrival_s / 2 for r in once] == pytest.approx([r.arrival_s for r in faster])
    assert [r.prompt for r in once] == [r.prompt for r in faster]  # only the clock of the arrivals scales
    assert len({r.request_id for r in once}) == 50
    # at a fixed concurrency no request has an arrival: each is sent when a slot frees
    assert all(r.arrival_s is None for r in plan_requests(5, rate=None, seed=7, **kwargs))


def test_lengths_are_uniform_within_vllm_s_range_ratio_and_outputs_have_a_second_token():
    assert length_bounds(100, 0.5) == (50, 150) and length_bounds(100, 0.0) == (100, 100)
    assert length_bounds(2, 0.9, least=2) == (2, 3)  # int(0.2) = 0, raised to the least
    plan = plan_requests(400, rate=1.0, burstiness=1.0, prompt_tokens=100, prompt_range=0.5, output_tokens=3,
                         output_range=0.9, vocab=10, seed=0)  # fmt: skip
    prompts, outputs = [len(r.prompt) for r in plan], [r.max_tokens for r in plan]
    assert min(prompts) == 50 and max(prompts) == 150  # both ends drawn among 400
    assert set(outputs) == {2, 3, 4, 5}  # int(3 x 0.1) = 0 raised to 2, int(3 x 1.9) = 5
    assert all(0 <= t < 10 for r in plan for t in r.prompt)
    with pytest.raises(ValueError, match="range ratio"):
        length_bounds(10, 1.0)


def test_settings_take_the_schema_s_defaults_and_name_the_key_they_refuse():
    settings = LoadSettings.from_dict({"requests": 50, "objective": {"tpot_ms": 20}})
    assert settings.requests == 50 and settings.arrivals == "poisson" and settings.load_shares[-1] == 1.25
    assert settings.objective == Objective(1000, 20, "p99")  # the other bounds at their defaults
    with pytest.raises(ValueError, match=r"unknown llm_load settings \['rate'\]"):
        LoadSettings.from_dict({"rate": 3})
    with pytest.raises(ValueError, match=r"llm_load.burstiness is 0.5 with arrivals poisson"):
        LoadSettings.from_dict({"burstiness": 0.5})
    with pytest.raises(ValueError, match=r"llm_load.concurrencies is \[4, 2\]"):
        LoadSettings.from_dict({"arrivals": "concurrency", "concurrencies": [4, 2]})
    assert LoadSettings.from_dict({"arrivals": "concurrency"}).loads == (1, 2, 4, 8)


# -- the arithmetic --


def test_a_request_s_ttft_tpot_itl_and_e2e_are_vllm_s():
    trace = RequestTrace("r", sent_s=1.0, max_tokens=4)
    trace.observe(1.1, 1, False)
    trace.observe(1.1, 1, False)  # no new token: no arrival
    trace.observe(1.15, 2, False)
    trace.observe(1.25, 4, True)  # two tokens in one arrival: one ITL
    figures = trace.figures_s()
    assert figures["ttft"] == pytest.approx(0.1) and figures["e2e"] == pytest.approx(0.25)
    assert figures["tpot"] == pytest.approx((0.25 - 0.1) / 3)  # (e2e - ttft) / (tokens - 1)
    assert figures["itl"] == pytest.approx([0.05, 0.1]) and figures["output_tokens"] == 4
    with pytest.raises(ValueError, match="said 1 tokens after saying 4"):
        trace.observe(1.3, 1, True)
    with pytest.raises(ValueError, match="has not finished"):
        RequestTrace("x", 0.0, 2).figures_s()


def _trace(request_id: str, sent: float, times: list[float]) -> RequestTrace:
    trace = RequestTrace(request_id, sent, len(times))
    for count, at in enumerate(times, start=1):
        trace.observe(at, count, count == len(times))
    return trace


def test_a_run_s_rates_goodput_and_objective_follow_from_its_requests():
    objective = Objective(ttft_ms=150, tpot_ms=60, percentile="p50")
    traces = [
        _trace("a", 0.0, [0.1, 0.15, 0.2]),  # ttft 100 ms, tpot 50 ms: good
        _trace("b", 0.5, [0.7, 0.72]),  # ttft 200 ms: not good
        _trace("c", 1.0, [1.05, 1.15, 1.3]),  # ttft 50, tpot 125 ms: not good
    ]
    run = traces_figures(traces, 0.0, objective)
    assert run["requests"] == 3 and run["duration_s"] == pytest.approx(1.3)  # from the start to the last token
    assert run["request_per_s"] == pytest.approx(3 / 1.3) and run["output_tokens_per_s"] == pytest.approx(8 / 1.3)
    assert run["good_requests"] == 1 and run["goodput_per_s"] == pytest.approx(1 / 1.3)
    assert run["ttft_ms"]["p50"] == pytest.approx(100) and run["ttft_ms"]["mean"] == pytest.approx(350 / 3)
    assert sorted(run["samples_ms"]["tpot"]) == pytest.approx([20, 50, 125])
    assert run["itl_ms"]["n"] == 5 and run["e2e_ms"]["p50"] == pytest.approx(220)
    # p50 TTFT 100 <= 150 and p50 TPOT 50 <= 60: met, though two requests of three were not good
    assert run["objective_met"] is True and run["good_share"] == pytest.approx(1 / 3)
    assert run["mean_in_flight"] == pytest.approx((0.2 + 0.22 + 0.3) / 1.3)  # Little's law
    # a p99 from three requests is not reported, and the objective is then not judged
    assert traces_figures(traces, 0.0, Objective(150, 60, "p99"))["objective_met"] is None


def _steady_load(rate: float, served_per_s: float, span_s: float, seed: int = 0) -> list[RequestTrace]:
    """Requests arriving at ``rate`` (Poisson) for ``span_s`` s, served in arrival order at ``served_per_s`` by one
    slot (a queue grows where the rate is above it), two tokens each."""
    arrivals = arrival_offsets(int(rate * span_s), rate, 1.0, np.random.default_rng(seed))
    traces, free = [], 0.0
    for index, arrival in enumerate(arrivals):
        start = max(free, float(arrival))
        free = start + 1 / served_per_s
        traces.append(_trace(f"r{index}", float(arrival), [start + 0.5 / served_per_s, free]))
    return traces


def test_a_load_is_judged_over_its_steady_window_valid_only_where_served_keeps_up_with_arrived():
    """The committed serving run called 118/s a load while serving 94/s, and served above offered below
    capacity: 200 requests arriving within 2 s, timed to the queue's drain. A steady window counts the
    requests that arrived in it and what was served in it, per second of it."""
    objective = Objective(ttft_ms=1000, tpot_ms=1000, percentile="p50")
    light = window_figures(_steady_load(5.0, 20.0, 40), 0.0, (5.0, 35.0), objective)
    assert light["window_s"] == 30 and light["arrived_per_s"] == pytest.approx(5.0, rel=0.2)
    assert light["request_per_s"] == pytest.approx(light["arrived_per_s"], rel=0.1), "steady: served = arrived"
    assert light["requests"] == pytest.approx(150, rel=0.2) and light["output_tokens_per_s"] > 0
    verdict = load_verdict(light, min_requests=100, tolerance=0.1)
    assert verdict == {"valid": True, "met": True, "failed": []}
    # twice the capacity: the queue grows, served stays at 10/s while 20/s arrive: INVALID, said why
    heavy = window_figures(_steady_load(20.0, 10.0, 40), 0.0, (5.0, 35.0), objective)
    assert heavy["request_per_s"] == pytest.approx(10.0, rel=0.05) and heavy["arrived_per_s"] > 15
    verdict = load_verdict(heavy, min_requests=100, tolerance=0.1)
    assert not verdict["valid"] and not verdict["met"]
    assert re.match(r"served: (9\.9\d|10\.0) requests/s against 1\d\.\d/s arrived, beyond ±10%$", verdict["failed"][0])
    # a load whose window holds too few requests, and a zero-gap burst: INVALID, each constraint named
    assert load_verdict(light, min_requests=1000, tolerance=0.1)["failed"][0].startswith("requests: ")
    burst = [_trace(f"b{i}", 5.0, [5.0 + 0.01 * (i + 1), 5.0 + 0.02 * (i + 1)]) for i in range(50)]
    judged = load_verdict(window_figures(burst, 0.0, (5.0, 35.0), objective), 10, 0.1)
    assert judged["failed"][0] == "duration: arrivals spread over 0 s of the 30-s window" and not judged["met"]
    # one request per load: no percentile to judge, never met
    one = window_figures([_trace("x", 6.0, [6.1, 6.2])], 0.0, (5.0, 35.0), Objective(1000, 1000, "p90"))
    assert "objective: too few requests to judge its percentile" in load_verdict(one, 1, 0.5)["failed"]
    # a burst before the window: nothing arrived in it
    empty = load_verdict(window_figures(burst, 0.0, (6.0, 36.0), objective), 10, 0.1)
    assert empty["failed"][:2] == ["requests: 0 in the steady window, fewer than 10",
                                   "duration: arrivals spread over 0 s of the 30-s window"]  # fmt: skip


def test_load_settings_refuse_shares_that_measure_nothing_and_size_each_load_by_its_window():
    with pytest.raises(ValueError, match=r"load_shares is \[1.0, 100.0\]: shares of the capacity from 0.05"):
        LoadSettings.from_dict({"load_shares": [1.0, 100]})
    with pytest.raises(ValueError, match="load_shares is"):
        LoadSettings.from_dict({"load_shares": [1e-9, 1.0]})
    settings = LoadSettings.from_dict({"requests": 200, "steady_s": 30, "ramp_s": 5})
    # long enough for 200 arrivals but for one chance in a thousand: 200 + 3 x sqrt(200) expected
    assert settings.window_s(100.0) == 30 and settings.window_s(2.0) == pytest.approx((200 + 3 * 200**0.5) / 2)
    assert settings.planned_count(100.0) == 4001, "a ramp, the window and as long again after it"
    # burstier arrivals count with more variance: a longer window
    bursty = LoadSettings.from_dict({"requests": 200, "steady_s": 30, "arrivals": "gamma", "burstiness": 0.5})
    assert bursty.window_s(2.0) == pytest.approx((200 + 3 * 400**0.5) / 2)


def test_a_window_sized_by_the_margin_holds_its_requests_in_nearly_every_seeded_plan():
    """Sized for 40 arrivals on average, half the windows held fewer; with the margin, almost none do."""
    settings = LoadSettings.from_dict({"requests": 40, "steady_s": 0.1, "ramp_s": 1.0})
    rate, short = 10.0, 0
    for seed in range(300):
        window = (settings.ramp_s, settings.ramp_s + settings.window_s(rate))
        planned = settings.plan(settings.planned_count(rate), rate=rate, seed=seed, prompt_tokens=8, output_tokens=4,
                                vocab=100, prefix="t-")  # fmt: skip
        arrived = sum(window[0] <= r.arrival_s < window[1] for r in planned)
        short += arrived < settings.requests
    assert short <= 3, f"{short} of 300 seeded windows held fewer than 40 arrivals"


def test_the_search_bisects_between_the_heaviest_load_met_and_the_lightest_missed():
    """Five fixed shares said "met up to 1x, missed at 1.5x": the highest rate lay somewhere in a factor of 1.5."""
    settings = LoadSettings.from_dict({"search_steps": 3})
    sweep = [{"offered_per_s": rate, "met": rate < 30} for rate in (10.0, 20.0, 40.0)]
    sent = []

    def at_rate(rate: float, step: int) -> dict[str, Any]:
        sent.append(step)
        return {"met": rate <= 30.0, "requests": 50, "samples_ms": {"e2e": [1.0]}}

    found = bisected(settings, sweep, at_rate)
    # 20 and 40 -> 28.3 met -> 33.6 missed -> 30.8 missed: the limit 30 lies within the last bracket
    assert found["rate_per_s"] == pytest.approx(800**0.5) and found["missed_per_s"] == pytest.approx(30.84, abs=0.01)
    assert sent == [0, 1, 2] and [s["met"] for s in found["steps"]] == [True, False, False]
    assert "samples_ms" in found["steps"][0], "the search keeps its samples: the processes' steps are pooled from them"
    # nothing to search: every load met, none met, or no steps asked for
    assert bisected(settings, [{"offered_per_s": 1.0, "met": True}], at_rate) is None
    assert bisected(settings, [{"offered_per_s": 1.0, "met": False}], at_rate) is None
    assert bisected(LoadSettings.from_dict({"search_steps": 0}), sweep, at_rate) is None
    # records from before the processes offered one set of rates: each bisected its own, and the merge takes
    # the median rate met beside how far apart they landed
    objective = settings.objective
    old = {**found, "steps": [{k: v for k, v in step.items() if k != "samples_ms"} for step in found["steps"]]}
    merged = merged_search([old, old | {"rate_per_s": 26.0}], objective, sweep)
    assert merged["by_process"]["rate_per_s"] == pytest.approx([28.28, 26.0], abs=0.01) and merged["steps"] == 3
    assert merged["rate_per_s"] == pytest.approx((28.284 + 26.0) / 2, abs=0.01) and merged["pooled"] is False
    assert merged_search([found, None], objective, sweep) is None


def test_a_replayed_search_narrows_its_own_bracket_from_the_first_process_s_rates():
    sweep = [{"offered_per_s": rate, "met": rate < 30} for rate in (10.0, 20.0, 40.0)]
    offered = []

    def at_rate(rate: float, step: int) -> dict[str, Any]:
        offered.append(rate)
        return {"met": rate <= 25.0}

    found = replayed([28.3, 23.8, 50.0], sweep, at_rate)
    assert offered == [28.3, 23.8, 50.0], "the first process's rates, in its order"
    # 28.3 missed here (20-28.3), 23.8 met (23.8-28.3), 50 lies outside the bracket and narrows nothing
    assert (found["rate_per_s"], found["missed_per_s"]) == (23.8, 28.3) and len(found["steps"]) == 3
    assert replayed([], sweep, at_rate) is None
    # a sweep that brackets nothing here keeps its steps for the merge
    assert searched([{"offered_per_s": 10.0, "met": True}], found["steps"])["rate_per_s"] is None


def test_a_sweep_s_answer_is_the_heaviest_load_before_the_first_that_misses():
    met, missed, unjudged = {"objective_met": True}, {"objective_met": False}, {"objective_met": None}
    assert sweep_answer([met, met, missed, met]) == (1, 2)  # a pass after a miss is not the answer
    assert sweep_answer([missed, met]) == (None, 0)
    assert sweep_answer([met, met]) == (1, None)
    assert sweep_answer([met, unjudged]) == (0, 1)
    # a load judged by its verdict: met only where VALID
    invalid = {"objective_met": True, "met": False, "valid": False}
    assert sweep_answer([met, invalid, met]) == (0, 1)


def test_processes_pool_their_samples_rates_over_their_summed_time_and_keep_their_own_values():
    objective = Objective(100, 50, "p50")

    def run(samples: list[float], duration: float, offered: float) -> dict[str, Any]:
        figures = run_figures({"ttft": samples, "tpot": samples, "itl": samples, "e2e": samples}, duration,
                              len(samples) * 4, len(samples), objective)  # fmt: skip
        return figures | {"samples_ms": {k: samples for k in ("ttft", "tpot", "itl", "e2e")}, "offered_per_s": offered,
                          "load": 0.5}  # fmt: skip

    pooled = pooled_run([run([10, 20], 2.0, 1.0), run([30, 40, 50], 4.0, 3.0)], objective)
    assert pooled["requests"] == 5 and pooled["request_per_s"] == pytest.approx(5 / 6)
    assert pooled["ttft_ms"]["p50"] == pytest.approx(30) and pooled["offered_per_s"] == pytest.approx(2.0)
    assert pooled["by_process"]["request_per_s"] == pytest.approx([1.0, 0.75])
    assert pooled["spread_pct"]["request_per_s"] == pytest.approx(100 * 0.25 / 0.875)
    assert pooled["by_process"]["ttft_p50"] == pytest.approx([15, 40]) and pooled["processes"] == 2
    assert spread_pct([1.0]) is None and spread_pct([2.0, None, 4.0]) == pytest.approx(200 / 3)


def test_served_tokens_agree_with_the_reference_up_to_the_first_difference():
    reference = np.array([[1, 2, 3, 4], [5, 6, 7, 8]])
    parted = reference.copy()
    parted[1, 2] = 0
    assert token_agreement(reference, reference, None)["equal"] is True
    found = token_agreement(parted, reference, None)
    assert found == {"equal": False, "checked": True, "compared": 4, "agreeing": 2, "first_difference": 2}
    assert token_agreement(parted, reference, gated=1)["equal"] is True  # a low precision: the first only


# -- the drivers --


class VirtualClock:
    """A clock that moves only when the fake engine works or the driver sleeps."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += max(0.0, seconds)


@dataclass
class FakeStepEngine:
    """Continuous batching of known times: up to ``running`` requests, each step ``step_s`` long makes one token
    for every running one (the first step of a request is its prefill: its first token); waiting requests are
    admitted between steps, in order."""

    #: what an engine's start compiled (none: a warm start; inferbench.engines.base.PRIMING_STEPS)
    cold_start_s: ClassVar[dict[str, float]] = {}
    clock: Any
    step_s: float
    running: int
    new_tokens: int = 4
    waiting: list[tuple[str, int]] = field(default_factory=list)
    active: dict[str, list[int]] = field(default_factory=dict)
    made: dict[str, list[int]] = field(default_factory=dict)
    steps: int = 0
    most_running: int = 0
    most_waiting: int = 0

    def serve_add(self, request_id: str, prompt: list[int], max_tokens: int) -> None:
        self.waiting.append((request_id, max_tokens))

    def serve_busy(self) -> bool:
        return bool(self.waiting or self.active)

    def serve_step(self) -> list[tuple[str, int, bool]]:
        self.most_waiting = max(self.most_waiting, len(self.waiting))
        while self.waiting and len(self.active) < self.running:
            request_id, max_tokens = self.waiting.pop(0)
            self.active[request_id] = [0, max_tokens]
        self.most_running = max(self.most_running, len(self.active))
        self._work(self.step_s)
        self.steps += 1
        out = []
        for request_id, state in list(self.active.items()):
            state[0] += 1
            finished = state[0] == state[1]
            out.append((request_id, state[0], finished))
            if finished:
                self.made[request_id] = [7] * state[0]
                del self.active[request_id]
        return out

    def _work(self, seconds: float) -> None:
        if isinstance(self.clock, VirtualClock):
            self.clock.sleep(seconds)
        else:
            time.sleep(seconds)

    def serve_tokens(self, request_id: str) -> list[int]:
        return self.made.pop(request_id)


def _requests(arrivals: list[float | None], tokens: int) -> list[PlannedRequest]:
    return [PlannedRequest(f"r{i}", at, (1, 2, 3), tokens) for i, at in enumerate(arrivals)]


def _figures(traces: list[RequestTrace]) -> list[tuple[float, float, float | None]]:
    return [(f["ttft"], f["e2e"], f["tpot"]) for f in (t.figures_s() for t in traces)]


def test_the_step_driver_admits_arrivals_between_steps_and_times_them_from_their_scheduled_arrival():
    clock = VirtualClock()
    engine = FakeStepEngine(clock, step_s=0.1, running=1)
    traces, started = drive_steps(engine, _requests([0.0, 0.25, 1.0], 3), clock=clock, sleep=clock.sleep)
    assert started == 0.0
    # r0: tokens at 0.1, 0.2, 0.3; r1 arrived at 0.25 but waits for r0 and the step in flight: tokens at 0.4, 0.5,
    # 0.6, its TTFT counting the wait from 0.25; the engine then idles and the driver sleeps until r2 at 1.0
    assert _figures(traces) == [
        pytest.approx((0.1, 0.3, 0.1)),
        pytest.approx((0.15, 0.35, 0.1)),
        pytest.approx((0.1, 0.3, 0.1)),
    ]
    assert traces[1].sent_s == 0.25 and engine.steps == 9


def test_at_a_fixed_concurrency_a_request_is_sent_when_one_finishes_and_counts_from_then():
    clock = VirtualClock()
    engine = FakeStepEngine(clock, step_s=0.1, running=2)
    traces, _ = drive_steps(engine, _requests([None] * 3, 2), concurrency=2, clock=clock, sleep=clock.sleep)
    assert [t.sent_s for t in traces] == pytest.approx([0.0, 0.0, 0.2])
    assert _figures(traces) == [pytest.approx((0.1, 0.2, 0.1))] * 3


def test_the_step_driver_refuses_an_engine_that_idles_with_requests_open_or_names_one_never_sent():
    clock = VirtualClock()
    idle = FakeStepEngine(clock, step_s=0.1, running=1)
    idle.serve_busy = lambda: False  # type: ignore[method-assign]
    with pytest.raises(RuntimeError, match="idle with 1 request"):
        drive_steps(idle, _requests([0.0], 2), clock=clock, sleep=clock.sleep)
    stray = FakeStepEngine(clock, step_s=0.1, running=1)
    stray.serve_step = lambda: [("nobody", 1, False)]  # type: ignore[method-assign]
    with pytest.raises(RuntimeError, match="'nobody', which was never sent"):
        drive_steps(stray, _requests([0.0], 2), clock=clock, sleep=clock.sleep)


class VirtualTime:
    """Virtual time for asyncio: ``sleep`` parks a task until the clock reaches its wake-up; ``run`` lets every
    ready task run until all wait, then moves the clock to the earliest wake-up."""

    def __init__(self) -> None:
        self.now = 0.0
        self.sleepers: list[tuple[float, int, asyncio.Future[None]]] = []
        self.order = 0

    def clock(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:
        future = asyncio.get_running_loop().create_future()
        heapq.heappush(self.sleepers, (self.now + max(0.0, seconds), self.order, future))
        self.order += 1
        await future

    async def run(self, main: Any) -> Any:
        task = asyncio.ensure_future(main)
        while True:
            for _ in range(50):  # every ready task runs on until it waits
                await asyncio.sleep(0)
            if task.done():
                return task.result()
            at, _, future = heapq.heappop(self.sleepers)
            self.now = at
            future.set_result(None)


@dataclass
class FakeStreamEngine:
    """Each request alone on its own: its first token ``first_s`` after it starts, then one every ``step_s``;
    ``pairs``: every arrival after the first brings two tokens."""

    cold_start_s: ClassVar[dict[str, float]] = {}
    time: VirtualTime
    first_s: float
    step_s: float
    pairs: bool = False

    async def serve_stream(self, request_id: str, prompt: list[int], max_tokens: int) -> Any:
        await self.time.sleep(self.first_s)
        made = 1
        yield made
        while made < max_tokens:
            await self.time.sleep(self.step_s)
            made = min(max_tokens, made + (2 if self.pairs else 1))
            yield made


def test_the_stream_driver_starts_each_request_at_its_arrival_and_times_every_yield():
    vt = VirtualTime()
    engine = FakeStreamEngine(vt, first_s=0.1, step_s=0.02)
    traces, started = asyncio.run(vt.run(drive_stream(engine, _requests([0.0, 0.05], 3), clock=vt.clock,
                                                      sleep=vt.sleep)))  # fmt: skip
    assert started == 0.0 and [t.sent_s for t in traces] == [0.0, 0.05]
    assert _figures(traces) == [pytest.approx((0.1, 0.14, 0.02))] * 2
    assert traces[1].figures_s()["itl"] == pytest.approx([0.02, 0.02])
    # two tokens per arrival: one ITL per arrival, TPOT over every token
    vt = VirtualTime()
    paired = FakeStreamEngine(vt, first_s=0.1, step_s=0.04, pairs=True)
    (trace,), _ = asyncio.run(vt.run(drive_stream(paired, _requests([0.0], 5), clock=vt.clock, sleep=vt.sleep)))
    assert trace.figures_s()["itl"] == pytest.approx([0.04, 0.04]) and trace.figures_s()["tpot"] == pytest.approx(0.02)


def test_the_stream_driver_at_a_fixed_concurrency_sends_the_next_request_when_one_ends():
    vt = VirtualTime()
    engine = FakeStreamEngine(vt, first_s=0.1, step_s=0.02)
    traces, _ = asyncio.run(vt.run(drive_stream(engine, _requests([None] * 3, 2), concurrency=2, clock=vt.clock,
                                                sleep=vt.sleep)))  # fmt: skip
    assert [t.sent_s for t in traces] == pytest.approx([0.0, 0.0, 0.12])
    assert _figures(traces) == [pytest.approx((0.1, 0.12, 0.02))] * 3


def test_the_warm_up_climbs_to_the_batch_size_by_doubling():
    from inferbench.scenarios.llm_load.measure import concurrency_ladder

    assert concurrency_ladder(1) == [1] and concurrency_ladder(4) == [1, 2, 4]
    assert concurrency_ladder(32) == [1, 2, 4, 8, 16, 32] and concurrency_ladder(6) == [1, 2, 4, 6]


def test_the_scenario_picks_the_stream_then_the_steps_and_names_an_engine_it_cannot_drive():
    class Both(FakeStreamEngine, FakeStepEngine):
        pass

    class Neither:
        pass

    assert serving_mode(FakeStreamEngine) == "stream" and serving_mode(Both) == "stream"
    assert serving_mode(FakeStepEngine) == "step" and serving_mode(Neither) is None
    assert unavailable_reason(FakeStepEngine) is None
    assert "Neither serves no requests under load: it has neither serve_stream" in unavailable_reason(Neither)
    # an engine that serves under load, but not here: the static transformers engine's graphs need a GPU
    from inferbench.engines.generation.transformers import HfGenerate, HfGenerateStatic

    assert unavailable_reason(HfGenerate, "cpu", "fp32") is None
    assert unavailable_reason(HfGenerateStatic, "cuda", "fp16") is None
    assert "CUDA graphs, which need a GPU" in unavailable_reason(HfGenerateStatic, "cpu", "fp32")
    assert SCENARIOS["llm_load"].unavailable == "inferbench.scenarios.llm_load.measure:unavailable_reason"


# -- a cell --

LOCKS = itertools.count()
# steady windows of 0.3 s after a ramp of 0.05 s: a fake engine serves hundreds of requests a second
SETTINGS = {"requests": 12, "load_shares": [0.5, 1.0, 4.0], "steady_s": 0.3, "ramp_s": 0.05, "served_tolerance": 0.25,
            "objective": {"ttft_ms": 60_000, "tpot_ms": 60_000, "percentile": "p90"}}  # fmt: skip


def _cell(engine: Any, scenario_settings: dict[str, Any], tmp_path: Path, batch: int = 2) -> PreparedCell:
    key = CellKey("llm:llama", "hf_eager", "fp32", "cpu", batch, 8, 1, "llm_load")
    settings = MeasureSettings(warmup_s=0, repeats=1, scenario_settings=scenario_settings)
    lock = MachineLock(tmp_path / f"lock{next(LOCKS)}")  # each cell its own: a shared one left held blocks the next
    lock.shared()
    specs = (InputSpec("input_ids", ("batch", "seq"), "int64", kind="tokens", high=50),)
    return PreparedCell(CellRequest(key, {"engine": "hf_generate"}, settings=settings), None, engine, specs, [], lock)


def test_a_cell_measures_its_capacity_then_sends_each_load_at_its_share_of_it(tmp_path):
    engine = FakeStepEngine(time.perf_counter, step_s=0.002, running=2, new_tokens=3)
    measured = measure(_cell(engine, SETTINGS, tmp_path))
    serving = measured.fields["sections"]["llm_load"]
    capacity = serving["capacity"]["request_per_s"]
    # the capacity run queues its 12 requests at once (vLLM's offline benchmark's way); the engine runs 2
    assert serving["capacity"]["requests"] == 12 == serving["capacity"]["queued"]
    assert engine.most_running == 2
    assert [step["load"] for step in serving["sweep"]] == [0.5, 1.0, 4.0]
    assert [step["offered_per_s"] for step in serving["sweep"]] == pytest.approx(
        [0.5 * capacity, capacity, 4 * capacity]
    )
    # each load at a rate over its steady window: at least 12 requests arrived in it, each timed to its end
    assert all(step["requests"] >= 12 and step["window_s"] >= 0.3 for step in serving["sweep"])
    light = serving["sweep"][0]
    assert light["valid"] and light["request_per_s"] == pytest.approx(light["arrived_per_s"], rel=0.25)
    # bounds of a minute: every VALID load meets them; 4x the capacity cannot be served as it arrives: INVALID
    heavy = serving["sweep"][2]
    assert not heavy["valid"] and heavy["failed"][0].startswith("served: ") and heavy["met"] is False
    assert serving["answer"]["index"] == 1 and serving["answer"]["failing_index"] == 2
    # then a search between 1x and 4x the capacity, each of its loads judged as the sweep's
    search = serving["search"]
    assert len(search["steps"]) == 3 and all("valid" in s for s in search["steps"])
    assert capacity <= search["rate_per_s"] < search["missed_per_s"] <= 4 * capacity
    assert serving["result"]["target_qps"] == serving["answer"]["rate_per_s"] == serving["sweep"][1]["offered_per_s"]
    assert serving["token_parity"] is None and serving["processes"] == 1 and serving["driven"] == "step"
    assert measured.invalid is None and measured.fields["timing"] == "llm_load"
    # warmed up with two waves at 1 and at 2 in flight, then one run like the capacity's (warmup_s 0)
    assert measured.fields["warmup_iters"] == 2 + 4 + 12
    # the cell's latency: every request of the answering load, e2e, as its processes' spread is read
    assert measured.samples["device"].size == serving["sweep"][1]["requests"] == measured.fields["n_iters"]
    assert measured.fields["latency_ms"]["p50"] == pytest.approx(serving["sweep"][1]["e2e_ms"]["p50"], rel=1e-3)


def test_a_capacity_the_settings_give_sets_the_rates_in_place_of_the_measured_one(tmp_path):
    engine = FakeStepEngine(time.perf_counter, step_s=0.002, running=2, new_tokens=3)
    given = {**SETTINGS, "load_shares": [0.5], "capacity_per_s": 40.0, "search_steps": 0}
    serving = measure(_cell(engine, given, tmp_path)).fields["sections"]["llm_load"]
    # the capacity run still measures the engine's own; the load is offered at its share of the given one
    assert serving["capacity"]["request_per_s"] > 0
    assert [step["offered_per_s"] for step in serving["sweep"]] == [20.0]
    assert serving["offered_from"] == {"capacity_per_s": 40.0, "process": "settings"}
    with pytest.raises(ValueError, match="capacity_per_s"):
        LoadSettings.from_dict({"capacity_per_s": 0.0})


def test_a_cell_whose_lightest_load_misses_the_objective_has_no_rate_and_a_stream_engine_is_driven_too(tmp_path):
    class RealTimeStream:
        new_tokens = 3
        cold_start_s: ClassVar[dict[str, float]] = {}

        async def serve_stream(self, request_id: str, prompt: list[int], max_tokens: int) -> Any:
            for made in range(1, max_tokens + 1):
                await asyncio.sleep(0.002)
                yield made

    tight = {**SETTINGS, "objective": {"ttft_ms": 0.001, "tpot_ms": 0.001, "percentile": "p90"}}
    serving = measure(_cell(RealTimeStream(), tight, tmp_path)).fields["sections"]["llm_load"]
    assert serving["driven"] == "stream" and serving["answer"]["index"] is None
    assert serving["answer"]["failing_index"] == 0 and serving["result"] is None
    assert all(step["objective_met"] is False for step in serving["sweep"])


def test_a_cell_of_an_engine_that_cannot_serve_under_load_says_why_and_one_without_settings_names_the_key(tmp_path):
    class OneAtATime:
        new_tokens = 3

    with pytest.raises(CannotServe, match="OneAtATime serves no requests under load"):
        measure(_cell(OneAtATime(), SETTINGS, tmp_path))
    engine = FakeStepEngine(time.perf_counter, step_s=0.001, running=2)
    with pytest.raises(ValueError, match=r"needs its settings in measure.scenario_settings"):
        measure(_cell(engine, None, tmp_path))  # type: ignore[arg-type]


def test_a_cell_s_processes_are_pooled_load_by_load_with_each_process_s_answer_and_its_spread(tmp_path):
    records, sweep_only = [], {**SETTINGS, "search_steps": 0}  # the sweep's loads pooled; the search's: below
    for _ in range(2):
        engine = FakeStepEngine(time.perf_counter, step_s=0.002, running=2, new_tokens=3)
        records.append(
            SimpleNamespace(
                sections={"llm_load": measure(_cell(engine, sweep_only, tmp_path)).fields["sections"]["llm_load"]}
            )
        )
    merged = merged_serving(records)
    assert merged["processes"] == 2 and len(merged["sweep"]) == 3
    first, second = (r.sections["llm_load"] for r in records)
    for pooled, one, two in zip(merged["sweep"], first["sweep"], second["sweep"], strict=True):
        assert pooled["requests"] == one["requests"] + two["requests"]
        assert pooled["by_process"]["request_per_s"] == [one["request_per_s"], two["request_per_s"]]
        # served over the two windows, and VALID only where both processes' loads were
        assert pooled["request_per_s"] == pytest.approx((one["served_requests"] + two["served_requests"]) /
                                                        (one["window_s"] + two["window_s"]))  # fmt: skip
        assert pooled["valid"] == (one["valid"] and two["valid"])
        assert pooled["ttft_ms"]["p50"] == pytest.approx(float(np.median(one["samples_ms"]["ttft"] +
                                                                         two["samples_ms"]["ttft"])))  # fmt: skip
        assert pooled["spread_pct"]["request_per_s"] == pytest.approx(spread_pct([one["request_per_s"],
                                                                                 two["request_per_s"]]))  # fmt: skip
    assert merged["capacity"]["requests"] == 24
    assert merged["answer"]["by_process"]["rate_per_s"] == [
        first["answer"]["rate_per_s"],
        second["answer"]["rate_per_s"],
    ]
    assert merged["answer"]["spread_pct"]["rate_per_s"] is not None
    assert merged["capacity_qps"] == pytest.approx(
        24 / sum(r.sections["llm_load"]["capacity"]["duration_s"] for r in records)
    )
    # what the cell runner replaces in the merged record (ScenarioInfo.merge): the pooled sweep, and the served rate
    # of the answering load as its throughput
    # each process alone (no shared folder): each offers shares of its own capacity
    assert merged["offered_from"]["process"] == "own" and merged["offered_from"]["same_rates"] is False
    fields = merged_fields(records)
    answer = fields["sections"]["llm_load"]["answer"]["index"]
    assert fields["throughput_per_s"] == fields["sections"]["llm_load"]["sweep"][answer]["request_per_s"]
    assert SCENARIOS["llm_load"].merge == "inferbench.scenarios.llm_load.measure:merged_fields"


def test_a_cell_s_later_processes_offer_the_first_s_rates_and_their_search_steps_are_pooled(tmp_path):
    """Each process offered shares of its own capacity: neither was offered the rate the pooled load named."""
    shared = tmp_path / "shared"
    shared.mkdir()
    records = []
    # two loads (the second twice the capacity: missed, a short queue to drain) and one search step between them
    one_step = {**SETTINGS, "load_shares": [0.5, 2.0], "search_steps": 1}
    for index, step_s in enumerate((0.002, 0.003)):  # the second process's engine is slower: its capacity lower
        engine = FakeStepEngine(time.perf_counter, step_s=step_s, running=2, new_tokens=3)
        cell = dataclasses.replace(_cell(engine, one_step, tmp_path), first_process=index == 0, shared=shared)
        records.append(SimpleNamespace(sections={"llm_load": measure(cell).fields["sections"]["llm_load"]}))
    first, second = (r.sections["llm_load"] for r in records)
    assert first["capacity"]["request_per_s"] != second["capacity"]["request_per_s"]
    assert [s["offered_per_s"] for s in second["sweep"]] == [s["offered_per_s"] for s in first["sweep"]]
    assert second["offered_from"] == {"capacity_per_s": first["capacity"]["request_per_s"], "process": "first"}
    assert [s["offered_per_s"] for s in second["search"]["steps"]] == [
        s["offered_per_s"] for s in first["search"]["steps"]
    ]
    merged = merged_serving(records)
    assert merged["offered_from"]["same_rates"] is True
    search = merged["search"]
    assert search["pooled"] is True and all(step["processes"] == 2 for step in search["steps"])
    for pooled, one, two in zip(search["steps"], first["search"]["steps"], second["search"]["steps"], strict=True):
        assert pooled["offered_per_s"] == pytest.approx(one["offered_per_s"])
        assert pooled["requests"] == one["requests"] + two["requests"]
        assert pooled["valid"] == (one["valid"] and two["valid"]) and pooled["met"] <= pooled["valid"]
    # the pooled bracket lies within the pooled sweep's
    answer = merged["answer"]
    if answer["failing_rate_per_s"] is not None and answer["rate_per_s"] is not None:
        assert answer["rate_per_s"] <= search["rate_per_s"] < search["missed_per_s"] <= answer["failing_rate_per_s"]
    # no GPU: every load says energy is unavailable, and why
    assert "CPU" in merged["energy_unavailable"] and all(step["energy"] is None for step in merged["sweep"])


def test_a_priming_process_leaves_the_offered_rates_to_the_first_timed_one(tmp_path):
    """A process that compiled for the others (a cold vLLM start) is not counted: its capacity, measured beside its
    compile, sets no process's rates."""
    shared = tmp_path / "shared"
    shared.mkdir()
    runs = []
    for index in range(2):
        engine = FakeStepEngine(time.perf_counter, step_s=0.001, running=2, new_tokens=3)
        engine.cold_start_s = {"compile": 1.0} if index == 0 else {}  # the first compiled for the others
        cell = dataclasses.replace(_cell(engine, SETTINGS, tmp_path), first_process=index == 0, shared=shared)
        runs.append(LoadRuns(cell))
        with runs[-1].driver.current():
            runs[-1].capacity()
    priming, timed = runs
    assert priming.primes and priming.offered_by == "own" and not priming.publishes, "its rates, for no one"
    assert timed.given is None and timed.offered_by == "first" and timed.publishes, "its own, for the later ones"


def test_the_energy_of_a_steady_window_is_read_at_its_edges_as_marks_of_the_run():
    clock = VirtualClock()
    counter = iter([1_000, 5_000])  # mJ at the two edges

    class Counter:
        def energy_mj(self) -> int:
            return next(counter)

    energy = WindowEnergy(Counter(), clock=clock)  # type: ignore[arg-type]
    engine = FakeStepEngine(clock, step_s=0.01, running=2, new_tokens=3)
    requests = [PlannedRequest(f"r{i}", 0.1 * i, (1, 2), 3) for i in range(10)]
    drive_steps(engine, requests, clock=clock, sleep=clock.sleep, marks=energy.marks((0.2, 0.6)))
    (begin, _), (end, _) = energy.readings
    assert 0.2 <= begin - 0 < 0.25 and 0.6 <= end < 0.65, "each read at the first step after its edge"
    # 4 J between the readings, at their mean power over the 0.4-s window
    assert energy.joules(0.4) == pytest.approx(4.0 * 0.4 / (end - begin))
    figures = energy_figures(4.0, {"window_s": 0.4, "output_tokens": 100, "served_requests": 8})
    assert figures == {"joules": 4.0, "mean_power_w": 10.0, "per_output_token_mj": 40.0, "per_request_j": 0.5}
    assert WindowEnergy(None).marks((0.2, 0.6)) == [] and WindowEnergy(None).joules(0.4) is None
    assert energy_figures(None, {"window_s": 0.4}) is None


# -- the scenario's place: catalog, config, grid --


def test_llm_load_drives_generation_engines_only_and_is_part_of_their_code_identity():
    assert scenario_info("llm_load", "generate") is SCENARIOS["llm_load"]
    assert drives("llm_load", "generate") and not drives("llm_load", "inference") and drives("single", "train")
    with pytest.raises(ValueError, match="timed by their own scenario"):
        scenario_info("llm_load", "train")
    assert "inferbench.scenarios.llm_load.measure" in cell_code_roots("hf_generate", "llm_load")


def _config(*also: str) -> dict[str, Any]:
    """config/config.yaml running the CPU llm_load study (and the studies ``also`` names)."""
    config = yaml.safe_load((REPO / "config" / "config.yaml").read_text())
    config["run"] = ["llm_serving_cpu", *also]
    return config


def test_the_cpu_study_has_one_cell_per_engine_with_its_own_settings_over_the_config_s():
    config = validate_config(_config())
    cells = [c for c in config_cells(config, has_cuda=False) if c.scenario == "llm_load"]
    assert [c.cell_id for c in cells] == ["llama_mini/hf_eager-fp32/cpu/b4-s64-t2-llm_load"]
    settings = cell_scenario_settings(config, has_cuda=False)[cells[0]]
    assert settings["requests"] == 40 and settings["load_shares"] == [0.5, 1.0, 1.5]
    assert settings["arrivals"] == "poisson" and settings["objective"]["percentile"] == "p90"
    # a study's objective is merged key by key over the config's
    config = _config()
    config["studies"]["llm_serving_cpu"]["llm_load"]["objective"] = {"ttft_ms": 250, "percentile": "p90"}
    settings = cell_scenario_settings(validate_config(config), has_cuda=False)[cells[0]]
    assert settings["objective"] == {"ttft_ms": 250, "tpot_ms": 100, "percentile": "p90"}
    assert settings["requests"] == 40
    # with a GPU, the GPU study's cells: vLLM and transformers' continuous batching
    gpu = [c.cell_id for c in config_cells(validate_config(_config("llm_serving_gpu")), True) if "cuda" in c.cell_id]
    assert gpu == [
        "llm:llama/hf_static-fp16/cuda/b32-s128-t0-llm_load",
        "llm:llama/vllm-fp16/cuda/b32-s128-t0-llm_load",
    ]


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"requests": 5}, "llm_serving_cpu.llm_load.requests: 5 requests per load are too few for the objective's p90"),
        ({"arrivals": "bursty"}, "llm_load.arrivals: 'bursty' is not allowed; allowed values: poisson, gamma"),
        ({"burstiness": 0.5}, "llm_load.burstiness is 0.5 with arrivals poisson"),
        ({"load_shares": [1.0, 0.5]}, r"llm_load.load_shares is \[1.0, 0.5\]: positive values, each once, from light"),
        ({"objective": {"ttft": 3}}, "llm_load.objective: Additional properties are not allowed"),
        ({"prompt_range": 1.0}, "llm_serving_cpu.llm_load.prompt_range: 1.0 is"),
        ({"load_shares": [1.0, 100]}, r"llm_serving_cpu.llm_load.load_shares\[1\]: 100 is too large; it must be <= 4"),
        ({"served_tolerance": 1.5}, "llm_serving_cpu.llm_load.served_tolerance: 1.5 is"),
        # issue 71: a million requests a load passed the dry run
        ({"requests": 1_000_000}, r"llm_serving_cpu.llm_load.requests: 1000000 is too large; it must be <= 100,000"),
    ],
)
def test_a_bad_llm_load_setting_stops_the_run_naming_the_key_and_what_is_allowed(change, message):
    config = _config()
    config["studies"]["llm_serving_cpu"]["llm_load"] |= change
    with pytest.raises(ConfigError, match=message):
        validate_config(config)


def test_two_studies_giving_one_cell_different_settings_and_misplaced_settings_are_refused():
    config = _config()
    twin = copy.deepcopy(config["studies"]["llm_serving_cpu"])
    twin["llm_load"]["requests"] = 50
    config["studies"]["twin"], config["run"] = twin, ["llm_serving_cpu", "twin"]
    with pytest.raises(ConfigError, match=r"studies.llm_serving_cpu and studies.twin both measure llama_mini/hf_eager"):
        validate_config(config)
    with pytest.raises(SettingsConflict):
        cell_scenario_settings(config, has_cuda=False)
    config = _config()
    config["studies"]["llm_cpu"]["llm_load"] = {"requests": 10}
    with pytest.raises(ConfigError, match=r"studies.llm_cpu.llm_load: only the llm_load scenario reads it"):
        validate_config(config)
    config = _config()
    config["measure"]["scenario_settings"] = {"requests": 10}
    with pytest.raises(ConfigError, match=r"measure.scenario_settings: the workflow sets it"):
        validate_config(config)
    # an inference engine in a study of llm_load alone has no cell there: a run of it stops saying why
    config = _config()
    config["studies"]["llm_serving_cpu"] |= {"workloads": ["mlp_heart"], "engines": ["ort_cpu"]}
    assert not config_cells(validate_config(config), has_cuda=False)
    message = no_cells_message(config, has_cuda=False)
    assert "mlp_heart on ort_cpu: an inference engine is driven by the scenarios single, server, offline" in message


def test_spread_lengths_must_fit_the_decoder_s_positions():
    config = _config()
    config["studies"]["llm_serving_cpu"]["seq_lens"] = [1500]  # x 1.5 + 48 tokens > 2,048 positions
    with pytest.raises(ConfigError, match=r"the longest requests are 2250 \+ 48 tokens\) exceed llama_mini's 2048"):
        validate_config(config)


# -- the report --


def _record(engine: str, rate_shares: list[float], met: list[bool], processes: int = 1) -> CellRecord:
    objective = Objective(500, 50, "p90")
    capacity = {"request_per_s": 10.0, "output_tokens_per_s": 320.0, "requests": 40, "queued": 40,
                "ttft_ms": {"p90": 20.0}, "tpot_ms": {"p90": 5.0}}  # fmt: skip
    sweep = []
    for share, ok in zip(rate_shares, met, strict=True):
        sweep.append({"load": share, "offered_per_s": 10.0 * share, "concurrency": None, "requests": 40,
                      "request_per_s": 10.0 * min(share, 1.0), "output_tokens_per_s": 320.0 * min(share, 1),
                      "mean_in_flight": 2.0, "ttft_ms": {"p50": 10.0, "p90": 100.0 if ok else 900.0, "p99": None},
                      "tpot_ms": {"p50": 4.0, "p90": 8.0 if ok else 70.0, "p99": None}, "itl_ms": {"p99": None},
                      "e2e_ms": {"p50": 150.0, "p90": 300.0, "p99": None}, "goodput_per_s": 9.0 * share,
                      "good_share": 0.9, "objective_met": ok})  # fmt: skip
    from inferbench.scenarios.llm_load.measure import sweep_record

    settings = LoadSettings.from_dict({"requests": 40, "load_shares": rate_shares, "prompt_range": 0.5,
                                       "objective": objective.as_dict()})  # fmt: skip
    serving = sweep_record(settings, capacity, sweep, "step", 4, 64, 32, processes=processes)
    if processes > 1:
        serving["answer"] |= {"by_process": {"rate_per_s": [9.0, 11.0]}, "spread_pct": {"rate_per_s": 20.0}}
        serving["capacity"] |= {"by_process": {"request_per_s": [9.5, 10.5]}, "spread_pct": {"request_per_s": 10.0}}
    key = CellKey("llama_mini", engine, "fp32", "cpu", 4, 64, 2, "llm_load")
    return CellRecord(
        key, "ok", "hf_generate", mode="generate", latency_ms={"p50": 150.0}, sections={"llm_load": serving}
    )


def test_the_answer_states_the_objective_the_rate_that_met_it_and_the_capacity_beside_it():
    from inferbench.scenarios.llm_load.answer import llm_load_answer

    records = {r.key.cell_id: r for r in (_record("hf_eager", [0.5, 1.0, 1.5], [True, True, False], processes=2),
                                           _record("vllm", [0.5, 1.0], [False, False]))}  # fmt: skip
    cells = pd.DataFrame([summary_row(r) for r in records.values()])
    text = "\n".join(llm_load_answer(cells, {}, None, records=records))
    assert "TTFT p90 ≤ 500 ms and TPOT p90 ≤ 50 ms up to **10.0 requests/s** (1× capacity" in text
    assert "There TTFT p90 100 ms, TPOT p90 8.00 ms, goodput 9.00 requests/s (90.0% of requests within both)." in text
    assert "At 1.5× capacity (15.0 requests/s) it missed: TTFT p90 900 ms, TPOT p90 70.0 ms." in text
    assert "Capacity 10.0 requests/s (320 output tokens/s, all queued, 4 running)." in text
    assert "2 processes; rate meeting the objective 9.00–11.0 requests/s (spread 20.0%)" in text
    assert "vllm fp32 cpu 2t (up to 4 running, prompts of 64 ±50% tokens, 32 new tokens, Poisson arrivals)" in text
    assert "not even the lightest load (0.5× capacity, 5.00 requests/s) met TTFT p90 ≤ 500 ms" in text
    # processes whose sweeps the runner did not pool: the record's is the first's, and the report says so
    first_only = _record("hf_eager", [0.5, 1.0], [True, True])
    first_only.repeats = {"n": 2, "p50_spread_pct": 12.0}
    line = "\n".join(llm_load_answer(cells.iloc[:1], {}, None, records={first_only.key.cell_id: first_only}))
    assert "The sweep of the first of its 2 processes (their e2e p50 at the answering load: 12.0% apart)." in line
    # a record that is not beside the summary: the summary's columns are named instead
    assert "their records (their sweeps) are not beside" in "\n".join(llm_load_answer(cells, {}, None, records={}))


def test_the_answer_prints_vllm_s_result_block_with_the_verdict_and_the_searched_rate():
    from inferbench.scenarios.llm_load.answer import llm_load_answer

    record = _record("hf_eager", [0.5, 1.0, 1.5], [True, True, False], processes=2)
    serving = record.sections["llm_load"]
    serving["sweep"][1] |= {"valid": True, "met": True, "failed": [], "window_s": 24.0, "arrived_per_s": 9.8,
                            "processes": 2, "spread_pct": {"request_per_s": 4.0}}  # fmt: skip
    serving["sweep"][2] |= {"valid": False, "met": False, "failed": ["served: 10 requests/s against 15/s arrived, "
                            "beyond ±10%", "objective: a bound missed"]}  # fmt: skip
    serving["search"] = {"rate_per_s": 12.2, "missed_per_s": 13.4, "steps": 3,
                         "by_process": {"rate_per_s": [11.8, 12.6]}}  # fmt: skip
    cells = pd.DataFrame([summary_row(record)])
    text = "\n".join(llm_load_answer(cells, {}, None, records={record.key.cell_id: record}))
    assert "VALID over a 12.0-s steady window: served 10.0 requests/s of 9.80 arrived" in text
    assert "the load was INVALID: served: 10 requests/s against 15/s arrived, beyond ±10%." in text
    assert "A search of 3 loads between the two met it up to 12.2 requests/s, processes 11.8–12.6, and missed at " \
           "13.4 requests/s." in text  # fmt: skip
    block = text[text.index("```") :]
    expected = {"Successful requests:": "40", "Benchmark duration (s):": "24.00 (2 steady windows of 12.00 s)",
                "Request throughput (req/s):": "10.00", "Median TTFT (ms):": "10.00", "Verdict:": "VALID",
                "Offered / arrived / served (req/s):": "10.00 / 9.80 / 10.00",
                "Request throughput spread (%):": "4.0 over 2 processes"}  # fmt: skip
    for title, value in expected.items():
        assert title.ljust(41) + value in block, title


def test_the_appendix_lists_every_load_and_the_generation_section_leaves_loaded_cells_out(tmp_path):
    from inferbench.report.plots import plot_declared
    from inferbench.scenarios.generation.answer import one_request_at_a_time
    from inferbench.scenarios.llm_load.answer import llm_load_section

    record = _record("hf_eager", [0.5, 1.0, 1.5], [True, True, False])
    cells = pd.DataFrame([summary_row(record)])
    text = "\n".join(llm_load_section(cells, {record.key.cell_id: record}))
    assert "| capacity | – | – | 10.0 | 320 |" in text and "| 1.5× capacity | 15.0 | – | 10.0 | 320 |" in text
    assert text.count("| yes |") == 2 and text.count("| no |") == 1
    assert one_request_at_a_time(cells).empty
    out = plot_declared([record], "llama_mini", tmp_path / "serving.png")
    assert out.stat().st_size > 10_000


def test_vllm_s_throughput_benchmark_is_sent_the_capacity_run_s_requests_and_set_beside_it(tmp_path, monkeypatch):
    import importlib.util

    tools = Path(__file__).resolve().parents[1] / "benchmarks/tools"
    monkeypatch.syspath_prepend(str(tools))
    spec = importlib.util.spec_from_file_location("vllm_bench_throughput", tools / "vllm_bench_throughput.py")
    tool = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tool)
    checkpoint = tmp_path / "ckpt"
    checkpoint.mkdir()
    (checkpoint / "config.json").write_text('{"vocab_size": 500}')
    settings = LoadSettings.from_dict({"requests": 12, "prompt_range": 0.25, "output_range": 0.5, "seed": 7})
    record = {
        "cell": {"cell_id": "llm:llama/vllm-fp16/cuda/b8-s64-t0"},
        "engine": {"vllm": "0.24.0", "checkpoint_dir": str(checkpoint), "engine_args": {"max_num_seqs": 8}},
        "sections": {"llm_load": {
            "scenario": "llm_load", "settings": settings.as_dict(), "prompt_tokens": 64, "output_tokens": 16,
            "max_running": 8, "capacity": {"requests": 12, "request_per_s": 30.0, "output_tokens_per_s": 450.0},
        }},
    }  # fmt: skip
    planned = tool.capacity_requests(record)
    # the scenario's own capacity run (inferbench.scenarios.llm_load.measure: seed, no rate) and its first warm-up
    for name, seed in (("requests", 7), ("warmup", 10_007)):
        expected = plan_requests(
            12, rate=None, burstiness=1.0, prompt_tokens=64, prompt_range=0.25, output_tokens=16,
            output_range=0.5, vocab=500, seed=seed,
        )  # fmt: skip
        assert planned[name] == [{"prompt": list(r.prompt), "max_tokens": r.max_tokens} for r in expected]
    assert planned["requests"] != planned["warmup"]
    runs = [
        {"elapsed_s": s, "requests": 12, "output_tokens": 180, "request_per_s": 12 / s, "output_tokens_per_s": 180 / s}
        for s in (0.5, 0.4, 0.45)
    ]
    row = tool.side_by_side(record, runs)
    assert row["bench_throughput"]["request_per_s"] == pytest.approx(12 / 0.45)  # the median run
    assert row["cell_over_bench"]["request_per_s"] == pytest.approx(30.0 / (12 / 0.45))
    assert "| 30.00 / 26.67 | 1.125 |" in tool.markdown([row])
    # the cells it reads: vLLM's, ok, served under load (the latency tool reads the generation ones)
    cells = tmp_path / "cells"
    served = record["sections"]
    for name, status, engine, sections in (
        ("load", "ok", record["engine"], served), ("gen", "ok", record["engine"], {}),
        ("failed", "failed", record["engine"], served), ("hf", "ok", {"impl": "hf"}, served),
    ):  # fmt: skip
        (cells / name).mkdir(parents=True)
        written = record | {"status": status, "engine": engine, "sections": sections}
        (cells / name / "b8.json").write_text(json.dumps(written))
    assert [r["sections"] for r in tool.vllm_cells(cells, llm_load=True)] == [served]
    assert [r["sections"] for r in tool.vllm_cells(cells)] == [{}]
    args = SimpleNamespace(cells=cells, out=tmp_path / "out.json", md=tmp_path / "out.md")
    assert tool.side_by_side_all(tool.vllm_cells(cells, llm_load=True), lambda r: row, args, tool.markdown) == 0
    assert json.loads(args.out.read_text())[0]["cell_over_bench"] == row["cell_over_bench"]
    assert "1.125" in args.md.read_text()
    assert tool.side_by_side_all([], lambda r: row, args, tool.markdown) == 2


def test_a_load_of_more_requests_than_hours_hold_is_refused_by_the_settings():
    """Issue 71: `requests: 1000000` with 2,000 new tokens passed the dry run (the schema refuses it too)."""
    with pytest.raises(ValueError, match=r"llm_load.requests is 1000000: a load sends from 1 to 100,000 requests"):
        LoadSettings.from_dict({"requests": 1_000_000})
