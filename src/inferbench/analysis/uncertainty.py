"""How sure a ratio of two cells' p50s is, counting the spread between fresh processes.

One process's confidence interval says how well its calls pin down *its* p50; the next process of
the same cell can differ by more (on shared VMs a host-bound GPU cell moves 10-75%). So each fresh
process's p50 is one observation of the cell (inferbench.launch.processes measures every cell in several), and
a ratio A/B gets Welch's t-interval on log p50: the difference of the cells' mean log p50 ± t × its
standard error, t from the Welch-Satterthwaite degrees of freedom. A cell's spread is never taken as
smaller than the sampling error of one process's p50 (its within-process CI), so two processes that
happen to agree do not make a cell look exact.

Nor smaller than its class's: cells whose time follows the host's CPU (host-bound GPU cells, CPU
cells) share that CPU's drift, which on a shared VM changes from minute to minute (two runs of the
H100 default 15 minutes apart moved such cells by up to 40% while their own processes, seconds
apart, agreed within 1%). So each class (``SpreadFloor``: device-bound GPU, host-bound GPU, CPU)
pools the spread of all its cells measured in several processes, and a cell's spread is at least
that. Where runs of other leases were measured, the class's spread between leases is added to the
uncertainty of the cell's mean, whole: a lease shifts all of a run's processes together, so more
processes do not average it away (inferbench.analysis.leases); a claim is then about the next lease
too. With one process the spread is unknown: the ratio has no interval and is never called
significant. A difference is significant when its 95% interval excludes 1 (inferbench.analysis.verdicts
says so in one place).

Each rule is written once, over arrays of cells and pairs (``Spreads``, ``Ratios``, ``ratios``, ``p_values``):
``CellSpread``, ``Ratio`` and ``ratio`` are one entry of them, so that a comparison of 100,000 cells and one
claim in a report are judged by the same arithmetic.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Self

import numpy as np

Z95 = 1.959963984540054


def _unknown_as_nan(value: float | None) -> float:
    return math.nan if value is None else float(value)


def _nan_as_none(value: float) -> float | None:
    return None if math.isnan(value) else float(value)


class _Columns:
    """A dataclass of equal-length arrays, one entry per cell or pair, in its fields' order."""

    def _fields(self) -> tuple[np.ndarray, ...]:
        return tuple(getattr(self, f.name) for f in dataclasses.fields(self))  # type: ignore[arg-type]

    def take(self, positions: np.ndarray) -> Self:
        """The entries at ``positions`` (or where a mask of them is True)."""
        return type(self)(*(values[positions] for values in self._fields()))

    def where(self, mask: np.ndarray, other: Self) -> Self:
        """Each entry from ``self`` where ``mask`` is True, else from ``other``."""
        fields = zip(self._fields(), other._fields(), strict=True)
        return type(self)(*(np.where(mask, mine, theirs) for mine, theirs in fields))


@dataclass(frozen=True)
class Spreads(_Columns):
    """``CellSpread`` of many cells at once, one entry per cell in each array: the one implementation of a
    cell's spread, its class's floor and the spread between leases (``CellSpread`` is one entry of it).
    ``df`` is NaN where the degrees of freedom are the cell's own (n - 1); a cell with no p50 has n 0."""

    mean_log: np.ndarray
    sd_log: np.ndarray
    n: np.ndarray
    df: np.ndarray
    lease_sd_log: np.ndarray

    @classmethod
    def from_processes(cls, p50s: np.ndarray, ci_low: np.ndarray, ci_high: np.ndarray) -> Spreads:
        """From each cell's process p50s (ms; a row per cell, NaN past its last process) and the 95% CI of its
        pooled p50 (NaN: none), whose width times sqrt(n) (one process's) sets the floor of its spread. Only
        p50s above 0 and finite count."""
        p50s = np.asarray(p50s, dtype=float)
        ci_low, ci_high = np.asarray(ci_low, dtype=float), np.asarray(ci_high, dtype=float)
        with np.errstate(invalid="ignore", divide="ignore"):
            valid = np.isfinite(p50s) & (p50s > 0)
            logs = np.log(np.where(valid, p50s, 1.0))
            n = valid.sum(axis=1)
            # summed process by process (a cell has a few): the order a sum over one cell's list takes
            total, squares = np.zeros(len(p50s)), np.zeros(len(p50s))
            for column in range(p50s.shape[1]):
                total += np.where(valid[:, column], logs[:, column], 0.0)
            mean = total / n
            for column in range(p50s.shape[1]):
                squares += np.where(valid[:, column], (logs[:, column] - mean) ** 2, 0.0)
            sd = np.where(n > 1, np.sqrt(squares / (n - 1)), 0.0)
            one_process = np.log(ci_high / ci_low) / (2 * Z95) * np.sqrt(n)
            sd = np.where((ci_low > 0) & (ci_high >= ci_low) & (one_process > sd), one_process, sd)
        return cls(mean, sd, n, np.full(len(n), np.nan), np.zeros(len(n)))

    @classmethod
    def of(cls, spreads: Sequence[CellSpread]) -> Spreads:
        return cls(
            np.array([s.mean_log for s in spreads], dtype=float),
            np.array([s.sd_log for s in spreads], dtype=float),
            np.array([s.n for s in spreads], dtype=np.int64),
            np.array([_unknown_as_nan(s.df) for s in spreads], dtype=float),
            np.array([s.lease_sd_log for s in spreads], dtype=float),
        )

    def __len__(self) -> int:
        return len(self.n)

    def row(self, i: int) -> CellSpread | None:
        """One cell's spread; None where it has no p50."""
        return self.entry(i) if self.n[i] >= 1 else None

    def entry(self, i: int) -> CellSpread:
        return CellSpread(float(self.mean_log[i]), float(self.sd_log[i]), int(self.n[i]), _nan_as_none(self.df[i]),
                          float(self.lease_sd_log[i]))  # fmt: skip

    @property
    def known(self) -> np.ndarray:
        """Whether each cell's spread between processes is known: it was measured in several."""
        return self.n > 1

    def degrees(self) -> np.ndarray:
        return np.where(np.isnan(self.df), self.n - 1.0, self.df)

    def with_floor(self, sd_log: np.ndarray, df: np.ndarray) -> Spreads:
        """Each spread, or its class's (``sd_log``, ``df``; NaN: no floor) where that is larger, then with the
        class's degrees of freedom. A cell measured in one process stays unknown: nothing says it belongs
        with the class's cells (it may come from another run, or another machine)."""
        with np.errstate(invalid="ignore"):
            raised = (self.n >= 2) & (sd_log > self.sd_log)
        return Spreads(self.mean_log, np.where(raised, sd_log, self.sd_log), self.n, np.where(raised, df, self.df),
                       self.lease_sd_log)  # fmt: skip

    def with_lease(self, sd_log: np.ndarray) -> Spreads:
        """Each spread with how far its cell moves between leases (a known spread only: one process says
        nothing about the next one, let alone the next lease)."""
        with np.errstate(invalid="ignore"):
            kept = (sd_log <= 0) | (self.n < 2)
        return Spreads(self.mean_log, self.sd_log, self.n, self.df, np.where(kept, self.lease_sd_log, sd_log))

    def variance_of_mean(self) -> np.ndarray:
        """The variance of each mean log p50 as an estimate of the cell's in another lease: the spread
        between processes over their count, plus the spread between leases whole."""
        with np.errstate(invalid="ignore", divide="ignore"):
            return self.sd_log**2 / self.n + self.lease_sd_log**2


@dataclass(frozen=True)
class CellSpread:
    """A cell's p50 across its processes: the mean and standard deviation of log p50, their count,
    and the degrees of freedom of that standard deviation (n - 1, or its class's where it comes
    from there); and how far the whole run's p50 moves between leases (``lease_sd_log``: a shift all
    the run's processes share, which more processes do not average away). One entry of ``Spreads``,
    whose arithmetic every method here is."""

    mean_log: float
    sd_log: float
    n: int
    df: float | None = None
    lease_sd_log: float = 0.0

    def _spreads(self) -> Spreads:
        return Spreads.of([self])

    @property
    def known(self) -> bool:
        """Whether the spread between processes is known: the cell was measured in several."""
        return bool(self._spreads().known[0])

    def degrees(self) -> float:
        return float(self._spreads().degrees()[0])

    def with_floor(self, floor: SpreadFloor | None) -> CellSpread:
        """This spread, or its class's where that is larger (``Spreads.with_floor``)."""
        if floor is None:
            return self
        return self._spreads().with_floor(np.array([floor.sd_log]), np.array([floor.df])).entry(0)

    def with_lease(self, sd_log: float) -> CellSpread:
        """This spread with how far the cell moves between leases (``Spreads.with_lease``)."""
        return self._spreads().with_lease(np.array([sd_log], dtype=float)).entry(0)

    def variance_of_mean(self) -> float:
        """The variance of the mean log p50 as an estimate of the cell's in another lease
        (``Spreads.variance_of_mean``)."""
        return float(self._spreads().variance_of_mean()[0])

    @classmethod
    def from_processes(
        cls, p50s: Sequence[float], ci_low: float | None = None, ci_high: float | None = None
    ) -> CellSpread | None:
        """From each process's p50 (ms); ``ci_low``/``ci_high``: the 95% CI of the pooled p50, whose
        width (times sqrt(n): one process's) sets the floor of the spread (``Spreads.from_processes``)."""
        values = np.array([[_unknown_as_nan(v) for v in p50s]], dtype=float)
        low, high = np.array([_unknown_as_nan(ci_low)]), np.array([_unknown_as_nan(ci_high)])
        return Spreads.from_processes(values, low, high).row(0)


@dataclass(frozen=True)
class SpreadFloor:
    """The between-process spread pooled over a class of cells: sqrt(sum((n_i - 1) s_i^2) / sum(n_i - 1))."""

    sd_log: float
    df: float
    cells: int

    @classmethod
    def pooled(cls, spreads: Sequence[CellSpread]) -> SpreadFloor | None:
        return cls.of_arrays(Spreads.of(spreads))

    @classmethod
    def of_arrays(cls, spreads: Spreads) -> SpreadFloor | None:
        """Pooled over the cells of ``spreads`` measured in several processes; None where none was."""
        several = spreads.n > 1
        weights = spreads.n[several] - 1
        df = int(weights.sum())
        if not df:
            return None
        return cls(math.sqrt(float((weights * spreads.sd_log[several] ** 2).sum()) / df), float(df), int(several.sum()))

    @property
    def pct(self) -> float:
        """The spread as a percentage of the p50 (one standard deviation)."""
        return 100.0 * (math.exp(self.sd_log) - 1)


def p_values(value: np.ndarray, log_se: np.ndarray, df: np.ndarray) -> np.ndarray:
    """Two-sided: how often a ratio this far from 1 comes from the spread alone (below 0.05 exactly where
    the 95% interval excludes 1); NaN where the spread is unknown (``log_se`` or ``df`` NaN) or the ratio is
    not above 0."""
    from scipy import special  # imported where used: the workflow's DAG imports this module (2 s)

    with np.errstate(invalid="ignore", divide="ignore"):
        unknown = np.isnan(log_se) | np.isnan(df) | ~(value > 0)
        # Student's t tail as the ufunc (scipy.stats.t.sf is ~100-500 us a call)
        tail = 2 * special.stdtr(df, -np.abs(np.log(value)) / log_se)
        exact = np.where(value == 1, 1.0, 0.0)  # no spread at all: a ratio of 1 is all it can give
        return np.where(unknown, np.nan, np.where(log_se == 0, exact, tail))


@dataclass(frozen=True)
class Ratios(_Columns):
    """``Ratio`` of many pairs at once, one entry per pair in each array (NaN: unknown); ``n_a``, ``n_b``:
    each cell's count of processes."""

    value: np.ndarray
    low: np.ndarray
    high: np.ndarray
    n_a: np.ndarray
    n_b: np.ndarray
    log_se: np.ndarray
    df: np.ndarray

    @classmethod
    def of(cls, ratios: Sequence[Ratio]) -> Ratios:
        def column(name: str) -> np.ndarray:
            return np.array([_unknown_as_nan(getattr(r, name)) for r in ratios], dtype=float)

        processes = np.array([r.processes for r in ratios], dtype=np.int64).reshape(len(ratios), 2)
        return cls(column("value"), column("low"), column("high"), processes[:, 0], processes[:, 1], column("log_se"),
                   column("df"))  # fmt: skip

    def __len__(self) -> int:
        return len(self.value)

    def row(self, i: int) -> Ratio:
        processes = (int(self.n_a[i]), int(self.n_b[i]))
        low, high, log_se, df = (_nan_as_none(values[i]) for values in (self.low, self.high, self.log_se, self.df))
        return Ratio(float(self.value[i]), low, high, processes, log_se, df)

    @property
    def known(self) -> np.ndarray:
        return ~np.isnan(self.low) & ~np.isnan(self.high)

    @property
    def significant(self) -> np.ndarray:
        """Each interval excludes 1: the difference holds beyond the spread between processes."""
        return self.known & ((self.low > 1) | (self.high < 1))

    def p_values(self) -> np.ndarray:
        return p_values(self.value, self.log_se, self.df)


@dataclass(frozen=True)
class Ratio:
    """``value`` = p50 of B / p50 of A (A faster when > 1), with its 95% interval where it is known. One
    entry of ``Ratios``, whose rules its properties are."""

    value: float
    low: float | None = None
    high: float | None = None
    processes: tuple[int, int] = (1, 1)
    #: the standard error of log ``value`` the interval was made from (None where it is unknown)
    log_se: float | None = None
    #: its degrees of freedom (Welch-Satterthwaite; None where the spread is unknown)
    df: float | None = None

    @property
    def known(self) -> bool:
        return bool(Ratios.of([self]).known[0])

    @property
    def significant(self) -> bool:
        """The interval excludes 1: the difference holds beyond the spread between processes."""
        return bool(Ratios.of([self]).significant[0])

    @property
    def p_value(self) -> float | None:
        """Two-sided: how often a ratio this far from 1 comes from the spread alone (below 0.05 exactly
        where the 95% interval excludes 1); None where the spread is unknown (``p_values``)."""
        return _nan_as_none(float(Ratios.of([self]).p_values()[0]))


def ratios(a: Spreads, b: Spreads, value: np.ndarray | None = None, confidence: float = 0.95) -> Ratios:
    """B / A per pair (``a`` and ``b`` aligned, one entry per pair), with Welch's interval on log p50 where
    both spreads are known. ``value``: the point estimates to centre them on (e.g. the ratio of the pooled
    p50s shown beside it; NaN or not above 0: that pair's default), by default the ratio of the geometric
    means."""
    from scipy import special

    with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
        default = b.mean_log - a.mean_log
        if value is None:
            centre = default
        else:
            value = np.asarray(value, dtype=float)
            centre = np.where(value > 0, np.log(np.where(value > 0, value, 1.0)), default)
        known = a.known & b.known
        va, vb = a.variance_of_mean(), b.variance_of_mean()
        se = np.sqrt(va + vb)
        exact = se == 0  # no spread at all: the interval is the point
        df = np.where(exact, np.inf, (va + vb) ** 2 / (va**2 / a.degrees() + vb**2 / b.degrees()))
        # Student's t quantile as the ufunc (t.ppf's, ~3 us a call)
        half = np.where(exact, 0.0, special.stdtrit(df, 0.5 + confidence / 2) * se)
        low = np.where(known, np.exp(centre - half), np.nan)
        high = np.where(known, np.exp(centre + half), np.nan)
        return Ratios(np.exp(centre), low, high, a.n, b.n, np.where(known, se, np.nan), np.where(known, df, np.nan))


def ratio(a: CellSpread, b: CellSpread, value: float | None = None, confidence: float = 0.95) -> Ratio:
    """B / A with Welch's interval on log p50 (``ratios`` of one pair). ``value``: the point estimate to
    centre it on (e.g. the ratio of the pooled p50s shown beside it); by default the ratio of the geometric
    means."""
    given = None if value is None else np.array([value], dtype=float)
    return ratios(Spreads.of([a]), Spreads.of([b]), given, confidence).row(0)
