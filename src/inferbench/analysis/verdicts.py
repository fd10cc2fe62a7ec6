"""One verdict rule for every claim that one cell is faster than another, wherever it is made: the
headline, the decisions, the study sections and ``inferbench compare`` all call ``claim``, or ``claims`` for
many pairs at once: one implementation, over arrays (a ``Claim`` is one entry of ``Claims``).

A claim is made at the pair's common boundary (inferbench.analysis.comparison: the device boundary
when both ran on one device and timed there, else end to end) and names it. Where both cells also have
the other boundary, the claim carries it too, and where the two point different ways (one cell faster
on the device, the other end to end) it says so rather than picking one, and is not significant. It is
significant only when its 95% interval excludes 1: the interval counts the spread between fresh
processes, moderated by their class's, and what moves whole cells: between A/A twins of the run, and
between leases where runs of other leases gave it (inferbench.analysis.uncertainty,
inferbench.analysis.leases). A claim about a cell unstable between processes holds only where every pair
of the two cells' processes differs the same way. A claim about a cell timed only while other work held the
host's cores is not decided.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Any

import numpy as np

from inferbench.analysis.comparison import BOUNDARY_LABELS, CellTable, ClassSpreads, pair_boundaries, pair_ratios
from inferbench.analysis.uncertainty import Ratio, Ratios

#: why a claim about a cell every process of which met other work on the host is left undecided
CONTENDED = "other work held the host's cores while a cell was timed"
#: the boundary a device-boundary claim is checked against, and the other way
OTHER_BOUNDARY = {"device": "end_to_end", "end_to_end": "device"}


def _close_to_one(values: np.ndarray) -> np.ndarray:
    """``math.isclose(value, 1.0)`` per entry (relative tolerance 1e-9; never for NaN or infinity)."""
    with np.errstate(invalid="ignore"):
        near = np.abs(values - 1.0) <= 1e-9 * np.maximum(np.abs(values), 1.0)
        return (values == 1.0) | (np.isfinite(values) & near)


def _verdict(
    value: float,
    other: float,
    boundary: str,
    disagree: bool,
    significant: bool | None,
    leases: int,
    unstable: bool,
    contended: bool,
) -> str:
    """How one claim holds, in words."""
    if contended:
        return f"undecided: {CONTENDED}"
    if disagree:
        return (
            f"the boundaries disagree: {value:.3g}× at the {BOUNDARY_LABELS[boundary]}, "
            f"{other:.3g}× {BOUNDARY_LABELS[OTHER_BOUNDARY[boundary]]}"
        )
    if significant is None:
        return "spread between processes unknown: 1 process"
    if unstable:
        return "unstable: " + ("every pair of processes differs the same way" if significant else "processes overlap")
    holds = "significant" if significant else "within the spread between processes"
    return holds + (f" over {leases} leases" if leases > 1 else "")


@dataclass(frozen=True)
class Claims:
    """``Claim`` of many pairs at once, one entry per pair: the one implementation of the verdict rule
    (a ``Claim`` is one entry of it). ``present``: where a claim could be made (elsewhere ``claim`` is
    None); ``other``: the pair at the other boundary where ``has_other``."""

    boundary: np.ndarray
    ratio: Ratios
    other: Ratios
    present: np.ndarray
    has_other: np.ndarray
    leases: np.ndarray

    @classmethod
    def of(cls, claims: Sequence[Claim | None]) -> Claims:
        missing = Ratio(float("nan"))
        return cls(
            np.array([c.boundary if c is not None else None for c in claims], dtype=object),
            Ratios.of([c.ratio if c is not None else missing for c in claims]),
            Ratios.of([c.other if c is not None and c.other is not None else missing for c in claims]),
            np.array([c is not None for c in claims], dtype=bool),
            np.array([c is not None and c.other is not None for c in claims], dtype=bool),
            np.array([c.leases if c is not None else 1 for c in claims], dtype=np.int64),
        )

    def __len__(self) -> int:
        return len(self.present)

    def take(self, positions: np.ndarray) -> Claims:
        """The claims at ``positions`` (or where a mask of them is True)."""
        return Claims(self.boundary[positions], self.ratio.take(positions), self.other.take(positions),
                      self.present[positions], self.has_other[positions], self.leases[positions])  # fmt: skip

    def boundaries_disagree(self) -> np.ndarray:
        """The other boundary points the other way, beyond the noise (within it, its direction is noise)."""
        value, other = self.ratio.value, self.other.value
        with np.errstate(invalid="ignore"):
            opposite = (value > 1) != (other > 1)
        return self.has_other & ~_close_to_one(value) & ~_close_to_one(other) & opposite & self.other.significant

    def significant(self) -> np.ndarray:
        """Per claim (objects): its interval excludes 1 and the other boundary does not point the other way;
        None where the spread between processes is unknown (a cell measured in one process)."""
        holds = self.ratio.significant & ~self.boundaries_disagree()
        return np.where(self.ratio.known, holds, None).astype(object)

    def verdicts(self) -> list[str]:
        """How each claim holds, in words ("unknown" where none was made)."""
        disagree, significant = self.boundaries_disagree().tolist(), self.significant().tolist()
        entries = zip(self.present.tolist(), self.ratio.value.tolist(), self.other.value.tolist(),
                      self.boundary.tolist(), disagree, significant, self.leases.tolist(),
                      self.ratio.unstable.tolist(), self.ratio.contended.tolist(), strict=True)  # fmt: skip
        return [_verdict(*entry) if made else "unknown" for made, *entry in entries]

    def claim(self, i: int) -> Claim | None:
        """The ``i``-th claim, None where it could not be made."""
        if not self.present[i]:
            return None
        other = self.other.row(i) if self.has_other[i] else None
        return Claim(str(self.boundary[i]), self.ratio.row(i), other, int(self.leases[i]))

    def columns(self, prefix: str) -> dict[str, list[Any]]:
        """Every claim as table columns (``claim_columns``; None, and verdict "unknown", where none was made):
        the ratio, its interval, its range over the processes where a cell is unstable, and the verdict."""
        made = self.present

        def known(values: np.ndarray) -> list[float | None]:
            return [v if keep and v == v else None for v, keep in zip(values.tolist(), made.tolist(), strict=True)]

        return {
            prefix: known(self.ratio.value),
            f"{prefix}_low": known(self.ratio.low),
            f"{prefix}_high": known(self.ratio.high),
            f"{prefix}_range_low": known(self.ratio.range_low),
            f"{prefix}_range_high": known(self.ratio.range_high),
            f"{prefix}_contended": (made & self.ratio.contended).tolist(),
            "significant": np.where(made, self.significant(), None).tolist(),
            "verdict": self.verdicts(),
            "boundary": np.where(made, self.boundary, None).tolist(),
        }


def claims(faster: CellTable, slower: CellTable, boundary: str | np.ndarray | None = None) -> Claims:
    """The claim that each row of ``faster`` is faster than the same row of ``slower`` (the tables aligned,
    their spreads floored as the run's report judges: ``CellTable.floored``): p50 of ``slower`` / p50 of
    ``faster``, below 1 where it is not. At each pair's common boundary unless ``boundary`` says another
    (one for all, or per pair: None entries take the common one); at the device boundary, with the pair end
    to end too."""
    common = pair_boundaries(faster, slower)
    if boundary is None:
        boundaries = common
    elif isinstance(boundary, str):
        boundaries = np.full(len(common), boundary, dtype=object)
    else:
        boundaries = np.where(np.equal(boundary, None), common, boundary).astype(object)
    at_device = boundaries == "device"
    device, device_present = pair_ratios(faster, slower, "device")
    end_to_end, end_to_end_present = pair_ratios(faster, slower, "end_to_end")
    return Claims(
        boundaries,
        device.where(at_device, end_to_end),
        end_to_end,
        np.where(at_device, device_present, end_to_end_present),
        at_device & end_to_end_present,  # both timed on one device: end to end is comparable too
        np.full(len(common), faster.leases, dtype=np.int64),
    )


@dataclass(frozen=True)
class Claim:
    """p50 of the second cell over the first (> 1: the first is faster) at ``boundary``, with the same
    pair at the other boundary where both cells were timed there on one device. One entry of ``Claims``,
    whose rules its properties are."""

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

    @cached_property
    def _judged(self) -> tuple[bool, bool | None, str]:
        """This claim judged as an entry of ``Claims`` (once: a report asks each claim several times)."""
        one = Claims.of([self])
        return bool(one.boundaries_disagree()[0]), one.significant().tolist()[0], one.verdicts()[0]

    @property
    def boundaries_disagree(self) -> bool:
        """The other boundary points the other way, beyond the noise (within it, its direction is noise)."""
        return self._judged[0]

    @property
    def significant(self) -> bool | None:
        """The interval excludes 1 and the other boundary does not point the other way; None where the
        spread between processes is unknown (a cell measured in one process)."""
        return self._judged[1]

    @property
    def verdict(self) -> str:
        """How the claim holds, in words."""
        return self._judged[2]


def claim(faster: Any, slower: Any, classes: ClassSpreads | None = None, boundary: str | None = None) -> Claim | None:
    """The claim that ``faster`` is faster than ``slower`` (p50 of ``slower`` / p50 of ``faster``; below 1
    where it is not), at their common boundary unless ``boundary`` says another; None where either has no
    p50 there (``claims`` of one pair)."""
    table = CellTable.of([faster, slower]).moderated(classes)
    return claims(table.take(np.array([0])), table.take(np.array([1])), boundary).claim(0)


def claim_columns(result: Claim | None, prefix: str) -> dict[str, Any]:
    """A claim as table columns: ``<prefix>``, ``<prefix>_low``, ``<prefix>_high``, ``significant``,
    ``verdict``, ``boundary`` (not where there is no claim)."""
    columns = {name: values[0] for name, values in Claims.of([result]).columns(prefix).items()}
    return columns if result is not None else {name: v for name, v in columns.items() if name != "boundary"}
