"""loads.csv: every load of every LLM serving cell, one row each, beside summary.csv; read by the report's
appendix, `inferbench compare` and the MLflow export (issue 70, item 4)."""

from __future__ import annotations

import time

import pandas as pd
import pytest

from inferbench.core.cells import CellKey, CellRecord
from inferbench.core.errors import UserError
from inferbench.exporters.mlflow import load_metrics
from inferbench.scenarios.llm_load.answer import LOAD_COLUMNS, llm_load_section, loads_markdown, paired_loads
from inferbench.scenarios.llm_load.loads import COLUMNS, load_rows, loads_frame, read_loads, write_loads
from inferbench.scenarios.llm_load.measure import measure
from tests.test_llm_load import SETTINGS, FakeStepEngine, _cell


@pytest.fixture(scope="module")
def record(tmp_path_factory: pytest.TempPathFactory) -> CellRecord:
    """An llm_load cell's record from a real sweep of the fake engine (3 loads, then a search)."""
    tmp = tmp_path_factory.mktemp("loads")
    engine = FakeStepEngine(time.perf_counter, step_s=0.002, running=2, new_tokens=3)
    cell = _cell(engine, SETTINGS, tmp)
    fields = measure(cell).fields
    return CellRecord(key=cell.key, status="ok", engine_impl="hf_generate", sections=fields["sections"])


def test_each_load_of_a_cell_is_one_row_with_its_verdict_and_the_capacity_is_judged_on_nothing(record):
    rows = loads_frame([record])
    search = record.sections["llm_load"]["search"]["steps"]
    assert list(rows.columns) == list(COLUMNS)
    assert list(rows["phase"]) == ["capacity", "sweep", "sweep", "sweep"] + ["search"] * len(search)
    sweep = rows[rows["phase"] == "sweep"]
    assert sweep["load"].tolist() == [0.5, 1.0, 4.0] and sweep["position"].tolist() == [0, 1, 2]
    for row, step in zip(sweep.itertuples(), record.sections["llm_load"]["sweep"], strict=True):
        assert row.request_per_s == step["request_per_s"] and row.ttft_p50_ms == step["ttft_ms"]["p50"]
        assert row.valid == step["valid"] and row.met == step["met"]
    heavy = sweep.iloc[2]
    assert heavy["valid"] is False and heavy["failed"].startswith("served: ")
    capacity = rows.iloc[0]
    assert capacity["valid"] is None and capacity["met"] is None and pd.isna(capacity["load"])
    assert rows["energy_j"].isna().all(), "a CPU cell has no energy figures"
    # a cell of another scenario has no loads
    single = CellKey("mlp_heart", "torch_eager", "fp32", "cpu", 1, 0, 1)
    assert load_rows(CellRecord(key=single, status="ok", engine_impl="torch_eager")) == []


def test_the_report_s_appendix_reads_loads_csv_and_a_cell_missing_there_from_its_record(record, tmp_path):
    path = tmp_path / "loads.csv"
    frame = write_loads([record], path)
    loads = read_loads(path)
    assert len(loads) == len(frame)
    cells = pd.DataFrame([{**{k: getattr(record.key, k) for k in ("workload", "engine", "precision", "device",
                                                                   "batch_size", "seq_len", "threads")},
                           "scenario": "llm_load", "status": "ok", "reason": None}])  # fmt: skip
    loads.loc[loads["phase"] == "sweep", "request_per_s"] = [111.0, 222.0, 333.0]  # what only the file says
    text = "\n".join(llm_load_section(cells, {record.key.cell_id: record}, loads))
    assert "| 0.5× capacity |" in text and "| 222 |" in text and "| search 1 |" in text
    assert "energy mJ" not in text and dict(LOAD_COLUMNS)["energy_mj_per_token"] == "mJ per token"
    # without the file the record's figures are shown
    own = "\n".join(llm_load_section(cells, {record.key.cell_id: record}, None))
    assert "| 222 |" not in own and "| 0.5× capacity |" in own


def test_a_loads_csv_that_is_no_such_table_is_named_and_none_is_no_error(tmp_path):
    assert read_loads(tmp_path / "loads.csv") is None
    (tmp_path / "loads.csv").write_text("a,b\n1,2\n")
    with pytest.raises(UserError, match=r"loads.csv lacks the column\(s\) cell_id, workload"):
        read_loads(tmp_path / "loads.csv")


def test_compare_pairs_two_runs_loads_and_counts_those_whose_verdict_changed(record):
    a = loads_frame([record])
    b = a.copy()
    changed = b.index[(b["phase"] == "sweep") & (b["position"] == 0)]
    b.loc[changed, "valid"] = False
    paired = paired_loads(a, b)
    assert len(paired) == len(a) - 1, "the capacity run is no load: not paired"
    assert paired["changed"].sum() == 1
    text = "\n".join(loads_markdown(paired))
    assert "loads of 1 LLM serving cells in both runs' loads.csv: 1 change their verdict" in text
    assert paired_loads(a, None) is None


def test_mlflow_logs_each_figure_of_a_cell_s_loads_as_a_history_sweep_then_search(record):
    loads = loads_frame([record])
    histories = load_metrics(loads, record.key.cell_id)
    steps = len(loads) - 1
    assert all(len(history) == steps for history in histories.values())
    expected = [s["request_per_s"] for s in record.sections["llm_load"]["sweep"]]
    expected += [s["request_per_s"] for s in record.sections["llm_load"]["search"]["steps"]]
    assert histories["load.request_per_s"] == pytest.approx(expected)
    assert set(histories["load.valid"]) <= {0.0, 1.0} and histories["load.valid"][2] == 0.0
    assert load_metrics(None, record.key.cell_id) == {} and load_metrics(loads, "another/cell") == {
        f"load.{figure}": [] for figure in ("offered_per_s", "request_per_s", "ttft_p99_ms", "tpot_p99_ms",
                                            "itl_p99_ms", "goodput_per_s", "energy_per_output_token_mj", "valid",
                                            "met")
    }  # fmt: skip
