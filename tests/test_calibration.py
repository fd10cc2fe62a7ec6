"""Verdicts that decide and are calibrated (issue 68): each cell's spread moderated by its class's, a cell
far beyond its class marked unstable, identical cells of a run (A/A twins) widening their class's
intervals, and the run's own calibration: how many A/A pairs the rule calls different, and whether it
finds a planted slowdown."""

from __future__ import annotations

import math
import time

import numpy as np
import pandas as pd
import pytest

from inferbench.analysis.calibration import calibrate, calibration_text, planted_pairs
from inferbench.analysis.comparison import ClassSpreads, compare, spread_at, twin_pairs
from inferbench.analysis.uncertainty import ClassSpread, Spreads
from inferbench.analysis.verdicts import claim
from inferbench.core.cells import options_id
from inferbench.report.answers import claim_text
from inferbench.scenarios.prepare import plant_slowdown
from tests.test_decisions import cell, processes

pytestmark = pytest.mark.fast


def test_the_class_fit_recovers_a_common_spread_and_a_cell_far_beyond_it_is_unstable():
    rng = np.random.default_rng(3)
    sd = 0.05
    p50s = np.exp(rng.normal(0, sd, size=(400, 2)))
    fitted = ClassSpread.fit(Spreads.from_processes(p50s, np.full(400, np.nan), np.full(400, np.nan)))
    assert fitted.sd_log == pytest.approx(sd, rel=0.15)
    assert fitted.df > 30  # a homogeneous class: a strong prior
    broken = Spreads.from_processes(np.array([[1.0, 2.0], [1.0, 1.05]]), np.full(2, np.nan), np.full(2, np.nan))
    moderated = broken.moderated(
        *(np.full(2, v) for v in (fitted.sd_log, fitted.df, fitted.typical_sd_log, fitted.typical_df))
    )
    assert moderated.unstable.tolist() == [True, False]
    assert moderated.degrees().tolist() == pytest.approx([fitted.df + 1] * 2)


def test_a_claim_about_an_unstable_cell_is_decided_by_every_pair_of_its_processes():
    """The published case: the heart MLP's GPU processes at 17.5 and 34.2 ms, its CPU ones at 7.17 and 11.8:
    every GPU process is slower than every CPU one, so the CPU is faster, by 1.48-4.77x over the processes;
    an interval from one degree of freedom spanned 0.06-2.9."""
    steady = [
        cell(engine=f"s{i}", batch_size=2 + i, p50_by_process_ms=processes(10.0, 10.2 + i / 100)) for i in range(8)
    ]
    gpu = cell(engine="x", latency_p50_ms=25.0, p50_by_process_ms=processes(17.5, 34.2))
    cpu = cell(engine="y", latency_p50_ms=9.0, p50_by_process_ms=processes(7.17, 11.8))
    classes = ClassSpreads.of(pd.DataFrame([*steady, gpu, cpu]))
    assert spread_at(gpu, "device", classes).unstable
    result = compare(cpu, gpu, classes=classes)
    assert result.unstable and result.significant
    assert (result.range_low, result.range_high) == pytest.approx((17.5 / 11.8, 34.2 / 7.17))
    overlapping = cell(engine="z", latency_p50_ms=20.0, p50_by_process_ms=processes(18.0, 22.0))
    assert not compare(overlapping, gpu, classes=classes).significant  # 17.5 < 18 < 22 < 34.2: undecided
    text = claim_text(claim(cpu, gpu, classes))
    assert "processes 1.48–4.77" in text and "CI" not in text


def _twins(shift: float, pairs: int, seed: int) -> list[dict]:
    """``pairs`` configurations measured twice, each cell's processes agreeing within 0.5% but each cell
    landing on its own level: how far a cell moves between minutes of a run is ``shift`` (sd of log)."""
    rng = np.random.default_rng(seed)
    rows = []
    for i in range(pairs):
        for name in ("ort_cpu", "ort_cpu_aa"):
            level = 1.0 * math.exp(rng.normal(0, shift))
            p50s = [level * math.exp(rng.normal(0, 0.005)) for _ in range(2)]
            rows.append(cell(engine=name, engine_impl="ort_cpu", options_id="abc", batch_size=i + 1,
                             latency_p50_ms=float(np.median(p50s)), p50_by_process_ms=processes(*p50s)))  # fmt: skip
    return rows


def test_twins_are_one_configuration_under_two_names_and_nothing_else():
    rows = _twins(0.0, 3, 0)
    rows.append(cell(engine="ort_cpu_slow", engine_impl="ort_cpu", options_id="def", batch_size=1,
                     planted_slowdown=0.3))  # fmt: skip
    frame = pd.DataFrame(rows).assign(host_input=None, graph=np.nan)  # missing settings, as a summary reads them
    pairs = twin_pairs(frame)
    assert len(pairs) == 3 and all(frame.loc[a, "batch_size"] == frame.loc[b, "batch_size"] for a, b in pairs)
    assert planted_pairs(frame) == [(0, 6)]
    assert options_id({"engine": "ort_cpu", "a": 1}) == options_id({"a": 1, "engine": "ort_cpu"})
    assert twin_pairs(frame.drop(columns="options_id")) == []  # an older summary cannot tell twins


def test_what_moves_between_cells_is_counted_and_calibrates_identical_pairs():
    """Cells whose processes agree (0.5%) but which land 10% apart from one cell to the next: without the
    A/A pairs' between-cell spread the rule calls most identical pairs different; with it, about 5%."""
    called, pairs = 0, 0
    for seed in range(20):
        frame = pd.DataFrame(_twins(0.10, 10, seed))
        classes = ClassSpreads.of(frame)
        assert classes.between[("cpu", "device")].pairs == 10
        found = calibrate(frame, classes)
        called, pairs = called + found.aa_different, pairs + found.aa_pairs
        blind = ClassSpreads(classes.priors, classes.leases)  # the same run, its twins unseen
        blind_found = calibrate(frame, blind)
        assert blind_found.aa_different >= found.aa_different
    assert called / pairs <= 0.10


def test_a_planted_slowdown_is_found_and_reported():
    rows = _twins(0.02, 10, 1)
    for i in range(10):
        p50s = [1.3 * math.exp(np.random.default_rng(i).normal(0, 0.02)) * f for f in (1.0, 1.004)]
        rows.append(cell(engine="ort_cpu_slow", engine_impl="ort_cpu", options_id="def", batch_size=i + 1,
                         planted_slowdown=0.3, latency_p50_ms=p50s[0], p50_by_process_ms=processes(*p50s)))  # fmt: skip
    found = calibrate(pd.DataFrame(rows))
    assert found.planted_pairs == 10 and found.planted_found >= 8
    text = calibration_text(found)
    assert "A/A pairs called different" in text and "a planted 1.3× found in" in text


def test_the_worked_example_in_the_docs_is_what_the_rule_computes():
    """docs/measuring.md works one claim through by hand from a committed summary: its figures are the code's."""
    from pathlib import Path

    from inferbench.analysis.summary import measured, read_summary_csv

    repo = Path(__file__).resolve().parents[1]
    summary = measured(read_summary_csv(repo / "docs/results/cpu-2core/readme_default/2026-11-27/summary.csv"))
    classes = ClassSpreads.of(summary)
    pair = summary[
        (summary["workload"] == "distilbert") & (summary["seq_len"] == 32) & (summary["engine"] == "ort_cpu")
    ]
    int8, fp32 = (pair[pair["precision"] == p].iloc[0] for p in ("int8", "fp32"))
    result = compare(int8, fp32, classes=classes)
    prior = classes.priors[("cpu", "end_to_end")]
    moderated = spread_at(int8, "end_to_end", classes)
    doc = (repo / "docs/measuring.md").read_text()
    for figure in (
        f"s0 = {prior.sd_log:.4f} with d0 = {prior.df:.2f}",
        f"{moderated.sd_log:.4f}, {moderated.degrees():.2f}",
        f"= {result.log_se:.4f}, with {result.df:.2f} degrees of freedom",
        f"= {result.low:.2f}–{result.high:.2f}",
    ):
        assert figure in doc, figure


def test_compare_states_each_runs_calibration(tmp_path):
    from inferbench.report.compare import compare_runs

    paths = []
    for seed in (1, 2):
        path = tmp_path / f"run{seed}.csv"
        pd.DataFrame(_twins(0.02, 6, seed)).assign(scenario="single").to_csv(path, index=False)
        paths.append(path)
    text = compare_runs(*paths)[2]
    assert text.count("A/A pairs called different") == 2 and "- A: Calibration: " in text


class _SleepingEngine:
    """An engine whose call takes at least ``seconds`` on the host and queues nothing on a device."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds

    def run(self, staged: object) -> object:
        time.sleep(self.seconds)
        return staged

    def stream(self) -> None:
        return None

    def synchronize(self) -> None:
        pass


def test_a_planted_call_does_its_share_more_work_on_the_host_and_returns_the_output():
    engine = _SleepingEngine(0.02)
    plant_slowdown(engine, 0.5, staged="x")  # no stream: nothing is timed or queued on a device
    start = time.perf_counter()
    output = engine.run("y")
    took = time.perf_counter() - start
    # the spin lasts half of what the call itself took, however long that was: a floor, whatever the machine
    assert output == "y" and took >= 1.5 * 0.02
