"""Which GPU measured each GPU cell of a run, and whether any two measurements overlapped (not a test).

    python benchmarks/tools/multi_gpu_check.py results/cells [--expect-gpus 2]

Prints, in Markdown: per GPU UUID the cells and measuring seconds; every GPU cell with its device;
the overlapping measuring windows: two GPUs measuring at once under their own locks (a partitioned host,
inferbench.machine.host_partition), and any other overlap, which must not happen. Exits 1 when a measured
GPU cell names no device, when fewer devices than ``--expect-gpus`` were used, or when windows overlap
against the rule.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from inferbench.analysis.gpu_use import conflicts, measured_windows, overlaps, per_gpu
from inferbench.core.cells import CellRecord


def report(records: list[CellRecord], expect_gpus: int) -> tuple[str, bool]:
    gpu_records = [r for r in records if r.key.device == "cuda"]
    use = per_gpu(gpu_records)
    windows = measured_windows(records)
    shared = conflicts(windows)
    together = sum(s for *_, s in overlaps(windows)) - sum(s for *_, s in shared)
    lines = ["| GPU UUID | cells | processes | measuring s |", "| --- | ---: | ---: | ---: |"]
    lines += [f"| {u} | {v['cells']} | {v['processes']} | {v['measuring_s']:.1f} |" for u, v in sorted(use.items())]
    lines += ["", "| cell | status | GPU UUID (each process) |", "| --- | --- | --- |"]
    for record in sorted(gpu_records, key=lambda r: r.key.cell_id):
        processes = (record.repeats or {}).get("per_repeat") or []
        uuids = ", ".join(sorted({p.get("gpu_uuid") or "?" for p in processes})) or record.environment.get("gpu_uuid")
        lines.append(f"| {record.key.cell_id} | {record.status} | {uuids or '-'} |")
    first, last = (windows[0].start, windows[-1].end) if windows else (0.0, 0.0)
    lines += [
        "",
        f"measuring windows: {len(windows)} (all cells, {last - first:.0f} s from first to last); "
        f"GPUs measuring at once (each under its own lock): {together:.0f} s; overlapping pairs against the "
        f"rule: {len(shared)}",
    ]
    lines += [f"- {a.cell_id} and {b.cell_id} share {s:.3f} s" for a, b, s in shared]
    nameless = [w.cell_id for w in windows if w.gpu_uuid is None and "/cuda/" in w.cell_id]
    good = not shared and not nameless and len(use) >= expect_gpus
    return "\n".join(lines), good


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("cells_dir", type=Path)
    parser.add_argument("--expect-gpus", type=int, default=1)
    args = parser.parse_args()
    records = [CellRecord.load(p) for p in sorted(args.cells_dir.rglob("*.json"))]
    text, good = report(records, args.expect_gpus)
    print(text)
    sys.exit(0 if good else 1)


if __name__ == "__main__":
    main()
