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
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace

Z95 = 1.959963984540054


@dataclass(frozen=True)
class CellSpread:
    """A cell's p50 across its processes: the mean and standard deviation of log p50, their count,
    and the degrees of freedom of that standard deviation (n - 1, or its class's where it comes
    from there); and how far the whole run's p50 moves between leases (``lease_sd_log``: a shift all
    the run's processes share, which more processes do not average away)."""

    mean_log: float
    sd_log: float
    n: int
    df: float | None = None
    lease_sd_log: float = 0.0

    @property
    def known(self) -> bool:
        """Whether the spread between processes is known: the cell was measured in several."""
        return self.n > 1

    def degrees(self) -> float:
        return self.df if self.df is not None else float(self.n - 1)

    def with_floor(self, floor: SpreadFloor | None) -> CellSpread:
        """This spread, or its class's where that is larger (then with the class's degrees of freedom).
        A cell measured in one process stays unknown: nothing says it belongs with the class's cells
        (it may come from another run, or another machine)."""
        if floor is None or self.n < 2 or floor.sd_log <= self.sd_log:
            return self
        return replace(self, sd_log=floor.sd_log, df=floor.df)

    def with_lease(self, sd_log: float) -> CellSpread:
        """This spread with how far the cell moves between leases (a known spread only: one process
        says nothing about the next one, let alone the next lease)."""
        if sd_log <= 0 or self.n < 2:
            return self
        return replace(self, lease_sd_log=sd_log)

    def variance_of_mean(self) -> float:
        """The variance of the mean log p50 as an estimate of the cell's in another lease: the spread
        between processes over their count, plus the spread between leases whole."""
        return self.sd_log**2 / self.n + self.lease_sd_log**2

    @classmethod
    def from_processes(
        cls, p50s: Sequence[float], ci_low: float | None = None, ci_high: float | None = None
    ) -> CellSpread | None:
        """From each process's p50 (ms); ``ci_low``/``ci_high``: the 95% CI of the pooled p50, whose
        width (times sqrt(n): one process's) sets the floor of the spread."""
        values = [float(v) for v in p50s if v is not None and v > 0 and math.isfinite(v)]
        if not values:
            return None
        logs = [math.log(v) for v in values]
        n = len(logs)
        mean = sum(logs) / n
        sd = math.sqrt(sum((x - mean) ** 2 for x in logs) / (n - 1)) if n > 1 else 0.0
        if ci_low and ci_high and ci_low > 0 and ci_high >= ci_low:
            one_process = math.log(ci_high / ci_low) / (2 * Z95) * math.sqrt(n)
            sd = max(sd, one_process)
        return cls(mean, sd, n)


@dataclass(frozen=True)
class SpreadFloor:
    """The between-process spread pooled over a class of cells: sqrt(sum((n_i - 1) s_i^2) / sum(n_i - 1))."""

    sd_log: float
    df: float
    cells: int

    @classmethod
    def pooled(cls, spreads: Sequence[CellSpread]) -> SpreadFloor | None:
        several = [s for s in spreads if s.n > 1]
        df = sum(s.n - 1 for s in several)
        if not df:
            return None
        return cls(math.sqrt(sum((s.n - 1) * s.sd_log**2 for s in several) / df), float(df), len(several))

    @property
    def pct(self) -> float:
        """The spread as a percentage of the p50 (one standard deviation)."""
        return 100.0 * (math.exp(self.sd_log) - 1)


@dataclass(frozen=True)
class Ratio:
    """``value`` = p50 of B / p50 of A (A faster when > 1), with its 95% interval where it is known."""

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
        return self.low is not None and self.high is not None

    @property
    def significant(self) -> bool:
        """The interval excludes 1: the difference holds beyond the spread between processes."""
        return self.known and (self.low > 1 or self.high < 1)  # type: ignore[operator]

    @property
    def p_value(self) -> float | None:
        """Two-sided: how often a ratio this far from 1 comes from the spread alone (below 0.05 exactly
        where the 95% interval excludes 1); None where the spread is unknown."""
        if self.log_se is None or self.df is None or self.value <= 0:
            return None
        if self.log_se == 0:
            return 1.0 if self.value == 1 else 0.0
        from scipy import special  # imported where used: the workflow's DAG imports this module (2 s)

        # Student's t tail as the ufunc (stdtr: ~3 us a call; scipy.stats.t.sf is ~100-500 us, the most of
        # `inferbench compare` at 100,000 cells)
        return float(2 * special.stdtr(self.df, -abs(math.log(self.value)) / self.log_se))


def ratio(a: CellSpread, b: CellSpread, value: float | None = None, confidence: float = 0.95) -> Ratio:
    """B / A with Welch's interval on log p50. ``value``: the point estimate to centre it on (e.g.
    the ratio of the pooled p50s shown beside it); by default the ratio of the geometric means."""
    centre = math.log(value) if value is not None and value > 0 else b.mean_log - a.mean_log
    processes = (a.n, b.n)
    if not (a.known and b.known):
        return Ratio(math.exp(centre), processes=processes)
    va, vb = a.variance_of_mean(), b.variance_of_mean()
    se = math.sqrt(va + vb)
    if se == 0:
        return Ratio(math.exp(centre), math.exp(centre), math.exp(centre), processes, 0.0, math.inf)
    df = (va + vb) ** 2 / (va**2 / a.degrees() + vb**2 / b.degrees())
    from scipy import special

    half = float(special.stdtrit(df, 0.5 + confidence / 2)) * se  # Student's t quantile (t.ppf's ufunc, ~3 us)
    return Ratio(math.exp(centre), math.exp(centre - half), math.exp(centre + half), processes, se, df)
