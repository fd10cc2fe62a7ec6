"""What an LLM serving run measured, request by request and for the run: the arithmetic of
inferbench.scenarios.llm_load, pure (numpy, no clock), so that it is checked against hand-computed cases.

Per request, as ``vllm bench serve`` defines them, each from the time the request counts from (its scheduled
arrival, or the moment it was sent at a fixed concurrency) on one host clock:

- **TTFT**: to the first token;
- **ITL**: between consecutive arrivals of tokens, one per arrival (a step that hands over two tokens is one
  arrival);
- **TPOT**: ``(e2e - ttft) / (output_tokens - 1)``, the mean time per token after the first;
- **e2e**: to the last token.

Per run: request throughput and output tokens per second over the run's duration (from its start to the last
request's last token), mean/p50/p90/p99 of each figure (a percentile from fewer samples than it needs is None:
inferbench.core.percentiles), and the objective (MLPerf's LLM server shape: TTFT and TPOT bounds at one
percentile) judged on the run's percentiles; goodput is the rate of the requests that meet both bounds
themselves (vllm's per-request SLOs).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from inferbench.core.percentiles import PERCENTILES
from inferbench.core.stats import reported_percentiles

#: the percentiles every figure of a run reports (the objective's is added where it is another)
REPORTED = ("p50", "p90", "p99")
#: the figures of a request, each kept in milliseconds per request (ITL: per token arrival)
FIGURES = ("ttft", "tpot", "itl", "e2e")


@dataclass(frozen=True)
class Objective:
    """A run meets its objective when the ``percentile`` of its TTFTs is within ``ttft_ms`` and that of its
    TPOTs within ``tpot_ms`` (MLPerf's LLM server scenario: both at p99); a request is good when its own TTFT
    and TPOT are within them (vllm's goodput)."""

    ttft_ms: float
    tpot_ms: float
    percentile: str = "p99"

    def __post_init__(self) -> None:
        if self.percentile not in PERCENTILES:
            raise ValueError(f"an objective's percentile is one of {', '.join(PERCENTILES)}, not {self.percentile!r}")
        for name in ("ttft_ms", "tpot_ms"):
            value = getattr(self, name)
            if not (isinstance(value, int | float) and value > 0 and np.isfinite(value)):
                raise ValueError(f"an objective's {name} is a positive number of milliseconds, not {value!r}")

    @classmethod
    def from_dict(cls, values: dict[str, Any]) -> Objective:
        return cls(float(values["ttft_ms"]), float(values["tpot_ms"]), str(values.get("percentile", "p99")))

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    def text(self) -> str:
        """The objective in words, e.g. ``TTFT p99 ≤ 500 ms and TPOT p99 ≤ 50 ms``."""
        p = self.percentile
        return f"TTFT {p} ≤ {self.ttft_ms:g} ms and TPOT {p} ≤ {self.tpot_ms:g} ms"

    def good(self, ttft_ms: float, tpot_ms: float | None) -> bool:
        """Whether one request meets both bounds (a request of one token has no TPOT: its TTFT decides)."""
        return ttft_ms <= self.ttft_ms and (tpot_ms is None or tpot_ms <= self.tpot_ms)


@dataclass
class RequestTrace:
    """One request as the driver saw it: when it counts from (``sent_s``), the tokens it asked for, and each
    arrival of tokens (host time, tokens made so far) until it finished."""

    request_id: str
    sent_s: float
    max_tokens: int
    events: list[tuple[float, int]] = field(default_factory=list)
    finished_s: float | None = None

    def observe(self, at_s: float, made: int, finished: bool) -> None:
        """The engine says the request has made ``made`` tokens by ``at_s`` (and whether it is done). A count
        that did not grow is no arrival; a count that fell is the engine's error."""
        last = self.events[-1][1] if self.events else 0
        if made < last:
            raise ValueError(f"request {self.request_id}: the engine said {made} tokens after saying {last}")
        if made > last:
            self.events.append((at_s, made))
        if finished and self.finished_s is None:
            self.finished_s = at_s

    @property
    def output_tokens(self) -> int:
        return self.events[-1][1] if self.events else 0

    def figures_s(self) -> dict[str, Any]:
        """TTFT, TPOT (None for one token) and e2e in seconds, the ITLs, and the output tokens."""
        if self.finished_s is None or not self.events:
            raise ValueError(f"request {self.request_id} has not finished with a token: it has no figures")
        first = self.events[0][0]
        ttft, e2e = first - self.sent_s, self.finished_s - self.sent_s
        tokens = self.output_tokens
        return {
            "ttft": ttft,
            "tpot": (e2e - ttft) / (tokens - 1) if tokens > 1 else None,
            "e2e": e2e,
            "itl": [b[0] - a[0] for a, b in zip(self.events, self.events[1:], strict=False)],
            "output_tokens": tokens,
        }


def figure_summary(values_ms: Sequence[float] | np.ndarray, names: Iterable[str] = REPORTED) -> dict[str, Any]:
    """Mean and the named percentiles (ms) of one figure's samples; a percentile from too few samples is None."""
    values = np.asarray(values_ms, dtype=np.float64)
    if values.size == 0:
        return {"mean": None, **dict.fromkeys(names), "n": 0}
    return {"mean": float(values.mean()), **reported_percentiles(values, names), "n": int(values.size)}


def percentile_names(objective: Objective) -> list[str]:
    """The percentiles a run reports: REPORTED and the objective's, in increasing order."""
    return [name for name in PERCENTILES if name in {*REPORTED, objective.percentile}]


def run_figures(
    samples_ms: Mapping[str, Sequence[float]],
    duration_s: float,
    output_tokens: int,
    good_requests: int,
    objective: Objective,
) -> dict[str, Any]:
    """A run's figures from its samples (ms: ``ttft``, ``tpot``, ``e2e`` per request, ``itl`` per token
    arrival), its duration, the tokens its requests made and how many of them met both bounds."""
    if duration_s <= 0:
        raise ValueError(f"a run lasts a positive time, not {duration_s} s")
    requests = len(samples_ms["e2e"])
    names = percentile_names(objective)
    summaries = {f"{name}_ms": figure_summary(samples_ms[name], names) for name in FIGURES}
    level = objective.percentile
    ttft, tpot = summaries["ttft_ms"][level], summaries["tpot_ms"][level]
    # None: too few requests for the objective's percentile, which is then not judged
    met = None if ttft is None or tpot is None else bool(ttft <= objective.ttft_ms and tpot <= objective.tpot_ms)
    return {
        "requests": requests,
        "duration_s": duration_s,
        "request_per_s": requests / duration_s,
        "output_tokens": output_tokens,
        "output_tokens_per_s": output_tokens / duration_s,
        **summaries,
        "good_requests": good_requests,
        "goodput_per_s": good_requests / duration_s,
        "good_share": good_requests / requests if requests else None,
        "objective_met": met,
        # requests in flight on average (Little's law: their summed time over the run's)
        "mean_in_flight": float(np.sum(samples_ms["e2e"])) / 1e3 / duration_s,
    }


def _request_samples(traces: Sequence[RequestTrace], objective: Objective) -> tuple[dict[str, list[float]], int, int]:
    """The requests' samples (ms: ``ttft``, ``tpot``, ``e2e`` per request, ``itl`` per token arrival), how many
    met both bounds, and the tokens they made."""
    per_request = [trace.figures_s() for trace in traces]
    samples = {
        "ttft": [f["ttft"] * 1e3 for f in per_request],
        "tpot": [f["tpot"] * 1e3 for f in per_request if f["tpot"] is not None],
        "e2e": [f["e2e"] * 1e3 for f in per_request],
        "itl": [itl * 1e3 for f in per_request for itl in f["itl"]],
    }
    good = sum(objective.good(f["ttft"] * 1e3, None if f["tpot"] is None else f["tpot"] * 1e3) for f in per_request)
    return samples, int(good), sum(f["output_tokens"] for f in per_request)


def _kept(traces: Sequence[RequestTrace], samples: dict[str, list[float]]) -> dict[str, Any]:
    short = sum(trace.output_tokens < trace.max_tokens for trace in traces)
    # every sample, rounded to 0.1 µs: what pooling the processes' runs reads back
    rounded = {name: [round(v, 4) for v in values] for name, values in samples.items()}
    return {"short_requests": int(short), "samples_ms": rounded}


def traces_figures(traces: Sequence[RequestTrace], started_s: float, objective: Objective) -> dict[str, Any]:
    """A run's figures from its requests' traces (every one finished), with the samples kept
    (``samples_ms``) so that the runs of several processes can be pooled (``pooled_run``)."""
    if not traces:
        raise ValueError("a run without requests has no figures")
    samples, good, tokens = _request_samples(traces, objective)
    ended = max(trace.finished_s for trace in traces if trace.finished_s is not None)
    return run_figures(samples, ended - started_s, tokens, good, objective) | _kept(traces, samples)


def window_figures(
    traces: Sequence[RequestTrace], started_s: float, window_s: tuple[float, float], objective: Objective
) -> dict[str, Any]:
    """A load's figures over its steady window (``window_s``: from and to, seconds after the run's start),
    the load running before it (a ramp) and after it (until its requests finish): the requests that arrived
    in the window, each timed to its end (TTFT, TPOT, ITL, e2e, goodput); the requests served (finished) and
    the tokens made within the window, per second of it (``request_per_s``, ``output_tokens_per_s``); the
    rate that arrived in it (``arrived_per_s``) and how far apart its first and last arrival were."""
    begin, end = started_s + window_s[0], started_s + window_s[1]
    duration = window_s[1] - window_s[0]
    if duration <= 0:
        raise ValueError(f"a steady window lasts a positive time, not {duration} s")
    counted = [trace for trace in traces if begin <= trace.sent_s < end]  # none: a burst before it (INVALID)
    samples, good, _ = _request_samples(counted, objective)
    served = sum(trace.finished_s is not None and begin <= trace.finished_s < end for trace in traces)
    tokens = 0
    for trace in traces:  # the tokens made within the window, by every request running in it
        previous = 0
        for at_s, made in trace.events:
            tokens += made - previous if begin <= at_s < end else 0
            previous = made
    figures = run_figures(samples, duration, tokens, good, objective)
    arrivals = [trace.sent_s for trace in counted] or [0.0]
    return (
        figures
        | _kept(counted, samples)
        | {
            "arrived_per_s": len(counted) / duration,
            "served_requests": int(served),
            "request_per_s": served / duration,
            "arrival_span_s": max(arrivals) - min(arrivals),
            "window_s": duration,
            # every token of the run, ramps and drain too: what the GPU's energy over the run is divided by
            "run_output_tokens": sum(trace.output_tokens for trace in traces),
        }
    )


def energy_figures(joules: float | None, step: dict[str, Any]) -> dict[str, float] | None:
    """The GPU's energy over a load's steady window (``joules``) and what it puts on each output token made and
    each request served in the window, and the mean power; None where no energy was read."""
    if joules is None or not step.get("window_s"):
        return None
    tokens, served = step.get("output_tokens") or 0, step.get("served_requests") or 0
    return {
        "joules": joules,
        "mean_power_w": joules / step["window_s"],
        "per_output_token_mj": 1e3 * joules / tokens if tokens else None,
        "per_request_j": joules / served if served else None,
    }


def load_verdict(step: dict[str, Any], min_requests: int, tolerance: float) -> dict[str, Any]:
    """VALID or INVALID, MLPerf's way, with every constraint a load failed: at least ``min_requests`` in its
    steady window; at a rate, arrivals spread over the window (within ``tolerance`` of its length: a burst is
    no rate) and requests served within ``tolerance`` of those that arrived (a load the engine cannot keep up
    with queues, and its rate is no steady one). The objective is judged on a VALID load only: ``met``."""
    failed = []
    if step["requests"] < min_requests:
        failed.append(f"requests: {step['requests']} in the steady window, fewer than {min_requests}")
    window = step.get("window_s")
    if window is not None:
        if step["arrival_span_s"] < (1 - tolerance) * window:
            failed.append(f"duration: arrivals spread over {step['arrival_span_s']:.3g} s of the {window:.3g}-s window")
        arrived, served = step["arrived_per_s"], step["request_per_s"]
        if arrived and abs(served - arrived) > tolerance * arrived:
            failed.append(
                f"served: {served:.3g} requests/s against {arrived:.3g}/s arrived, beyond ±{100 * tolerance:g}%"
            )
    return judged(step, not failed, failed)


def judged(step: dict[str, Any], valid: bool, failed: list[str]) -> dict[str, Any]:
    """A load's verdict: ``valid``, the constraints it ``failed`` (the objective's too, judged on its
    percentiles), and ``met``: VALID and within the objective."""
    met = step.get("objective_met")
    kept = [f for f in failed if not f.startswith("objective:")]
    if met is not True:
        kept.append("objective: " + ("too few requests to judge its percentile" if met is None else "a bound missed"))
    return {"valid": valid, "met": valid and met is True, "failed": kept}


def pooled_failures(by_process: Sequence[Sequence[str]]) -> list[str]:
    """The constraints a load failed in any of its processes, once each (named by the text before its colon):
    the first process's words for it, and in how many of the processes it failed where there were several."""
    first: dict[str, str] = {}
    count: dict[str, int] = {}
    for failed in by_process:
        for text in failed:
            name = text.split(":", 1)[0]
            first.setdefault(name, text)
            count[name] = count.get(name, 0) + 1
    processes = len(by_process)
    return [text + (f" (in {count[name]} of {processes} processes)" if processes > 1 else "")
            for name, text in first.items()]  # fmt: skip


def spread_pct(values: Sequence[float | None]) -> float | None:
    """(max - min) / median of the values, in percent (inferbench.launch.processes: the spread between a
    cell's processes); None with fewer than two values."""
    present = [v for v in values if v is not None]
    if len(present) < 2:
        return None
    median = float(np.median(present))
    return 100.0 * (max(present) - min(present)) / median if median > 0 else None


def pooled_run(runs: Sequence[dict[str, Any]], objective: Objective) -> dict[str, Any]:
    """One step of a sweep from the same step of every process: percentiles from the pooled samples, rates
    over the summed durations (as if the processes' runs were one), each process's own rates kept beside
    (``by_process``) with their spread. The offered rate: the processes' mean (each sets its own, from its
    own capacity)."""
    if not runs:
        raise ValueError("no runs to pool")
    samples = {name: [v for run in runs for v in run["samples_ms"][name]] for name in FIGURES}
    pooled = run_figures(
        samples,
        sum(run["duration_s"] for run in runs),
        sum(run["output_tokens"] for run in runs),
        sum(run["good_requests"] for run in runs),
        objective,
    )
    by_process = {
        name: [run[name] for run in runs]
        for name in ("request_per_s", "output_tokens_per_s", "goodput_per_s", "offered_per_s")
        if all(name in run for run in runs)
    }
    offered = by_process.get("offered_per_s") or []
    by_process |= {
        f"{name}_{level}": [run[f"{name}_ms"][level] for run in runs] for name in ("ttft", "tpot") for level in
        percentile_names(objective)
    }  # fmt: skip
    spread = {name: spread_pct(values) for name, values in by_process.items()}
    extra: dict[str, Any] = {key: runs[0][key] for key in ("load", "concurrency") if key in runs[0]}
    if all("served_requests" in run for run in runs):  # steady windows: served and arrived over their summed time
        windows = sum(run["window_s"] for run in runs)
        pooled |= {
            "request_per_s": sum(run["served_requests"] for run in runs) / windows,
            "arrived_per_s": pooled["requests"] / windows,
            "served_requests": sum(run["served_requests"] for run in runs),
            "arrival_span_s": min(run["arrival_span_s"] for run in runs),
            "window_s": windows,
            # each process's own verdict: a load is VALID only where every process's was
            "valid": all(run.get("valid", True) for run in runs),
            "failed": pooled_failures([run.get("failed", []) for run in runs]),
        }
        energies = [run.get("energy") for run in runs]
        pooled["energy"] = (
            energy_figures(sum(e["joules"] for e in energies), pooled)  # type: ignore[index]
            if all(e is not None for e in energies)
            else None
        )
    return {
        **extra,
        "offered_per_s": float(np.mean(offered)) if offered and None not in offered else None,
        **pooled,
        "short_requests": sum(run.get("short_requests", 0) for run in runs),
        "samples_ms": samples,
        "processes": len(runs),
        "by_process": by_process,
        "spread_pct": spread,
    }


def sweep_answer(steps: Sequence[dict[str, Any]]) -> tuple[int | None, int | None]:
    """The index of the heaviest load up to which every step met the objective (None: not even the
    lightest), and of the first step that did not (None: every one did). A step whose percentile could not
    be judged (too few requests) ends the run of steps that met it, as a failing one does."""
    answer = None
    for index, step in enumerate(steps):
        if step.get("met", step.get("objective_met")) is not True:
            return answer, index
        answer = index
    return answer, None
