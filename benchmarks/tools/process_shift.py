"""Where each run's host-bound GPU processes sit against the same cells' processes in the other runs,
and whether a busier machine made them slower (not a test).

    python benchmarks/tools/process_shift.py gpu2=RUN_A/results/cells gpu1=RUN_B/results/cells [...]
        [--save processes.csv]
    python benchmarks/tools/process_shift.py --processes processes.csv     # the same table from the saved processes

A cell's median over runs hides what a single process saw; this looks at the processes. For each GPU
cell host-bound in every run (the record's class, as `inferbench compare` classes cells), each process's
p50 is set against the same cell's processes in the *other* runs: its ratio to their median, and whether
it falls within their range. Where all runs measure alike, a process falls within the range of n others
with probability (n - 1) / (n + 1) (5/7 for 6 others); a run whose processes fall within it less often
measured otherwise. The machine's busy share during each process's timed calls (``host_busy_pct``,
/proc/stat over the window) against its ratio says whether work elsewhere on the host (preparation, the
other GPU's slot) went with a slower timed loop: Spearman's rho within each run.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import pandas as pd
from scipy import stats

from inferbench.analysis.comparison import spread_class
from inferbench.core.cells import CellRecord


def processes(named_dirs: dict[str, Path]) -> pd.DataFrame:
    """One row per measuring process of every ok GPU cell: run, cell, the cell's class, p50, cores, machine
    busy %, when its timed calls began."""
    rows = []
    for run, cells_dir in named_dirs.items():
        for path in sorted(cells_dir.rglob("*.json")):
            record = CellRecord.load(path)
            if record.status != "ok" or record.key.device != "cuda":
                continue
            per_process = (record.repeats or {}).get("per_repeat") or []
            windows = record.measured_windows_unix or []
            for i, process in enumerate(per_process):
                if process.get("p50_ms") is None or process.get("prime"):  # a priming process timed for no figure
                    continue
                rows.append(
                    {
                        "run": run,
                        "cell": record.key.cell_id,
                        "bound": (record.bound or {}).get("class"),
                        "p50_ms": process["p50_ms"],
                        "cpus": str(process.get("cpus")),
                        "busy_pct": process.get("host_busy_pct"),
                        # one window per process, in the processes' order
                        "window_start_unix": windows[i][0] if len(windows) == len(per_process) else None,
                    }
                )
    return pd.DataFrame(rows)


def host_bound_shifts(frame: pd.DataFrame) -> pd.DataFrame:
    """The processes of GPU cells host-bound in every run, each against the cell's processes in the other runs:
    ``ratio`` (its p50 over their median), ``within`` (inside their range) and ``within_expected``
    ((n - 1) / (n + 1) for n others: the chance of falling inside where every run measures alike)."""
    frame = frame.dropna(subset=["p50_ms"])  # a process without a p50 (a CSV's empty field) is no evidence
    runs = frame.run.nunique()
    # compare's class: a GPU cell not found device-bound is host-bound (unclassified ones too)
    frame = frame.assign(host=frame.assign(device="cuda").apply(spread_class, axis=1) == "host")
    per_cell = frame.groupby("cell").agg(runs=("run", "nunique"), host=("host", "all"))
    keep = per_cell[(per_cell.runs == runs) & per_cell.host].index
    host = frame[frame.cell.isin(keep)].reset_index(drop=True)
    parts = [host.iloc[0:0].assign(ratio=[], within=[], within_expected=[])]
    for _, cell in host.groupby("cell", sort=False):
        for run in cell.run.unique():
            mine, others = cell[cell.run == run], cell.p50_ms[cell.run != run]
            parts.append(mine.assign(
                ratio=mine.p50_ms / others.median(),
                within=mine.p50_ms.between(others.min(), others.max()),
                within_expected=(len(others) - 1) / (len(others) + 1),
            ))  # fmt: skip
    return pd.concat(parts).sort_index()


def table(host: pd.DataFrame) -> str:
    lines = [
        f"{host.cell.nunique()} GPU cells host-bound in every run; each process against the same cell's processes "
        "in the other runs",
        "",
        "| run | cores | processes | p50 / others' median: median | middle half | within the others' range "
        "(expected alike) | machine busy % (median) | Spearman rho, busy % vs ratio (p) |",
        "| --- | --- | ---: | ---: | --- | ---: | ---: | --- |",
    ]
    order = list(host.run.unique())
    groups = [(run, "all", g) for run, g in host.groupby("run", sort=False)]
    # per set of cores only where a run measured on more than one (a gpu=2 run's two slots)
    groups += [
        (run, cpus, g)
        for (run, cpus), g in host.groupby(["run", "cpus"], sort=False)
        if host[host.run == run].cpus.nunique() > 1
    ]
    for run, cpus, g in sorted(groups, key=lambda x: (order.index(x[0]), x[1] != "all")):
        busy = g.dropna(subset=["busy_pct"])
        rho = stats.spearmanr(busy.busy_pct, np.log(busy.ratio)) if len(busy) > 2 else None
        shown = f"{rho.statistic:+.2f} ({rho.pvalue:.2f})" if rho is not None else "–"
        busy_median = f"{busy.busy_pct.median():.1f}" if len(busy) else "–"
        lines.append(
            f"| {run} | {cpus} | {len(g)} | {g.ratio.median():.3f} | {g.ratio.quantile(0.25):.3f}–"
            f"{g.ratio.quantile(0.75):.3f} | {g.within.mean():.0%} ({g.within_expected.mean():.0%}) "
            f"| {busy_median} | {shown} |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("runs", nargs="*", help="NAME=results/cells of each run")
    parser.add_argument("--processes", type=Path, help="read the processes from this CSV (as --save wrote it)")
    parser.add_argument("--save", type=Path, help="write the processes read from the runs' records here (CSV)")
    args = parser.parse_args()
    if bool(args.runs) == bool(args.processes):
        parser.error("give either NAME=results/cells for each run or --processes CSV")
    if args.processes:
        frame = pd.read_csv(args.processes)
    else:
        frame = processes({name: Path(path) for name, path in (run.split("=", 1) for run in args.runs)})
    if args.save:
        frame.to_csv(args.save, index=False)
    print(table(host_bound_shifts(frame)))


if __name__ == "__main__":
    main()
