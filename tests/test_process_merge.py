"""A cell's processes merged into one record (inferbench.launch.processes): its p50 as the median of its
processes' p50s, beside the pooled one; a first process that compiled for the others primes the cell and is
timed in no figure."""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pandas as pd
import pytest

from inferbench.analysis.compare_runs import Run
from inferbench.analysis.comparison import rate_at
from inferbench.analysis.summary import summary_frame
from inferbench.analysis.summary_checks import checked_summary
from inferbench.core.cells import CellKey, CellRecord
from inferbench.core.errors import UserError
from inferbench.core.stats import latency_stats
from inferbench.core.storage import save_cell
from inferbench.engines.base import PRIMING_STEPS
from inferbench.launch.processes import merge_repeats, primes, processes_wanted

pytestmark = pytest.mark.fast  # pure logic: the developer's loop (docs/contributing.md)

KEY = CellKey("mlp_heart", "torch_compile", "fp32", "cpu", 1, 0, 1)
COMPILED = {"prepare": 50.0, "first_call": 0.2, "compile": 45.0}


def _process(
    ms: float, calls: int, cold: dict[str, float] | None = None, status: str = "ok", bound: str | None = None
) -> tuple[CellRecord, dict[str, np.ndarray]]:
    """One process's record and samples: ``calls`` calls around ``ms`` (end to end: 1 ms more), as a child
    writes them (its figures from its own calls)."""
    spread = np.linspace(-0.01, 0.01, calls) if calls > 1 else np.zeros(1)
    device = (ms + spread) / 1e3
    e2e = device + 1e-3
    stats, e2e_stats = latency_stats(device, 1), latency_stats(e2e, 1)
    ok = status == "ok"
    record = CellRecord(
        key=KEY,
        status=status,
        engine_impl="torch_compile",
        reason=None if ok else "broke",
        latency_ms=stats["latency_ms"] if ok else None,
        latency_ci95_ms=stats["latency_ci95_ms"] if ok else None,
        throughput_per_s=stats["throughput_per_s"] if ok else None,
        n_iters=calls if ok else None,
        measured_s=float(device.sum()) if ok else None,
        measured_windows_unix=[[0.0, 1.0]],
        end_to_end={k: e2e_stats[k] for k in ("latency_ms", "latency_ci95_ms", "n_iters", "throughput_per_s")}
        if ok
        else None,
        memory_mb={"host_peak_rss": 100.0 + ms},
        bound={"class": bound} if bound else None,
        cold_start_s=cold if cold is not None else {"prepare": 5.0, "first_call": 0.1, "compile": 2.0},
    )
    return record, ({"device": device, "end_to_end": e2e} if ok else {})


def _merged(*processes: tuple[CellRecord, dict[str, np.ndarray]]) -> tuple[CellRecord, dict[str, np.ndarray]]:
    return merge_repeats([p[0] for p in processes], [p[1] for p in processes])


def test_a_cells_p50_is_its_fast_processes_not_pulled_by_the_one_that_timed_more_calls():
    plain = {"prepare": 1.0, "first_call": 0.1}  # no compile: nothing primes
    merged, pooled = _merged(_process(10.0, 9, plain), _process(20.0, 991, plain), _process(10.6, 11, plain))
    assert not merged.repeats["primed"] and merged.repeats["n"] == 3
    # 10 and 10.6 ms lie within 10% of the fastest: the fast mode, their geometric mean; 20 ms met the host slow
    assert merged.latency_ms["p50"] == pytest.approx(math.sqrt(10.0 * 10.6), abs=1e-6)
    assert merged.latency_ms["p50_pooled"] == pytest.approx(20.0, abs=0.02)  # 991 of 1,011 calls are ~20 ms
    assert merged.end_to_end["latency_ms"]["p50"] == pytest.approx(math.sqrt(11.0 * 11.6), abs=1e-6)
    assert merged.end_to_end["latency_ms"]["p50_pooled"] == pytest.approx(21.0, abs=0.02)
    # the rest still pools every call: the CI, the tail, throughput (calls over their summed seconds)
    low, high = merged.latency_ci95_ms["p50"]
    assert 19.9 < low <= high < 20.1, "the p50's interval is the pooled calls'"
    assert merged.n_iters == pooled["device"].size == 1011
    assert merged.throughput_per_s == pytest.approx(1011 / pooled["device"].astype(np.float64).sum(), rel=1e-6)
    row = merged.flatten()
    assert row["latency_p50_ms"] == merged.latency_ms["p50"]
    assert row["latency_p50_pooled_ms"] == merged.latency_ms["p50_pooled"]
    assert row["e2e_latency_p50_pooled_ms"] == merged.end_to_end["latency_ms"]["p50_pooled"]
    assert row["latency_per_item_p50_ms"] == merged.latency_ms["p50"]  # batch 1, from the cell's p50
    assert row["p50_by_process_ms"].split(";") == ["10", "20", "10.6"], "every process listed, the slow one too"

    # two processes in the fast mode: their geometric mean, whatever their counts
    two, _ = _merged(_process(10.0, 5, plain), _process(10.8, 500, plain))
    assert two.latency_ms["p50"] == pytest.approx(math.sqrt(10.0 * 10.8), abs=1e-6)
    assert two.latency_ms["p50_pooled"] == pytest.approx(10.8, abs=0.02)


def test_one_process_keeps_its_own_p50_and_its_pooled_column_is_that_p50():
    one, samples = _process(7.0, 40, {"prepare": 1.0})
    merged, kept = _merged((one, samples))
    assert merged.latency_ms == one.latency_ms and kept is samples
    row = merged.flatten()
    assert row["latency_p50_pooled_ms"] == row["latency_p50_ms"] == one.latency_ms["p50"]
    assert row["e2e_latency_p50_pooled_ms"] == row["e2e_latency_p50_ms"]


def test_a_first_process_that_compiled_primes_the_cell_and_enters_no_timed_figure():
    prime = _process(40.0, 300, COMPILED)  # compiled from nothing, slower, and timed the most calls
    merged, pooled = _merged(prime, _process(10.0, 20), _process(11.0, 30))
    repeats = merged.repeats
    assert repeats["primed"] and repeats["n"] == 2
    assert [r["prime"] for r in repeats["per_repeat"]] == [True, False, False], "listed, and marked"
    assert merged.latency_ms["p50"] == pytest.approx(math.sqrt(10.0 * 11.0), abs=1e-6)
    assert merged.latency_ms["p50_pooled"] == pytest.approx(11.0, abs=0.02)
    assert merged.latency_ms["max"] < 12.0 and merged.end_to_end["latency_ms"]["max"] < 13.0
    assert merged.n_iters == pooled["device"].size == pooled["end_to_end"].size == 50
    assert merged.measured_s == pytest.approx(pooled["device"].astype(np.float64).sum(), rel=1e-6)
    # the spread between processes is the timed ones'
    assert repeats["p50_spread_pct"] == pytest.approx(100 * 1.0 / 10.5, rel=1e-4)
    assert merged.flatten()["p50_by_process_ms"].split(";") == ["10", "11"]
    assert merged.flatten()["repeats"] == 2
    # the cost a user pays once is the priming process's; its window and peak memory stay the cell's
    assert merged.cold_start_s == COMPILED
    assert repeats["per_repeat"][0]["cold_start_s"] == pytest.approx(50.2)
    assert len(merged.measured_windows_unix) == 3 and merged.memory_mb["host_peak_rss"] == 140.0


def test_a_priming_process_with_one_timed_process_after_it_gives_that_ones_figures():
    timed = _process(10.0, 20)
    merged, samples = _merged(_process(40.0, 300, COMPILED), timed)
    assert merged.latency_ms == timed[0].latency_ms and samples is timed[1]
    assert merged.cold_start_s == COMPILED and merged.repeats["n"] == 1
    assert merged.flatten()["p50_by_process_ms"] == "10"


def test_a_priming_process_that_failed_fails_the_cell():
    merged, _ = _merged(_process(40.0, 0, COMPILED, status="failed"))
    assert merged.status == "failed" and merged.reason == "broke"
    merged, _ = _merged(_process(40.0, 10, COMPILED), _process(10.0, 10, status="failed"))
    assert merged.status == "failed" and merged.reason == "repeat 2 of 2: broke"


def test_only_a_compiling_first_process_primes():
    assert "compile" in PRIMING_STEPS
    for steps in ({"prepare": 1.0}, {"prepare": 1.0, "build": 30.0}, {"prepare": 1.0, "compile_model": 0.5}):
        assert not primes([_process(10.0, 5, steps)[0]]), steps  # TensorRT's plan, OpenVINO: every process alike
    assert primes([_process(10.0, 5, COMPILED)[0], _process(10.0, 5, {"prepare": 1.0})[0]])
    assert not primes([_process(10.0, 5, {"prepare": 1.0})[0], _process(10.0, 5, COMPILED)[0]]), "the first only"
    assert not primes([])


def test_a_priming_process_adds_one_to_the_processes_a_cell_needs():
    plain = {"prepare": 1.0}
    assert processes_wanted([], 2, 3) == 2, "nothing known before the first"
    assert processes_wanted([_process(40.0, 5, COMPILED)[0]], 2, 3) == 3
    timed = [_process(40.0, 5, COMPILED)[0], _process(10.0, 5, bound="device")[0], _process(10.0, 5, bound="device")[0]]
    assert processes_wanted(timed, 2, 3) == 3, "two timed besides the priming one: done"
    host = [_process(40.0, 5, COMPILED)[0], _process(10.0, 5, bound="host")[0]]
    assert processes_wanted(host, 2, 3) == 4, "host-bound: three timed, and the priming one"
    # the priming process's own bound is no timed process's: it does not ask for more
    assert processes_wanted([_process(40.0, 5, COMPILED, bound="host")[0]], 2, 3) == 3
    assert processes_wanted([_process(10.0, 5, plain, bound="host")[0]], 2, 3) == 3, "no priming: as before"
    assert processes_wanted([_process(40.0, 0, COMPILED, status="failed")[0]], 2, 3) == 1, "a broken one ends it"


def test_compare_checks_a_cells_saved_calls_against_its_pooled_p50(tmp_path):
    merged, pooled = _merged(_process(40.0, 300, COMPILED), _process(10.0, 9), _process(20.0, 91))
    assert merged.latency_ms["p50"] != pytest.approx(merged.latency_ms["p50_pooled"], rel=1e-3)
    cells = tmp_path / "cells"
    path = cells / KEY.relpath
    save_cell(path, merged, pooled)
    run = Run(checked_summary(summary_frame([path]), cells), cells, cells)
    row = run.summary.iloc[0]
    for boundary in ("device", "end_to_end"):
        values = run.samples(row, boundary)  # its median is the pooled p50, not the cell's p50
        assert values is not None and values.size == 100
    # without its record, the summary's pooled column says what the samples' median is
    path.unlink()
    alone = Run(run.summary, cells, tmp_path / "summary.csv")
    assert alone.samples(row, "device").size == 100
    older = row.drop("latency_p50_pooled_ms")  # a summary from before the column: its p50 was the pooled one
    with pytest.raises(UserError, match="pooled p50"):
        alone.samples(older, "device")


def test_processes_that_part_get_more_processes_up_to_the_cap():
    plain = {"prepare": 5.0, "first_call": 0.1}
    apart = [_process(10.0, 5, plain)[0], _process(14.0, 5, plain)[0]]  # 33% apart
    close = [_process(10.0, 5, plain)[0], _process(11.0, 5, plain)[0]]  # 10% apart
    assert processes_wanted(apart, 2, 2, parted=(25.0, 4)) == 3, "apart beyond 25%: one more"
    assert processes_wanted(close, 2, 2, parted=(25.0, 4)) == 2, "within it: done"
    assert processes_wanted(apart, 2, 2) == 2, "without the rule: as before"
    four = [*apart, _process(9.0, 5, plain)[0], _process(15.0, 5, plain)[0]]
    assert processes_wanted(four, 2, 2, parted=(25.0, 4)) == 4, "the cap holds"
    assert processes_wanted(apart[:1], 2, 2, parted=(25.0, 4)) == 2, "one process: no spread yet"


def _contended(process: tuple[CellRecord, dict[str, np.ndarray]]) -> tuple[CellRecord, dict[str, np.ndarray]]:
    """The process as one timed while other work held the host's cores (inferbench.trackers.host_telemetry)."""
    record, samples = process
    return replace(record, host_telemetry={"contended": True, "others_cores": 0.9}), samples


def test_a_process_timed_while_other_work_held_the_cores_is_left_out_of_the_figures():
    plain = {"prepare": 1.0, "first_call": 0.1}
    merged, _ = _merged(_process(10.0, 9, plain), _contended(_process(160.0, 9, plain)), _process(11.0, 9, plain))
    assert merged.latency_ms["p50"] == pytest.approx(math.sqrt(10.0 * 11.0)), "of the two the host left alone"
    assert merged.repeats["n"] == 2 and merged.repeats["contended"] == 1 and not merged.repeats["all_contended"]
    assert [r["counted"] for r in merged.repeats["per_repeat"]] == [True, False, True]
    row = merged.flatten()
    assert row["p50_by_process_ms"] == "10;11" and row["contended_processes"] == 1 and row["host_contended"] is False


def test_a_cell_every_process_of_which_was_contended_keeps_their_figures_and_says_so():
    plain = {"prepare": 1.0, "first_call": 0.1}
    merged, _ = _merged(_contended(_process(10.0, 9, plain)), _contended(_process(30.0, 9, plain)))
    assert merged.latency_ms["p50"] == pytest.approx(10.0) and merged.repeats["all_contended"]  # the fast mode
    assert merged.flatten()["host_contended"] is True


def test_a_contended_process_is_measured_again_within_the_cap():
    plain = {"prepare": 5.0, "first_call": 0.1}
    one = [_process(10.0, 5, plain)[0], _contended(_process(10.0, 5, plain))[0]]
    assert processes_wanted(one, 2, 2, parted=(25.0, 3)) == 3, "one more for the contended one"
    both = [_contended(_process(10.0, 5, plain))[0]] * 3
    assert processes_wanted(both, 2, 2, parted=(25.0, 3)) == 3, "the cap holds"
    # the contended process's p50 does not part the cell: only the two the host left alone are compared
    apart = [_process(10.0, 5, plain)[0], _contended(_process(30.0, 5, plain))[0], _process(10.5, 5, plain)[0]]
    assert processes_wanted(apart, 2, 2, parted=(25.0, 4)) == 3


def test_the_summarys_throughput_is_the_pages_items_per_call_over_the_p50_at_each_boundary():
    plain = {"prepare": 1.0, "first_call": 0.1}
    # two processes that timed different call counts: the mean-based rate differs from items / p50
    merged, _ = _merged(_process(10.0, 9, plain), _process(20.0, 3, plain))
    frame = pd.DataFrame([merged.flatten()])
    row = frame.iloc[0]
    assert row["throughput_per_s"] == pytest.approx(1e3 / 10.0), "items per call / the cell's p50, device boundary"
    assert row["e2e_throughput_per_s"] == pytest.approx(1e3 / 11.0)
    for boundary, column in (("device", "throughput_per_s"), ("end_to_end", "e2e_throughput_per_s")):
        assert rate_at(frame, boundary).iloc[0] == pytest.approx(row[column]), "the page's figure is the summary's"
    assert row["throughput_mean_per_s"] == pytest.approx(merged.throughput_per_s)
    assert row["throughput_mean_per_s"] != pytest.approx(row["throughput_per_s"], rel=0.05), "the mean's is apart"


def test_the_summary_says_how_much_of_the_time_the_host_ran_at_its_fast_pace():
    plain = {"prepare": 1.0, "first_call": 0.1}
    shares = (0.25, 1.0, 0.5)
    processes = [_process(10.0 + i / 10, 9, plain) for i in range(3)]
    processes = [
        (replace(r, host_telemetry={"fast_phase_share": share}), s)
        for (r, s), share in zip(processes, shares, strict=True)
    ]
    merged, _ = _merged(*processes)
    assert merged.flatten()["host_fast_phase_pct"] == pytest.approx(50.0), "the median process's share"
    alone, _ = _merged(processes[0])
    assert alone.flatten()["host_fast_phase_pct"] == pytest.approx(25.0)
    assert _merged(_process(10.0, 9, plain))[0].flatten()["host_fast_phase_pct"] is None, "a record without it"
