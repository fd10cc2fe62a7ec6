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

from collections.abc import Iterable, Sequence
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
    samples_ms: dict[str, Sequence[float]],
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


def traces_figures(traces: Sequence[RequestTrace], started_s: float, objective: Objective) -> dict[str, Any]:
    """A run's figures from its requests' traces (every one finished), with the samples kept
    (``samples_ms``) so that the runs of several processes can be pooled (``pooled_run``)."""
    if not traces:
        raise ValueError("a run without requests has no figures")
    per_request = [trace.figures_s() for trace in traces]
    samples = {
        "ttft": [f["ttft"] * 1e3 for f in per_request],
        "tpot": [f["tpot"] * 1e3 for f in per_request if f["tpot"] is not None],
        "e2e": [f["e2e"] * 1e3 for f in per_request],
        "itl": [itl * 1e3 for f in per_request for itl in f["itl"]],
    }
    good = sum(objective.good(f["ttft"] * 1e3, None if f["tpot"] is None else f["tpot"] * 1e3) for f in per_request)
    ended = max(trace.finished_s for trace in traces if trace.finished_s is not None)
    tokens = sum(f["output_tokens"] for f in per_request)
    figures = run_figures(samples, ended - started_s, tokens, good, objective)
    short = sum(trace.output_tokens < trace.max_tokens for trace in traces)
    # every sample, rounded to 0.1 µs: what pooling the processes' runs reads back
    rounded = {name: [round(v, 4) for v in values] for name, values in samples.items()}
    return figures | {"short_requests": int(short), "samples_ms": rounded}


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
    extra = {key: runs[0][key] for key in ("load", "concurrency") if key in runs[0]}
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
        if step.get("objective_met") is not True:
            return answer, index
        answer = index
    return answer, None
