"""The LoadGen server scenario's plot: p99 latency against the QPS completed over every run of each cell's search
(reached through the scenario's declaration, inferbench.catalog.scenarios)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

from inferbench.core.cells import CellRecord
from inferbench.report.plot_axes import BATCH_MARKERS, DEVICE_STYLES, engine_colour, log_axis, save_figure
from inferbench.scenarios.serving import SECTION


def plot_server(records: Sequence[CellRecord], workload: str, out: str | Path, variants: Sequence[str] = ()) -> Path:
    """p99 latency against the QPS LoadGen completed, for every run of every server cell's search of
    ``workload`` (filled: valid runs, hollow: not valid), one line per engine and largest batch, the
    cells' latency bounds as horizontal lines: where each configuration crosses its bound."""
    fig, ax = plt.subplots(figsize=(7, 4.5))
    bounds = set()
    cells = [
        r for r in records if r.key.workload == workload and r.key.scenario == "server" and r.sections.get(SECTION)
    ]
    # colour: the engine variant, as in every plot; marker: the largest batch
    batch_marker = {
        b: BATCH_MARKERS[i % len(BATCH_MARKERS)] for i, b in enumerate(sorted({r.key.batch_size for r in cells}))
    }
    for record in sorted(cells, key=lambda r: (r.key.engine, r.key.precision, r.key.device, r.key.batch_size)):
        serving = record.sections.get(SECTION) or {}  # every cell kept has one (filtered above)
        runs = sorted((s for s in serving.get("search") or [] if s.get("p99_ms")), key=lambda s: s["completed_qps"])
        if not runs:
            continue
        key = record.key
        colour = engine_colour(key.engine, variants)
        label = f"{key.engine} {key.precision} {key.device}, max batch {key.batch_size}"
        qps, p99 = [s["completed_qps"] for s in runs], [s["p99_ms"] for s in runs]
        marker = batch_marker[key.batch_size]
        ax.plot(qps, p99, color=colour, linestyle=DEVICE_STYLES.get(key.device, ":"), alpha=0.6)
        for s in runs:
            face = colour if s["valid"] else "none"
            ax.plot(s["completed_qps"], s["p99_ms"], marker=marker, color=colour, mfc=face, linestyle="none")
        ax.plot([], [], color=colour, marker=marker, label=label)
        if serving.get("latency_bound_ms"):
            bounds.add(serving["latency_bound_ms"])
    for bound in sorted(bounds):
        ax.axhline(bound, color="black", linewidth=0.8, linestyle=":")
    log_axis(ax, "x")
    log_axis(ax, "y")
    ax.set_xlabel("queries per second completed (LoadGen server, Poisson arrivals)")
    ax.set_ylabel("p99 latency, ms (issue to completion)")
    ax.set_title(f"{workload}: p99 against load, every run of the search (hollow: not valid)")
    if ax.lines:
        ax.legend(fontsize=7, loc="best")
    out = Path(out)
    save_figure(fig, out)
    return out
