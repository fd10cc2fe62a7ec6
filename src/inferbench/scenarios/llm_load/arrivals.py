"""The requests an LLM serving run sends: when each arrives, how long its prompt is, how many tokens it asks
for, seeded so that a run repeats (inferbench.scenarios.llm_load sends them).

Arrivals follow ``vllm bench serve``: the gaps between requests are drawn from a gamma distribution of shape
``burstiness`` and scale ``1 / (rate * burstiness)``, so that their mean is ``1 / rate`` at any burstiness;
burstiness 1 is the exponential distribution (Poisson arrivals), below 1 the requests come in bursts, above 1
more evenly. The first request is sent at once (offset 0), as vllm sends its first.

Lengths follow vllm's random dataset: uniform integers within ``mean * (1 - range_ratio)`` and
``mean * (1 + range_ratio)`` (both ends included), a range ratio of 0 giving every request the mean. Prompt
token ids are uniform over the vocabulary. Light: numpy only.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from inferbench.core.percentiles import MIN_SAMPLES
from inferbench.scenarios.llm_load.metrics import Objective

#: the fewest output tokens a request asks for: its time per output token needs a second token
MIN_OUTPUT_TOKENS = 2


@dataclass(frozen=True)
class PlannedRequest:
    """One request of a run: its id, when it is sent (seconds from the run's start; None where it is sent
    when an earlier one finishes, at a fixed concurrency), its prompt's token ids, the tokens it asks for."""

    request_id: str
    arrival_s: float | None
    prompt: tuple[int, ...]
    max_tokens: int


#: standard deviations of the arrival count a steady window's expected arrivals exceed ``requests`` by
WINDOW_MARGIN_SD = 3.0


def arrival_offsets(count: int, rate: float, burstiness: float, rng: np.random.Generator) -> np.ndarray:
    """When each of ``count`` requests is sent, in seconds from the first (which is sent at 0): gamma gaps of
    shape ``burstiness`` and mean ``1 / rate``."""
    if count < 1:
        raise ValueError(f"a run sends at least one request, not {count}")
    if not (rate > 0 and math.isfinite(rate)):
        raise ValueError(f"a request rate must be a positive finite number of requests per second, not {rate}")
    if not (burstiness > 0 and math.isfinite(burstiness)):
        raise ValueError(f"burstiness (the gamma shape of the gaps) must be positive, not {burstiness}")
    gaps = rng.gamma(shape=burstiness, scale=1.0 / (rate * burstiness), size=count - 1)
    return np.concatenate(([0.0], np.cumsum(gaps)))


def length_bounds(mean: int, range_ratio: float, least: int = 1) -> tuple[int, int]:
    """The shortest and longest length of requests whose lengths spread ``range_ratio`` around ``mean``
    (vllm's random dataset: ``int(mean * (1 - r))`` to ``int(mean * (1 + r))``), never below ``least``."""
    if not 0 <= range_ratio < 1:
        raise ValueError(f"a range ratio lies in [0, 1), not {range_ratio}")
    low, high = int(mean * (1 - range_ratio)), int(mean * (1 + range_ratio))
    return max(least, low), max(least, high)


def request_lengths(count: int, mean: int, range_ratio: float, rng: np.random.Generator, least: int = 1) -> np.ndarray:
    """``count`` lengths, uniform integers within ``length_bounds`` (all ``mean`` at range ratio 0)."""
    low, high = length_bounds(mean, range_ratio, least)
    return rng.integers(low, high + 1, size=count)


def plan_requests(
    count: int,
    *,
    rate: float | None,
    burstiness: float,
    prompt_tokens: int,
    prompt_range: float,
    output_tokens: int,
    output_range: float,
    vocab: int,
    seed: int,
    prefix: str = "r",
) -> list[PlannedRequest]:
    """``count`` seeded requests: sent at ``rate`` requests per second with gamma gaps of shape
    ``burstiness`` (``rate`` None: each is sent when a slot frees, at a fixed concurrency), prompts of
    ``prompt_tokens`` spread by ``prompt_range``, outputs of ``output_tokens`` spread by ``output_range`` (at
    least MIN_OUTPUT_TOKENS). The same arguments give the same requests: every process of a cell, and every
    engine, is sent the same ones."""
    if vocab < 1:
        raise ValueError(f"prompt tokens are drawn from a vocabulary of at least one token, not {vocab}")
    rng = np.random.default_rng(seed)
    # drawn in a fixed order, each from the same generator, so that one setting's change leaves the others' draws
    # as they were only where it comes after them: lengths first, then arrivals, then the tokens
    prompts = request_lengths(count, prompt_tokens, prompt_range, rng)
    outputs = request_lengths(count, output_tokens, output_range, rng, least=MIN_OUTPUT_TOKENS)
    arrivals = arrival_offsets(count, rate, burstiness, rng) if rate is not None else [None] * count
    width = len(str(count - 1))
    return [
        PlannedRequest(
            f"{prefix}{index:0{width}d}",
            None if arrival is None else float(arrival),
            tuple(int(t) for t in rng.integers(0, vocab, size=int(length))),
            int(out),
        )
        for index, (arrival, length, out) in enumerate(zip(arrivals, prompts, outputs, strict=True))
    ]


#: the lightest and heaviest load, as shares of the capacity, a sweep may offer
MIN_SHARE, MAX_SHARE = 0.05, 4.0
#: the most requests a load's window asks for (the schema's maximum of llm_load.requests too)
MAX_REQUESTS = 100_000
#: how a run's requests arrive: at a rate with gamma gaps (poisson: shape 1; gamma: shape ``burstiness``), or
#: each when an earlier one finishes, at a fixed number in flight (concurrency)
ARRIVALS = ("poisson", "gamma", "concurrency")


@dataclass(frozen=True)
class LoadSettings:
    """How an llm_load cell sends its requests (config ``llm_load``, a study's ``llm_load`` over it; their
    keys, defaults and meaning are the config schema's): the arrival process, the loads of the sweep (shares
    of the cell's measured capacity, or concurrencies), the requests per load, how far prompt and output
    lengths spread around the cell's prompt length and its engine's ``new_tokens``, the seed and the
    objective."""

    arrivals: str
    burstiness: float
    load_shares: tuple[float, ...]
    concurrencies: tuple[int, ...]
    requests: int
    prompt_range: float
    output_range: float
    seed: int
    objective: Objective
    steady_s: float = 30.0
    ramp_s: float = 5.0
    served_tolerance: float = 0.1
    search_steps: int = 3
    #: the capacity whose shares the sweep offers, where given (else the cell's own, measured first)
    capacity_per_s: float | None = None

    def __post_init__(self) -> None:
        if self.arrivals not in ARRIVALS:
            raise ValueError(f"llm_load.arrivals is {self.arrivals!r}; allowed: {', '.join(ARRIVALS)}")
        if self.arrivals == "poisson" and self.burstiness != 1:
            raise ValueError(
                f"llm_load.burstiness is {self.burstiness:g} with arrivals poisson, whose gaps are exponential "
                "(burstiness 1); set arrivals: gamma for another shape"
            )
        loads = self.concurrencies if self.by_concurrency else self.load_shares
        key = "concurrencies" if self.by_concurrency else "load_shares"
        if not loads or list(loads) != sorted(set(loads)) or min(loads) <= 0:
            raise ValueError(f"llm_load.{key} is {list(loads)}: positive values, each once, from light to heavy")
        if not 1 <= self.requests <= MAX_REQUESTS:
            raise ValueError(
                f"llm_load.requests is {self.requests}: a load sends from 1 to {MAX_REQUESTS:,} requests (MLPerf's "
                "LLM server runs about 24,000 queries; a load of more runs for hours)"
            )
        if not self.by_concurrency and not MIN_SHARE <= min(loads) <= max(loads) <= MAX_SHARE:
            raise ValueError(
                f"llm_load.load_shares is {list(loads)}: shares of the capacity from {MIN_SHARE:g} (lighter loads "
                f"last hours for their requests) to {MAX_SHARE:g} (heavier ones only fill the queue)"
            )
        if self.capacity_per_s is not None and not self.capacity_per_s > 0:
            raise ValueError(f"llm_load.capacity_per_s is {self.capacity_per_s:g}: a positive rate, or null")
        if not (self.steady_s > 0 and self.ramp_s >= 0 and 0 < self.served_tolerance < 1 and self.search_steps >= 0):
            raise ValueError(
                f"llm_load: steady_s {self.steady_s:g} must be positive, ramp_s {self.ramp_s:g} at least 0, served_"
                f"tolerance {self.served_tolerance:g} between 0 and 1, search_steps {self.search_steps} at least 0"
            )

    def window_s(self, rate: float) -> float:
        """How long a load at ``rate`` requests/s is judged: its steady window, at least ``steady_s`` and long
        enough that ``requests`` arrivals land in it but for about one chance in a thousand, so that no load is
        INVALID for chance alone (docs/generation.md, "A process's sweep"): its expected arrivals are
        ``requests`` plus ``WINDOW_MARGIN_SD`` standard deviations of their count (a renewal process with gamma
        gaps of shape k counts with variance mean / k; Poisson: k = 1)."""
        sd = math.sqrt(self.requests / self.burstiness)
        return max(self.steady_s, (self.requests + WINDOW_MARGIN_SD * sd) / rate)

    def planned_count(self, rate: float) -> int:
        """The requests a load at ``rate`` sends: a ramp, its steady window and as long again as the ramp
        after it, so that the window's last requests finish under the same load."""
        return math.ceil(rate * (2 * self.ramp_s + self.window_s(rate))) + 1

    def load_seed(self, index: int) -> int:
        """The seed of the sweep's ``index``-th load (0: the lightest): each load draws requests of its own."""
        return self.seed + 1 + index

    @property
    def by_concurrency(self) -> bool:
        return self.arrivals == "concurrency"

    @property
    def loads(self) -> tuple[float, ...] | tuple[int, ...]:
        """The sweep's loads, light to heavy: shares of the capacity, or concurrencies."""
        return self.concurrencies if self.by_concurrency else self.load_shares

    @classmethod
    def from_dict(cls, values: dict[str, Any]) -> LoadSettings:
        """The settings from a cell's resolved ``llm_load`` (missing keys at the schema's defaults)."""
        from inferbench.core.settings import schema_defaults

        defaults = dict(schema_defaults("llm_load"))
        unknown = sorted(set(values) - set(defaults))
        if unknown:
            raise ValueError(f"unknown llm_load settings {unknown}; known: {', '.join(defaults)}")
        merged = {**defaults, **values}
        objective = {**dict(schema_defaults("llm_load", "objective")), **(merged.get("objective") or {})}
        return cls(
            arrivals=str(merged["arrivals"]),
            burstiness=float(merged["burstiness"]),
            load_shares=tuple(float(v) for v in merged["load_shares"]),
            concurrencies=tuple(int(v) for v in merged["concurrencies"]),
            requests=int(merged["requests"]),
            prompt_range=float(merged["prompt_range"]),
            output_range=float(merged["output_range"]),
            seed=int(merged["seed"]),
            objective=Objective.from_dict(objective),
            steady_s=float(merged["steady_s"]),
            ramp_s=float(merged["ramp_s"]),
            served_tolerance=float(merged["served_tolerance"]),
            search_steps=int(merged["search_steps"]),
            capacity_per_s=None if merged["capacity_per_s"] is None else float(merged["capacity_per_s"]),
        )

    def plan(
        self,
        count: int,
        *,
        rate: float | None,
        seed: int,
        prompt_tokens: int,
        output_tokens: int,
        vocab: int,
        prefix: str = "r",
    ) -> list[PlannedRequest]:
        """``count`` requests as these settings send them (``plan_requests``: their burstiness, their spread of
        prompt and output lengths around ``prompt_tokens`` and ``output_tokens``)."""
        return plan_requests(
            count, rate=rate, burstiness=self.burstiness, prompt_tokens=prompt_tokens, prompt_range=self.prompt_range,
            output_tokens=output_tokens, output_range=self.output_range, vocab=vocab, seed=seed, prefix=prefix,
        )  # fmt: skip

    @staticmethod
    def longest_request(prompt: int, new_tokens: int, prompt_range: float, output_range: float) -> tuple[int, int]:
        """The prompt and output of the longest request a cell of ``prompt`` tokens and ``new_tokens`` sends with
        these ranges: what the model's positions must hold."""
        return length_bounds(prompt, prompt_range)[1], length_bounds(new_tokens, output_range, MIN_OUTPUT_TOKENS)[1]

    def problems(self) -> list[str]:
        """What the config check refuses of settings that construct (their key first): requests too few for the
        objective's percentile."""
        needed = MIN_SAMPLES[self.objective.percentile]
        if self.requests >= needed:
            return []
        return [
            f"requests: {self.requests} requests per load are too few for the objective's "
            f"{self.objective.percentile}, which needs {needed}; send at least {needed}, or judge the "
            "objective at a lower percentile (objective.percentile)"
        ]

    def as_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["load_shares"], out["concurrencies"] = list(self.load_shares), list(self.concurrencies)
        return out
