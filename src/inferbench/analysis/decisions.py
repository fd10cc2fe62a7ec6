"""The answers a reader of a benchmark wants, computed from summary rows (one row per cell).

Every function takes the summary frame (inferbench.analysis.summary) and uses only measured cells
(status ``ok``; ``invalid`` cells failed the parity gate and never count as a win). Latencies are
p50 milliseconds; where two devices are compared, the end-to-end boundary is used, since only it
includes moving the data to the GPU and back.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pandas as pd

#: the engine variant every speed-up is measured against
BASELINE_ENGINE, BASELINE_PRECISION = "torch_eager", "fp32"
#: one-off costs paid outside the cell's own process (ONNX export and conversion, TensorRT build)
EXTERNAL_COLD_START = ("export_s", "simplify_s", "convert_s", "build_s")


def measured(summary: pd.DataFrame) -> pd.DataFrame:
    ok = summary[summary["status"] == "ok"]
    if "mode" in ok:
        ok = ok[ok["mode"] != "train"]
    return ok[ok["engine_impl"] != "noop"]


def e2e_p50_ms(frame: pd.DataFrame) -> pd.Series:
    """End-to-end p50 per call; the engine's own p50 where the engine's boundary is already end to end."""
    e2e = frame["e2e_latency_p50_ms"] if "e2e_latency_p50_ms" in frame else frame["latency_p50_ms"]
    return e2e.fillna(frame["latency_p50_ms"])


def e2e_per_item_ms(frame: pd.DataFrame) -> pd.Series:
    return e2e_p50_ms(frame) / frame["batch_size"]


def crossover_batch(batches: list[float], cpu_ms: list[float], gpu_ms: list[float]) -> float | None:
    """The batch size where the GPU's latency per item falls below the CPU's, interpolated linearly
    in log(batch) on log(cpu / gpu). ``None`` when the sign never changes in the measured range."""
    x = np.log(np.asarray(batches, dtype=float))
    ratio = np.log(np.asarray(cpu_ms, dtype=float) / np.asarray(gpu_ms, dtype=float))  # > 0: GPU faster
    for i in range(len(x) - 1):
        if ratio[i] <= 0 < ratio[i + 1]:
            if ratio[i] == 0:
                return float(math.exp(x[i]))
            t = -ratio[i] / (ratio[i + 1] - ratio[i])
            return float(math.exp(x[i] + t * (x[i + 1] - x[i])))
    return None


def cpu_gpu_crossovers(summary: pd.DataFrame) -> pd.DataFrame:
    """Per workload (and sequence length): from which batch size the GPU beats the CPU per item.

    Each device's curve is its best engine at each batch (lowest end-to-end p50 per item), over the
    batch sizes measured on both devices. ``verdict`` says what the range shows when there is no
    crossing inside it."""
    ok = measured(summary).assign(per_item_ms=e2e_per_item_ms)
    rows = []
    for (workload, seq), cells in ok.groupby(["workload", "seq_len"]):
        best = cells.groupby(["device", "batch_size"])["per_item_ms"].min().unstack(0)
        if not {"cpu", "cuda"} <= set(best.columns):
            continue
        both = best[["cpu", "cuda"]].dropna().sort_index()
        if both.empty:
            continue
        batches = list(both.index)
        crossing = crossover_batch(batches, list(both["cpu"]), list(both["cuda"]))
        if crossing is not None:
            verdict = f"GPU faster from batch ≈{crossing:.3g}"
        elif (both["cuda"] < both["cpu"]).all():
            verdict = f"GPU faster at every measured batch ({batches[0]}-{batches[-1]})"
        elif (both["cuda"] >= both["cpu"]).all():
            verdict = f"CPU as fast or faster at every measured batch ({batches[0]}-{batches[-1]})"
        else:
            verdict = "GPU faster at small batches only"
        rows.append(
            {"workload": workload, "seq_len": seq, "batches": batches, "crossover_batch": crossing, "verdict": verdict}
        )
    return pd.DataFrame(rows, columns=["workload", "seq_len", "batches", "crossover_batch", "verdict"])


def best_cells(summary: pd.DataFrame) -> pd.DataFrame:
    """The fastest engine, precision and device per workload x batch x sequence length (device p50)."""
    ok = measured(summary)
    if ok.empty:
        return ok
    index = ok.groupby(["workload", "batch_size", "seq_len"])["latency_p50_ms"].idxmin()
    return ok.loc[index, ["workload", "batch_size", "seq_len", "engine", "precision", "device", "latency_p50_ms"]]


def pareto_front(
    points: pd.DataFrame, latency: str = "latency_p50_ms", throughput: str = "throughput_per_s"
) -> pd.DataFrame:
    """Rows no other row beats on both lower latency and higher throughput, by latency."""
    ordered = points.sort_values([latency, throughput], ascending=[True, False])
    front, best_throughput = [], -math.inf
    for index, row in ordered.iterrows():
        if row[throughput] > best_throughput:
            front.append(index)
            best_throughput = row[throughput]
    return ordered.loc[front]


def speedups(summary: pd.DataFrame) -> pd.DataFrame:
    """Each cell's p50 speed-up over FP32 eager PyTorch at the same workload, device, batch, sequence
    length and threads, with an interval from the two 95% CIs of p50: [base_low / cell_high,
    base_high / cell_low], which covers the ratio with at least 90% confidence (two 95% intervals)."""
    ok = measured(summary)
    key = ["workload", "device", "batch_size", "seq_len", "threads"]
    base = ok[(ok["engine"] == BASELINE_ENGINE) & (ok["precision"] == BASELINE_PRECISION)].set_index(key)
    rows = []
    for row in ok.itertuples(index=False):
        k = tuple(getattr(row, c) for c in key)
        if k not in base.index or (row.engine == BASELINE_ENGINE and row.precision == BASELINE_PRECISION):
            continue
        b = base.loc[k]
        rows.append(
            {
                **dict(zip(key, k, strict=True)),
                "engine": row.engine,
                "precision": row.precision,
                "speedup": b["latency_p50_ms"] / row.latency_p50_ms,
                "speedup_low": _ratio(b.get("latency_p50_ci95_low_ms"), getattr(row, "latency_p50_ci95_high_ms", None)),
                "speedup_high": _ratio(
                    b.get("latency_p50_ci95_high_ms"), getattr(row, "latency_p50_ci95_low_ms", None)
                ),
            }
        )
    return pd.DataFrame(rows)


def _ratio(numerator: Any, denominator: Any) -> float | None:
    if numerator is None or denominator is None or pd.isna(numerator) or pd.isna(denominator) or denominator <= 0:
        return None
    return float(numerator) / float(denominator)


def seq_scaling(summary: pd.DataFrame) -> pd.DataFrame:
    """The exponent k of latency ∝ seq_len^k per text cell series (least squares in log-log), with
    its R²; series with fewer than two sequence lengths are left out."""
    ok = measured(summary)
    ok = ok[ok["seq_len"] > 0]
    rows = []
    for key, series in ok.groupby(["workload", "engine", "precision", "device", "batch_size", "threads"]):
        if series["seq_len"].nunique() < 2:
            continue
        x, y = np.log(series["seq_len"].to_numpy(float)), np.log(series["latency_p50_ms"].to_numpy(float))
        slope, intercept = np.polyfit(x, y, 1)
        residual = y - (slope * x + intercept)
        total = ((y - y.mean()) ** 2).sum()
        r2 = 1 - (residual**2).sum() / total if total > 0 else 1.0
        names = ["workload", "engine", "precision", "device", "batch_size", "threads"]
        rows.append(
            {**dict(zip(names, key, strict=True)), "exponent": float(slope), "r2": float(r2), "points": len(series)}
        )
    return pd.DataFrame(rows)


def cold_start_total_s(row: Any) -> float | None:
    """Seconds before a cell's first answer: its preparation and first call, plus the one-off costs
    paid in other jobs (ONNX export, simplification, conversion; TensorRT build)."""
    values = [getattr(row, "prepare_s", None), getattr(row, "first_call_s", None)]
    if any(v is None or pd.isna(v) for v in values):
        return None
    extra = [getattr(row, name, None) for name in EXTERNAL_COLD_START]
    return float(sum(values) + sum(v for v in extra if v is not None and not pd.isna(v)))


def break_even(summary: pd.DataFrame) -> pd.DataFrame:
    """After how many inferences an engine's extra cold start (compile, capture, build, export...)
    is paid back by its faster calls, against FP32 eager at the same workload, device, batch,
    sequence length and threads: extra cold-start seconds / seconds saved per call. ``None`` where
    the engine is not faster (it never pays back) or starts no slower (it pays from the first call)."""
    ok = measured(summary)
    key = ["workload", "device", "batch_size", "seq_len", "threads"]
    base = {
        tuple(getattr(r, c) for c in key): r
        for r in ok.itertuples(index=False)
        if r.engine == BASELINE_ENGINE and r.precision == BASELINE_PRECISION
    }
    rows = []
    for row in ok.itertuples(index=False):
        k = tuple(getattr(row, c) for c in key)
        b = base.get(k)
        if b is None or (row.engine == BASELINE_ENGINE and row.precision == BASELINE_PRECISION):
            continue
        cold, base_cold = cold_start_total_s(row), cold_start_total_s(b)
        if cold is None or base_cold is None:
            continue
        extra_s, saved_s = cold - base_cold, (b.latency_p50_ms - row.latency_p50_ms) / 1e3
        if saved_s <= 0:
            inferences, verdict = None, "never: not faster per call"
        elif extra_s <= 0:
            inferences, verdict = 0.0, "from the first call: no extra start-up"
        else:
            inferences = extra_s / saved_s
            verdict = f"after {math.ceil(inferences):,} calls"
        rows.append(
            {
                **dict(zip(key, k, strict=True)),
                "engine": row.engine,
                "precision": row.precision,
                "extra_cold_start_s": extra_s,
                "saved_ms_per_call": saved_s * 1e3,
                "break_even_calls": inferences,
                "verdict": verdict,
            }
        )
    return pd.DataFrame(rows)
