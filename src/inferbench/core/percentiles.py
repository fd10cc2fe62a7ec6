"""Which latency percentiles a study reports, and how many timed calls each one needs.

A tail percentile from too few samples is noise: p90, p95 and p99 are reported only from at least
10, 20 and 100 calls (the spirit of MLPerf's minimum query counts). A study names the percentiles
its report section shows (``percentiles``, else those of its layout), and the grid gives each cell
enough calls for the highest one of any study it belongs to. Light: imports nothing.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

PERCENTILES = {"p50": 50.0, "p90": 90.0, "p95": 95.0, "p99": 99.0}
MIN_SAMPLES = {"p50": 1, "p90": 10, "p95": 20, "p99": 100}
#: the percentiles each report layout shows when a study names none
LAYOUT_PERCENTILES = {
    "by_batch": ["p50"],
    "engines": ["p50", "p95", "p99"],
    "seq": ["p50", "p90", "p99"],
    "training": ["p50"],
    "serving": ["p50", "p99"],  # LoadGen's own, over its queries (inferbench.scenarios.serving)
}


def study_percentiles(study: dict[str, Any]) -> list[str]:
    """The percentiles a study reports: its own list, else its layout's."""
    return list(study.get("percentiles") or LAYOUT_PERCENTILES[study.get("layout", "engines")])


def samples_needed(percentiles: Iterable[str]) -> int:
    """Timed calls the highest of ``percentiles`` needs."""
    return max((MIN_SAMPLES[p] for p in percentiles), default=1)
