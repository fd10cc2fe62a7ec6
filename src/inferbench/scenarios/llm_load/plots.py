"""The llm_load scenario's plot of a decoder workload (its declaration names it the workload's serving plot): TTFT
and TPOT against the request rate of every load of each cell's sweep."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import matplotlib.pyplot as plt

from inferbench.core.cells import CellRecord
from inferbench.report.plot_axes import BATCH_MARKERS, DEVICE_STYLES, empty_axes, engine_colour, log_axis, save_figure
from inferbench.scenarios.llm_load import SCENARIO, SECTION


def plot_llm_load(records: Sequence[CellRecord], workload: str, out: str | Path, variants: Sequence[str] = ()) -> Path:
    """A decoder's llm_load cells: the objective's percentile of TTFT (left) and of TPOT (right) against the
    request rate of every load of each cell's sweep (offered; served at a fixed concurrency), filled where the
    load met the objective, hollow where not; each cell's bounds as horizontal lines and its capacity as a
    vertical one. Colour: the engine variant, as in every plot; marker: the cell's largest running batch."""
    cells = [
        r for r in records if r.key.workload == workload and r.key.scenario == SCENARIO and r.sections.get(SECTION)
    ]
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.5))
    batch_marker = {
        b: BATCH_MARKERS[i % len(BATCH_MARKERS)] for i, b in enumerate(sorted({r.key.batch_size for r in cells}))
    }
    levels = sorted({r.sections[SECTION]["objective"]["percentile"] for r in cells})
    for record in sorted(cells, key=lambda r: (r.key.engine, r.key.precision, r.key.device, r.key.batch_size)):
        serving: dict[str, Any] = record.sections[SECTION]
        key = record.key
        level = serving["objective"]["percentile"]
        colour, marker = engine_colour(key.engine, variants), batch_marker[key.batch_size]
        rates = [
            s["offered_per_s"] if s.get("offered_per_s") is not None else s["request_per_s"] for s in serving["sweep"]
        ]
        label = f"{key.engine} {key.precision} {key.device}, up to {key.batch_size} running, prompt {key.seq_len}"
        for ax, figure, bound in ((axes[0], "ttft", "ttft_ms"), (axes[1], "tpot", "tpot_ms")):
            values = [s[f"{figure}_ms"][level] for s in serving["sweep"]]
            met = [s.get("met", s.get("objective_met")) for s in serving["sweep"]]  # a VALID load within the objective
            points = [(x, y, m) for x, y, m in zip(rates, values, met, strict=True) if y is not None]
            if not points:
                continue
            line = DEVICE_STYLES.get(key.device, ":")
            ax.plot([p[0] for p in points], [p[1] for p in points], color=colour, linestyle=line, alpha=0.6)
            for x, y, met in points:
                ax.plot(x, y, marker=marker, color=colour, mfc=colour if met else "none", linestyle="none")
            ax.axhline(serving["objective"][bound], color=colour, linewidth=0.8, linestyle=":")
            ax.axvline(serving["capacity"]["request_per_s"], color=colour, linewidth=0.8, linestyle="-.", alpha=0.5)
        axes[0].plot([], [], color=colour, marker=marker, label=label)
    level_text = "/".join(levels) or "p99"
    for ax, what in (
        (axes[0], f"time to first token, {level_text} (ms)"),
        (axes[1], f"time per output token, {level_text} (ms)"),
    ):
        if ax.lines:
            log_axis(ax, "x")
            log_axis(ax, "y")
            ax.grid(True, which="both", alpha=0.3)
        else:
            empty_axes(ax, "no llm_load cell with a sweep")
        ax.set(xlabel="request rate (requests/s; dash-dot: capacity)", ylabel=what)
    if axes[0].lines:
        axes[0].legend(fontsize=7, loc="best")
    fig.suptitle(
        f"{workload}: TTFT and TPOT against the request rate (hollow: the objective missed; dotted: its bound)"
    )
    out = Path(out)
    save_figure(fig, out)
    return out
