"""Axes of the report's plots: log axes ticked at 1, 2 and 5 of each decade with plain numbers (never a lone
power of ten, never 1e+03), and the bars that stand in for a curve where a sweep measured one x value; the
colours, lines and markers every plot shares, and how a plot is saved."""

from __future__ import annotations

import zlib
from collections.abc import Sequence
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
from matplotlib.ticker import FixedLocator, FuncFormatter, LogLocator, NullFormatter

from inferbench.core.fsutil import atomic_path
from inferbench.report.tables import fmt

_PALETTE = plt.get_cmap("tab20").colors
#: the line of each device and the marker of each batch size, in every plot
DEVICE_STYLES = {"cpu": "-", "cuda": "--"}
BATCH_MARKERS = ["o", "s", "^", "D", "v", "P"]

#: major ticks of a log axis: 1, 2 and 5 of each decade; every step where that leaves fewer than 3 in view
ONE_TWO_FIVE = (1.0, 2.0, 5.0)
EVERY_STEP = tuple(float(step) for step in range(1, 10))
#: beyond this many decades 1-2-5 crowds the axis: powers of ten only
CROWDED_DECADES = 5


def plain(value: float, _position: object = None) -> str:
    """A tick's number as the report's tables write it (3 significant digits, thousands separated), its
    trailing zeros dropped: 0.5, 20, 1,000; a matplotlib tick formatter."""
    text = fmt(float(value))
    return text.rstrip("0").rstrip(".") if "." in text else text


def _in_view(locator: LogLocator, low: float, high: float) -> list[float]:
    # tick_values also returns the decades just outside the view: they carry no label on the plot
    return [float(t) for t in locator.tick_values(low, high) if low * (1 - 1e-9) <= t <= high * (1 + 1e-9)]


def log_locator(low: float, high: float) -> LogLocator:
    """1-2-5 of each decade between ``low`` and ``high``; where that leaves fewer than 3 ticks (a range
    narrower than about a decade, as 0.4-1.2), every step of the decade, so an axis never reads only 0.5 and 1."""
    locator = LogLocator(base=10, subs=(1.0,) if high / low > 10**CROWDED_DECADES else ONE_TWO_FIVE)
    return locator if len(_in_view(locator, low, high)) >= 3 else LogLocator(base=10, subs=EVERY_STEP)


def log_axis(ax: plt.Axes, which: str, measured: Sequence[float] = ()) -> None:
    """Put ``ax``'s ``which`` axis ("x" or "y") on a log scale, labelled with plain numbers: at the
    ``measured`` values where given (the batches a sweep ran), else at 1-2-5 steps (``log_locator``)."""
    axis = ax.xaxis if which == "x" else ax.yaxis
    getattr(ax, f"set_{which}scale")("log")
    if measured:
        axis.set_major_locator(FixedLocator(sorted(set(measured))))
    else:
        low, high = sorted(getattr(ax, f"get_{which}lim")())  # autoscaled to the data drawn so far
        if low > 0:  # an axis with nothing drawn keeps matplotlib's ticks
            axis.set_major_locator(log_locator(low, high))
    axis.set_major_formatter(FuncFormatter(plain))
    axis.set_minor_formatter(NullFormatter())  # unlabelled: matplotlib would label some, doubling the text


def log_log_axes(ax: plt.Axes, xs: Sequence[float]) -> None:
    """Log-log axes labelled with plain numbers: the measured x values, and 1-2-5 steps of y."""
    log_axis(ax, "x", xs)
    log_axis(ax, "y")


def bars(ax: plt.Axes, labels: Sequence[str], values: Sequence[float], colours: Sequence[tuple[float, ...]]) -> None:
    """One labelled bar per cell, its value written on it: where a sweep has one x value a line has
    nothing to join, and a lone marker on a log axis hides how far apart the cells are."""
    drawn = ax.bar(range(len(values)), values, color=colours, edgecolor="black", linewidth=0.5)
    ax.bar_label(drawn, labels=[plain(v) for v in values], fontsize=7, padding=2)
    ax.set_xticks(range(len(values)), labels, rotation=25, ha="right", fontsize=8)
    ax.yaxis.set_major_formatter(FuncFormatter(plain))
    ax.margins(y=0.12)  # room above the tallest bar for its value
    ax.grid(True, axis="y", alpha=0.3)


def engine_colour(engine: str, variants: Sequence[str] = ()) -> tuple[float, float, float]:
    """One colour per engine variant, the same in every plot of a run: the variants in the order the
    config declares them (``variants``, config `engines`) take the palette in turn; a variant not
    declared there gets one from a stable hash of its name (never from which engines a plot shows)."""
    if engine in variants:
        return _PALETTE[list(variants).index(engine) % len(_PALETTE)]
    return _PALETTE[zlib.crc32(engine.encode()) % len(_PALETTE)]


def empty_axes(ax: plt.Axes, text: str) -> None:
    """Axes with nothing to draw, saying why."""
    ax.text(0.5, 0.5, text, ha="center", va="center", transform=ax.transAxes)


def save_figure(fig: plt.Figure, path: Path) -> None:
    """``fig`` as a PNG at ``path``, written whole or not at all, then closed."""
    with atomic_path(path) as tmp:
        fig.savefig(tmp, format="png", dpi=110, bbox_inches="tight")
    plt.close(fig)
