"""benchmarks/process_shift.py: each process against its cell's processes over all runs, host-bound cells only."""

from __future__ import annotations

import importlib.util

import numpy as np
import pandas as pd

from tests.conftest import REPO

spec = importlib.util.spec_from_file_location("process_shift", REPO / "benchmarks" / "process_shift.py")
process_shift = importlib.util.module_from_spec(spec)
spec.loader.exec_module(process_shift)


def _frame(slow_run_factor: float) -> pd.DataFrame:
    rng = np.random.default_rng(0)
    rows = []
    for run, factor in (("a", 1.0), ("b", 1.0), ("slow", slow_run_factor)):
        for cell, base, bound in (("x", 1.0, "host"), ("y", 5.0, "host"), ("z", 2.0, "device")):
            for _ in range(3):
                rows.append({"run": run, "cell": cell, "p50_ms": base * factor * rng.uniform(0.98, 1.02),
                             "bound": bound, "cpus": "[28]", "busy_pct": rng.uniform(0, 20)})  # fmt: skip
    return pd.DataFrame(rows)


def test_a_run_twice_as_slow_sits_at_twice_the_cells_median_and_device_bound_cells_are_left_out():
    host = process_shift.host_bound_shifts(_frame(2.0))
    assert set(host.cell) == {"x", "y"}  # z is device-bound
    by_run = np.exp(host.groupby("run").log_ratio.median())
    # the cell's median over 9 processes is one of runs a/b's: the slow run sits ~2x above it
    assert 1.9 < by_run["slow"] < 2.1
    assert 0.95 < by_run["a"] < 1.05 and 0.95 < by_run["b"] < 1.05
    text = process_shift.table(host)
    assert "| slow | all | 6 |" in text


def test_a_cell_host_bound_in_one_run_only_is_left_out():
    frame = _frame(1.0)
    frame.loc[(frame.cell == "x") & (frame.run == "b"), "bound"] = "device"
    assert set(process_shift.host_bound_shifts(frame).cell) == {"y"}
