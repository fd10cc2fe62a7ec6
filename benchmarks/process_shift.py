"""Where each run's host-bound GPU processes sit against the same cells' processes in every run, and
whether a busier machine made them slower (not a test).

    python benchmarks/process_shift.py gpu2=RUN_A/results/cells gpu1=RUN_B/results/cells [...]

A cell's median over runs hides what a single process saw; this looks at the processes. For each GPU
cell host-bound in every process of every run, each process's p50 is divided by the median of that
cell's processes over all the runs given. Per run (and per set of cores it measured on) it prints the
median of those ratios beside the class's spread between processes: a run whose processes sit within
that spread measured like the others. The machine's busy share during each process's timed calls
(``host_busy_pct``, /proc/stat over the window) against its ratio says whether work elsewhere on the
host (preparation, the other GPU's slot) slowed the timed loop: Spearman's rho within each run.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import pandas as pd
from scipy import stats

from inferbench.core.cells import CellRecord


def processes(named_dirs: dict[str, Path]) -> pd.DataFrame:
    """One row per measuring process of every ok GPU cell: run, cell, p50, bound, cores, machine busy %."""
    rows = []
    for run, cells_dir in named_dirs.items():
        for path in sorted(cells_dir.rglob("*.json")):
            record = CellRecord.load(path)
            if record.status != "ok" or record.key.device != "cuda":
                continue
            for process in (record.repeats or {}).get("per_repeat") or []:
                if process.get("p50_ms") is None:
                    continue
                rows.append(
                    {
                        "run": run,
                        "cell": record.key.cell_id,
                        "p50_ms": process["p50_ms"],
                        "bound": process.get("bound"),
                        "cpus": str(process.get("cpus")),
                        "busy_pct": process.get("host_busy_pct"),
                    }
                )
    return pd.DataFrame(rows)


def host_bound_shifts(frame: pd.DataFrame) -> pd.DataFrame:
    """The processes of cells host-bound in every process of every run, each with ``log_ratio``: its p50
    against the median of the cell's processes over all runs (log scale)."""
    always_host = frame.groupby("cell")["bound"].agg(lambda b: (b == "host").all())
    runs_per_cell = frame.groupby("cell")["run"].nunique()
    keep = always_host[always_host].index.intersection(runs_per_cell[runs_per_cell == frame.run.nunique()].index)
    host = frame[frame.cell.isin(keep)].copy()
    log_p50 = np.log(host.p50_ms)
    host["log_ratio"] = log_p50 - log_p50.groupby(host.cell).transform("median")
    return host


def spread_pct(host: pd.DataFrame) -> float:
    """The class's spread between processes: median over cells and runs of (max - min) / median p50."""
    per = host.groupby(["run", "cell"]).p50_ms.agg(lambda p: (p.max() - p.min()) / p.median())
    return float(100 * per.median())


def table(host: pd.DataFrame) -> str:
    lines = [
        f"{host.cell.nunique()} GPU cells host-bound in every process of every run; spread between processes "
        f"(median over cells and runs): {spread_pct(host):.0f}%",
        "",
        "| run | cores | processes | median p50 / cell's median over all runs | middle half | machine busy % (median) "
        "| Spearman rho, busy % vs ratio (p) |",
        "| --- | --- | ---: | ---: | --- | ---: | --- |",
    ]
    groups = [(run, "all", g) for run, g in host.groupby("run", sort=False)]
    # per set of cores only where a run measured on more than one (a gpu=2 run's two slots)
    groups += [
        (run, cpus, g)
        for (run, cpus), g in host.groupby(["run", "cpus"], sort=False)
        if host[host.run == run].cpus.nunique() > 1
    ]
    for run, cpus, g in sorted(groups, key=lambda x: (list(host.run.unique()).index(x[0]), x[1] != "all")):
        ratio = np.exp(g.log_ratio)
        busy = g.dropna(subset=["busy_pct"])
        rho = stats.spearmanr(busy.busy_pct, busy.log_ratio) if len(busy) > 2 else None
        shown = f"{rho.statistic:+.2f} ({rho.pvalue:.2f})" if rho is not None else "–"
        lines.append(
            f"| {run} | {cpus} | {len(g)} | {ratio.median():.3f} "
            f"| {ratio.quantile(0.25):.3f}–{ratio.quantile(0.75):.3f} | {busy.busy_pct.median():.1f} | {shown} |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("runs", nargs="+", help="NAME=results/cells of each run")
    args = parser.parse_args()
    named = dict(run.split("=", 1) for run in args.runs)
    frame = processes({name: Path(path) for name, path in named.items()})
    print(table(host_bound_shifts(frame)))


if __name__ == "__main__":
    main()
