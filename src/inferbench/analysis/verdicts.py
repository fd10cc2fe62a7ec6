"""One verdict rule for every claim that one cell is faster than another, wherever it is made: the
headline, the decisions, the study sections and ``inferbench compare`` all call ``claim``.

A claim is made at the pair's common boundary (inferbench.analysis.comparison: the device boundary
when both ran on one device and timed there, else end to end) and names it. Where both cells also have
the other boundary, the claim carries it too, and where the two point different ways (one cell faster
on the device, the other end to end) it says so rather than picking one, and is not significant. It is
significant only when its 95% interval excludes 1: the interval counts the spread between fresh
processes, at least their class's, and the spread between leases where runs of other leases gave it
(inferbench.analysis.uncertainty, inferbench.analysis.leases).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from inferbench.analysis.comparison import BOUNDARY_LABELS, SpreadFloors, boundary_of, compare
from inferbench.analysis.uncertainty import Ratio

#: the boundary a device-boundary claim is checked against, and the other way
OTHER_BOUNDARY = {"device": "end_to_end", "end_to_end": "device"}


@dataclass(frozen=True)
class Claim:
    """p50 of the second cell over the first (> 1: the first is faster) at ``boundary``, with the same
    pair at the other boundary where both cells were timed there on one device."""

    boundary: str
    ratio: Ratio
    other: Ratio | None = None
    #: how many leases the interval rests on (1: this run's alone)
    leases: int = 1

    @property
    def value(self) -> float:
        return self.ratio.value

    @property
    def low(self) -> float | None:
        return self.ratio.low

    @property
    def high(self) -> float | None:
        return self.ratio.high

    @property
    def boundaries_disagree(self) -> bool:
        """The other boundary points the other way, beyond the noise (within it, its direction is noise)."""
        other = self.other
        if other is None or math.isclose(self.value, 1.0) or math.isclose(other.value, 1.0):
            return False
        return (self.value > 1) != (other.value > 1) and other.significant

    @property
    def significant(self) -> bool | None:
        """The interval excludes 1 and the other boundary does not point the other way; None where the
        spread between processes is unknown (a cell measured in one process)."""
        if not self.ratio.known:
            return None
        return self.ratio.significant and not self.boundaries_disagree

    @property
    def verdict(self) -> str:
        """How the claim holds, in words."""
        if self.boundaries_disagree:
            assert self.other is not None
            return (
                f"the boundaries disagree: {self.value:.3g}× at the {BOUNDARY_LABELS[self.boundary]}, "
                f"{self.other.value:.3g}× {BOUNDARY_LABELS[OTHER_BOUNDARY[self.boundary]]}"
            )
        if self.significant is None:
            return "spread between processes unknown: 1 process"
        holds = "significant" if self.significant else "within the spread between processes"
        return holds + (f" over {self.leases} leases" if self.leases > 1 else "")


def claim(faster: Any, slower: Any, floors: SpreadFloors | None = None, boundary: str | None = None) -> Claim | None:
    """The claim that ``faster`` is faster than ``slower`` (p50 of ``slower`` / p50 of ``faster``; below 1
    where it is not), at their common boundary unless ``boundary`` says another; None where either has no
    p50 there."""
    boundary = boundary or boundary_of([faster, slower])
    main = compare(faster, slower, boundary, floors)
    if main is None:
        return None
    other = None
    if boundary == "device":  # both timed on one device: end to end is comparable too
        other = compare(faster, slower, "end_to_end", floors)
    leases = floors.leases.leases if floors is not None and floors.leases is not None else 1
    return Claim(boundary, main, other, leases)


def claim_columns(result: Claim | None, prefix: str) -> dict[str, Any]:
    """A claim as table columns: ``<prefix>``, ``<prefix>_low``, ``<prefix>_high``, ``significant``,
    ``verdict``, ``boundary``."""
    if result is None:
        return {prefix: None, f"{prefix}_low": None, f"{prefix}_high": None, "significant": None,
                "verdict": "unknown"}  # fmt: skip
    return {
        prefix: result.value,
        f"{prefix}_low": result.low,
        f"{prefix}_high": result.high,
        "significant": result.significant,
        "verdict": result.verdict,
        "boundary": result.boundary,
    }
