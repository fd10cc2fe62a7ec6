"""Sentences for what a study's table shows but does not say: which GPU cells the host's kernel launches held
back (with the GPU's busy share, and what lifted the limit), the memory a GPU cell costs (the allocator's
peak beside the process's), what int8 did on each engine (faster or slower, by how much), and orderings
that contradict the sweep's physics (a longer sequence or a larger batch faster beyond the spread), which
point at a measurement to distrust rather than at a result.

Each takes one workload's cells (summary rows) and a function that words a claim (the report's
``claim_text``): every ratio is the one verdict rule's, at the pair's common boundary, with its interval.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable

import pandas as pd

from inferbench.analysis.decisions import ClaimBasis
from inferbench.analysis.verdicts import Claim, claim
from inferbench.report.tables import cell_name, fmt
from inferbench.report.text import escape_markdown

#: what a claim reads as, in words (inferbench.report.answers.claim_text)
Words = Callable[[Claim], str]
#: a cell's configuration but the axis a sweep moves along
SERIES = ["engine", "precision", "device", "threads"]


def _busy_text(rows: pd.DataFrame) -> str:
    """``GPU busy 41–63%`` over ``rows`` (summary rows), or nothing where no busy share was read."""
    busy = pd.to_numeric(rows.get("gpu_busy_pct", pd.Series(dtype=float)), errors="coerce").dropna()
    if busy.empty:
        return ""
    low, high = f"{busy.min():.0f}", f"{busy.max():.0f}"
    return f" (GPU busy {low}%)" if low == high else f" (GPU busy {low}–{high}%)"


def host_bound_lines(frame: pd.DataFrame, basis: ClaimBasis, words: Words) -> list[str]:
    """Per shape whose GPU cells were host-bound: that their times are the host's, with the GPU's busy share,
    and what lifted the limit where the run measured it (a faster device-bound cell of the same shape: a
    captured graph, a compiled engine), else what would."""
    out: list[str] = []
    gpu = frame[frame["device"] == "cuda"]
    for (batch, seq), shape in gpu.groupby(["batch_size", "seq_len"], sort=True):
        host = shape[shape["bound"] == "host"].sort_values("p50")
        if host.empty:
            continue
        names = ", ".join(escape_markdown(cell_name(r)) for _, r in host.head(3).iterrows())
        names += f" and {len(host) - 3} more" if len(host) > 3 else ""
        where = f"batch {fmt(int(batch))}" + (f", sequence {int(seq)}" if seq else "")
        line = f"- Host-bound at {where}{_busy_text(host)}: {names}; their ratios measure the host."
        # against the fastest host-bound cell: the least that lifting the limit gained
        fastest_host = host.iloc[0]
        lifted = shape[(shape["bound"] == "device") & (shape["p50"] < fastest_host["p50"])].sort_values("p50")
        found = claim(lifted.iloc[0], fastest_host, basis.classes) if not lifted.empty else None
        if found is None:
            out.append(f"{line} No cell here lifted the limit.")
            continue
        out.append(f"{line} Lifted by {escape_markdown(cell_name(lifted.iloc[0]))}: {words(found)} faster.")
    return out


def memory_line(frame: pd.DataFrame) -> list[str]:
    """GPU cells: the allocator's peak beside the process's (the process adds the CUDA context, the libraries'
    workspaces and the allocator's cache), so that "what does it cost in memory" has both figures."""
    gpu = frame[frame["device"] == "cuda"]
    if gpu.empty or "gpu_peak_allocated_mb" not in gpu or "gpu_process_peak_mb" not in gpu:
        return []
    both = gpu.dropna(subset=["gpu_peak_allocated_mb", "gpu_process_peak_mb"])
    if both.empty:
        return []
    allocated, process = both["gpu_peak_allocated_mb"], both["gpu_process_peak_mb"]
    return [
        f"- GPU memory: the allocator's peak {_span(allocated)} MB, the process's {_span(process)} MB "
        "(CUDA context, workspaces, cache)."
    ]


def _span(values: pd.Series) -> str:
    low, high = fmt(float(values.min())), fmt(float(values.max()))
    return low if low == high else f"{low}–{high}"


def int8_lines(frame: pd.DataFrame, basis: ClaimBasis, words: Words) -> list[str]:
    """Per engine and shape with an int8 cell and an fp32 cell: whether int8 made it faster or slower, by how
    much, with the verdict."""
    out = []
    shape = ["engine", "device", "threads", "batch_size", "seq_len"]
    for key, group in frame.groupby(shape, sort=True):
        by_precision = {row["precision"]: row for _, row in group.iterrows()}
        if "int8" not in by_precision or "fp32" not in by_precision:
            continue
        int8, fp32 = by_precision["int8"], by_precision["fp32"]
        found = claim(int8, fp32, basis.classes)
        if found is None:
            continue
        where = f"batch {fmt(int(key[3]))}" + (f", sequence {int(key[4])}" if key[4] else "")
        if not found.significant:
            out.append(f"- int8 on {escape_markdown(str(key[0]))} at {where}: not apart from fp32, {words(found)}.")
            continue
        faster = found.value > 1
        shown = words(found) if faster else words(claim(fp32, int8, basis.classes) or found)
        verdict = "faster" if faster else "slower"
        out.append(f"- int8 on {escape_markdown(str(key[0]))} at {where}: {verdict} than fp32, {shown}.")
    return out


def physics_flags(frame: pd.DataFrame, basis: ClaimBasis, words: Words) -> list[str]:
    """A longer sequence (same batch) or a larger batch (same sequence) whose call is faster beyond the spread:
    the sweep contradicts its physics, so one of the two figures is not what it seems."""
    out = []
    for axis, fixed in (("seq_len", "batch_size"), ("batch_size", "seq_len")):
        for _, series in frame.groupby([*SERIES, fixed], sort=True):
            ordered = series.sort_values(axis)
            rows = [row for _, row in ordered.iterrows()]
            for smaller, larger in itertools.pairwise(rows):
                found = claim(larger, smaller, basis.classes)  # above 1: the larger one is faster
                if found is None or found.value <= 1 or not found.significant:
                    continue
                name = "sequence" if axis == "seq_len" else "batch"
                out.append(
                    f"- Check {escape_markdown(_cell(larger))}: {name} {fmt(int(larger[axis]))} ran faster than "
                    f"{name} {fmt(int(smaller[axis]))}, {words(found)}."
                )
    if out:  # why it is flagged, said once
        out[0] += " More work in less time is suspect."
    return out


def _cell(row: pd.Series) -> str:
    return f"{row['engine']} {row['precision']} {row['device']} b{int(row['batch_size'])} s{int(row['seq_len'])}"
