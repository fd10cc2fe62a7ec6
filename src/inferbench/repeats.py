"""``measure.repeats``: measure a cell in several fresh processes and report the spread between them.

Within one process, the confidence interval of a percentile says how well the calls pin it down;
it says nothing about the next process, whose memory layout, clocks, thread placement and caches
differ. Each repeat is a full ``run-cell`` in its own interpreter (under the machine lock like any
cell); the merged record pools their samples for its percentiles and keeps each repeat's headline
numbers, with the spread of their medians: the number a reader needs to trust a difference.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from inferbench.cells import CellRecord


def spread_pct(values: Sequence[float | None]) -> float | None:
    """(max - min) / median of the values, in percent; None with fewer than two values."""
    present = [v for v in values if v is not None]
    if len(present) < 2:
        return None
    median = float(np.median(present))
    return 100.0 * (max(present) - min(present)) / median if median > 0 else None


def merge_repeats(
    records: list[CellRecord], samples: list[dict[str, np.ndarray]]
) -> tuple[CellRecord, dict[str, np.ndarray]]:
    """One record from the records of fresh-process repeats of one cell.

    Percentiles, CIs and throughput come from the pooled samples of every repeat that measured; cold
    start is the first repeat's (later ones may find compile caches warm); peak memory is the
    largest; the status is the first non-ok one, naming its repeat, so a flaky cell is not hidden.
    """
    from inferbench.measure.stats import latency_stats

    if not records:
        raise ValueError("no repeats to merge")
    first = records[0]
    per_repeat = [
        {
            "status": r.status,
            "p50_ms": (r.latency_ms or {}).get("p50"),
            "e2e_p50_ms": ((r.end_to_end or {}).get("latency_ms") or {}).get("p50"),
            "cold_start_s": sum(r.cold_start_s.values()) if r.cold_start_s else None,
            "hostname": r.environment.get("hostname"),
            # what may explain a spread: the host's steal and busy shares, the GPU's clock
            "host_steal_pct": (r.host_telemetry or {}).get("steal_pct"),
            "host_busy_pct": (r.host_telemetry or {}).get("busy_pct"),
            "involuntary_switches": (r.host_telemetry or {}).get("involuntary_switches"),
            "gpu_sm_clock_mean_mhz": ((r.gpu_telemetry or {}).get("sm_clock_mhz") or {}).get("mean"),
        }
        for r in records
    ]
    summary = {
        "n": len(records),
        "per_repeat": per_repeat,
        "p50_spread_pct": spread_pct([r["p50_ms"] for r in per_repeat]),
        "e2e_p50_spread_pct": spread_pct([r["e2e_p50_ms"] for r in per_repeat]),
        "description": "each repeat is a fresh process; spread = (max - min) / median of the repeats' p50",
    }
    bad = next(((i, r) for i, r in enumerate(records) if r.status != "ok"), None)
    if bad is not None:
        index, record = bad
        reason = f"repeat {index + 1} of {len(records)}: {record.reason}"
        return replace(record, reason=reason, repeats=summary), samples[index]

    pooled = {b: np.concatenate([s[b] for s in samples]) for b in ("device", "end_to_end")}
    items = first.items_per_call or first.key.batch_size
    stats = latency_stats(pooled["device"], items)
    e2e = latency_stats(pooled["end_to_end"], items)
    memory = {
        name: max((v for r in records if (v := r.memory_mb.get(name)) is not None), default=None)
        for name in first.memory_mb
    }
    merged = replace(
        first,
        latency_ms=stats["latency_ms"],
        latency_ci95_ms=stats["latency_ci95_ms"],
        cv=stats["cv"],
        throughput_per_s=stats["throughput_per_s"],
        n_iters=stats["n_iters"],
        warmup_iters=sum(r.warmup_iters or 0 for r in records),
        measured_s=sum(r.measured_s or 0.0 for r in records),
        end_to_end={
            **(first.end_to_end or {}),
            **{k: e2e[k] for k in ("latency_ms", "latency_ci95_ms", "cv", "n_iters", "throughput_per_s")},
        },
        memory_mb=memory,
        repeats=summary,
    )
    return merged, pooled


def run_repeats(child_argv: Sequence[str], n: int, out: Path) -> tuple[CellRecord, dict[str, np.ndarray]]:
    """Run ``python -m inferbench run-cell <child_argv> --out <tmp>`` ``n`` times, one after another,
    each in a fresh interpreter, and merge their records."""
    from inferbench.cell_runner import samples_path

    records, samples = [], []
    out.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="repeats-", dir=out.parent) as tmp:
        for i in range(n):
            rep_out = Path(tmp) / f"repeat{i}.json"
            cmd = [sys.executable, "-m", "inferbench", "run-cell", *child_argv, "--out", str(rep_out)]
            print(f"repeat {i + 1}/{n}: fresh process", flush=True)
            completed = subprocess.run(cmd, check=False)
            if not rep_out.exists():  # run-cell writes a record whatever happens; this is a crash
                raise RuntimeError(f"repeat {i + 1} exited with {completed.returncode} and wrote no record")
            records.append(CellRecord.load(rep_out))
            samples.append({b: np.load(samples_path(rep_out, b)) for b in ("device", "end_to_end")})
    return merge_repeats(records, samples)


def child_measure(measure: dict[str, Any]) -> str:
    """The measure settings of one repeat: the same, measured once."""
    return json.dumps({**measure, "repeats": 1}, sort_keys=True)
