"""A class of cells that moved as a whole between two runs (inferbench.analysis.class_shift)."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from inferbench.analysis.class_shift import class_shifts, median_interval, shifts_markdown
from inferbench.core.cells import CellKey
from inferbench.report.compare import compare_runs

from .test_compare import write_cell

pytestmark = pytest.mark.fast  # pure logic: the developer's loop (docs/contributing.md)

KEY = {"workload": "w", "engine": "e", "precision": "fp32", "seq_len": 0, "threads": 0, "scenario": "single"}


def _runs(rows: list[tuple[str, str | None, float]]) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """compare_cells-like rows (device, bound, ratio; each cell its own batch size) on a shuffled index,
    and the two runs' summaries: each cell's spread between processes its batch size (A) and twice it (B)."""
    cells = pd.DataFrame(
        [{**KEY, "device": d, "batch_size": i, "bound": b, "ratio": r} for i, (d, b, r) in enumerate(rows)]
    )
    cells.index = np.random.default_rng(0).permutation(len(cells)) + 100  # not 0..n-1, not in order
    summary = cells.drop(columns=["ratio"]).assign(status="ok")
    summary_a = summary.assign(repeat_p50_spread_pct=summary["batch_size"].astype(float))
    summary_b = summary.assign(repeat_p50_spread_pct=2.0 * summary["batch_size"])
    return cells, summary_a.iloc[::-1], summary_b  # the summaries in another order than the cells


def test_a_median_interval_covers_95_percent_from_six_values_on():
    assert median_interval(np.arange(5.0)) is None  # min..max covers 1 - 2/32 = 94% of the time
    assert median_interval(np.array([3.0, 1, 2, 6, 5, 4])) == (1.0, 6.0)
    # 27 values: the 8th smallest and the 8th largest (the binomial table's k for 95%)
    assert median_interval(np.arange(27.0)) == (7.0, 19.0)


def test_a_class_every_cell_of_which_moved_a_little_moved_as_a_whole():
    # host-bound cells 6-12% slower each (each within its own wide interval, say), one without a ratio;
    # device-bound cells around 1 either way; two CPU cells, too few to tell a class's movement from a cell's
    host = [("cuda", "host", r) for r in (1.06, 1.08, 1.09, 1.10, 1.07, 1.12, 1.11, 1.08, math.nan)]
    device = [("cuda", "device", r) for r in (0.99, 1.0, 1.01, 1.005, 0.995, 1.02, 0.98)]
    cells, summary_a, summary_b = _runs([*host, *device, ("cpu", None, 1.3), ("cpu", None, 1.2)])
    shifts = {s.name: s for s in class_shifts(cells, summary_a, summary_b)}
    assert set(shifts) == {"host", "device"}
    host_shift, device_shift = shifts["host"], shifts["device"]
    assert host_shift.cells == 8 and (host_shift.slower, host_shift.faster) == (8, 0)
    assert host_shift.moved and host_shift.low == pytest.approx(1.06) and host_shift.high == pytest.approx(1.12)
    assert host_shift.median_ratio == pytest.approx(1.085, abs=0.001)
    assert not device_shift.moved and device_shift.low < 1 < device_shift.high
    # each class's spread: the median over its own cells with a ratio (batch sizes 0-7; 9-15), run by run
    assert (host_shift.spread_a_pct, host_shift.spread_b_pct) == (3.5, 7.0)
    assert (device_shift.spread_a_pct, device_shift.spread_b_pct) == (12.0, 24.0)
    text = "\n".join(shifts_markdown(list(shifts.values())))
    assert (
        "| host-bound GPU cells (the GPU waits for the thread launching its kernels) | 8 | 1.085 | 1.060–1.120 " in text
    )
    assert "| 8 / 0 | 4% / 7% | 0 | yes |" in text and "| 7 / 0 |" not in text


def test_cells_that_scatter_both_ways_do_not_move_their_class_and_few_cells_cannot_tell():
    cells, summary_a, summary_b = _runs([("cuda", "host", r) for r in (0.6, 1.4, 0.8, 1.25, 0.9, 1.1, 0.7, 1.3, 1.0)])
    (host,) = class_shifts(cells, summary_a, summary_b)
    assert not host.moved and host.low < 1 < host.high and (host.slower, host.faster) == (4, 4)
    few, few_a, few_b = _runs([("cuda", "host", r) for r in (1.2, 1.3, 1.25)])
    (three,) = class_shifts(few, few_a, few_b)
    assert three.low is None and not three.moved
    (row,) = [line for line in shifts_markdown([three]) if line.startswith("| host-bound")]
    assert "| – | 3 / 0 |" in row and row.endswith("| too few cells to tell |")


def test_a_cell_whose_class_changed_between_the_runs_is_left_out():
    # on a slower host a device-bound cell turns host-bound: classed by either run alone, it would follow
    # the very shift the class measures
    rows = [("cuda", "host", r) for r in (1.0, 1.01, 0.99, 1.0, 1.02, 0.98)] + [("cuda", "device", 1.5)]
    cells, summary_a, summary_b = _runs(rows)
    summary_b = summary_b.assign(bound="host")
    (host,) = class_shifts(cells, summary_a, summary_b)
    assert host.cells == 6 and host.changed_class == 1 and not host.moved


def test_compare_says_which_class_moved(tmp_path):
    for name, scale in (("a", 1.0), ("b", 1.05)):  # every GPU cell about 5% slower in run B, tight processes
        for batch in (1, 2, 4, 8, 16, 32):
            key = CellKey("resnet50", "torch_cudagraph", "fp16", "cuda", batch, 0, 0)
            factor = scale * (1 + 0.002 * (batch % 3)) if name == "b" else 1.0
            write_cell(tmp_path / name / "cells", key, [factor * batch * f for f in (1.0, 1.005, 0.995)], batch)
    cells, _, text, _ = compare_runs(tmp_path / "a", tmp_path / "b")
    assert (cells["change"] == "slower").all()
    (row,) = [line for line in text.splitlines() if line.startswith("| device-bound GPU cells |")]
    assert row.startswith("| device-bound GPU cells | 6 | 1.05") and row.endswith("| 0 | yes |")
