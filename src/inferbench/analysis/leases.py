"""How far a cell moves from one lease to the next: runs of the same cells on machines lent at other times.

A lease is a fresh machine (another VM, another day): its CPU, clocks and neighbours differ, so a cell's
p50 moves between leases by more than between the processes of one run. Host-bound GPU cells and CPU
cells follow the host and move most. From two or more runs of the same cells (each a summary), each
cell's p50s give one standard deviation of log p50 between leases; per class (device-bound GPU,
host-bound GPU, CPU: inferbench.analysis.comparison.spread_class), the typical cell's is the spread a
claim must outlast to hold in the next lease. ``inferbench compare`` writes it (``--out-leases``); a report given
it (config ``report.lease_spread``) adds it to every interval and says how many leases they rest on.

A file given is checked whole before any cell is measured (``lease_spread_problems``, which the workflow
calls beside the config's own checks) and again where a report loads it: a regular file of JSON, at most
``MAX_FILE_BYTES``, of the shape ``save`` writes, each class's spread a finite number from 0 to
``MAX_SD_LOG``. This module imports nothing heavy at its top (the workflow's parse imports it); pandas and
the classes come where they are used.
"""

from __future__ import annotations

import json
import math
import os
import stat
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from inferbench.core.errors import UserError

if TYPE_CHECKING:
    import pandas as pd

#: the median of |Z| for a standard normal Z: a median of per-cell standard deviations over it is the
#: class's standard deviation, robust to the few cells that moved for a reason of their own
MEDIAN_ABS_Z = 0.6744897501960817


#: a class's spread between leases is measured from this many cells on (fewer cannot tell the class's
#: typical movement from one cell's own)
MIN_CELLS = 3
#: the widest spread between leases a file may give: one standard deviation of a factor 10 (sd of log
#: p50 ln 10), far beyond what host-bound cells move between leases (docs/comparing.md); beyond a factor
#: 10 the number is a unit or a typo, and every claim would drown in it
MAX_SD_LOG = math.log(10)
#: a spread between leases is a few hundred bytes of JSON: a larger file is not one
MAX_FILE_BYTES = 1 << 20
#: what config ``report.lease_spread`` may be, as every problem with it says
LEASE_SPREAD_ALLOWED = (
    "report.lease_spread is null (this run's lease alone) or the path of a JSON file written by `python -m "
    "inferbench compare RUN_A RUN_B --out-leases FILE` from runs of two leases: an object of sd_log (per class "
    f"of device, host, cpu: one standard deviation of log p50, from 0 to {MAX_SD_LOG:.3g}), cells (per class of "
    f"sd_log: its count of cells, from {MIN_CELLS}) and leases (a count, from 2)"
)


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
        import numpy as np
        import pandas as pd

        from inferbench.analysis.comparison import spread_classes
        from inferbench.analysis.summary import KEY_COLUMNS, measured

        if len(summaries) < 2:
            raise ValueError("the spread between leases needs runs from two leases at least")
        key = [c for c in KEY_COLUMNS if all(c in s for s in summaries)]
        oks = [measured(s) for s in summaries]
        repeated = [int(ok.duplicated(key).sum()) for ok in oks]
        if any(repeated):  # the merge below would pair each copy with each: one cell counted many times
            raise ValueError(f"the spread between leases needs each cell once a run; repeated cells: {repeated}")
        merged = None
        for i, ok in enumerate(oks):
            ok = ok[[*key, "latency_p50_ms", "bound"]]
            ok = ok.rename(columns={"latency_p50_ms": f"p50_{i}", "bound": f"bound_{i}"})
            merged = ok if merged is None else merged.merge(ok, on=key)
        # each cell's variance of log p50 over the runs (those with a p50 above 0; two at least), in one pass
        p50s = merged[[f"p50_{i}" for i in range(len(summaries))]].to_numpy(dtype=float)
        kept = p50s > 0  # NaN: no
        logs = np.log(np.where(kept, p50s, 1.0))
        counted = kept.sum(axis=1)
        mean = np.where(kept, logs, 0.0).sum(axis=1) / np.maximum(counted, 1)
        squares = np.where(kept, (logs - mean[:, None]) ** 2, 0.0).sum(axis=1)
        variance = squares / np.maximum(counted - 1, 1)
        # a cell is host-bound if any run found it so (the cautious reading)
        bounds = merged[[f"bound_{i}" for i in range(len(summaries))]]
        bound = pd.Series(np.where(bounds.eq("host").any(axis=1), "host", merged["bound_0"]), index=merged.index)
        names = spread_classes(pd.DataFrame({"device": merged["device"], "bound": bound}))
        variances: dict[str, list[float]] = {}
        for name, value in zip(names[counted >= 2].tolist(), variance[counted >= 2].tolist(), strict=True):
            variances.setdefault(name, []).append(value)
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
        from inferbench.analysis.comparison import SPREAD_CLASSES

        parts = [f"{SPREAD_CLASSES[n]} {self.pct(n):.1f}% ({self.cells[n]} cells)" for n in SPREAD_CLASSES
                 if n in self.sd_log]  # fmt: skip
        return f"measured over {self.leases} leases: " + ("; ".join(parts) or "no cell in common")

    def save(self, path: str | Path) -> None:
        from inferbench.core.fsutil import write_json

        write_json(path, asdict(self))

    @classmethod
    def load(cls, path: str | Path) -> LeaseSpread:
        """The spread written by ``save``; a UserError naming ``path`` and what is wrong with it (what
        ``lease_spread_problems`` finds) where it is not one."""
        data, problem = _read_json(Path(path))
        problems = [problem] if problem else _shape_problems(data)
        if problems:
            raise UserError(f"{path} is not a spread between leases: {'; '.join(problems)}. {LEASE_SPREAD_ALLOWED}")
        return cls(
            {name: float(sd) for name, sd in data["sd_log"].items()},
            {name: int(n) for name, n in data["cells"].items()},
            int(data["leases"]),
        )


def lease_spread_problems(value: object) -> list[str]:
    """What is wrong with config ``report.lease_spread`` (``value``) and the file it names, each problem
    naming the key, the value and what is allowed; empty where it is fine. A relative path is read from
    the working directory, as the workflow's rules read it."""
    if value is None:
        return []
    if not isinstance(value, str) or not value:
        return [f"report.lease_spread: {_quoted(value)} is not a path to a file. {LEASE_SPREAD_ALLOWED}"]
    data, problem = _read_json(Path(value))
    problems = [problem] if problem else _shape_problems(data)
    return [f"report.lease_spread: {value!r} {p}. {LEASE_SPREAD_ALLOWED}" for p in problems]


def _quoted(value: object) -> str:
    """A value as a message quotes it, at most 80 characters."""
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _read_json(path: Path) -> tuple[Any, str | None]:
    """The JSON in ``path``, or why it cannot be read as a spread between leases: missing, not a regular
    file (a directory, a device or a pipe, whose read would never end), too large, or not JSON."""
    try:
        info = os.stat(path)
    except FileNotFoundError:
        return None, "does not exist"
    except OSError as error:
        return None, f"cannot be read ({error.strerror})"
    if stat.S_ISDIR(info.st_mode):
        return None, "is a directory, not a file"
    if not stat.S_ISREG(info.st_mode):
        return None, "is not a regular file (a device, a pipe or a socket)"
    if info.st_size > MAX_FILE_BYTES:
        return None, f"holds {info.st_size:,} bytes, far more than a spread between leases (a few hundred)"
    try:
        return json.loads(path.read_text(encoding="utf-8")), None
    except (OSError, UnicodeDecodeError) as error:
        return None, f"cannot be read ({type(error).__name__}: {str(error)[:200]})"
    except json.JSONDecodeError as error:
        return None, f"is not JSON ({error})"


def _count_problem(what: str, value: object, least: int) -> str | None:
    if isinstance(value, int) and not isinstance(value, bool) and value >= least:
        return None
    return f"{what} is {_quoted(value)}, not a whole number from {least}"


def _shape_problems(data: Any) -> list[str]:
    """Where ``data`` (a file's JSON) is not what ``LeaseSpread.save`` writes, each spread a finite number
    from 0 to ``MAX_SD_LOG`` and each count within its range."""
    from inferbench.analysis.comparison import SPREAD_CLASSES  # pandas: only where a file is given

    if not isinstance(data, dict):
        return [f"holds {_quoted(data)} ({type(data).__name__}), not an object with sd_log, cells and leases"]
    problems = []
    extra = sorted(set(data) - {"sd_log", "cells", "leases"}, key=str)  # a missing one is named below
    if extra:
        problems.append(f"has keys other than sd_log, cells and leases: {_quoted(extra)}")
    sd_log, cells = data.get("sd_log"), data.get("cells")
    if not isinstance(sd_log, dict) or not sd_log:
        problems.append(f"sd_log is {_quoted(sd_log)}, not an object of one spread per class (at least one class)")
        sd_log = {}
    for name, sd in sd_log.items():
        if name not in SPREAD_CLASSES:
            problems.append(f"sd_log names class {_quoted(name)}, not one of {', '.join(SPREAD_CLASSES)}")
        elif isinstance(sd, bool) or not isinstance(sd, (int, float)) or not 0 <= sd <= MAX_SD_LOG:
            problems.append(
                f"sd_log {name} is {_quoted(sd)}, not a finite spread from 0 to {MAX_SD_LOG:.3g} (the standard "
                f"deviation of log p50: 0.1 is about 10%)"
            )
    if not isinstance(cells, dict) or set(cells) != set(sd_log):
        problems.append(f"cells is {_quoted(cells)}, not an object of one count per class of sd_log")
    else:
        problems += [p for name, n in cells.items() if (p := _count_problem(f"cells {name}", n, MIN_CELLS))]
    if problem := _count_problem("leases", data.get("leases"), 2):
        problems.append(problem)
    return problems
