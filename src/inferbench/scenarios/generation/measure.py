"""The generation scenario: a decoder LM answers requests one after another, each a prompt of the cell's
sequence length for each row of the batch, then ``new_tokens`` tokens (the engine's option) picked
greedily, with no stop at EOS, so that every request does the same work.

A request is timed three ways:

- **time to first token** (TTFT): the prefill (the prompt through the model, its KV cache filled, the
  first token picked), from the request's start to its first token;
- **time per output token** (TPOT): each further step, from the previous token to this one;
- **request latency** (the cell's ``latency_ms``, boundary ``end_to_end``): host token ids in, the
  generated token ids back on the host.

On a GPU, TTFT and each step are the times between CUDA events recorded on the engine's stream after
each token, and the host issues the next step without waiting (tokens are picked on the device, as in a
server's decode loop), so an idle gap while the host issues a step counts in that step: what a user
waits per token. On the CPU every step is timed on the host clock. From these: decode tokens per second
per sequence (1 / TPOT p50) and in aggregate (the batch's rows), the KV cache's and the weights' bytes,
and a roofline for decode: at batch 1 a step reads every weight once, so its floor is the weights' bytes
(but the input embedding table's, of which it reads a row per token) over the memory bandwidth a copy
reaches here, bytes read + written per second (inferbench.trackers.roofline.copy_bandwidth), and
``decode_floor_share`` is that floor over the TPOT p50 (1: at the memory bound; above 1 on a CPU whose
caches hold the weights).
"""

from __future__ import annotations

import contextlib
import itertools
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from inferbench.core.errors import failure_reason
from inferbench.core.stats import latency_stats
from inferbench.machine.host_partition import measuring
from inferbench.machine.watchdog import beat
from inferbench.models.parity import load_reference_tokens
from inferbench.scenarios.generation import SECTION
from inferbench.scenarios.prepare import Measured, PreparedCell
from inferbench.scenarios.timing import warm_up
from inferbench.trackers import memory
from inferbench.trackers.bound import classify
from inferbench.trackers.gpu_telemetry import GpuTelemetry
from inferbench.trackers.host_telemetry import HostWindow
from inferbench.trackers.kernel_trace import KernelTotals, busy_us, profiled_kernels, totals
from inferbench.trackers.roofline import copy_bandwidth

BOUNDARY = (
    "one request: the prompt's token ids from the host, the prefill, then one decode step per further token "
    "(greedy, a fixed count, no stop at EOS), the generated token ids back on the host; host clock"
)


class StepClock:
    """The time of each token of a request: CUDA events on the engine's stream (GPU), else the host clock."""

    def __init__(self, stream: Any) -> None:
        self.stream = stream
        self.marks: list[Any] = []

    def mark(self) -> None:
        if self.stream is None:
            self.marks.append(time.perf_counter())
        else:
            import torch

            event = torch.cuda.Event(enable_timing=True)
            event.record(self.stream)
            self.marks.append(event)

    def intervals_s(self) -> list[float]:
        """Seconds between consecutive marks (the GPU's events waited for)."""
        if self.stream is None:
            return [b - a for a, b in itertools.pairwise(self.marks)]
        self.marks[-1].synchronize()
        return [a.elapsed_time(b) * 1e-3 for a, b in itertools.pairwise(self.marks)]


#: a request tells the stall watchdog it progresses every this many tokens (inferbench.machine.watchdog): a
#: long request is no stall. A beat is a store to shared memory (under a microsecond): every 8 steps it is
#: lost in the steps' own time
BEAT_EVERY_TOKENS = 8


def generate_request(
    engine: Any, batch: dict[str, np.ndarray], stream: Any
) -> tuple[float, list[float], float, Any, list[float]]:
    """One request: (TTFT s, each further token's s, the request's host-clock s, the engine's request, the
    host's s inside each ``step`` call: for an engine that queues a step and returns, its time to issue it)."""
    clock = StepClock(stream)
    host_step_s: list[float] = []
    start = time.perf_counter()
    staged = engine.stage(batch)
    clock.mark()
    request = engine.start(staged)
    clock.mark()
    beat()  # the prefill, done (a long prompt's takes a while)
    for index in range(1, engine.new_tokens):
        called = time.perf_counter()
        request = engine.step(request)
        host_step_s.append(time.perf_counter() - called)
        clock.mark()
        if index % BEAT_EVERY_TOKENS == 0:
            beat()
    engine.generated(request)  # the tokens on the host: the request is answered
    latency = time.perf_counter() - start
    intervals = clock.intervals_s()
    return intervals[0], intervals[1:], latency, request, host_step_s


def generation_stats(ttft_s: np.ndarray, tpot_s: np.ndarray, batch: int) -> dict[str, Any]:
    """TTFT and TPOT percentiles (ms) and decode tokens per second, per sequence and for the batch."""
    ttft, tpot = latency_stats(ttft_s, batch), latency_stats(tpot_s, batch)
    per_sequence = 1e3 / tpot["latency_ms"]["p50"]
    return {
        "ttft_ms": ttft["latency_ms"],
        "ttft_ci95_ms": ttft["latency_ci95_ms"],
        "tpot_ms": tpot["latency_ms"],
        "tpot_ci95_ms": tpot["latency_ci95_ms"],
        "requests": int(ttft_s.size),
        "decode_steps": int(tpot_s.size),
        "decode_tokens_per_s_per_sequence": per_sequence,
        "decode_tokens_per_s": per_sequence * batch,
    }


def decode_roofline(read_bytes: int, copy_bytes_per_s: float, tpot_p50_ms: float) -> dict[str, float]:
    """A decode step reads ``read_bytes`` of weights at least: its floor is them over the memory's
    bandwidth, as a copy measures it (bytes read + written per second: reads and writes share the one
    bus, and a step that only reads can have all of it; counting half, as an earlier version did, put the
    floor twice too high)."""
    read_bytes_per_s = copy_bytes_per_s
    floor_ms = read_bytes / read_bytes_per_s * 1e3
    return {
        "decode_floor_ms": floor_ms,
        "decode_floor_share": floor_ms / tpot_p50_ms,
        "read_bytes_per_s": read_bytes_per_s,
    }


def measure(cell: PreparedCell) -> Measured:
    """The cell's requests timed one after another (``_timed_requests``), what is measured beside them under
    the same lock (``_beside_the_requests``), and the record's fields made of both."""
    engine: Any = cell.engine  # a generation engine (inferbench.engines.generation): new_tokens, start, step
    key = cell.key
    gpu = key.device == "cuda"
    stream = engine.stream() if gpu else None
    batches = itertools.cycle(cell.batches)
    telemetry = GpuTelemetry.for_cuda_device() if gpu else None
    host = HostWindow()
    # the phase the watchdog names if a request stalls (the cell's key says scenario "single", as its paths do)
    beat(f"generating (warm-up, then requests of {key.seq_len} prompt + {engine.new_tokens} new tokens)")
    with measuring(cell.lock, key.device, cell.settings.cpu_affinity) as held:
        timed = _timed_requests(cell, batches, stream, telemetry, host)
        beside = _beside_the_requests(cell, batches, timed, host)
    items = key.batch_size * engine.new_tokens  # tokens a request generates
    # the GPU's telemetry over the timed requests
    gpu_summary = telemetry.summary(items * len(timed.latencies)) if telemetry else None
    generation, invalid = _generation_section(cell, timed, beside)
    samples = np.asarray(timed.latencies)
    fields = _record_fields(cell, timed, samples, items, {"measuring": held, "host_telemetry": host.summary},
                            gpu_summary, generation)  # fmt: skip
    return Measured(fields, {"device": samples, "end_to_end": samples}, invalid)


@dataclass
class TimedRequests:
    """What one process's timed requests measured: each request's TTFT, decode steps and latency (seconds)."""

    ttft: list[float] = field(default_factory=list)
    tpot: list[float] = field(default_factory=list)
    latencies: list[float] = field(default_factory=list)
    #: the host's time to issue each decode step (a GPU step syncs nowhere)
    host_step: list[float] = field(default_factory=list)
    warmup: int = 0
    measured_s: float = 0.0
    window: list[float] = field(default_factory=list)
    #: the last request, whose KV cache the record sizes
    request: Any = None


def _timed_requests(
    cell: PreparedCell, batches: Iterator[Any], stream: Any, telemetry: GpuTelemetry | None, host: HostWindow
) -> TimedRequests:
    """Whole requests as warm-up until ``warmup_s`` has passed (one at least), then timed ones until the
    process has ``min_iters_per_process`` of them and ``min_time_s`` has passed (a GPU cell's at least
    ``measure.gpu_min_requests`` and ``gpu_min_requests_s``)."""
    engine: Any = cell.engine
    settings, gpu = cell.settings, cell.key.device == "cuda"
    timed = TimedRequests()
    timed.warmup = warm_up(lambda _: generate_request(engine, next(batches), stream), settings.warmup_s)
    if gpu:
        memory.reset_gpu_peak()
    enough_s, enough_requests = settings.min_time_s, settings.min_iters_per_process
    if gpu:
        enough_s = max(enough_s, settings.gpu_min_requests_s)
        enough_requests = max(enough_requests, settings.gpu_min_requests)
    with host, telemetry or contextlib.nullcontext():
        window_start = time.time()
        started = time.perf_counter()
        while len(timed.latencies) < enough_requests or time.perf_counter() - started < enough_s:
            first, steps, latency, timed.request, host_steps = generate_request(engine, next(batches), stream)
            timed.ttft.append(first)
            timed.tpot.extend(steps)
            timed.host_step.extend(host_steps)
            timed.latencies.append(latency)
            beat()
        timed.measured_s = time.perf_counter() - started
        timed.window = [window_start, time.time()]
    return timed


def _beside_the_requests(
    cell: PreparedCell, batches: Iterator[Any], timed: TimedRequests, host: HostWindow
) -> dict[str, Any]:
    """After the timed window, still under the measuring lock: where a decode step's time goes (a profiled
    request: its cost stays out of the cell's numbers), requests without the stepped loop, and the copy
    bandwidth that sets the decode floor (it would disturb a cell measuring beside it)."""
    engine: Any = cell.engine
    gpu = cell.key.device == "cuda"
    tpot_p50_ms = float(np.median(timed.tpot)) * 1e3 if timed.tpot else None
    # an engine that traces in an engine of its own (vLLM's takes tens of seconds to start: docs/gpu-machines.md)
    # does so in the first process
    traced_here = cell.first_process or not hasattr(engine, "traced_decode_steps")
    profiled = gpu and tpot_p50_ms and traced_here
    # the CPU the engine's own processes (vLLM's engine core) used per scheduler iteration of the timed
    # requests: a prefill and a decode step per further token each
    children_cpu_s = host.summary.get("children_cpu_s")
    iterations = len(timed.latencies) * engine.new_tokens
    core_cpu_ms = children_cpu_s * 1e3 / iterations if children_cpu_s is not None and iterations else None
    return {
        "step_split": _or_reason(step_split, engine, next(batches), tpot_p50_ms, timed.host_step, core_cpu_ms)
        if profiled
        else None,
        "plain_requests": _or_reason(plain_requests, engine, next(batches)),
        "client_floor": _or_reason(client_floor, engine, next(batches)),
        "copy_bytes_per_s": copy_bandwidth(cell.key.device),
    }


def _generation_section(
    cell: PreparedCell, timed: TimedRequests, beside: dict[str, Any]
) -> tuple[dict[str, Any], str | None]:
    """The record's ``generation``: TTFT and TPOT statistics, sizes, the decode roofline, the tokens' parity
    against FP32 eager (greedy, from the reference prompts); and why the cell is invalid, if its tokens differ."""
    engine: Any = cell.engine
    key = cell.key
    # an engine that serves a model other than the workload's checkpoint (a server at a URL) says so
    given = None if getattr(engine, "tokens_unchecked", None) else cell.inputs.reference
    reference = load_reference_tokens(given, key.batch_size) if given is not None else None
    gated = GATED_TOKENS.get(key.precision, 1)
    tokens_parity = token_parity(engine, *reference, gated) if reference is not None else None
    read_bytes, bandwidth = engine.decode_read_bytes(), beside["copy_bytes_per_s"]
    generation = generation_stats(np.asarray(timed.ttft), np.asarray(timed.tpot), key.batch_size)
    generation |= {
        "new_tokens": engine.new_tokens,
        "prompt_tokens": key.seq_len,
        "kv_cache_mb": engine.cache_bytes(timed.request) / 2**20,
        "weights_mb": engine.weight_bytes() / 2**20,
        "decode_read_mb": read_bytes / 2**20,
        "copy_bytes_per_s": bandwidth,
        **decode_roofline(read_bytes, bandwidth, generation["tpot_ms"]["p50"]),
        "token_parity": tokens_parity,
        "step_split": beside["step_split"],
        "plain_requests": beside["plain_requests"],
        "client_floor": beside["client_floor"],
        # every sample, so that a cell's processes pool them (inferbench.launch.processes)
        "samples_ms": {name: [round(s * 1e3, 4) for s in values] for name, values in
                       (("ttft", timed.ttft), ("tpot", timed.tpot))},
    }  # fmt: skip
    invalid = None
    if tokens_parity is not None and not tokens_parity["equal"]:
        invalid = (
            f"generated tokens differ from FP32 eager's at token {tokens_parity['first_difference']} "
            f"(of the first {tokens_parity['compared']})"
        )
    return generation, invalid


def _record_fields(
    cell: PreparedCell,
    timed: TimedRequests,
    samples: np.ndarray,
    items: int,
    held: dict[str, Any],
    gpu_summary: dict[str, Any] | None,
    generation: dict[str, Any],
) -> dict[str, Any]:
    """The record's fields: request latency statistics at the end-to-end boundary, the window and what held
    it (``held``: the measuring lock and the host's telemetry), and who set the pace from NVML's busy share
    (a decode step syncs nowhere, but its launches are many small ones: no single call's launch share)."""
    stats = latency_stats(samples, items)
    bound = None
    if cell.key.device == "cuda":
        busy = gpu_summary["gpu_busy_pct"] if gpu_summary else None
        bound_class, signal = classify(None, busy, False)
        bound = {"class": bound_class, "signal": signal, "launch_share": None, "gpu_busy_pct": busy}
    figures = ("latency_ms", "latency_ci95_ms", "cv", "n_iters", "throughput_per_s")
    return {
        "timing": "end_to_end",
        "timing_description": BOUNDARY,
        "clock": "host",
        "items_per_call": items,
        "input_batches": cell.settings.input_batches,
        **{name: stats[name] for name in figures},
        "warmup_iters": timed.warmup,
        "measured_s": timed.measured_s,
        "measured_windows_unix": [timed.window],
        **held,
        "gpu_telemetry": gpu_summary,
        "bound": bound,
        "memory_mb": {"gpu_process_peak_nvml": gpu_summary["process_peak_mb"] if gpu_summary else None},
        "sections": {SECTION: generation},
        "end_to_end": {"description": BOUNDARY, "clock": "host", **{name: stats[name] for name in figures}},
    }


def _or_reason(figure: Any, *args: Any) -> dict | None:
    """``figure(*args)``, or why it could not be had: a figure beside the timed requests never fails the cell
    whose requests were measured."""
    try:
        return figure(*args)
    except Exception as error:
        return {"reason": failure_reason(error)}


#: how a decode step's kernels are found, for an engine whose kernels this process launches
IN_PROCESS_TRACE = (
    "torch.profiler in the cell's process (CUPTI: every kernel the process ran, CUDA-graph replays included) "
    "over the decode steps of one request, its prefill done and synchronised before"
)


def step_split(
    engine: Any,
    batch: dict[str, np.ndarray],
    tpot_p50_ms: float,
    host_step_s: list[float],
    children_cpu_ms_per_iteration: float | None = None,
) -> dict:
    """Where a decode step's time goes on a GPU: the kernels' busy time per step (the union of their
    intervals, from one profiled request) against the timed TPOT p50; the rest the GPU idles, waiting for the
    host to schedule, launch or hand back the step. Beside it, the host's time inside each ``step`` call of
    the timed requests: for an engine that queues a step and returns, its time to issue one (where ``step``
    waits for the GPU or for another process, that wait is in it; ``host_step_call`` says which). For an
    engine that steps in another process, that process's CPU time per scheduler iteration of the timed
    requests instead (``children_cpu_ms_per_iteration``: all its threads, a spinning wait counted).

    An engine whose kernels run in another process (vLLM's engine core) traces them there and tells its
    decode steps apart (``engine.traced_decode_steps``: the kernels of each)."""
    steps = engine.new_tokens - 1
    if hasattr(engine, "traced_decode_steps"):
        per_step = engine.traced_decode_steps(engine.stage(batch))
        steps = len(per_step)
        decode = KernelTotals(sum(len(k) for k in per_step), sum(busy_us(k) for k in per_step))
        how = engine.kernel_trace_description
    else:
        request = engine.start(engine.stage(batch))
        engine.synchronize()

        def decode_steps() -> None:
            nonlocal request
            for _ in range(steps):
                request = engine.step(request)

        with tempfile.TemporaryDirectory(prefix="inferbench-trace-") as folder:
            decode = totals(profiled_kernels(decode_steps, engine.synchronize, Path(folder) / "decode.json"))
        engine.generated(request)
        how = IN_PROCESS_TRACE
    if steps <= 0 or decode.kernels <= 0 or decode.busy_us <= 0:
        return {"profiled": how, "reason": "the profiler saw no kernel of the decode steps"}
    in_another_process = getattr(engine, "steps_in_another_process", False)
    host_call_ms = float(np.median(host_step_s)) * 1e3 if host_step_s and not in_another_process else None
    return {
        "profiled": how,
        "steps_profiled": steps,
        "kernels_per_step": decode.kernels / steps,
        **_against_tpot(decode.busy_us / steps / 1e3, tpot_p50_ms),
        "host_step_call_ms_p50": host_call_ms,
        "engine_core_cpu_ms_per_iteration": children_cpu_ms_per_iteration if in_another_process else None,
        "host_step_call": (
            "the engine core steps in its own process: this process's step call waits for its output"
            if in_another_process
            else "the host's time inside the engine's step call (returns once the step is queued where the engine "
            "computes asynchronously)"
        ),
    }


def _against_tpot(busy_ms: float, tpot_p50_ms: float) -> dict[str, float]:
    """A step's GPU busy time beside the TPOT p50: its share, and the rest, the GPU idle (negative where the
    profiled request's kernels ran longer than the timed steps took at their median)."""
    return {
        "gpu_busy_ms_per_step": busy_ms,
        "tpot_p50_ms": tpot_p50_ms,
        "gpu_busy_share": busy_ms / tpot_p50_ms,
        "gpu_idle_ms_per_step": tpot_p50_ms - busy_ms,
    }


def merged_step_split(splits: list[dict | None], tpot_p50_ms: float) -> dict | None:
    """Each process's ``step_split`` as the cell's: the median busy time and kernels per step, against the
    TPOT p50 pooled over the processes; each process's busy time beside it."""
    known = [s for s in splits if s and s.get("gpu_busy_ms_per_step") is not None]
    if not known:
        return next((s for s in splits if s), None)
    busy_ms = float(np.median([s["gpu_busy_ms_per_step"] for s in known]))
    host = [s["host_step_call_ms_p50"] for s in known if s.get("host_step_call_ms_p50") is not None]
    return {
        **known[0],
        "kernels_per_step": float(np.median([s["kernels_per_step"] for s in known])),
        **_against_tpot(busy_ms, tpot_p50_ms),
        "gpu_busy_ms_per_step_by_process": [s["gpu_busy_ms_per_step"] for s in known],
        "host_step_call_ms_p50": float(np.median(host)) if host else None,
    }


#: pairs of requests, one stepped and one answered the engine's plain way (``engine.plain_request``), to set
#: side by side
PLAIN_REQUESTS = 5


def plain_requests(engine: Any, batch: dict[str, np.ndarray]) -> dict | None:
    """An engine stepped here token by token (vLLM's engine, a scheduler iteration per call), against its
    plain way of answering a request (``LLM.generate``): the stepping must cost nothing, or its per-token
    times would not be what a user of the engine sees. The two alternate, a stepped request then a plain
    one, ``PLAIN_REQUESTS`` times after one of each: both meet the same state of the machine, where the timed
    requests came first and read far from the plain ones, one way in one process and the other way in the
    next. None for engines with no plain way of their own."""
    if not hasattr(engine, "plain_request"):
        return None
    staged = engine.stage(batch)
    stepped_s, plain_s = [], []
    for pair in range(PLAIN_REQUESTS + 1):  # the first pair: anything either sets up once stays out
        stepped = generate_request(engine, batch, None)[2]
        started = time.perf_counter()
        engine.plain_request(staged)
        if pair:
            stepped_s.append(stepped)
            plain_s.append(time.perf_counter() - started)
    stepped_p50, plain_p50 = float(np.median(stepped_s)), float(np.median(plain_s))
    return {
        "how": engine.plain_request_description,
        "requests": PLAIN_REQUESTS,
        "plain_p50_ms": plain_p50 * 1e3,
        "stepped_p50_ms": stepped_p50 * 1e3,
        "stepped_over_plain": stepped_p50 / plain_p50,
    }


#: requests sent to the null server for the client's floor (``client_floor``)
FLOOR_REQUESTS = 10


def client_floor(engine: Any, batch: dict[str, np.ndarray]) -> dict | None:
    """For an engine that drives a server (``engine.client_floor``: the same client pointed at the null server,
    which streams canned tokens at once): ``FLOOR_REQUESTS`` requests of the cell's shape timed as the cell's
    are, after one untimed. Their TTFT and TPOT are what the client and its event loop take alone. None for
    other engines."""
    if not hasattr(engine, "client_floor"):
        return None
    with engine.client_floor() as server:
        generate_request(engine, batch, None)
        requests = [generate_request(engine, batch, None) for _ in range(FLOOR_REQUESTS)]
    return {
        "server": server,
        "requests": FLOOR_REQUESTS,
        "ttft_p50_ms": float(np.median([r[0] for r in requests])) * 1e3,
        "tpot_p50_ms": float(np.median([step for r in requests for step in r[1]])) * 1e3,
        "latency_p50_ms": float(np.median([r[2] for r in requests])) * 1e3,
    }


def merged_plain_requests(comparisons: list[dict | None]) -> dict | None:
    """Each process's ``plain_requests`` as the cell's: the median of each p50 and of their ratio, each
    process's ratio beside it."""
    known = [c for c in comparisons if c and "stepped_over_plain" in c]
    if not known:
        return next((c for c in comparisons if c), None)  # none, or why none could be had
    return {
        **known[0],
        "requests": sum(c["requests"] for c in known),
        **{
            k: float(np.median([c[k] for c in known])) for k in ("plain_p50_ms", "stepped_p50_ms", "stepped_over_plain")
        },
        "stepped_over_plain_by_process": [c["stepped_over_plain"] for c in known],
    }


#: the generated tokens that must equal FP32 eager's, by precision: all the reference holds in fp32; at a
#: lower precision the first only (the prefill's pick, whose logits parity bounds). Random weights leave
#: the next token's logits within a rounding of each other, so a low-precision greedy sequence parts from
#: FP32's after a few tokens without any error; how long they agree is reported
GATED_TOKENS = {"fp32": None, "fp16": 1, "bf16": 1}


def token_parity(
    engine: Any, inputs: dict[str, np.ndarray], reference: np.ndarray, gated: int | None = None
) -> dict[str, Any]:
    """The engine's greedy tokens from the reference prompts (tiled to the cell's batch) against those of
    FP32 eager through transformers' own ``generate``: ``equal`` when the first ``gated`` (None: all the
    reference holds) agree; ``agreeing``: how many agree from the start (after a first difference the
    sequences part by construction)."""
    request = generate_request(engine, inputs, None)[3]
    tokens = engine.generated(request)
    compared = min(tokens.shape[1], reference.shape[1], gated or reference.shape[1])
    available = min(tokens.shape[1], reference.shape[1])
    differs = np.nonzero((tokens[:, :available] != reference[:, :available]).any(axis=0))[0]
    first = int(differs[0]) if differs.size else None
    agreeing = available if first is None else first
    return {"equal": agreeing >= compared, "compared": compared, "agreeing": agreeing, "first_difference": first}


# -- a cell's processes --


def merged_fields(records: Sequence[Any]) -> dict[str, Any]:
    """The record fields of a generation cell that its processes' pooled request latencies do not make
    (ScenarioInfo.merge): its section, from every process's TTFT and TPOT samples pooled; its decode
    roofline against the pooled TPOT (the bandwidth: the best any process measured)."""
    sections = [record.sections.get(SECTION) or {} for record in records]
    first = sections[0]
    pooled = {name: np.concatenate([np.asarray(g["samples_ms"][name]) for g in sections]) / 1e3
              for name in ("ttft", "tpot")}  # fmt: skip
    stats = generation_stats(pooled["ttft"], pooled["tpot"], records[0].key.batch_size)
    bandwidth = max(g.get("copy_bytes_per_s") or 0.0 for g in sections)
    roofline = decode_roofline(round(first["decode_read_mb"] * 2**20), bandwidth, stats["tpot_ms"]["p50"])
    parity = [g.get("token_parity") for g in sections]
    generation = {
        **first,
        **stats,
        **roofline,
        "copy_bytes_per_s": bandwidth,
        "kv_cache_mb": max(g.get("kv_cache_mb") or 0.0 for g in sections),
        "token_parity": next((p for p in parity if p is not None and not p["equal"]), parity[0]),
        "samples_ms": {name: [round(v * 1e3, 4) for v in values] for name, values in pooled.items()},
        # each process's own TPOT p50: how far a decode step moves between processes (the report's intervals)
        "tpot_p50_by_process_ms": [(g.get("tpot_ms") or {}).get("p50") for g in sections],
        "step_split": merged_step_split([g.get("step_split") for g in sections], stats["tpot_ms"]["p50"]),
        "plain_requests": merged_plain_requests([g.get("plain_requests") for g in sections]),
        "client_floor": merged_client_floor([g.get("client_floor") for g in sections]),
    }
    return {"sections": {SECTION: generation}}


def merged_client_floor(floors: list[dict | None]) -> dict | None:
    """Each process's ``client_floor`` as the cell's: the median of each figure, each process's TTFT beside."""
    known = [f for f in floors if f and "ttft_p50_ms" in f]
    if not known:
        return next((f for f in floors if f), None)  # none, or why none could be had
    figures = ("ttft_p50_ms", "tpot_p50_ms", "latency_p50_ms")
    return {
        **known[0],
        "requests": sum(f["requests"] for f in known),
        **{name: float(np.median([f[name] for f in known])) for name in figures},
        "ttft_p50_by_process_ms": [f["ttft_p50_ms"] for f in known],
    }
