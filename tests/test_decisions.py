"""Each analysis on a synthetic summary whose answer is known."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from inferbench.analysis.comparison import ClassSpreads, boundary_of, compare, spread_at
from inferbench.analysis.decisions import (
    BASELINE_ENGINE,
    best_cells,
    break_even,
    cpu_gpu_crossovers,
    crossover_batch,
    crossover_bracket,
    pareto_front,
    seq_scaling,
    speedups,
    workload_front,
)
from inferbench.analysis.uncertainty import CellSpread, ratio
from inferbench.analysis.verdicts import Claim

pytestmark = pytest.mark.fast  # pure logic: the developer's loop (docs/contributing.md)

RESULTS = Path(__file__).resolve().parents[1] / "docs" / "results" / "h100"


def cell(**values) -> dict:
    row = {
        "workload": "resnet50", "engine": "torch_eager", "engine_impl": "torch_eager", "precision": "fp32",
        "device": "cpu", "batch_size": 1, "seq_len": 0, "threads": 2, "status": "ok", "mode": "inference",
        "latency_p50_ms": 10.0, "latency_p50_ci95_low_ms": None, "latency_p50_ci95_high_ms": None,
        "e2e_latency_p50_ms": None, "throughput_per_s": 100.0, "prepare_s": 1.0, "first_call_s": 0.1,
        "import_s": 5.0, "timing": "device",
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
    assert result.iloc[0]["verdict"] == "GPU as fast as the CPU at batch 8, faster above"


def test_a_crossover_is_reported_as_its_measured_bracket_with_the_interpolation_named():
    # CPU 0.145 ms per call at 1,000 and 1.45 at 10,000; GPU 0.165 and 1.3: equal in between
    assert crossover_bracket([1000, 10000], [0.145e-3, 0.145e-3], [0.165e-3, 0.13e-3])[:2] == (1000.0, 10000.0)
    rows = [cell(workload="mlp_lendingclub", engine="ort_cpu", batch_size=b, latency_p50_ms=0.145 * b / 1000)
            for b in (1000, 10000)]  # fmt: skip
    rows += [cell(workload="mlp_lendingclub", engine="ort_cuda", device="cuda", threads=0, batch_size=1000,
                  latency_p50_ms=0.1, e2e_latency_p50_ms=0.165),
             cell(workload="mlp_lendingclub", engine="ort_cuda", device="cuda", threads=0, batch_size=10000,
                  latency_p50_ms=0.5, e2e_latency_p50_ms=1.30)]  # fmt: skip
    verdict = cpu_gpu_crossovers(pd.DataFrame(rows)).iloc[0]["verdict"]
    assert verdict.startswith("GPU faster from a batch between 1,000 and 10,000 (about 3,483 interpolated")
    assert "interpolated" in verdict and "e+" not in verdict


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
    best = best_cells(frame).iloc[0]
    assert best["engine"] == "a" and best["boundary"] == "device" and best["runner_up"].startswith("b ")
    assert best["verdict"] == "spread between processes unknown: 1 process"
    assert list(pareto_front(frame[frame["status"] == "ok"])["engine"]) == ["a", "b"]


def processes(*p50s: float) -> str:
    return ";".join(str(v) for v in p50s)


def test_the_spread_between_leases_is_not_averaged_away_by_more_processes():
    """A lease shifts all of a run's processes together: 30 processes pin the run's p50 down, not the
    next lease's. The interval's half-width in log is at least 1.96 x the two cells' lease spreads."""
    lease_sd = 0.1
    for n in (3, 30):
        a = CellSpread(0.0, 0.01, n).with_shift(lease_sd)
        b = CellSpread(math.log(2.0), 0.01, n).with_shift(lease_sd)
        result = ratio(a, b)
        assert math.log(result.high / result.low) / 2 >= 1.96 * math.sqrt(2) * lease_sd
    alone = ratio(CellSpread(0.0, 0.01, 30), CellSpread(math.log(2.0), 0.01, 30))
    assert math.log(alone.high / alone.low) / 2 < 0.02, "without leases: the processes' spread over their count"


def test_speedup_interval_is_welchs_on_the_processes_log_p50s():
    base_p50s, cell_p50s = [10.0, 10.4, 9.7], [5.0, 5.2, 4.8]  # each cell's processes in its fast mode
    gpu = {"device": "cuda", "threads": 0, "bound": "device"}
    frame = pd.DataFrame(
        [
            cell(latency_p50_ms=10.0, p50_by_process_ms=processes(*base_p50s), **gpu),
            cell(engine="ort_cuda", engine_impl="ort_cuda", latency_p50_ms=5.0, p50_by_process_ms=processes(*cell_p50s),
                 **gpu),
            cell(engine="ort_cuda", engine_impl="ort_cuda", batch_size=4, latency_p50_ms=1.0, **gpu),  # no baseline
        ]
    )  # fmt: skip
    row = speedups(frame).iloc[0]
    assert len(speedups(frame)) == 1
    # the cells' figures: the geometric means of their processes' p50s
    shown = math.exp(np.mean(np.log(base_p50s)) - np.mean(np.log(cell_p50s)))
    assert row["speedup"] == pytest.approx(shown) and row["boundary"] == "device" and row["significant"]
    # without class floors: the same interval as SciPy's own Welch test
    welch = stats.ttest_ind(np.log(base_p50s), np.log(cell_p50s), equal_var=False).confidence_interval()
    shift = 0.0
    plain = compare(frame.iloc[1], frame.iloc[0])
    assert plain.low == pytest.approx(math.exp(welch.low + shift))
    assert plain.high == pytest.approx(math.exp(welch.high + shift))
    # with them (speedups): the quieter cell takes the class's pooled spread and its degrees of freedom
    floors = ClassSpreads.of(frame)
    assert (row["speedup_low"], row["speedup_high"]) == pytest.approx(
        (
            compare(frame.iloc[1], frame.iloc[0], classes=floors).low,
            compare(frame.iloc[1], frame.iloc[0], classes=floors).high,
        )
    )


def test_a_quiet_cells_spread_is_moderated_towards_its_class_continuously():
    """Two quiet CPU cells 15% apart, beside CPU cells whose processes spread by 40%: each quiet cell's
    spread lies between its own and its class's, and grows with the class's (no jump where a cell's own
    pair disagrees a little more than the class's)."""
    quiet_a = cell(engine="a", latency_p50_ms=1.0, p50_by_process_ms=processes(1.0, 1.001))
    quiet_b = cell(engine="b", latency_p50_ms=1.15, p50_by_process_ms=processes(1.15, 1.151))

    def noisy(high: float) -> list[dict]:
        return [cell(engine=f"n{i}", batch_size=4, latency_p50_ms=5.0, p50_by_process_ms=processes(4.0, high + i / 10))
                for i in range(4)]  # fmt: skip

    alone = pd.DataFrame([quiet_a, quiet_b])
    assert compare(quiet_a, quiet_b, classes=ClassSpreads.of(alone)).significant
    own = spread_at(quiet_a, "device")
    widths = []
    for high in (4.5, 5.0, 6.0, 8.0):
        classes = ClassSpreads.of(pd.DataFrame([quiet_a, quiet_b, *noisy(high)]))
        moderated = spread_at(quiet_a, "device", classes)
        assert own.sd_log < moderated.sd_log < classes.get(quiet_a, "device").pooled_sd_log
        assert moderated.degrees() > own.degrees()
        widths.append(moderated.sd_log)
    assert widths == sorted(widths)
    # a device-bound GPU cell is not moderated by the CPU's class
    gpu = cell(engine="g", device="cuda", threads=0, bound="device", p50_by_process_ms=processes(1.0, 1.001))
    assert classes.get(gpu, "device") is None


def test_spread_between_processes_widens_what_one_process_calls_exact():
    """The published case: BERT-base eager b1 at 7.61 and 4.53 ms in two processes, each with a CI of
    about 1%. Against a cell 30% faster, one process's CI would call it; the processes do not. The cell's
    figure is its fast mode's (4.53 ms), and its spread every process's: it decides nothing."""
    narrow = {"latency_p50_ci95_low_ms": 7.55, "latency_p50_ci95_high_ms": 7.67}
    one = ratio(CellSpread.from_processes([7.61], 7.55, 7.67), CellSpread.from_processes([5.3], 5.27, 5.33))
    assert not one.known and one.significant is False
    assert Claim("device", one).verdict == "spread between processes unknown: 1 process"
    eager = cell(latency_p50_ms=6.0, p50_by_process_ms=processes(7.61, 4.53), **narrow)
    faster = cell(engine="graph", latency_p50_ms=4.6, p50_by_process_ms=processes(4.62, 4.58))
    result = compare(faster, eager)
    assert result.value == pytest.approx(4.53 / math.sqrt(4.62 * 4.58)) and result.known and not result.significant
    assert result.low < 1 < result.high
    # two steady device-bound cells 10% apart are told apart with two processes each
    steady = compare(cell(latency_p50_ms=2.61, p50_by_process_ms=processes(2.605, 2.623)),
                     cell(latency_p50_ms=2.87, p50_by_process_ms=processes(2.870, 2.874)))  # fmt: skip
    assert steady.significant and 1.05 < steady.low < steady.high < 1.15


def test_a_cells_spread_is_never_below_one_processs_sampling_error():
    # two processes that agree exactly, but each p50 is only known to +-5%: the spread keeps that
    spread = CellSpread.from_processes([10.0, 10.0], ci_low=9.65, ci_high=10.35)
    assert spread.sd_log == pytest.approx(math.log(10.35 / 9.65) / (2 * 1.959964) * math.sqrt(2), rel=1e-4)


def test_one_boundary_rule_for_every_comparison():
    device = cell(device="cuda", threads=0)
    host_to_host = cell(engine="ort_cuda_host", device="cuda", threads=0, timing="end_to_end")
    assert boundary_of([device, cell(engine="x", device="cuda", threads=0)]) == "device"
    assert boundary_of([device, host_to_host]) == "end_to_end", "either engine's own boundary is end to end"
    assert boundary_of([device, cell()]) == "end_to_end", "the devices differ"


def test_published_contradiction_heart_mlp_b1024_is_compared_end_to_end():
    """default/report.md gave ort_cuda_host 0.943x over eager at mlp_heart b1024 (device p50 of eager
    against ORT's host-to-host p50); end to end ORT is 1.44x faster, as its README said. (That report
    was rendered from the run now in measurement/.)"""
    summary = pd.read_csv(RESULTS / "measurement" / "summary.csv")
    result = speedups(summary)
    row = result[(result["workload"] == "mlp_heart") & (result["engine"] == "ort_cuda_host")
                 & (result["batch_size"] == 1024)].iloc[0]  # fmt: skip
    assert row["boundary"] == "end_to_end"
    assert row["speedup"] == pytest.approx(0.180427 / 0.125175, rel=1e-4)


def test_published_contradiction_fastest_lendingclub_b1000_is_ort_cpu_end_to_end():
    """full/report.md named ort_cuda (device p50) fastest at mlp_lendingclub b1000; end to end, the
    boundary a CPU and a GPU cell share, ort_cpu wins (0.145 against 0.165 ms)."""
    best = best_cells(pd.read_csv(RESULTS / "full" / "2026-11-23" / "summary.csv"))
    row = best[(best["workload"] == "mlp_lendingclub") & (best["batch_size"] == 1000)].iloc[0]
    assert (row["engine"], row["device"], row["boundary"]) == ("ort_cpu", "cpu", "end_to_end")
    assert row["p50_ms"] == pytest.approx(0.144864, rel=1e-4)


def test_pareto_front_across_devices_is_end_to_end():
    cells = pd.DataFrame(
        [
            cell(engine="gpu", device="cuda", threads=0, latency_p50_ms=0.1, e2e_latency_p50_ms=5.0,
                 throughput_per_s=1000.0, e2e_throughput_per_s=20.0),
            cell(engine="cpu", latency_p50_ms=1.0, throughput_per_s=100.0, e2e_throughput_per_s=90.0),
        ]
    )  # fmt: skip
    boundary, front = workload_front(cells)
    assert boundary == "end_to_end" and list(front["engine"]) == ["cpu"], "the GPU cell's device p50 does not count"


def test_sequence_length_scaling_exponent():
    rows = [cell(workload="bert_base", seq_len=s, latency_p50_ms=2.0 * s**1.5) for s in (32, 64, 128, 256)]
    rows.append(cell(workload="bert_base", engine="x", seq_len=128))  # one point: left out
    rows += [cell(workload="bert_base", engine="two", seq_len=s, latency_p50_ms=s) for s in (64, 128)]
    result = seq_scaling(pd.DataFrame(rows)).set_index("engine")
    assert list(result.index) == ["torch_eager", "two"]
    assert result.loc["torch_eager", "exponent"] == pytest.approx(1.5)
    assert result.loc["torch_eager", "r2"] == pytest.approx(1.0)
    assert pd.isna(result.loc["two", "exponent"]) and result.loc["two", "points"] == 2, "no fit to two lengths"


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


def test_break_even_leaves_imports_out_and_needs_them_timed_apart():
    # the compiled cell's process imported for 9 s, the baseline's for 4 s: not the engine's cost
    frame = pd.DataFrame(
        [
            cell(latency_p50_ms=10.0, prepare_s=1.0, first_call_s=0.1, import_s=4.0),
            cell(engine="compiled", engine_impl="torch_compile", latency_p50_ms=5.0, prepare_s=11.0, first_call_s=0.1,
                 import_s=9.0),
        ]
    )  # fmt: skip
    assert break_even(frame).iloc[0]["break_even_calls"] == pytest.approx(2000.0)
    assert break_even(frame.drop(columns="import_s")).empty, "cold start with imports in it: no verdict"


def test_a_host_input_change_is_judged_end_to_end_where_it_acts_and_alone():
    """Pinned, fp16 host inputs change what happens before the device computes: the step from the naive
    path is a claim at the end-to-end boundary, even where both cells were also timed on the device."""
    from inferbench.analysis.decisions import option_steps

    same = {"device": "cuda", "threads": 0, "precision": "fp16", "engine_impl": "torch_compile", "graph": "inductor",
            "compile_mode": "default", "precision_mode": "cast", "channels_last": True, "cuda_graph": False,
            "io_binding": None, "tf32": None, "fusions": None, "latency_p50_ms": 10.0, "p50_by_process_ms": "10;10.1",
            "bound": "device"}  # fmt: skip
    naive = cell(**same, engine="compiled", host_input=None, e2e_latency_p50_ms=30.0, e2e_p50_by_process_ms="30;30.5")
    staged = cell(**same, engine="compiled_staged", host_input="pinned fp16", e2e_latency_p50_ms=14.0,
                  e2e_p50_by_process_ms="14;14.2")  # fmt: skip
    steps = option_steps(pd.DataFrame([naive, staged]))
    assert len(steps) == 1
    step = steps.iloc[0]
    assert step["knob"] == "host_input" and step["boundary"] == "end_to_end"
    assert (step["from_engine"], step["to_engine"]) == ("compiled", "compiled_staged")  # from the plain way
    assert step["speedup"] == pytest.approx(30.25 / 14.1, rel=0.01) and step["significant"]
    assert step["change"] == "host_input: pageable fp32 → pinned fp16"
