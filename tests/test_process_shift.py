"""benchmarks/tools/process_shift.py: each process of a host-bound GPU cell against the same cell's processes in
the other runs."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys

import numpy as np
import pandas as pd
import pytest

from tests.conftest import REPO

pytestmark = pytest.mark.fast  # pure logic: the developer's loop (docs/contributing.md)

spec = importlib.util.spec_from_file_location("process_shift", REPO / "benchmarks" / "tools" / "process_shift.py")
process_shift = importlib.util.module_from_spec(spec)
spec.loader.exec_module(process_shift)


def _frame(factors: dict[str, float], busy: bool = True) -> pd.DataFrame:
    rng = np.random.default_rng(0)
    rows = []
    for run, factor in factors.items():
        for cell, base, bound in (("x", 1.0, "host"), ("y", 5.0, "host"), ("z", 2.0, "device")):
            for i in range(3):
                p50, cpus = base * factor * rng.uniform(0.98, 1.02), "[24]" if i == 0 else "[28]"
                busy_pct = rng.uniform(0, 20) if busy else None
                rows.append(
                    {"run": run, "cell": cell, "bound": bound, "p50_ms": p50, "cpus": cpus, "busy_pct": busy_pct}
                )
    return pd.DataFrame(rows)


def test_a_run_twice_as_slow_reads_twice_the_others_even_with_two_runs():
    """Against the *other* runs' processes: a median over all runs would put the slow one of two at ~1.4x."""
    host = process_shift.host_bound_shifts(_frame({"a": 1.0, "slow": 2.0}))
    assert set(host.cell) == {"x", "y"}  # z is device-bound
    ratio = host.groupby("run").ratio.median()
    assert 1.9 < ratio["slow"] < 2.1 and 0.45 < ratio["a"] < 0.55
    assert not host.within.any()  # 2x is outside a 4% range
    assert (host.within_expected == (3 - 1) / (3 + 1)).all()  # 3 processes of the other run


def test_runs_that_measure_alike_fall_within_each_others_range_as_often_as_expected():
    """200 cells whose processes all come from one distribution: (n - 1) / (n + 1) of them fall within the
    range of the n others (counting a process among its own others would give 1)."""
    rng = np.random.default_rng(1)
    rows = [{"run": run, "cell": f"c{c}", "bound": "host", "p50_ms": rng.lognormal(0, 0.2), "cpus": "[28]"}
            for c in range(200) for run in "abc" for _ in range(3)]  # fmt: skip
    host = process_shift.host_bound_shifts(pd.DataFrame(rows).assign(busy_pct=None))
    assert (host.within_expected == 5 / 7).all()
    assert abs(host.within.mean() - 5 / 7) < 0.05


def test_one_shifted_run_of_three_stands_out_and_the_others_read_below_one():
    host = process_shift.host_bound_shifts(_frame({"a": 1.0, "b": 1.0, "late": 1.2}))
    ratio = host.groupby("run").ratio.median()
    assert 1.15 < ratio["late"] < 1.25 and 0.9 < ratio["a"] < 1.0 and 0.9 < ratio["b"] < 1.0
    assert host[host.run == "late"].within.mean() == 0


def test_a_process_without_a_p50_and_a_repeated_index_change_nothing():
    frame = _frame({"a": 1.0, "slow": 2.0})
    expected = process_shift.host_bound_shifts(frame)
    repeated = frame.set_axis([0] * len(frame))  # as a concat of frames leaves it
    missing = pd.concat([repeated, frame.iloc[[0]].assign(p50_ms=np.nan)])
    host = process_shift.host_bound_shifts(missing)
    assert len(host) == len(expected) and (host.within_expected == 0.5).all()
    np.testing.assert_allclose(host.ratio.to_numpy(), expected.ratio.to_numpy())


def test_a_cell_missing_from_a_run_or_of_another_class_in_one_is_left_out():
    frame = _frame({"a": 1.0, "b": 1.0})
    frame.loc[(frame.cell == "x") & (frame.run == "b"), "bound"] = "device"
    frame = frame[~((frame.cell == "y") & (frame.run == "a"))]
    assert process_shift.host_bound_shifts(frame).empty


def test_the_table_splits_a_run_by_cores_only_where_it_used_several_and_copes_without_busy_shares():
    frame = _frame({"a": 1.0, "b": 1.0}, busy=False)
    frame.loc[frame.run == "b", "cpus"] = "[28]"
    text = process_shift.table(process_shift.host_bound_shifts(frame))
    assert "| a | [24] | 2 |" in text and "| a | [28] | 4 |" in text
    assert "| b | all | 6 |" in text and "| b | [28]" not in text
    assert "| – | – |" in text  # no busy shares: no median, no rho


def test_the_table_reads_back_from_saved_processes_and_asks_for_runs_or_a_csv(tmp_path):
    csv = tmp_path / "processes.csv"
    _frame({"a": 1.0, "slow": 2.0}).to_csv(csv, index=False)
    script = [sys.executable, str(REPO / "benchmarks" / "tools" / "process_shift.py")]
    env = {**os.environ, "PYTHONPATH": str(REPO / "src")}
    shown = subprocess.run([*script, "--processes", str(csv)], capture_output=True, text=True, env=env, check=True)
    assert "| slow | all | 6 | 2.0" in shown.stdout
    refused = subprocess.run(script, capture_output=True, text=True, env=env)
    assert refused.returncode == 2 and "--processes CSV" in refused.stderr


def test_a_gpu_cell_left_unclassified_counts_as_host_bound_as_in_compare():
    frame = _frame({"a": 1.0, "b": 1.0})
    frame.loc[frame.cell == "x", "bound"] = np.nan  # a CSV's empty field
    assert set(process_shift.host_bound_shifts(frame).cell) == {"x", "y"}
