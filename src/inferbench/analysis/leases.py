"""How far a cell moves from one lease to the next: runs of the same cells on machines lent at other times.

A lease is a fresh machine (another VM, another day): its CPU, clocks and neighbours differ, so a cell's
p50 moves between leases by more than between the processes of one run. Host-bound GPU cells and CPU
cells follow the host and move most. From two or more runs of the same cells (each a summary), each
cell's p50s give one standard deviation of log p50 between leases; per class (device-bound GPU,
host-bound GPU, CPU: inferbench.analysis.comparison.spread_class), the typical cell's is the spread a
claim must outlast to hold in the next lease. ``inferbench compare`` writes it (``--out-leases``); a report given
it (config ``report.lease_spread``) adds it to every interval and says how many leases they rest on.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import pandas as pd

from inferbench.analysis.comparison import SPREAD_CLASSES, spread_class
from inferbench.analysis.summary import KEY_COLUMNS, measured

#: the median of |Z| for a standard normal Z: a median of per-cell standard deviations over it is the
#: class's standard deviation, robust to the few cells that moved for a reason of their own
MEDIAN_ABS_Z = 0.6744897501960817


#: a class's spread between leases is measured from this many cells on (fewer cannot tell the class's
#: typical movement from one cell's own)
MIN_CELLS = 3


def _typical_sd(variances: list[float]) -> float:
    """A class's spread between leases from its cells' variances: the median cell's, so that one cell
    that moved for a reason of its own neither hides its own change nor widens every other claim."""
    sds = sorted(math.sqrt(v) for v in variances)
    middle = len(sds) // 2
    median = sds[middle] if len(sds) % 2 else (sds[middle - 1] + sds[middle]) / 2
    return median / MEDIAN_ABS_Z


@dataclass(frozen=True)
class LeaseSpread:
    #: per class: one standard deviation of log p50 from lease to lease, and how many cells it pools
    sd_log: dict[str, float]
    cells: dict[str, int]
    #: how many leases (runs) it was measured on
    leases: int

    @classmethod
    def between(cls, summaries: Sequence[pd.DataFrame]) -> LeaseSpread:
        """From two or more runs' summaries: every inference cell timed one call at a time and ok in all
        of them (no serving, training or no-op cell), at its own boundary (p50).
        A cell is in the host-bound class if any run found it so (the cautious reading). A class with
        fewer than ``MIN_CELLS`` cells in common is left out: its spread between leases is unknown."""
        if len(summaries) < 2:
            raise ValueError("the spread between leases needs runs from two leases at least")
        key = [c for c in KEY_COLUMNS if all(c in s for s in summaries)]
        merged = None
        for i, summary in enumerate(summaries):
            ok = measured(summary)[[*key, "latency_p50_ms", "bound"]]
            ok = ok.rename(columns={"latency_p50_ms": f"p50_{i}", "bound": f"bound_{i}"})
            merged = ok if merged is None else merged.merge(ok, on=key)
        variances: dict[str, list[float]] = {}
        for row in merged.to_dict("records"):
            logs = [math.log(row[f"p50_{i}"]) for i in range(len(summaries)) if row[f"p50_{i}"] > 0]
            if len(logs) < 2:
                continue
            bounds = {row[f"bound_{i}"] for i in range(len(summaries))}
            name = spread_class({"device": row["device"], "bound": "host" if "host" in bounds else row["bound_0"]})
            mean = sum(logs) / len(logs)
            variances.setdefault(name, []).append(sum((x - mean) ** 2 for x in logs) / (len(logs) - 1))
        enough = {name: v for name, v in variances.items() if len(v) >= MIN_CELLS}
        return cls(
            {name: _typical_sd(v) for name, v in enough.items()},
            {name: len(v) for name, v in enough.items()},
            len(summaries),
        )

    def pct(self, name: str) -> float:
        """A class's spread between leases as a percentage of the p50 (one standard deviation)."""
        return 100.0 * (math.exp(self.sd_log[name]) - 1)

    def describe(self) -> str:
        parts = [f"{SPREAD_CLASSES[n]} {self.pct(n):.1f}% ({self.cells[n]} cells)" for n in SPREAD_CLASSES
                 if n in self.sd_log]  # fmt: skip
        return f"measured over {self.leases} leases: " + ("; ".join(parts) or "no cell in common")

    def save(self, path: str | Path) -> None:
        from inferbench.core.fsutil import write_json

        write_json(path, asdict(self))

    @classmethod
    def load(cls, path: str | Path) -> LeaseSpread:
        data = json.loads(Path(path).read_text())
        unknown = set(data.get("sd_log", {})) - set(SPREAD_CLASSES)
        if unknown or not isinstance(data.get("leases"), int):
            raise ValueError(f"{path} is not a lease spread written by `inferbench compare --out-leases`")
        return cls(data["sd_log"], data["cells"], data["leases"])
