"""A class of cells that moved as a whole between two runs (inferbench.analysis.class_shift)."""

from __future__ import annotations

import pandas as pd

from inferbench.analysis.class_shift import class_shifts, shifts_markdown
from inferbench.analysis.compare_runs import compare_runs
from inferbench.core.cells import CellKey

from .test_compare import write_cell


def _cells(rows: list[tuple[str, str, float]]) -> pd.DataFrame:
    """compare_cells-like rows: (device, bound, ratio), each its own batch size."""
    key = {"workload": "w", "engine": "e", "precision": "fp32", "seq_len": 0, "threads": 0, "scenario": "single"}
    return pd.DataFrame(
        [
            {**key, "device": device, "batch_size": i, "bound": bound, "ratio": ratio}
            for i, (device, bound, ratio) in enumerate(rows)
        ]
    )


def _summary(cells: pd.DataFrame, spread_pct: float) -> pd.DataFrame:
    return cells.drop(columns=["bound", "ratio"]).assign(status="ok", repeat_p50_spread_pct=spread_pct)


def test_a_class_every_cell_of_which_moved_a_little_moved_as_a_whole():
    # host-bound cells 6-12% slower each (each within its own wide interval, say); device-bound cells
    # around 1 either way; two CPU cells, too few to tell a class's movement from a cell's
    host = [("cuda", "host", r) for r in (1.06, 1.08, 1.09, 1.10, 1.07, 1.12, 1.11, 1.08)]
    device = [("cuda", "device", r) for r in (0.99, 1.0, 1.01, 1.005, 0.995)]
    cells = _cells([*host, *device, ("cpu", None, 1.3), ("cpu", None, 1.2)])
    shifts = {s.name: s for s in class_shifts(cells, _summary(cells, 30.0), _summary(cells, 40.0))}
    assert set(shifts) == {"host", "device"}
    host = shifts["host"]
    assert host.moved and host.low > 1.05 and (host.slower, host.faster) == (8, 0)
    assert 1.08 <= shifts["host"].median_ratio <= 1.10
    assert not shifts["device"].moved and shifts["device"].low < 1 < shifts["device"].high
    assert (shifts["host"].spread_a_pct, shifts["host"].spread_b_pct) == (30.0, 40.0)
    text = "\n".join(shifts_markdown(list(shifts.values())))
    assert "| host-bound GPU cells" in text and "| 8 / 0 | 30% / 40% | yes |" in text


def test_cells_that_scatter_both_ways_do_not_move_their_class():
    ratios = (0.6, 1.4, 0.8, 1.25, 0.9, 1.1, 0.7, 1.3, 1.0)
    cells = _cells([("cuda", "host", r) for r in ratios])
    (host,) = class_shifts(cells, _summary(cells, 40.0), _summary(cells.iloc[:0], 0.0))
    assert not host.moved and host.spread_b_pct is None  # run B's summary lacks these cells


def test_compare_says_which_class_moved(tmp_path):
    for name, scale in (("a", 1.0), ("b", 1.05)):  # every GPU cell 5% slower in run B, tight processes
        for batch in (1, 2, 4, 8):
            key = CellKey("resnet50", "torch_cudagraph", "fp16", "cuda", batch, 0, 0)
            write_cell(tmp_path / name / "cells", key, [scale * batch * f for f in (1.0, 1.005, 0.995)], batch)
    cells, _, text, _ = compare_runs(tmp_path / "a", tmp_path / "b")
    assert (cells["change"] == "slower").all()
    assert "| device-bound GPU cells | 4 | 1.050 |" in text and "| yes |" in text
