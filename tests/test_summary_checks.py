"""Issue 71: no impossible number published. The report (the workflow's, and `rerender`'s) and `aggregate` refuse
a summary or a record that compare already refused: by file, row and cell, before anything is written. And
"every cell ran" is claimed only against the cells the studies name."""

from __future__ import annotations

import shutil
from pathlib import Path

import pandas as pd
import pytest

from inferbench.cli.main import main
from inferbench.core.cells import CellKey, CellRecord
from inferbench.core.errors import UserError
from inferbench.report.answers import not_measured_section
from inferbench.report.markdown import write_report
from tests.conftest import REPO

pytestmark = pytest.mark.fast

COMMITTED = REPO / "docs" / "results" / "cpu-2core" / "readme_default" / "2026-11-28" / "summary.csv"


def _summary(tmp_path: Path, edit) -> Path:
    frame = pd.read_csv(COMMITTED)
    frame = edit(frame) if edit is not None else frame
    path = tmp_path / "summary.csv"
    frame.to_csv(path, index=False)
    return path


def _set(column: str, value: object):
    def edit(frame: pd.DataFrame) -> pd.DataFrame:
        frame[column] = frame[column].astype(object)
        frame.loc[0, column] = value
        return frame

    return edit


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (
            _set("latency_p50_ms", -0.5),
            r"column latency_p50_ms of row 1 \(cell bert_base/ort_cpu-fp32/cpu/b1-s\d+-t2\) "
            r"is -0.5, not a latency in ms above 0",
        ),
        (_set("latency_p50_ms", 0.0), r"latency_p50_ms of row 1 .* is 0.0, not a latency in ms above 0"),
        (_set("latency_p50_ms", "fast"), r"latency_p50_ms of row 1 .* is 'fast', not a number"),
        (_set("latency_p50_ms", None), r"latency_p50_ms of row 1 .* is empty, not a number: the cell measured"),
        (_set("batch_size", 1.5), r"batch_size of row 1 .* is 1.5, not a whole number"),
        (_set("batch_size", -1), r"batch_size of row 1 .* is -1, not a whole number from 1"),
        (
            _set("workload", "bert\nbase"),
            r"workload of row 1 \(cell bert\\nbase/ort_cpu.*\) is 'bert\\nbase', not a name without line breaks",
        ),
        (lambda f: f.drop(columns="latency_p50_ms"), r"has no column latency_p50_ms \(report needs"),
        (lambda f: pd.concat([f, f.iloc[[0]]], ignore_index=True), r"is in rows 1, 37 .* report would count each"),
    ],
)
def test_the_report_refuses_an_impossible_summary_naming_file_row_and_cell(tmp_path, edit, message):
    summary = _summary(tmp_path, edit)
    with pytest.raises(UserError, match=message) as raised:
        write_report(summary, tmp_path / "report.md")
    assert str(summary) in str(raised.value) and "re-make the summary from the run's records" in str(raised.value)
    assert not (tmp_path / "report.md").exists(), "nothing is written"


def test_a_repeated_header_is_refused_and_a_committed_summary_renders(tmp_path):
    text = COMMITTED.read_text().splitlines()
    header = text[0].split(",")
    (tmp_path / "summary.csv").write_text(",".join([*header, header[0]]) + "\n" + "\n".join(f"{row},x" for row in
                                                                                         text[1:]) + "\n")  # fmt: skip
    with pytest.raises(UserError, match="names a column more than once in its header"):
        write_report(tmp_path / "summary.csv", tmp_path / "report.md")
    write_report(_summary(tmp_path, None), tmp_path / "report.md")
    assert "## Answers" in (tmp_path / "report.md").read_text()


def test_aggregate_refuses_a_hand_edited_record_by_its_cell_before_writing_a_summary(tmp_path, capsys):
    source = REPO / "docs" / "results" / "h200" / "llm_serving" / "2026-11-29" / "cells" / "llm-llama"
    cells = tmp_path / "cells" / "llm:llama"
    shutil.copytree(source, cells)
    records = sorted(cells.glob("*/*/*.json"))
    record = CellRecord.load(records[0])
    record.latency_ms = {**record.latency_ms, "p50": -0.5}
    record.save(records[0])
    out = tmp_path / "summary.csv"
    code = main(["aggregate", *map(str, records), "--out-csv", str(out), "--out-parquet", str(tmp_path / "s.parquet")])
    error = capsys.readouterr().err
    assert code != 0 and not out.exists(), "no summary is written"
    assert f"{tmp_path / 'cells' / 'llm:llama'}: column latency_p50_ms of row 1 (cell llm:llama/hf_static" in error
    assert "delete the cell's record and run the same command" in error


def test_every_cell_ran_is_claimed_only_against_the_cells_the_studies_name():
    rows = pd.read_csv(COMMITTED)
    ok = rows[rows["status"] == "ok"].drop(columns="host_cpus").reset_index(drop=True)  # no thread-budget line
    named = [f"{r.workload}/{r.engine}-{r.precision}/{r.device}/b{r.batch_size}-s{r.seq_len}-t{r.threads}"
             for r in ok.itertuples()]  # fmt: skip
    assert (
        not_measured_section(ok, {"s": {"cells": named}})[2] == "Nothing: every cell the studies name ran and is `ok`."
    )
    # one cell the study names has no row: said, with the cell, and no "every cell ran"
    lines = not_measured_section(ok.iloc[1:], {"s": {"cells": named}})
    assert any(line.startswith("- 1 cell(s) the studies name have no row in the summary: `" + named[0] + "`")
               for line in lines)  # fmt: skip
    assert not any("every cell" in line for line in lines)
    # a summary rendered without the studies' cells claims nothing of them
    assert not_measured_section(ok, {})[-2] == "Nothing: every cell of the summary is `ok`."


def test_rerender_refuses_a_linked_plots_folder_and_writes_nothing_outside_the_run(tmp_path):
    """Issue 71: a symlinked plots/ took the PNGs outside the run (a linked file was refused; a folder was not)."""
    run = tmp_path / "run"
    run.mkdir()
    summary = _summary(run, None)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (run / "plots").symlink_to(elsewhere)
    assert main(["rerender", "--summary", str(summary)]) != 0
    assert not any(elsewhere.iterdir()) and not (run / "report.md").exists()
    # a workload's folder linked inside a plots/ of the run's own: refused too
    (run / "plots").unlink()
    (run / "plots").mkdir()
    (run / "plots" / "bert_base").symlink_to(elsewhere)
    assert main(["rerender", "--summary", str(summary)]) != 0
    assert not any(elsewhere.iterdir())
    # and the same summary with an impossible figure: named before any plot is drawn
    (run / "plots" / "bert_base").unlink()
    bad = _summary(run, _set("latency_p50_ms", -0.5))
    assert main(["rerender", "--summary", str(bad)]) != 0
    assert not any((run / "plots").iterdir())


def test_an_ok_record_whose_parity_fails_its_own_tolerance_is_refused_and_clean_removes_it(tmp_path, capsys):
    key = CellKey("mlp_heart", "torch_eager", "fp32", "cpu", 1, 0, 1)
    parity = {"rel_l2": 5.0, "max_abs": 1.0, "cosine": 0.5, "finite": True, "tolerance": {"max_rel_l2": 1e-4}}
    edited = tmp_path / "cells" / "edited.json"
    CellRecord(key, "ok", "torch_eager", parity=parity, latency_ms={"p50": 1.0}).save(edited)
    honest = tmp_path / "cells" / "honest.json"
    CellRecord(key, "ok", "torch_eager", parity=parity | {"rel_l2": 1e-6}, latency_ms={"p50": 1.0}).save(honest)
    out = tmp_path / "summary.csv"
    code = main(["aggregate", str(edited), str(honest), "--out-csv", str(out), "--out-parquet", str(out) + ".pq"])
    error = capsys.readouterr().err
    assert code != 0 and not out.exists(), "nothing is published from a record that calls itself ok and fails"
    assert "edited.json: it contradicts itself: status ok, yet parity fails its own tolerance" in error
    assert "relative L2 error 5 > 0.0001" in error and "honest.json" not in error
    assert main(["clean", "--cells-dir", str(tmp_path / "cells")]) == 0
    assert honest.exists() and not edited.exists()
