"""Which GPU measured each cell, and whether any two measurements overlapped in time.

With ``--resources gpu=N`` several GPU jobs run at once, each on a device of its own
(inferbench.machine.gpu_slots). Where the host is partitioned each GPU's processes measure on cores of
their own, one GPU at a time under the GPUs' measuring lock while the others set up, or at once, each
under its GPU's lock, where asked (inferbench.machine.host_partition); else one at a time machine-wide
(inferbench.machine.lock). The records say all of it: ``environment.gpu_uuid``
(and each process's in ``repeats.per_repeat``) names the physical device, ``measured_windows_unix`` when
each process measured, ``measuring_lock`` what it held. This module checks them against each other;
``benchmarks/tools/multi_gpu_check.py`` prints the result for a run.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from inferbench.core.cells import CellRecord


@dataclass(frozen=True)
class Window:
    """One process's measuring window, and the lock it held (``machine``; ``gpus``: the GPUs' one;
    ``gpu <id>``: its GPU's own; None in records made before the lock was recorded: machine-wide)."""

    cell_id: str
    gpu_uuid: str | None
    start: float
    end: float
    lock: str | None = None


def measured_windows(records: Iterable[CellRecord]) -> list[Window]:
    """Every process's measuring window of the measured records (ok or invalid), by start time."""
    windows = []
    for record in records:
        if record.status not in ("ok", "invalid"):
            continue
        processes = (record.repeats or {}).get("per_repeat") or [{}]
        spans = record.measured_windows_unix or []
        for index, (start, end) in enumerate(spans):
            process = processes[index] if index < len(processes) else {}
            uuid = process.get("gpu_uuid") or record.environment.get("gpu_uuid")
            lock = process.get("measuring_lock") or (record.measuring or {}).get("lock")
            windows.append(Window(record.key.cell_id, uuid, start, end, lock))
    return sorted(windows, key=lambda w: w.start)


def overlaps(windows: list[Window]) -> list[tuple[Window, Window, float]]:
    """Pairs of windows of different processes that overlap, with the seconds they share."""
    found = []
    ordered = sorted(windows, key=lambda w: w.start)
    for i, first in enumerate(ordered):
        for second in ordered[i + 1 :]:
            if second.start >= first.end:
                break  # sorted by start: no later window reaches back into this one
            found.append((first, second, min(first.end, second.end) - second.start))
    return found


def conflicts(windows: list[Window]) -> list[tuple[Window, Window, float]]:
    """The overlapping pairs that break the rule: any but two GPUs measuring at once, each under its own
    GPU's lock (a machine-wide measurement overlaps nothing; one GPU measures one cell at a time)."""
    return [
        (a, b, shared)
        for a, b, shared in overlaps(windows)
        if not (str(a.lock).startswith("gpu ") and str(b.lock).startswith("gpu ") and a.lock != b.lock)
    ]


def per_gpu(records: Iterable[CellRecord]) -> dict[str, dict[str, float]]:
    """Per GPU UUID: the cells measured on it and their summed measuring seconds (GPU cells only)."""
    use: dict[str, dict[str, float]] = {}
    cells: dict[str, set[str]] = {}
    for window in measured_windows(r for r in records if r.key.device == "cuda"):
        uuid = window.gpu_uuid or "unknown"
        entry = use.setdefault(uuid, {"cells": 0, "processes": 0, "measuring_s": 0.0})
        entry["processes"] += 1
        entry["measuring_s"] += window.end - window.start
        cells.setdefault(uuid, set()).add(window.cell_id)
        entry["cells"] = len(cells[uuid])
    return use
