"""The generation scenario's plot: a decoder's cells, one request at a time, against the batch size (reached through
the scenario's declaration, inferbench.catalog.scenarios.GENERATION, and drawn from a summary)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import pandas as pd

from inferbench.analysis.summary import split_scenarios
from inferbench.catalog.scenarios import PLAIN
from inferbench.report.plot_axes import BATCH_MARKERS, empty_axes, engine_colour, log_log_axes, save_figure


def plot_generation(summary: pd.DataFrame, workload: str, out: str | Path, variants: Sequence[str] = ()) -> Path:
    """A decoder's generation cells against the batch size: time per output token (p50, the decode step a
    user waits for) on the left, time to first token (p50, the prefill) on the right; colour: the engine
    variant, as in every plot; marker and line: the prompt length."""
    frame = split_scenarios(summary).generating
    # one request at a time: a cell under load is drawn by its own scenario's plot
    frame = frame[(frame["workload"] == workload) & (frame["status"] == "ok") & (frame["scenario"] == PLAIN)]
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2))
    prompts = sorted(frame["seq_len"].unique()) if not frame.empty else []
    prompt_style = {
        n: (BATCH_MARKERS[i % len(BATCH_MARKERS)], ["--", "-", ":", "-."][i % 4]) for i, n in enumerate(prompts)
    }
    for ax, column, what in (
        (axes[0], "gen_tpot_p50_ms", "time per output token, p50 (ms)"),
        (axes[1], "gen_ttft_p50_ms", "time to first token, p50 (ms)"),
    ):
        rows = frame.dropna(subset=[column]) if column in frame else frame.iloc[0:0]
        by = ["engine", "precision", "device", "threads", "seq_len"]
        for (engine, precision, device, threads, prompt), group in rows.groupby(by):
            marker, line = prompt_style[prompt]
            group = group.sort_values("batch_size")
            label = f"{engine} {precision} {device}" + (f" {threads}t" if threads else "") + f", prompt {int(prompt)}"
            ax.plot(group["batch_size"], group[column], color=engine_colour(engine, variants), marker=marker,
                    linestyle=line, label=label)  # fmt: skip
        if ax.lines:
            log_log_axes(ax, list(rows["batch_size"]))
            ax.grid(True, which="both", alpha=0.3)
        else:
            empty_axes(ax, "no ok generation cells")
        ax.set(xlabel="batch size (sequences decoded together)", ylabel=what)
    if axes[0].lines:
        axes[0].legend(fontsize=7)
    fig.suptitle(f"{workload}: generation against the batch size")
    out = Path(out)
    save_figure(fig, out)
    return out
