"""How sure a ratio of two cells' p50s is, counting the spread between fresh processes.

One process's confidence interval says how well its calls pin down *its* p50; the next process of
the same cell can differ by more (on shared VMs a host-bound GPU cell moves 10-75%). So each fresh
process's p50 is one observation of the cell (inferbench.launch.processes measures every cell in several), and
a ratio A/B gets Welch's t-interval on log p50: the difference of the cells' figures ± t × its standard
error, t from the Welch-Satterthwaite degrees of freedom. A cell's figure is its fast mode's mean log p50
(inferbench.core.stats.fast_mode: a process that met its shared host slow throughout is left out of it), and
its variance is the spread over the count of those processes. A cell's spread is never taken as
smaller than the sampling error of one process's p50 (its within-process CI), so two processes that
happen to agree do not make a cell look exact.

Two processes give a spread with one degree of freedom: alone it cannot decide (t = 12.7). So each
cell's spread is moderated by its class's (``ClassSpread``: device-bound GPU, host-bound GPU, CPU), the
empirical-Bayes way limma judges experiments with few replicates: the class's cells give a prior
spread s0 with d0 degrees of freedom (``ClassSpread.fit``: the distribution of their variances), and a
cell with d = n - 1 of its own gets s^2 = (d0 s0^2 + d s_i^2) / (d0 + d) with d0 + d degrees of freedom.
One continuous rule: no cell jumps between its own spread and its class's. A cell whose processes
disagree far beyond its class (its variance beyond F(d, D)'s 95th percentile times the class's typical
variance) is not averaged away: it is ``unstable``, and a claim about it holds only where every pair of
processes differs the same way. Which processes make the spread, and when landing in several modes makes a
cell unstable, depends on whether the run's A/A twins measure its class (inferbench.analysis.comparison).

What moves a whole cell (all its processes together) is counted on top, whole, since more processes
do not average it away: how far cells move between leases where runs of other leases were measured
(inferbench.analysis.leases), and how far identical cells measured minutes apart in one run move
(``between_cells``: A/A twins of the run). With one process the spread is unknown: the ratio has no
interval and is never called significant. A difference is significant when its 95% interval excludes
1 (inferbench.analysis.verdicts says so in one place).

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

from inferbench.core.stats import fast_mode

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
    cell's spread, its moderation by its class's and what moves the whole cell (``CellSpread`` is one entry
    of it). ``df`` is NaN where the degrees of freedom are the cell's own (n - 1); a cell with no p50 has
    n 0; ``unstable``: its processes disagree far beyond its class (``moderated``); ``contended``: other work
    held the host's cores in every process it was timed in (inferbench.launch.processes.counted_processes),
    so that no claim about it is decided."""

    mean_log: np.ndarray
    sd_log: np.ndarray
    n: np.ndarray
    df: np.ndarray
    shift_sd_log: np.ndarray
    unstable: np.ndarray
    #: the lowest and highest process's log p50 (NaN: no p50): what an unstable cell is judged by
    min_log: np.ndarray
    max_log: np.ndarray
    contended: np.ndarray
    #: the processes measured; ``fast``: those in the cell's fast mode, whose mean log p50 ``mean_log`` is the
    #: cell's figure (inferbench.core.stats.fast_mode_p50) and whose count its variance divides by; ``n``: those
    #: whose spread ``sd_log`` is (the fast ones, or every one: ``from_processes``)
    processes: np.ndarray
    fast: np.ndarray

    @classmethod
    def from_processes(
        cls, p50s: np.ndarray, ci_low: np.ndarray, ci_high: np.ndarray, fast_only: bool = False
    ) -> Spreads:
        """From each cell's process p50s (ms; a row per cell, NaN past its last process) and the 95% CI of its
        pooled p50 (NaN: none), whose width times sqrt(n) (one process's) sets the floor of its spread. Only
        p50s above 0 and finite count. The figure is the mean log p50 of the processes in the cell's fast
        mode (inferbench.core.stats.fast_mode); the spread is theirs with ``fast_only`` (where A/A pairs of
        the run measure what that misses: inferbench.analysis.comparison.ClassSpreads), else every process's."""
        p50s = np.asarray(p50s, dtype=float)
        ci_low, ci_high = np.asarray(ci_low, dtype=float), np.asarray(ci_high, dtype=float)
        with np.errstate(invalid="ignore", divide="ignore"):
            every = np.isfinite(p50s) & (p50s > 0)
            fast = fast_mode(p50s)
            valid = fast if fast_only else every
            logs = np.log(np.where(every, p50s, 1.0))
            processes, fast_count, n = every.sum(axis=1), fast.sum(axis=1), valid.sum(axis=1)

            def mean_of(mask: np.ndarray, count: np.ndarray) -> np.ndarray:
                # summed process by process (a cell has a few): the order a sum over one cell's list takes
                total = np.zeros(len(p50s))
                for column in range(p50s.shape[1]):
                    total += np.where(mask[:, column], logs[:, column], 0.0)
                return total / count

            centre = mean_of(valid, n)
            squares = np.zeros(len(p50s))
            for column in range(p50s.shape[1]):
                squares += np.where(valid[:, column], (logs[:, column] - centre) ** 2, 0.0)
            mean = mean_of(fast, fast_count)
            sd = np.where(n > 1, np.sqrt(squares / (n - 1)), 0.0)
            one_process = np.log(ci_high / ci_low) / (2 * Z95) * np.sqrt(n)
            sd = np.where((ci_low > 0) & (ci_high >= ci_low) & (one_process > sd), one_process, sd)
        cells = len(n)
        with np.errstate(invalid="ignore"):
            low = np.where(n > 0, np.min(np.where(valid, logs, np.inf), axis=1), np.nan)
            high = np.where(n > 0, np.max(np.where(valid, logs, -np.inf), axis=1), np.nan)
        no = np.zeros(cells, dtype=bool)
        return cls(mean, sd, n, np.full(cells, np.nan), np.zeros(cells), no, low, high, no.copy(), processes,
                   fast_count)  # fmt: skip

    @classmethod
    def of(cls, spreads: Sequence[CellSpread]) -> Spreads:
        return cls(
            np.array([s.mean_log for s in spreads], dtype=float),
            np.array([s.sd_log for s in spreads], dtype=float),
            np.array([s.n for s in spreads], dtype=np.int64),
            np.array([_unknown_as_nan(s.df) for s in spreads], dtype=float),
            np.array([s.shift_sd_log for s in spreads], dtype=float),
            np.array([s.unstable for s in spreads], dtype=bool),
            np.array([s.min_log for s in spreads], dtype=float),
            np.array([s.max_log for s in spreads], dtype=float),
            np.array([s.contended for s in spreads], dtype=bool),
            np.array([s.processes if s.processes is not None else s.n for s in spreads], dtype=np.int64),
            np.array([s.fast if s.fast is not None else s.n for s in spreads], dtype=np.int64),
        )

    def __len__(self) -> int:
        return len(self.n)

    def row(self, i: int) -> CellSpread | None:
        """One cell's spread; None where it has no p50."""
        return self.entry(i) if self.n[i] >= 1 else None

    def entry(self, i: int) -> CellSpread:
        return CellSpread(float(self.mean_log[i]), float(self.sd_log[i]), int(self.n[i]), _nan_as_none(self.df[i]),
                          float(self.shift_sd_log[i]), bool(self.unstable[i]), float(self.min_log[i]),
                          float(self.max_log[i]), bool(self.contended[i]), int(self.processes[i]),
                          int(self.fast[i]))  # fmt: skip

    @property
    def known(self) -> np.ndarray:
        """Whether each cell's spread between processes is known: measured in several, or its class's spread
        stands for it (``moderated``: one of several processes in the fast mode)."""
        return (self.n > 1) | ~np.isnan(self.df)

    def degrees(self) -> np.ndarray:
        return np.where(np.isnan(self.df), self.n - 1.0, self.df)

    def moderated(
        self, prior_sd_log: np.ndarray, prior_df: np.ndarray, typical_sd_log: np.ndarray, typical_df: np.ndarray
    ) -> Spreads:
        """Each spread moderated by its class's prior (``prior_sd_log`` s0 with ``prior_df`` d0; NaN: none):
        s^2 = (d0 s0^2 + d s_i^2) / (d0 + d) with d0 + d degrees of freedom, d = n - 1. A cell whose own
        variance lies beyond F(d, ``typical_df``)'s ``UNSTABLE_QUANTILE`` times the class's typical variance
        (``typical_sd_log``: robust to the unstable cells themselves) is marked unstable. A cell with one process
        in its fast mode of several measured takes the class's spread, s0 with d0. A cell measured in one
        process stays unknown: nothing says it belongs with the class's cells (it may come from another run,
        or another machine)."""
        from scipy import special  # imported where used: the workflow's DAG imports this module

        own = self.n - 1.0
        with np.errstate(invalid="ignore", divide="ignore"):
            applies = (self.n >= 1) & (self.processes >= 2) & (prior_df > 0) & (prior_sd_log > 0)
            d0, s0 = np.where(applies, prior_df, 0.0), np.where(applies, prior_sd_log, 0.0)
            variance = (d0 * s0**2 + own * self.sd_log**2) / (d0 + own)
            typical = np.where(applies & (typical_df > 0), typical_sd_log, np.nan) ** 2
            limit = special.fdtri(np.maximum(own, 1.0), np.maximum(typical_df, 1.0), UNSTABLE_QUANTILE) * typical
            unstable = applies & (own >= 1) & (self.sd_log**2 > limit)
        return Spreads(self.mean_log, np.where(applies, np.sqrt(variance), self.sd_log), self.n,
                       np.where(applies, d0 + own, self.df), self.shift_sd_log, self.unstable | unstable,
                       self.min_log, self.max_log, self.contended, self.processes, self.fast)  # fmt: skip

    def with_shift(self, sd_log: np.ndarray) -> Spreads:
        """Each spread with how far its whole cell moves (between leases, between cells of a run), where that
        is wider than what it had (a known spread only: one process says nothing about the next one)."""
        with np.errstate(invalid="ignore"):
            kept = ~(sd_log > self.shift_sd_log) | (self.processes < 2)
        return Spreads(self.mean_log, self.sd_log, self.n, self.df, np.where(kept, self.shift_sd_log, sd_log),
                       self.unstable, self.min_log, self.max_log, self.contended, self.processes,
                       self.fast)  # fmt: skip

    def variance_of_mean(self) -> np.ndarray:
        """The variance of each figure (the fast mode's mean log p50) as an estimate of the cell's measured again
        later: the spread between processes over the count of those that make it, plus what moves the whole
        cell."""
        with np.errstate(invalid="ignore", divide="ignore"):
            return self.sd_log**2 / self.fast + self.shift_sd_log**2


#: a cell whose processes' variance exceeds this quantile of its class's (F(d, d0) times s0^2) is unstable:
#: at 0.95 one steady cell in twenty of one process pair is marked so; the workflow gives a cell whose processes
#: part more processes (measure.unstable_spread_pct), after which a steady cell rarely is
UNSTABLE_QUANTILE = 0.95


@dataclass(frozen=True)
class CellSpread:
    """A cell's p50 across its processes: the mean and standard deviation of log p50, their count, and the
    degrees of freedom of that standard deviation (n - 1, or more once moderated by its class); how far
    the whole cell moves (``shift_sd_log``: between leases or between cells of a run, a shift all its
    processes share, which more processes do not average away); whether it is unstable. One entry of
    ``Spreads``, whose arithmetic every method here is."""

    mean_log: float
    sd_log: float
    n: int
    df: float | None = None
    shift_sd_log: float = 0.0
    unstable: bool = False
    min_log: float = math.nan
    max_log: float = math.nan
    contended: bool = False
    #: the processes measured, and those in the fast mode (None: ``n``, every one in the fast mode)
    processes: int | None = None
    fast: int | None = None

    def _spreads(self) -> Spreads:
        return Spreads.of([self])

    @property
    def known(self) -> bool:
        """Whether the spread between processes is known: the cell was measured in several."""
        return bool(self._spreads().known[0])

    def degrees(self) -> float:
        return float(self._spreads().degrees()[0])

    def moderated(self, prior: ClassSpread | None) -> CellSpread:
        """This spread moderated by its class's (``Spreads.moderated``)."""
        if prior is None:
            return self
        arrays = (np.array([value]) for value in (prior.sd_log, prior.df, prior.typical_sd_log, prior.typical_df))
        return self._spreads().moderated(*arrays).entry(0)

    def with_shift(self, sd_log: float) -> CellSpread:
        """This spread with how far its whole cell moves (``Spreads.with_shift``)."""
        return self._spreads().with_shift(np.array([sd_log], dtype=float)).entry(0)

    def variance_of_mean(self) -> float:
        """The variance of the mean log p50 as an estimate of the cell's measured again later
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


def _trigamma_inverse(x: float) -> float:
    """y with trigamma(y) = x, by Newton's method (limma's trigammaInverse)."""
    from scipy import special

    if x > 1e7:
        return 1.0 / math.sqrt(x)
    if x < 1e-6:
        return 1.0 / x
    y = 0.5 + 1.0 / x
    for _ in range(50):
        tri = float(special.polygamma(1, y))
        step = tri * (1 - tri / x) / float(special.polygamma(2, y))
        y += step
        if -step / y < 1e-8:
            break
    return y


@dataclass(frozen=True)
class ClassSpread:
    """The spread between processes of a class of cells, as a prior for each of its cells: s0 (``sd_log``)
    with d0 (``df``) degrees of freedom, fitted to the distribution of the class's cell variances
    (``fit``); ``cells``: how many cells of several processes it rests on; ``pooled_sd_log``: their pooled
    spread, sqrt(sum((n_i - 1) s_i^2) / sum(n_i - 1)), the class's spread in words; ``typical_sd_log``:
    the spread of its median cell, which a few cells far beyond the rest do not move, with the class's
    degrees of freedom (``typical_df``): what a cell is tested against to be called unstable."""

    sd_log: float
    df: float
    cells: int
    pooled_sd_log: float
    typical_sd_log: float = math.nan
    typical_df: float = 0.0

    @classmethod
    def fit(cls, spreads: Spreads) -> ClassSpread | None:
        """Of the cells of ``spreads`` measured in several processes; None where none was. From three such
        cells, limma's fit of a scaled F distribution to their variances (``fitFDist``: by the moments of
        log s^2) gives s0 and d0; d0 is at most the class's own degrees of freedom (its cells cannot tell
        more than they measured), and with fewer cells the prior is their pooled spread with those."""
        from scipy import special

        several = spreads.n > 1
        own = (spreads.n[several] - 1).astype(float)
        pooled_df = float(own.sum())
        if not pooled_df:
            return None
        variances = spreads.sd_log[several] ** 2
        pooled = math.sqrt(float((own * variances).sum()) / pooled_df)
        cells = int(several.sum())
        # each variance over the median of its chi-square (s_i^2 ~ s^2 chi2_d / d): their median is the
        # typical cell's variance, whatever a few broken cells read
        typical = math.sqrt(float(np.median(variances / (special.chdtri(own, 0.5) / own))))
        if cells < 3 or pooled == 0:
            return cls(pooled, pooled_df, cells, pooled, typical, pooled_df)
        # limma keeps exact zeros out of the logs: at least 1e-5 of the median variance
        median = float(np.median(variances)) or 1.0
        logs = np.log(np.maximum(variances, 1e-5 * median))
        adjusted = logs - special.digamma(own / 2) + np.log(own / 2)
        mean = float(adjusted.mean())
        excess = float(((adjusted - mean) ** 2).sum() / (cells - 1) - special.polygamma(1, own / 2).mean())
        prior_df = 2 * _trigamma_inverse(excess) if excess > 0 else math.inf
        prior_df = min(prior_df, pooled_df)
        prior_sd = math.sqrt(math.exp(mean + float(special.digamma(prior_df / 2)) - math.log(prior_df / 2)))
        return cls(prior_sd, prior_df, cells, pooled, typical, pooled_df)

    @property
    def pct(self) -> float:
        """The class's typical spread as a percentage of the p50 (one standard deviation, pooled)."""
        return 100.0 * (math.exp(self.pooled_sd_log) - 1)


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
    each cell's count of processes; ``unstable``: either cell's processes disagree far beyond its class, and
    then ``range_low``/``range_high``: the ratio's least and greatest over every pair of the two cells'
    processes (NaN elsewhere), which decide in place of the interval; ``contended``: either cell was timed only
    while other work held the host's cores, and the pair is left undecided (its interval unknown)."""

    value: np.ndarray
    low: np.ndarray
    high: np.ndarray
    n_a: np.ndarray
    n_b: np.ndarray
    log_se: np.ndarray
    df: np.ndarray
    unstable: np.ndarray
    range_low: np.ndarray
    range_high: np.ndarray
    contended: np.ndarray

    @classmethod
    def of(cls, ratios: Sequence[Ratio]) -> Ratios:
        def column(name: str) -> np.ndarray:
            return np.array([_unknown_as_nan(getattr(r, name)) for r in ratios], dtype=float)

        processes = np.array([r.processes for r in ratios], dtype=np.int64).reshape(len(ratios), 2)
        unstable = np.array([r.unstable for r in ratios], dtype=bool)
        contended = np.array([r.contended for r in ratios], dtype=bool)
        return cls(column("value"), column("low"), column("high"), processes[:, 0], processes[:, 1], column("log_se"),
                   column("df"), unstable, column("range_low"), column("range_high"), contended)  # fmt: skip

    def __len__(self) -> int:
        return len(self.value)

    def row(self, i: int) -> Ratio:
        processes = (int(self.n_a[i]), int(self.n_b[i]))
        low, high, log_se, df = (_nan_as_none(values[i]) for values in (self.low, self.high, self.log_se, self.df))
        range_low, range_high = _nan_as_none(self.range_low[i]), _nan_as_none(self.range_high[i])
        return Ratio(float(self.value[i]), low, high, processes, log_se, df, bool(self.unstable[i]), range_low,
                     range_high, bool(self.contended[i]))  # fmt: skip

    @property
    def known(self) -> np.ndarray:
        return ~np.isnan(self.low) & ~np.isnan(self.high)

    @property
    def significant(self) -> np.ndarray:
        """Each interval excludes 1: the difference holds beyond the spread between processes; where a cell is
        unstable, every pair of the two cells' processes differs the same way instead."""
        with np.errstate(invalid="ignore"):
            by_interval = (self.low > 1) | (self.high < 1)
            by_range = (self.range_low > 1) | (self.range_high < 1)
        return self.known & np.where(self.unstable, by_range, by_interval)

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
    #: either cell's processes disagree far beyond its class: the range over their processes decides
    unstable: bool = False
    range_low: float | None = None
    range_high: float | None = None
    #: either cell was timed only while other work held the host's cores: undecided
    contended: bool = False

    @property
    def known(self) -> bool:
        return bool(Ratios.of([self]).known[0])

    @property
    def significant(self) -> bool:
        """The interval excludes 1 (an unstable pair: every pair of processes differs the same way)."""
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
        contended = a.contended | b.contended
        known = a.known & b.known & ~contended
        va, vb = a.variance_of_mean(), b.variance_of_mean()
        se = np.sqrt(va + vb)
        exact = se == 0  # no spread at all: the interval is the point
        df = np.where(exact, np.inf, (va + vb) ** 2 / (va**2 / a.degrees() + vb**2 / b.degrees()))
        # Student's t quantile as the ufunc (t.ppf's, ~3 us a call)
        quantile = special.stdtrit(df, 0.5 + confidence / 2)
        half = np.where(exact, 0.0, quantile * se)
        low = np.where(known, np.exp(centre - half), np.nan)
        high = np.where(known, np.exp(centre + half), np.nan)
        unstable = known & (a.unstable | b.unstable)
        # what moves a whole cell moves all its processes together: the range widens by it too
        moved = np.where(exact, 0.0, quantile * np.sqrt(a.shift_sd_log**2 + b.shift_sd_log**2))
        range_low = np.where(unstable, np.exp(b.min_log - a.max_log - moved), np.nan)
        range_high = np.where(unstable, np.exp(b.max_log - a.min_log + moved), np.nan)
        return Ratios(np.exp(centre), low, high, a.n, b.n, np.where(known, se, np.nan), np.where(known, df, np.nan),
                      unstable, range_low, range_high, contended)  # fmt: skip


def ratio(a: CellSpread, b: CellSpread, value: float | None = None, confidence: float = 0.95) -> Ratio:
    """B / A with Welch's interval on log p50 (``ratios`` of one pair). ``value``: the point estimate to
    centre it on (e.g. the ratio of the pooled p50s shown beside it); by default the ratio of the geometric
    means."""
    given = None if value is None else np.array([value], dtype=float)
    return ratios(Spreads.of([a]), Spreads.of([b]), given, confidence).row(0)
