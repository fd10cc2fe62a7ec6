"""Each analysis on a synthetic summary whose answer is known."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from inferbench.analysis.decisions import (
    BASELINE_ENGINE,
    best_cells,
    break_even,
    cpu_gpu_crossovers,
    crossover_batch,
    pareto_front,
    seq_scaling,
    speedups,
)


def cell(**values) -> dict:
    row = {
        "workload": "resnet50", "engine": "torch_eager", "engine_impl": "torch_eager", "precision": "fp32",
        "device": "cpu", "batch_size": 1, "seq_len": 0, "threads": 2, "status": "ok", "mode": "inference",
        "latency_p50_ms": 10.0, "latency_p50_ci95_low_ms": None, "latency_p50_ci95_high_ms": None,
        "e2e_latency_p50_ms": None, "throughput_per_s": 100.0, "prepare_s": 1.0, "first_call_s": 0.1,
    }  # fmt: skip
    row.update(values)
    if row["e2e_latency_p50_ms"] is None:
        row["e2e_latency_p50_ms"] = row["latency_p50_ms"]
    return row


def test_crossover_is_interpolated_in_log_batch():
    # GPU per item = 3 / batch, CPU = 1 per item: equal at batch 3 exactly (log-linear in between)
    batches = [1, 2, 4, 8]
    assert crossover_batch(batches, [1.0] * 4, [3 / b for b in batches]) == pytest.approx(3.0)
    assert crossover_batch(batches, [1.0] * 4, [4.0, 2.0, 1.0, 0.5]) == pytest.approx(4.0)  # equal at 4
    assert crossover_batch(batches, [1.0] * 4, [0.5] * 4) is None  # GPU always faster


def test_cpu_gpu_crossover_per_workload_uses_each_devices_best_engine_end_to_end():
    rows = []
    for b in (1, 2, 4, 8, 16):
        rows.append(cell(batch_size=b, e2e_latency_p50_ms=1.0 * b, latency_p50_ms=1.0 * b))  # 1 ms/item
        rows.append(cell(engine="ort_cpu", engine_impl="ort_cpu", batch_size=b, latency_p50_ms=2.0 * b))  # worse
        # GPU: device time tiny, but end to end 8 ms per call: per item 8 / b, crossing at b = 8
        rows.append(cell(device="cuda", threads=0, batch_size=b, latency_p50_ms=0.1, e2e_latency_p50_ms=8.0))
    rows.append(cell(workload="vit_b16", device="cuda", threads=0, latency_p50_ms=0.5))  # no CPU twin
    result = cpu_gpu_crossovers(pd.DataFrame(rows))
    assert list(result["workload"]) == ["resnet50"]
    assert result.iloc[0]["crossover_batch"] == pytest.approx(8.0)
    assert "from batch ≈8" in result.iloc[0]["verdict"]


def test_best_cell_and_pareto_front():
    frame = pd.DataFrame(
        [
            cell(engine="a", latency_p50_ms=1.0, throughput_per_s=10.0),
            cell(engine="b", latency_p50_ms=2.0, throughput_per_s=20.0),
            cell(engine="c", latency_p50_ms=3.0, throughput_per_s=15.0),  # dominated by b
            cell(engine="d", latency_p50_ms=2.0, throughput_per_s=5.0),  # dominated by a and b
            cell(engine="e", latency_p50_ms=0.5, status="invalid"),  # failed parity: never best
        ]
    )
    assert best_cells(frame).iloc[0]["engine"] == "a"
    assert list(pareto_front(frame[frame["status"] == "ok"])["engine"]) == ["a", "b"]


def test_speedup_over_fp32_eager_with_an_interval_from_both_cis():
    frame = pd.DataFrame(
        [
            cell(latency_p50_ms=10.0, latency_p50_ci95_low_ms=9.0, latency_p50_ci95_high_ms=11.0),
            cell(engine="ort_cpu", engine_impl="ort_cpu", latency_p50_ms=5.0, latency_p50_ci95_low_ms=4.5,
                 latency_p50_ci95_high_ms=5.5),
            cell(engine="ort_cpu", engine_impl="ort_cpu", batch_size=4, latency_p50_ms=1.0),  # no baseline
        ]
    )  # fmt: skip
    result = speedups(frame)
    assert len(result) == 1
    row = result.iloc[0]
    assert row["speedup"] == pytest.approx(2.0)
    assert row["speedup_low"] == pytest.approx(9.0 / 5.5) and row["speedup_high"] == pytest.approx(11.0 / 4.5)


def test_sequence_length_scaling_exponent():
    rows = [cell(workload="bert_base", seq_len=s, latency_p50_ms=2.0 * s**1.5) for s in (32, 64, 128, 256)]
    rows.append(cell(workload="bert_base", engine="x", seq_len=128))  # one point: no fit
    result = seq_scaling(pd.DataFrame(rows))
    assert len(result) == 1
    assert result.iloc[0]["exponent"] == pytest.approx(1.5) and result.iloc[0]["r2"] == pytest.approx(1.0)


def test_break_even_counts_calls_until_a_compile_pays_for_itself():
    frame = pd.DataFrame(
        [
            cell(latency_p50_ms=10.0, prepare_s=1.0, first_call_s=0.1),
            # 30 s more start-up, 5 ms saved per call: 6,000 calls
            cell(engine="compiled", engine_impl="torch_compile", latency_p50_ms=5.0, prepare_s=31.0, first_call_s=0.1),
            # ORT: its export (outside the cell) counts too: 2 + 1 + 1 s more, 8 ms saved: 500 calls
            cell(engine="ort_cpu", engine_impl="ort_cpu", latency_p50_ms=2.0, prepare_s=3.0, first_call_s=0.1,
                 export_s=1.0, simplify_s=1.0),
            cell(engine="slow", engine_impl="x", latency_p50_ms=12.0, prepare_s=0.5, first_call_s=0.1),
        ]
    )  # fmt: skip
    result = break_even(frame).set_index("engine")
    assert BASELINE_ENGINE not in result.index  # the baseline is not compared with itself
    assert result.loc["compiled", "break_even_calls"] == pytest.approx(6000.0)
    assert result.loc["compiled", "verdict"] == "after 6,000 calls"
    assert result.loc["ort_cpu", "break_even_calls"] == pytest.approx(500.0)
    assert math.isnan(result.loc["slow", "break_even_calls"]) and result.loc["slow", "verdict"].startswith("never")
