"""The latency percentiles, and how many timed calls each one needs.

A tail percentile from too few samples is noise: p90, p95 and p99 are reported only from at least
10, 20 and 100 calls (the spirit of MLPerf's minimum query counts). A study names the percentiles
its report section shows (``percentiles``, else those of its layout: inferbench.catalog.layouts), and
the grid gives each cell enough calls for the highest one of any study it belongs to. Light: imports
nothing.
"""

from __future__ import annotations

from collections.abc import Iterable

PERCENTILES = {"p50": 50.0, "p90": 90.0, "p95": 95.0, "p99": 99.0}
MIN_SAMPLES = {"p50": 1, "p90": 10, "p95": 20, "p99": 100}


def samples_needed(percentiles: Iterable[str]) -> int:
    """Timed calls the highest of ``percentiles`` needs."""
    return max((MIN_SAMPLES[p] for p in percentiles), default=1)
