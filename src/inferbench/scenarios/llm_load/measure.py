"""The llm_load scenario: a decoder serving requests under load, as ``vllm bench serve`` and MLPerf's LLM server
scenario measure one. Requests arrive at a rate (Poisson, or gamma gaps of a burstiness) or at a fixed
concurrency while earlier ones still decode, and the engine batches them continuously, up to the cell's batch
size running at once. Each request asks for its own prompt and output length (``arrivals``: fixed, or uniform
within a range ratio, seeded: every process and every engine gets the same requests).

A cell's process first measures the engine's **capacity**: its request throughput with every request of a run
sent at once, queued in the engine, which runs at most the batch size of them (as vLLM's offline throughput
benchmark measures it: a request sent as another finishes would reach the engine a step or two late, its slot
empty meanwhile). Then it sweeps the loads of its settings from light to
past saturation: request rates at shares of that capacity (or concurrencies), each load a run of
``requests`` requests. Per request: TTFT, TPOT = (e2e - TTFT) / (output tokens - 1), the inter-token latencies
and e2e; per run: request throughput, output tokens/s, mean/p50/p90/p99 of each, goodput (requests within both
bounds of the objective, per second) and whether the run's percentiles meet the objective
(``metrics``). The answer: the heaviest load up to which every load met the objective, with
the capacity beside it and the first load that missed it.

What is timed: every request from the time it counts from to each of its tokens, on the host clock
(``time.perf_counter``): at a rate, from its **scheduled arrival** (a request that waits for the engine to
finish a step, or in its queue, waits in its TTFT, as a client that sent it then would), where ``vllm bench
serve`` times from its send; at a fixed concurrency, from the moment it is sent (a slot freed). A token is
timed when the engine hands it to the scenario. The run lasts from its start to its last request's last token.

How an engine serves under load (the contract; an engine knows nothing of the timing). It runs at most the
cell's batch size of requests at once and queues the others in arrival order:

(a) **step-driven**: ``serve_add(request_id: str, prompt: list[int], max_tokens: int) -> None`` queues a
    request (greedy, exactly ``max_tokens`` tokens, no stop at EOS); ``serve_step() -> list[tuple[str, int,
    bool]]`` runs one scheduler iteration and returns, for each request that made a token in it, (request id,
    tokens that request has made so far, finished); ``serve_busy() -> bool`` says whether a request is waiting
    or running. The driver admits every request whose arrival has passed, steps while the engine is busy,
    sleeps until the next arrival while it is idle, and timestamps each new token as ``serve_step`` returns.
(b) **stream-driven**: ``async def serve_stream(request_id: str, prompt: list[int], max_tokens: int) ->
    AsyncIterator[int]`` yields the count of tokens made so far each time new tokens arrive, and ends when the
    request is done. The driver runs one asyncio event loop for the whole cell (every ``serve_stream`` call of a
    cell runs on it, current while the cell measures), starts one task per request at its arrival time and
    timestamps each yield.

Either kind may define ``serve_tokens(request_id: str) -> list[int]``, the tokens a finished request made: the
scenario then sends the workload's reference prompts through the same path and holds their first tokens to
those of FP32 eager (as the generation scenario does), else it says the tokens were not checked; and
``serve_close() -> None``, called once the cell is done serving (the engine puts back what serving changed).
The scenario picks (b) where the engine has ``serve_stream``, else (a) where it has ``serve_add``; an engine
with neither cannot be driven, nor one whose classmethod ``serve_unavailable_reason(device, precision)`` gives
a reason (``unavailable_reason``: its cell is ``unavailable`` with that reason).

Every process's record keeps its own sweep (``serving``) with every sample; a cell's processes are pooled by
``merged_fields`` (``merged_serving``): each load's percentiles from every process's requests, its rates over
their summed time, and each figure's value per process with its spread (max - min over the median), the
capacity and the answer too.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import math
import time
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Sequence
from typing import Any

import numpy as np

from inferbench.core.fsutil import read_json, write_json
from inferbench.core.stats import latency_stats
from inferbench.engines.base import compiled_for_others
from inferbench.machine.host_partition import measuring
from inferbench.machine.watchdog import beat
from inferbench.models.parity import load_reference_tokens
from inferbench.scenarios.generation.measure import GATED_TOKENS
from inferbench.scenarios.llm_load import SCENARIO, SECTION
from inferbench.scenarios.llm_load.arrivals import LoadSettings, PlannedRequest
from inferbench.scenarios.llm_load.metrics import (
    Objective,
    RequestTrace,
    energy_figures,
    judged,
    load_verdict,
    pooled_run,
    spread_pct,
    sweep_answer,
    traces_figures,
    window_figures,
)
from inferbench.scenarios.prepare import Measured, PreparedCell
from inferbench.scenarios.timing import warm_up
from inferbench.trackers.gpu_telemetry import GpuTelemetry
from inferbench.trackers.host_telemetry import HostWindow

#: the driver tells the stall watchdog it progresses every this many steps (or streamed token arrivals)
BEAT_EVERY = 16

Clock = Callable[[], float]
#: a call the driver makes once a run has lasted its seconds (a reading at a steady window's edge)
Mark = tuple[float, Callable[[], None]]


class CannotServe(RuntimeError):
    """The engine has no way to serve requests under load (neither serve_stream nor serve_add)."""


def serving_mode(engine: Any) -> str | None:
    """How the scenario drives ``engine`` (an instance or its class): ``stream`` (it has ``serve_stream``),
    ``step`` (``serve_add``, ``serve_step``, ``serve_busy``), or None."""
    if callable(getattr(engine, "serve_stream", None)):
        return "stream"
    if all(callable(getattr(engine, name, None)) for name in ("serve_add", "serve_step", "serve_busy")):
        return "step"
    return None


def unavailable_reason(engine_class: type, device: str | None = None, precision: str | None = None) -> str | None:
    """Why the scenario cannot drive engines of ``engine_class`` (on ``device`` at ``precision``), or None: it
    has no way to serve under load, or its ``serve_unavailable_reason(device, precision)`` says why not here."""
    if serving_mode(engine_class) is None:
        return (
            f"{engine_class.__name__} serves no requests under load: it has neither serve_stream (stream-driven) "
            "nor serve_add/serve_step/serve_busy (step-driven), the two ways inferbench.scenarios.llm_load drives "
            "an engine"
        )
    own = getattr(engine_class, "serve_unavailable_reason", None)
    return own(device, precision) if callable(own) and device is not None else None


# -- the two drivers --


def drive_steps(
    engine: Any,
    requests: Sequence[PlannedRequest],
    concurrency: int | None = None,
    clock: Clock = time.perf_counter,
    sleep: Callable[[float], None] = time.sleep,
    marks: Sequence[Mark] = (),
) -> tuple[list[RequestTrace], float]:
    """Send ``requests`` to a step-driven engine: each at its arrival (``concurrency`` None), or each as soon as
    fewer than ``concurrency`` are in flight; step while the engine is busy, sleep until the next arrival while
    it is idle. ``marks``: (seconds after the start, call) pairs, each called once its time has passed, between
    steps. Returns each request's trace (in the order given) and when the run started."""
    waiting = deque(requests)
    pending = deque(sorted(marks, key=lambda mark: mark[0]))
    traces: dict[str, RequestTrace] = {}
    in_flight: set[str] = set()
    started = clock()
    steps = 0
    while waiting or in_flight or pending:
        now = clock()
        while pending and started + pending[0][0] <= now:
            pending.popleft()[1]()
        if not (waiting or in_flight):  # only marks left: wait for the next
            sleep(max(0.0, started + pending[0][0] - clock()))
            continue
        while waiting and (
            len(in_flight) < concurrency if concurrency is not None else started + _arrival(waiting[0]) <= now
        ):
            request = waiting.popleft()
            # at a rate a request counts from its scheduled arrival, however late the driver admits it
            sent = now if concurrency is not None else started + _arrival(request)
            traces[request.request_id] = RequestTrace(request.request_id, sent, request.max_tokens)
            engine.serve_add(request.request_id, list(request.prompt), request.max_tokens)
            in_flight.add(request.request_id)
        if engine.serve_busy():
            progress = engine.serve_step()
            at = clock()  # every token this step made is handed over now
            for request_id, made, finished in progress:
                if request_id not in traces:
                    raise RuntimeError(f"the engine's step returned request {request_id!r}, which was never sent")
                traces[request_id].observe(at, int(made), bool(finished))
                if finished:
                    in_flight.discard(request_id)
            steps += 1
            if steps % BEAT_EVERY == 0:
                beat()
        elif in_flight:
            raise RuntimeError(
                f"the engine says it is idle with {len(in_flight)} request(s) unfinished "
                f"(e.g. {sorted(in_flight)[0]}): serve_busy must stay true until serve_step has finished them"
            )
        elif waiting:
            until = started + _arrival(waiting[0])
            if pending:  # a mark due before the next arrival is made on time
                until = min(until, started + pending[0][0])
            sleep(max(0.0, until - clock()))
    return [traces[request.request_id] for request in requests], started


async def drive_stream(
    engine: Any,
    requests: Sequence[PlannedRequest],
    concurrency: int | None = None,
    clock: Clock = time.perf_counter,
    sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    marks: Sequence[Mark] = (),
) -> tuple[list[RequestTrace], float]:
    """Send ``requests`` to a stream-driven engine: one task per request, started at its arrival
    (``concurrency`` None) or once fewer than ``concurrency`` are in flight, each timestamping every yield of
    ``serve_stream``; one task per mark of ``marks`` ((seconds after the start, call) pairs), calling it at its
    time. Returns each request's trace (in the order given) and when the run started."""
    started = clock()
    traces: dict[str, RequestTrace] = {}
    slots = asyncio.Semaphore(concurrency) if concurrency is not None else None
    arrivals = 0

    async def one(request: PlannedRequest) -> None:
        nonlocal arrivals
        if slots is None:
            await sleep(started + _arrival(request) - clock())
            sent = started + _arrival(request)
        else:
            await slots.acquire()
            sent = clock()
        trace = traces[request.request_id] = RequestTrace(request.request_id, sent, request.max_tokens)
        try:
            stream: AsyncIterator[int] = engine.serve_stream(
                request.request_id, list(request.prompt), request.max_tokens
            )
            async for made in stream:
                trace.observe(clock(), int(made), False)
                arrivals += 1
                if arrivals % BEAT_EVERY == 0:
                    beat()
        finally:
            if slots is not None:
                slots.release()
        if not trace.events:
            raise RuntimeError(f"request {request.request_id}'s stream ended without a token")
        trace.observe(trace.events[-1][0], trace.output_tokens, True)  # done with its last token

    async def mark(after_s: float, call: Callable[[], None]) -> None:
        await sleep(max(0.0, started + after_s - clock()))
        call()

    await asyncio.gather(*(one(request) for request in requests), *(mark(*pair) for pair in marks))
    return [traces[request.request_id] for request in requests], started


def _arrival(request: PlannedRequest) -> float:
    if request.arrival_s is None:
        raise ValueError(f"request {request.request_id} has no arrival time: send it at a fixed concurrency")
    return request.arrival_s


class Driver:
    """Runs a list of requests through an engine the way it serves (``stream`` on one event loop for the whole
    cell, or ``step``), returning the traces and the run's start."""

    def __init__(
        self, engine: Any, clock: Clock = time.perf_counter, device: str | None = None, precision: str | None = None
    ) -> None:
        mode = serving_mode(engine)
        why = unavailable_reason(type(engine), device, precision)
        if mode is None or why is not None:
            raise CannotServe(why)
        self.engine, self.mode, self.clock = engine, mode, clock
        self.loop = asyncio.new_event_loop() if mode == "stream" else None

    def run(
        self, requests: Sequence[PlannedRequest], concurrency: int | None, marks: Sequence[Mark] = ()
    ) -> tuple[list[RequestTrace], float]:
        if self.loop is None:
            return drive_steps(self.engine, requests, concurrency, self.clock, marks=marks)
        return self.loop.run_until_complete(drive_stream(self.engine, requests, concurrency, self.clock, marks=marks))

    @contextlib.contextmanager
    def current(self) -> Iterator[None]:
        """The driver's event loop current (a library that asks for the running loop's gets it); after, the
        engine's ``serve_close``, where it has one (the loop still open: what the engine opened on it closes
        there), then the loop closed."""
        if self.loop is not None:
            asyncio.set_event_loop(self.loop)
        try:
            yield
        finally:
            close = getattr(self.engine, "serve_close", None)
            try:
                if close is not None:
                    close()
            finally:
                if self.loop is not None:
                    asyncio.set_event_loop(None)
                    self.loop.close()


# -- one cell --


def load_settings(cell: PreparedCell) -> LoadSettings:
    """The cell's llm_load settings, as the workflow resolved them (``measure.scenario_settings``)."""
    values = getattr(cell.settings, "scenario_settings", None)
    if values is None:
        raise ValueError(
            "an llm_load cell needs its settings in measure.scenario_settings (the workflow passes config "
            "`llm_load` with its studies' over it; a hand run: --measure '{\"scenario_settings\": {...}}')"
        )
    return LoadSettings.from_dict(values)


def concurrency_ladder(running: int) -> list[int]:
    """1, 2, 4, ... below ``running``, then ``running``: the concurrencies the warm-up sends at."""
    rungs = [1]
    while rungs[-1] * 2 < running:
        rungs.append(rungs[-1] * 2)
    return [*rungs, running] if running > 1 else rungs


def _vocab(cell: PreparedCell) -> int:
    tokens = [spec for spec in cell.specs if spec.kind == "tokens"]
    if not tokens or not tokens[0].high:
        raise ValueError(f"{cell.key.workload} takes no token ids: llm_load drives decoders (llm: workloads)")
    return int(tokens[0].high)


@contextlib.contextmanager
def _collector_frozen() -> Iterator[None]:
    """What is alive now (torch, transformers: ~400,000 objects) left out of the collector's full passes, whose
    50-120 ms pauses would land in some request's tokens (as the serving scenario does; vLLM freezes after
    start-up for the same reason). New garbage is still collected."""
    gc.collect()
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()


#: a process's runs draw their requests from ``llm_load.seed`` (every process and engine the same): the
#: capacity run from the seed itself, load ``i`` from seed + 1 + i, the warm-up's waves from seed +
#: WARMUP_SEED + wave and its concurrency ladder from seed + LADDER_SEED + concurrency
WARMUP_SEED = 10_000
LADDER_SEED = 20_000
#: ... and search step ``n`` from seed + SEARCH_SEED + n
SEARCH_SEED = 30_000


def measure(cell: PreparedCell) -> Measured:
    """The cell's capacity, then its sweep of loads, under the exclusive machine lock; the served tokens held
    to FP32 eager's where the engine hands them over."""
    key = cell.key
    runs = LoadRuns(cell)
    host = HostWindow()
    with runs.driver.current():
        beat(f"llm_load: warm-up, capacity, then {len(runs.settings.loads)} loads of {runs.settings.requests} requests")
        with measuring(cell.lock, key.device, cell.settings.cpu_affinity) as held, _collector_frozen():
            warmed = runs.warm_up()
            window_start = time.time()
            started = time.perf_counter()
            with host, runs.telemetry or contextlib.nullcontext():
                capacity = runs.capacity()
                sweep = runs.sweep()
                search = runs.search(sweep)
                floor = runs.client_floor(sweep)
            timed = {"warmup_iters": warmed, "measured_s": time.perf_counter() - started,
                     "measured_windows_unix": [[window_start, time.time()]], "measuring": held}  # fmt: skip
        parity = _served_parity(cell, runs.driver, runs.new_tokens)
    if runs.publishes and cell.shared is not None:
        searched_rates = [step["offered_per_s"] for step in search["steps"]] if search else []
        write_json(cell.shared / RATES_FILE, {"capacity_per_s": runs.nominal_capacity, "search_rates": searched_rates})
    serving = runs.serving_section(capacity, sweep, search, parity, host) | {"client_floor": floor}
    return _measured(runs, serving, capacity, sweep, search, timed | {"host_telemetry": host.summary})


class LoadRuns:
    """The runs one process of an llm_load cell makes, each a list of planned requests driven through the
    engine (``Driver``): the warm-up, the capacity run, the sweep of loads and the search of the highest rate
    meeting the objective. Every process offers the same rates: shares of the first process's capacity."""

    def __init__(self, cell: PreparedCell) -> None:
        self.cell, self.key = cell, cell.key
        self.settings = load_settings(cell)
        engine: Any = cell.engine  # a generation engine (inferbench.engines.generation)
        self.driver = Driver(engine, device=cell.key.device, precision=cell.key.precision)
        self.new_tokens = int(engine.new_tokens)
        self.vocab = _vocab(cell)
        self.telemetry = GpuTelemetry.for_cuda_device() if cell.key.device == "cuda" else None
        self.given = offered_by_first(cell)
        #: whether this process compiled for the others: it primes the cell, is not counted, and sets no rates
        self.primes = compiled_for_others(engine.cold_start_s)
        #: whether its own capacity, where it measures one, sets the rates of the cell's other processes
        self.leads = cell.shared is not None and not self.primes
        self.nominal_capacity: float | None = None
        #: where the offered rates' capacity came from: the settings, the first process, or this one's own
        self.offered_by = "own"

    def plan(self, count: int, rate: float | None, seed: int, prefix: str) -> list[PlannedRequest]:
        return self.settings.plan(count, rate=rate, seed=seed, prompt_tokens=self.key.seq_len,
                                  output_tokens=self.new_tokens, vocab=self.vocab, prefix=prefix)  # fmt: skip

    def warm_up(self) -> int:
        """Two waves at each concurrency of 1, 2, 4, ... up to the batch size, then runs like the capacity's (its
        request count, other prompts) until warmup_s has passed (one at least): every batch composition the
        timed runs meet is made once before them. With the capacity's runs alone, the first load at a rate met
        new ones (fewer running, a prefill beside them) and its TTFT measured them, not the load
        (docs/generation.md, "A process's sweep", has the figures). The requests it sent."""
        settings, warmed = self.settings, 0
        for concurrency in concurrency_ladder(self.key.batch_size):  # the engine's largest running batch
            ladder = self.plan(2 * concurrency, None, settings.seed + LADDER_SEED + concurrency, f"l{concurrency}-")
            self.driver.run(ladder, concurrency)
            warmed += 2 * concurrency

        def warm_wave(wave: int) -> None:
            wave_requests = self.plan(settings.requests, None, settings.seed + WARMUP_SEED + wave, f"w{wave}-")
            self.driver.run(wave_requests, settings.requests)

        return warmed + warm_up(warm_wave, self.cell.settings.warmup_s) * settings.requests

    @property
    def publishes(self) -> bool:
        """Whether this process leaves the rates it offered for the cell's later processes: the first timed one of
        several, which measured its own capacity (not one that primes the cell)."""
        return self.leads and self.given is None and not self.settings.by_concurrency

    def capacity(self) -> dict[str, Any]:
        """Every request queued at once: the capacity whose shares the sweep offers (the first process's)."""
        settings = self.settings
        traces, run_start = self.driver.run(self.plan(settings.requests, None, settings.seed, "c-"), settings.requests)
        capacity = traces_figures(traces, run_start, settings.objective) | {"queued": settings.requests}
        # the rates of every process: the settings' capacity where given, else the first process's
        if settings.capacity_per_s is not None:
            self.nominal_capacity, self.offered_by = settings.capacity_per_s, "settings"
        elif self.given is not None:
            self.nominal_capacity, self.offered_by = self.given["capacity_per_s"], "first"
        else:  # the first timed process's own (published), or a process's own: alone, or priming the cell
            self.nominal_capacity = capacity["request_per_s"]
            self.offered_by = "first" if self.leads else "own"
        beat()
        return capacity

    def at_rate(self, rate: float, seed: int, prefix: str) -> dict[str, Any]:
        """One load at ``rate``: a ramp, its steady window, as long again; judged over the window, the GPU's
        energy counter read at the window's edges."""
        settings = self.settings
        window = (settings.ramp_s, settings.ramp_s + settings.window_s(rate))
        energy = WindowEnergy(self.telemetry)
        requests = self.plan(settings.planned_count(rate), rate, seed, prefix)
        traces, run_start = self.driver.run(requests, None, energy.marks(window))
        step = window_figures(traces, run_start, window, settings.objective)
        step["energy"] = energy_figures(energy.joules(window[1] - window[0]), step)
        beat()
        return step | load_verdict(step, settings.requests, settings.served_tolerance)

    def sweep(self) -> list[dict[str, Any]]:
        """Each load of the sweep: a share of the capacity as a rate, or a fixed concurrency (every request
        counts)."""
        settings, sweep = self.settings, []
        for index, load in enumerate(settings.loads):
            seed, prefix = settings.load_seed(index), f"s{index}-"
            if settings.by_concurrency:
                traces, run_start = self.driver.run(self.plan(settings.requests, None, seed, prefix), int(load))
                step = traces_figures(traces, run_start, settings.objective)
                step |= load_verdict(step, settings.requests, settings.served_tolerance)
                sweep.append({"load": load, "offered_per_s": None, "concurrency": int(load), **step})
                beat()
                continue
            if self.nominal_capacity is None:
                raise RuntimeError("the capacity run comes before the sweep: its rates are shares of the capacity")
            rate = float(load) * self.nominal_capacity
            sweep.append({"load": load, "offered_per_s": rate, "concurrency": None, **self.at_rate(rate, seed, prefix)})
        return sweep

    def search(self, sweep: list[dict[str, Any]]) -> dict[str, Any] | None:
        """The highest rate meeting the objective: bisected here, or the first process's rates replayed."""

        def search_step(rate: float, number: int) -> dict[str, Any]:
            return self.at_rate(rate, self.settings.seed + SEARCH_SEED + number, f"q{number}-")

        if self.given is not None:
            return replayed(self.given["search_rates"], sweep, search_step)
        return bisected(self.settings, sweep, search_step)

    def client_floor(self, sweep: list[dict[str, Any]]) -> dict[str, Any] | None:
        """The same client against the null server (where the engine has ``client_floor``: a server's endpoint),
        which streams canned tokens at once: what the client and its event loop take with no model behind them.
        None for other engines. The capacity's requests, all queued at once (the client's own capacity), and
        each load of the sweep again at its rate, with its requests (``sweep``): the floor under that load's
        TTFT and ITL, which a queue of the burst would hide."""
        floor = getattr(self.driver.engine, "client_floor", None)
        if floor is None:
            return None
        settings = self.settings
        requests = self.plan(settings.requests, None, settings.seed, "f-")
        with floor() as server:
            traces, run_start = self.driver.run(requests, settings.requests)
            at_loads = [
                {"load": step["load"], "offered_per_s": step["offered_per_s"], "concurrency": None}
                | self.at_rate(step["offered_per_s"], settings.load_seed(index), f"f{index}-")
                for index, step in enumerate(sweep)
                if step.get("offered_per_s") is not None
            ]
        burst = traces_figures(traces, run_start, settings.objective) | {"queued": settings.requests}
        return burst | {"server": server, "sweep": at_loads}

    def serving_section(
        self,
        capacity: dict[str, Any],
        sweep: list[dict[str, Any]],
        search: dict[str, Any] | None,
        parity: dict[str, Any] | None,
        host: HostWindow,
    ) -> dict[str, Any]:
        """The record's ``serving``: the sweep's record, the served tokens' parity, the search, where the offered
        rates came from, and the host during the timed runs (as a LoadGen result has it)."""
        key, settings = self.key, self.settings
        serving = sweep_record(
            settings, capacity, sweep, self.driver.mode, key.batch_size, key.seq_len, self.new_tokens
        )
        serving["token_parity"], serving["search"] = parity, search
        serving["offered_from"] = {
            "capacity_per_s": None if settings.by_concurrency else self.nominal_capacity,
            "process": self.offered_by,
        }
        serving["energy_unavailable"] = energy_unavailable(key.device, self.telemetry)
        if serving["result"] is not None:
            serving["result"]["host"] = host.summary
        return serving


def _measured(
    runs: LoadRuns,
    serving: dict[str, Any],
    capacity: dict[str, Any],
    sweep: list[dict[str, Any]],
    search: dict[str, Any] | None,
    timed: dict[str, Any],
) -> Measured:
    """The record's fields. The cell's latency: every request of the load that answers it (the lightest where
    none met the objective), e2e, so that its processes' spread is recorded as every cell's is."""
    shown = sweep[serving["answer"]["index"] if serving["answer"]["index"] is not None else 0]
    samples = np.asarray(shown["samples_ms"]["e2e"]) / 1e3
    stats = latency_stats(samples, 1)
    searched = search["steps"] if search else []
    tokens = sum(step.get("run_output_tokens", step["output_tokens"]) for step in [*sweep, *searched])
    tokens += capacity["output_tokens"]
    figures = {k: stats[k] for k in ("latency_ms", "latency_ci95_ms", "cv", "n_iters")}
    fields = {
        "timing": SCENARIO,
        "timing_description": timing_description(runs.settings, serving["answer"]["index"] is not None),
        "clock": "host",
        "items_per_call": 1,
        **figures,
        "throughput_per_s": shown["request_per_s"],
        **timed,
        "gpu_telemetry": runs.telemetry.summary(tokens) if runs.telemetry else None,
        "sections": {SECTION: serving},
        "end_to_end": {
            "description": "each request from its scheduled arrival (or its send) to its last token, host clock",
            "clock": "host",
            **figures,
            "throughput_per_s": shown["request_per_s"],
        },
    }
    return Measured(fields, {"device": samples, "end_to_end": samples}, invalid_reason(serving))


#: the file in a cell's shared folder (PreparedCell.shared) where its first process leaves the rates it offered
RATES_FILE = "llm_load_rates.json"


def offered_by_first(cell: PreparedCell) -> dict[str, Any] | None:
    """What the cell's first timed process offered (its capacity, whose shares are the sweep's rates, and its
    search's rates), for a later process to offer the same; None in the first process, one measuring alone, or one
    after a priming process (which compiled for the others and publishes nothing: it is not counted)."""
    if cell.first_process or cell.shared is None or not (cell.shared / RATES_FILE).is_file():
        return None
    return read_json(cell.shared / RATES_FILE)


class WindowEnergy:
    """The GPU's energy counter read at a steady window's two edges, as marks of the run (no thread samples
    while requests are served): the energy over the window from the mean power between the two readings."""

    def __init__(self, telemetry: GpuTelemetry | None, clock: Clock = time.perf_counter) -> None:
        self.telemetry, self.clock = telemetry, clock
        self.readings: list[tuple[float, int | None]] = []

    def marks(self, window: tuple[float, float]) -> list[Mark]:
        return [(edge, self._read) for edge in window] if self.telemetry is not None else []

    def _read(self) -> None:
        assert self.telemetry is not None
        self.readings.append((self.clock(), self.telemetry.energy_mj()))

    def joules(self, window_s: float) -> float | None:
        """The energy over ``window_s`` seconds at the mean power between the readings, or None."""
        if len(self.readings) != 2 or any(mj is None for _, mj in self.readings):
            return None
        (begin, first), (end, last) = self.readings
        return (last - first) / 1e3 / (end - begin) * window_s if end > begin else None  # type: ignore[operator]


def energy_unavailable(device: str, telemetry: GpuTelemetry | None) -> str | None:
    """Why a cell's loads have no energy figures, or None where the GPU's counter was read."""
    if device != "cuda":
        return "energy is read from a GPU's counter (NVML): a CPU has none that inferbench reads"
    if telemetry is None:
        return "NVML could not be loaded (nvidia-ml-py, the `gpu` extra) or the GPU was not found"
    return None


def bisected(
    settings: LoadSettings, sweep: Sequence[dict[str, Any]], at_rate: Callable[[float, int], dict[str, Any]]
) -> dict[str, Any] | None:
    """The highest rate meeting the objective, searched between the sweep's heaviest load that met it and its
    lightest that missed: ``search_steps`` loads, each at the geometric mean of the two (``at_rate(rate, step)``
    runs one, judged), the bracket narrowing to the side it fell on. None where the sweep is of concurrencies,
    met every load or none, or the settings ask for no search."""
    bracket = _bracket(sweep)
    if settings.by_concurrency or bracket is None or not settings.search_steps:
        return None
    low, high = bracket
    steps = []
    for number in range(settings.search_steps):
        rate = math.sqrt(low * high)
        step = {"offered_per_s": rate} | at_rate(rate, number)
        steps.append(step)
        low, high = (rate, high) if step["met"] else (low, rate)
    return searched(sweep, steps)


def replayed(
    rates: Sequence[float], sweep: Sequence[dict[str, Any]], at_rate: Callable[[float, int], dict[str, Any]]
) -> dict[str, Any] | None:
    """The first process's search offered again: a load at each of its ``rates``, in its order, then the bracket
    they narrow (``searched``). None where it searched nothing."""
    if not rates:
        return None
    return searched(sweep, [{"offered_per_s": rate} | at_rate(rate, n) for n, rate in enumerate(rates)])


def _bracket(sweep: Sequence[dict[str, Any]]) -> tuple[float, float] | None:
    index, failing = sweep_answer(sweep)
    if index is None or failing is None or sweep[index].get("offered_per_s") is None:
        return None
    return float(sweep[index]["offered_per_s"]), float(sweep[failing]["offered_per_s"])


def searched(sweep: Sequence[dict[str, Any]], steps: Sequence[dict[str, Any]]) -> dict[str, Any] | None:
    """The bracket of the highest rate meeting the objective: from the sweep's heaviest load met and lightest
    missed, narrowed by each search step in order whose rate falls inside it (met: from below; else from above).
    Where the sweep has no such pair, the steps with no bracket (None without steps)."""
    bracket = _bracket(sweep)
    if bracket is None:  # this process's sweep brackets nothing: its steps are kept for the merge
        return {"rate_per_s": None, "missed_per_s": None, "steps": list(steps)} if steps else None
    low, high = bracket
    for step in steps:
        rate = float(step["offered_per_s"])
        if low < rate < high:
            low, high = (rate, high) if step["met"] else (low, rate)
    return {"rate_per_s": low, "missed_per_s": high, "steps": list(steps)}


def timing_description(settings: LoadSettings, answered: bool) -> str:
    which = "the heaviest load meeting the objective" if answered else "the lightest load (none met the objective)"
    since = "its send (a slot freed)" if settings.by_concurrency else "its scheduled arrival"
    return (
        f"each request of {which}, from {since} to its last token, on the host clock; the record's `serving` holds "
        "every load's TTFT, TPOT, ITL and e2e (inferbench.scenarios.llm_load)"
    )


def sweep_record(
    settings: LoadSettings,
    capacity: dict[str, Any],
    sweep: list[dict[str, Any]],
    mode: str,
    running: int,
    prompt_tokens: int,
    output_tokens: int,
    processes: int = 1,
) -> dict[str, Any]:
    """What the record keeps under ``serving`` for a sweep: the settings, the capacity, every load, the answer
    (and, in ``result``, the answering load as the summary's serving columns read it)."""
    index, failing = sweep_answer(sweep)
    return {
        "scenario": SCENARIO,
        "driven": mode,
        "processes": processes,
        "arrivals": settings.arrivals,
        "settings": settings.as_dict(),
        "objective": settings.objective.as_dict(),
        "objective_text": settings.objective.text(),
        "timed_from": "sent" if settings.by_concurrency else "scheduled arrival",
        "max_running": running,
        "prompt_tokens": prompt_tokens,
        "output_tokens": output_tokens,
        "capacity": capacity,
        "capacity_qps": capacity["request_per_s"],
        "sweep": sweep,
        **_answer_fields(
            sweep[index] if index is not None else None, index, sweep[failing] if failing is not None else None, failing
        ),
    }


def _load_rate(step: dict[str, Any] | None) -> float | None:
    """A load's request rate: the offered one, or at a fixed concurrency the one served."""
    if step is None:
        return None
    return step["offered_per_s"] if step["offered_per_s"] is not None else step["request_per_s"]


def _answer_fields(
    answer: dict[str, Any] | None, index: int | None, missed: dict[str, Any] | None, failing: int | None
) -> dict[str, Any]:
    """The sweep's answer (the highest load meeting the objective, and the lowest missing it), and what the
    summary's serving columns read of it (inferbench.core.cells): its rate, throughput and e2e."""
    return {
        "answer": {
            "index": index,
            "load": answer["load"] if answer else None,
            "rate_per_s": _load_rate(answer),
            "request_per_s": answer["request_per_s"] if answer else None,
            "goodput_per_s": answer["goodput_per_s"] if answer else None,
            "failing_index": failing,
            "failing_rate_per_s": _load_rate(missed),
        },
        "qps_at_bound": _load_rate(answer),
        "lowest_invalid_qps": _load_rate(missed),
        "latency_bound_ms": None,
        "result": {
            "target_qps": _load_rate(answer),
            "completed_qps": answer["request_per_s"],
            "latency_ms": {k: answer["e2e_ms"][k] for k in ("p50", "p90", "p99")},
            "valid": True,
            "query_count": answer["requests"],
        }
        if answer
        else None,
        "batches": {"mean_size": answer["mean_in_flight"]} if answer else None,
    }


def invalid_reason(serving: dict[str, Any]) -> str | None:
    """Why the cell's measurement is not valid: its served tokens differ from FP32 eager's, or requests made
    fewer tokens than they asked for (their lengths would not be the planned ones)."""
    parity = serving.get("token_parity")
    if parity is not None and not parity["equal"]:
        return (
            f"served tokens differ from FP32 eager's at token {parity['first_difference']} "
            f"(of the first {parity['compared']})"
        )
    short = sum(step.get("short_requests", 0) for step in [serving["capacity"], *serving["sweep"]])
    if short:
        return (
            f"{short} request(s) made fewer tokens than they asked for (a stop at EOS?): lengths differ from the plan"
        )
    return None


def _served_parity(cell: PreparedCell, driver: Driver, new_tokens: int) -> dict[str, Any] | None:
    """The reference prompts served through the engine's own path under load, all at once, their tokens
    against FP32 eager's greedy ones (the first ones in fp16/bf16: GATED_TOKENS); None where there is no
    reference or the engine does not hand its tokens over (then ``checked`` says so)."""
    if cell.inputs.reference is None:
        return None
    loaded = load_reference_tokens(cell.inputs.reference, cell.key.batch_size)
    if loaded is None:
        return None
    if not callable(getattr(driver.engine, "serve_tokens", None)):
        return {"equal": True, "checked": False, "why": "the engine hands over no tokens (no serve_tokens)"}
    if unchecked := getattr(driver.engine, "tokens_unchecked", None):
        return {"equal": True, "checked": False, "why": unchecked}
    inputs, reference = loaded
    count = min(new_tokens, reference.shape[1])
    requests = [
        PlannedRequest(f"parity-{row}", None, tuple(int(t) for t in prompt), count)
        for row, prompt in enumerate(inputs["input_ids"])
    ]
    driver.run(requests, len(requests))
    served = np.asarray([driver.engine.serve_tokens(request.request_id)[:count] for request in requests])
    return token_agreement(served, reference[:, :count], GATED_TOKENS.get(cell.key.precision, 1))


def token_agreement(served: np.ndarray, reference: np.ndarray, gated: int | None) -> dict[str, Any]:
    """Served tokens (rows, tokens) against the reference's: ``equal`` when the first ``gated`` (None: all)
    agree in every row, how many agree from the start, and the first that differs."""
    compared = min(served.shape[1], reference.shape[1], gated or reference.shape[1])
    differs = np.nonzero((served != reference).any(axis=0))[0]
    first = int(differs[0]) if differs.size else None
    agreeing = served.shape[1] if first is None else first
    return {
        "equal": agreeing >= compared,
        "checked": True,
        "compared": compared,
        "agreeing": agreeing,
        "first_difference": first,
    }


# -- a cell's processes --


def merged_serving(records: Sequence[Any]) -> dict[str, Any]:
    """The ``serving`` of a cell from its processes' records (each its own sweep): every load pooled over the
    processes (``pooled_run``: percentiles from every request, rates over the summed time, each process's value
    and their spread), the capacity likewise, the answer from the pooled loads, and each process's own answer
    with their spread. The token parity: the first process's that failed, else the first's."""
    sweeps = [record.sections[SECTION] for record in records]
    first = sweeps[0]
    if len({len(s["sweep"]) for s in sweeps}) != 1:
        raise ValueError("the processes' sweeps have different loads: they cannot be pooled")
    settings = LoadSettings.from_dict({**first["settings"], "objective": first["objective"]})
    objective = settings.objective
    capacity = pooled_run([s["capacity"] for s in sweeps], objective)
    sweep = [_judged(pooled_run([s["sweep"][i] for s in sweeps], objective)) for i in range(len(first["sweep"]))]
    merged = sweep_record(
        settings, capacity, sweep, first["driven"], first["max_running"], first["prompt_tokens"],
        first["output_tokens"], processes=len(sweeps),
    )  # fmt: skip
    own = [s["answer"] for s in sweeps]
    merged["answer"] |= {
        "by_process": {"rate_per_s": [a["rate_per_s"] for a in own], "load": [a["load"] for a in own]},
        "spread_pct": {"rate_per_s": spread_pct([a["rate_per_s"] for a in own])},
    }
    merged["search"] = merged_search([s.get("search") for s in sweeps], objective, sweep)
    offered = [s.get("offered_from") for s in sweeps]
    merged["offered_from"] = offered[0]
    if offered[0] is not None:
        capacities = [o["capacity_per_s"] if o else None for o in offered]
        merged["offered_from"] = {**offered[0], "same_rates": len(set(capacities)) == 1}
    merged["energy_unavailable"] = first.get("energy_unavailable")
    merged["client_floor"] = merged_floor([s.get("client_floor") for s in sweeps], objective)
    parities = [s.get("token_parity") for s in sweeps]
    merged["token_parity"] = next((p for p in parities if p is not None and not p["equal"]), parities[0])
    hosts = [((s.get("result") or {}).get("host")) for s in sweeps]
    if merged["result"] is not None:
        merged["result"]["host"] = next((h for h in hosts if h), None)
    return merged


def merged_floor(floors: Sequence[dict[str, Any] | None], objective: Objective) -> dict[str, Any] | None:
    """The processes' client floors pooled as their loads are: the burst, and each load at its rate. None where a
    process has none."""
    if not floors or not all(floors):
        return None
    present = [floor for floor in floors if floor is not None]
    loads = [floor.get("sweep") or [] for floor in present]
    count = min(len(at) for at in loads)
    at_loads = [pooled_run([at[i] for at in loads], objective) for i in range(count)]
    return pooled_run(present, objective) | {"server": present[0]["server"], "sweep": at_loads}


def merged_search(
    searches: Sequence[dict[str, Any] | None], objective: Objective, sweep: Sequence[dict[str, Any]]
) -> dict[str, Any] | None:
    """The processes' searches, merged. Where every process offered the same rates (the later ones replay the
    first's search): each step pooled over them and judged as a sweep's load is, and the bracket those pooled
    steps narrow from the pooled ``sweep``. Else (records from before, each process bisecting its own rates)
    the median of the processes' brackets. Each process's own bracket beside, with their spread. None where a
    process searched nothing."""
    if not searches or any(found is None for found in searches):
        return None
    present = [found for found in searches if found is not None]
    met = [found["rate_per_s"] for found in present]
    missed = [found["missed_per_s"] for found in present]
    beside = {
        "by_process": {"rate_per_s": met, "missed_per_s": missed},
        "spread_pct": {"rate_per_s": spread_pct(met)},
    }
    rates = [[float(step["offered_per_s"]) for step in found["steps"]] for found in present]
    same = all(len(r) == len(rates[0]) and all(map(math.isclose, r, rates[0])) for r in rates)
    if same and all("samples_ms" in step for found in present for step in found["steps"]):
        steps = [_judged(pooled_run([found["steps"][i] for found in present], objective)) for i in range(len(rates[0]))]
        pooled = searched(sweep, steps)
        if pooled is not None:
            return pooled | {"pooled": True} | beside
    if any(rate is None for rate in [*met, *missed]):
        return None
    return {
        "rate_per_s": float(np.median(met)),
        "missed_per_s": float(np.median(missed)),
        "steps": len(present[0]["steps"]),
        "pooled": False,
    } | beside


def _judged(step: dict[str, Any]) -> dict[str, Any]:
    """A load pooled over the processes, judged: VALID where each process's was, its objective met on the
    pooled percentiles (``met`` only where VALID)."""
    if "valid" not in step:  # records from before the verdict
        return step
    return step | judged(step, step["valid"], step["failed"])


def merged_fields(records: Sequence[Any]) -> dict[str, Any]:
    """The record fields of a cell that its processes' pooled samples do not make (ScenarioInfo.merge): its
    ``serving`` pooled load by load (``merged_serving``), and its throughput, the pooled answering load's served
    rate (pooling the e2e samples alone gives requests over their summed latencies, no rate under load)."""
    serving = merged_serving(records)
    answer = serving["answer"]
    shown = serving["sweep"][answer["index"] if answer["index"] is not None else 0]
    fields: dict[str, Any] = {"sections": {SECTION: serving}, "throughput_per_s": shown["request_per_s"]}
    end_to_end = getattr(records[0], "end_to_end", None)
    if end_to_end is not None:
        fields["end_to_end"] = {**end_to_end, "throughput_per_s": shown["request_per_s"]}
    return fields
