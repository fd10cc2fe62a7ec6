"""Issue 32, `inferbench compare` and `inferbench rerender` on input they used to mishandle.

compare: samples that are not their record's are refused, not bootstrapped (a file multiplied by 10
read as "slower, 9.99-10.0"); a cell of a million calls is compared in bounded memory (the bootstrap
allocated 12.7 GiB for 854,727); broken runs (all failed, a header-only CSV, a missing column, a p50
that is not a number, a truncated .npy) are refused by name, without a traceback.

render_run.py --summary: renders every committed summary (KeyError: ['fusions'] on most) and never
rewrites it (it wrote back host NA as empty, commit 12345e7 as 123450000000.0).
"""

from __future__ import annotations

import importlib.util
import shutil
import subprocess
import sys
import tracemalloc
from collections import Counter
from pathlib import Path
from types import ModuleType

import numpy as np
import pandas as pd
import pytest

from inferbench.analysis.compare_runs import (
    BOOTSTRAP_RESAMPLES,
    Run,
    bootstrap_medians,
    bootstrap_ratio,
)
from inferbench.analysis.summary import split_scenarios
from inferbench.analysis.summary_checks import read_summary
from inferbench.catalog.engines import COMPUTATION_KEYS
from inferbench.cli.main import main as inferbench_main
from inferbench.core.cells import CellKey, CellRecord
from inferbench.core.errors import UserError
from inferbench.core.stats import latency_stats
from inferbench.core.storage import samples_path, save_samples
from inferbench.report.compare import compare_runs
from tests.conftest import REPO
from tests.test_compare import make_runs

#: the CPU cell make_runs measures in one process: its interval comes from its saved calls
SINGLE_PROCESS = CellKey("mlp_heart", "ort_cpu", "fp32", "cpu", 1, 0, 2)


def refused(path_a: Path, path_b: Path, capsys: pytest.CaptureFixture[str]) -> str:
    """The message compare refuses two runs with: a UserError from the function, and from the CLI
    the same message on stderr, exit status 2, no traceback."""
    with pytest.raises(UserError) as error:
        compare_runs(path_a, path_b)
    capsys.readouterr()
    assert inferbench_main(["compare", str(path_a), str(path_b)]) == 2
    err = capsys.readouterr().err
    assert str(error.value) in err and "Traceback" not in err
    return str(error.value)


# --- samples checked against their records ---------------------------------------------------------


def test_samples_multiplied_by_ten_are_refused_naming_the_file_and_both_p50s(tmp_path, capsys):
    run_a, run_b = make_runs(tmp_path)
    record = run_b / "cells" / SINGLE_PROCESS.relpath
    samples = samples_path(record, "device")
    np.save(samples, np.load(samples) * 10)
    p50 = CellRecord.load(record).latency_ms["p50"]
    message = refused(run_a, run_b, capsys)
    assert str(samples) in message and str(record) in message
    assert f"median {p50 * 10:.6g} ms" in message and f"p50 {p50:.6g} ms" in message
    assert "400 calls" in message and "Re-run the cell, or delete" in message


def test_samples_with_another_count_of_calls_are_refused(tmp_path, capsys):
    run_a, run_b = make_runs(tmp_path)
    samples = samples_path(run_a / "cells" / SINGLE_PROCESS.relpath, "end_to_end")
    # the same median without the fastest and the slowest call: only the count tells them apart
    np.save(samples, np.sort(np.load(samples))[1:-1])
    message = refused(run_a, run_b, capsys)
    assert str(samples) in message and "holds 398 calls" in message and "says 400 calls" in message
    assert "end_to_end boundary" in message


def test_samples_that_match_their_record_give_the_interval(tmp_path):
    """float32 on disk against the record's float64 p50: within SAMPLES_P50_RTOL, used."""
    run_a, run_b = make_runs(tmp_path)
    cells, *_ = compare_runs(run_a, run_b)
    row = cells.set_index("engine").loc["ort_cpu"]
    assert row["interval_from"].startswith("calls within one process")
    assert row["ratio_low"] < row["ratio"] < row["ratio_high"] and row["change"] == "slower"


def test_a_summary_that_is_not_of_the_records_beside_it_is_refused(tmp_path, capsys):
    run_a, run_b = make_runs(tmp_path)
    summary = Run.load(run_b).summary
    single = summary["engine"] == "ort_cpu"
    summary.loc[single, "latency_p50_ms"] *= 10  # a stale summary.csv: its p50 is not the record's
    summary.to_csv(run_b / "summary.csv", index=False)
    message = refused(run_a, run_b, capsys)
    assert str(run_b / "summary.csv") in message and str(run_b / "cells" / SINGLE_PROCESS.relpath) in message
    assert "mlp_heart/ort_cpu-fp32/cpu/b1-s0-t2" in message and "aggregate" in message


def test_a_truncated_samples_file_is_refused_by_name(tmp_path, capsys):
    run_a, run_b = make_runs(tmp_path)
    samples = samples_path(run_b / "cells" / SINGLE_PROCESS.relpath, "device")
    samples.write_bytes(samples.read_bytes()[:100])
    message = refused(run_a, run_b, capsys)
    assert str(samples) in message and "damaged or truncated" in message and "delete" in message


# --- memory: the bootstrap of a cell of a million calls --------------------------------------------


def write_single_process_cell(cells_dir: Path, key: CellKey, p50_ms: float, calls: int, seed: int) -> None:
    seconds = np.random.default_rng(seed).normal(p50_ms, 0.02 * p50_ms, calls).astype(np.float32) * 1e-3
    stats = latency_stats(seconds, key.batch_size)
    record = CellRecord(
        key=key,
        status="ok",
        engine_impl=key.engine,
        timing="device",
        latency_ms=stats["latency_ms"],
        n_iters=stats["n_iters"],
        end_to_end={"latency_ms": stats["latency_ms"], "n_iters": stats["n_iters"]},
    )
    save_samples(cells_dir / key.relpath, {"device": seconds, "end_to_end": seconds})
    record.save(cells_dir / key.relpath)


def test_a_cell_of_a_million_calls_is_compared_in_bounded_memory(tmp_path):
    """Resampling (2000, n) allocated 16 GB here (12.7 GiB for the reported 854,727 calls); the
    bootstrap now holds a few copies of the calls: the peak stays below 128 MiB (8 MB per copy)."""
    for seed, (name, p50) in enumerate((("a", 1.0), ("b", 1.1))):
        write_single_process_cell(tmp_path / name / "cells", SINGLE_PROCESS, p50, 1_000_000, seed)
    tracemalloc.start()
    try:
        cells, *_ = compare_runs(tmp_path / "a", tmp_path / "b")
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 128 * 2**20, f"compare peaked at {peak / 2**20:.0f} MiB"
    row = cells.iloc[0]
    assert row["interval_from"].startswith("calls within one process")
    assert row["ratio_low"] < 1.1 < row["ratio_high"] and row["ratio_high"] - row["ratio_low"] < 1e-3


def test_the_bootstrap_allocates_no_array_of_resamples_by_calls():
    calls = np.random.default_rng(0).lognormal(0, 0.3, 20_000)
    tracemalloc.start()
    try:
        bootstrap_ratio(calls, calls * 1.05)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    # resampling would hold BOOTSTRAP_RESAMPLES x 20,000 indices (320 MB); a few copies of the calls here
    assert peak < 8 * calls.nbytes < BOOTSTRAP_RESAMPLES * calls.nbytes


@pytest.mark.parametrize("size", [2, 4, 7])
def test_the_bootstrap_medians_are_distributed_as_the_medians_of_resamples(size):
    """Against the resampling it replaces: the same distinct medians, at the same frequencies (within
    5 standard errors of a count, each of the few values)."""
    values = np.arange(1.0, size + 1) ** 2
    draws = 200_000
    resampled = Counter(np.median(np.random.default_rng(1).choice(values, size=(draws, size)), axis=1))
    drawn = Counter(bootstrap_medians(values, draws, np.random.default_rng(2)))
    assert set(drawn) == set(resampled)
    for median, count in resampled.items():
        assert abs(drawn[median] - count) < 5 * np.sqrt(count), median


# --- runs that cannot be compared -------------------------------------------------------------------


def a_summary(tmp_path: Path) -> tuple[Path, pd.DataFrame]:
    run_a, _ = make_runs(tmp_path)
    return run_a, Run.load(run_a).summary


def test_an_all_failed_run_says_there_is_nothing_to_compare(tmp_path, capsys):
    run_a, summary = a_summary(tmp_path)
    failed = tmp_path / "failed"
    for key in (CellKey(*row) for row in summary[["workload", "engine", "precision", "device", "batch_size",
                                                   "seq_len", "threads"]].itertuples(index=False)):  # fmt: skip
        CellRecord(key=key, status="failed", engine_impl=key.engine, reason="RuntimeError: CUDA error").save(
            failed / "cells" / key.relpath
        )
    for a, b in ((run_a, failed), (failed, run_a)):
        message = refused(a, b, capsys)
        assert str(failed / "cells") in message and "none of its 3 cells measured anything (3 failed" in message
        assert "nothing to compare" in message and "RuntimeError: CUDA error" in message
    csv = tmp_path / "failed.csv"
    Run.load(run_a).summary.assign(status="failed", reason="oom").to_csv(csv, index=False)
    assert f"{csv}: none of its 3 cells" in refused(run_a, csv, capsys)


def test_a_header_only_csv_is_refused_by_name(tmp_path, capsys):
    run_a, summary = a_summary(tmp_path)
    csv = tmp_path / "header.csv"
    summary.iloc[:0].to_csv(csv, index=False)
    assert csv.read_text().count("\n") == 1
    assert f"{csv} has no cells (a header and no rows)" in refused(csv, run_a, capsys)
    csv.write_text("")  # not even a header
    assert f"{csv} cannot be read as a summary CSV" in refused(csv, run_a, capsys)


@pytest.mark.parametrize("column", ["latency_p50_ms", "status", "batch_size"])
def test_a_summary_missing_a_column_compare_needs_is_refused_by_name(tmp_path, capsys, column):
    run_a, summary = a_summary(tmp_path)
    csv = tmp_path / "summary.csv"
    summary.drop(columns=[column]).to_csv(csv, index=False)
    message = refused(run_a, csv, capsys)
    assert f"{csv} has no column {column}" in message and "aggregate" in message


def test_a_summary_without_the_columns_compare_can_do_without_is_compared(tmp_path):
    """Only the cell's dimensions, status and p50 (an older or a hand-made summary): compared, no
    interval (no spread, no samples)."""
    _, summary = a_summary(tmp_path)
    csv = tmp_path / "minimal.csv"
    summary[["workload", "engine", "precision", "device", "batch_size", "seq_len", "threads", "status",
             "latency_p50_ms"]].to_csv(csv, index=False)  # fmt: skip
    cells, _, text, _ = compare_runs(csv, csv)
    assert len(cells) == 3 and (cells["ratio"] == 1).all() and "3 cells ok in both runs" in text


@pytest.mark.parametrize(
    ("column", "value", "what"),
    [
        ("latency_p50_ms", "fast", "is 'fast', not a number"),
        ("e2e_latency_p50_ms", "1.2 ms", "is '1.2 ms', not a number"),
        ("batch_size", "1.5", "is 1.5, not a whole number"),
        ("p50_by_process_ms", "1.0;n/a", "is '1.0;n/a', not ';'-separated numbers"),
    ],
)
def test_a_field_that_is_not_a_number_is_refused_naming_file_cell_column_and_value(
    tmp_path, capsys, column, value, what
):
    run_a, summary = a_summary(tmp_path)
    summary = summary.astype({column: object})
    row = summary.index[summary["engine"] == "ort_cpu"][0]
    summary.loc[row, column] = value
    csv = tmp_path / "summary.csv"
    summary.to_csv(csv, index=False)
    message = refused(run_a, csv, capsys)
    assert message.startswith(f"{csv}: column {column} of row {row + 1} (cell mlp_heart/ort_cpu-fp32/cpu/b")
    assert what in message


def test_a_path_that_is_no_run_is_refused_by_name(tmp_path, capsys):
    run_a, _ = make_runs(tmp_path)
    assert f"{tmp_path / 'nowhere'} does not exist" in refused(tmp_path / "nowhere", run_a, capsys)
    (tmp_path / "empty" / "cells").mkdir(parents=True)
    assert f"{tmp_path / 'empty' / 'cells'} has no cell records" in refused(tmp_path / "empty", run_a, capsys)


# --- render_run.py on the committed summaries -------------------------------------------------------

#: every summary committed under docs/results (summary.csv, run1_summary.csv, summary_gpu1.csv ...)
COMMITTED = sorted((REPO / "docs" / "results").rglob("*summary*.csv"))
#: rendered with their plots too (~2 s each on a 2-core machine, against ~0.5 s for the report alone):
#: a CPU run of every workload; H100 runs whose summaries predate the fusions column, every computation
#: column, and the scenario column; a serving run
WITH_PLOTS = [
    "cpu-2core/readme_default/2026-11-27/summary.csv",
    "h100/full/2026-11-23/summary.csv",
    "h100/reproducibility/run1_summary.csv",
    "h100/default_leases/lease1/summary.csv",
    "h100/serving/summary.csv",
]


@pytest.fixture(scope="module")
def render_run() -> ModuleType:
    return importlib.import_module("inferbench.cli.rerender")


@pytest.fixture(scope="module")
def default_config(render_run: ModuleType) -> tuple[dict, dict]:
    return render_run.load_config(None, gpu=False)


def test_the_committed_summaries_are_found():
    assert len(COMMITTED) >= 20
    assert all((REPO / "docs" / "results" / name).exists() for name in WITH_PLOTS)


@pytest.mark.parametrize("summary", COMMITTED, ids=lambda p: str(p.relative_to(REPO / "docs" / "results")))
def test_every_committed_summary_renders_its_report_and_stays_as_it_was(tmp_path, render_run, default_config, summary):
    before = summary.read_bytes()
    with_plots = str(summary.relative_to(REPO / "docs" / "results")) in WITH_PLOTS
    report = render_run.render_summary(summary, tmp_path, *default_config, plots=with_plots)
    assert summary.read_bytes() == before
    rows = len(pd.read_csv(summary))
    text = report.read_text()
    assert report == tmp_path / "report.md" and text.startswith("# inferbench report")
    assert f"\n{rows} cells: " in text
    text += (tmp_path / "report_details.md").read_text()  # a plot is shown on the first page or linked there
    plots = sorted((tmp_path / "plots").rglob("*.png"))
    if with_plots and not split_scenarios(pd.read_csv(summary)).single.empty:
        assert plots and all(f"plots/{p.relative_to(tmp_path / 'plots').as_posix()}" in text for p in plots)
    elif not with_plots:
        assert not plots


def test_render_run_keeps_identity_fields_as_written_and_never_writes_the_summary(tmp_path):
    """The reported case, through the script's command line: a summary rendered in its own folder (the
    default) is not written back; a host named NA and commit 12345e7 reach the report as written."""
    source = REPO / "docs" / "results" / "h100" / "repeatability_same_host" / "summary.csv"  # predates `graph`
    summary = pd.read_csv(source, dtype=str, keep_default_na=False)
    summary["hostname"], summary["git_commit"], summary["cuda"] = "NA", "12345e7", "12.10"
    csv = tmp_path / "summary.csv"
    summary.to_csv(csv, index=False)
    before = csv.read_bytes()
    done = subprocess.run(
        [sys.executable, "-m", "inferbench", "rerender", "--summary", str(csv), "--no-plots"],
        capture_output=True, text=True, check=False, cwd=REPO,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert csv.read_bytes() == before
    text = (tmp_path / "report_details.md").read_text()
    assert "- host: NA" in text and "inferbench commit 12345e7" in text and "CUDA 12.10" in text
    assert "- Code: inferbench 12345e7" in (tmp_path / "report.md").read_text()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["report.md", "report_details.md", "summary.csv"]


def test_render_run_refuses_a_summary_it_cannot_read_by_name(tmp_path):
    csv = tmp_path / "summary.csv"
    csv.write_text("")
    done = subprocess.run(
        [sys.executable, "-m", "inferbench", "rerender", "--summary", str(csv),
         "--out", str(tmp_path)],
        capture_output=True, text=True, check=False, cwd=REPO,
    )  # fmt: skip
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert f"{csv} cannot be read as a summary CSV" in done.stderr


def test_backfill_adds_only_the_computation_columns_a_summary_lacks(render_run, default_config):
    config, _ = default_config
    committed = REPO / "docs" / "results"
    without_fusions = read_summary(committed / "h100" / "default" / "summary.csv")
    filled = render_run.backfill_computation(without_fusions, config["engines"])
    assert "fusions" not in without_fusions and "fusions" in filled
    # what the summary had is kept as it was
    pd.testing.assert_frame_equal(filled[list(without_fusions.columns)], without_fusions, check_dtype=False)
    without_graph = read_summary(committed / "h100" / "reproducibility" / "run1_summary.csv")
    filled = render_run.backfill_computation(without_graph, config["engines"])
    ort = filled[filled["engine"] == "ort_cuda"]
    assert "graph" not in without_graph and not ort.empty and (ort["graph"] == "onnxruntime").all()
    computation = [c for c in filled.columns if c in COMPUTATION_KEYS]
    assert computation == list(COMPUTATION_KEYS), "every computation column, in order"


def test_a_summary_copied_elsewhere_renders_beside_itself_by_default(tmp_path):
    """The default output folder is the summary's own (as committed reports are made); only
    report.md, its appendix and plots/ are written there."""
    source = REPO / "docs" / "results" / "h100" / "serving" / "summary.csv"
    csv = tmp_path / "summary.csv"
    shutil.copyfile(source, csv)
    done = subprocess.run(
        [sys.executable, "-m", "inferbench", "rerender", "--summary", str(csv)],
        capture_output=True, text=True, check=False, cwd=REPO,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert csv.read_bytes() == source.read_bytes()
    assert {p.name for p in tmp_path.iterdir()} <= {"report.md", "report_details.md", "summary.csv", "plots"}
    assert (tmp_path / "report.md").read_text().startswith("# inferbench report")


def test_a_re_rendered_report_keeps_what_a_summary_cannot_make_from_the_report_it_replaces(render_run):
    """Models, profiles and the method text come from the run's records and the code that measured: a
    summary re-rendered with later report code keeps them from the run's own report, in their place."""
    original = (
        "# inferbench report\n\nGenerated then.\n\n## Headline\n\nold verdict\n\n"
        "## What was measured\n\nthe old way\n\n"
        "## Environment\n\nold env\n\n## Models\n\n| model |\n\n## All cells by workload\n\nold cells\n"
    )
    fresh = (
        "# inferbench report\n\nGenerated now.\n\n## Headline\n\none verdict\n\n## What was measured\n\nthe new way\n\n"
        "## Environment\n\nenv\n\n## All cells by workload\n\ncells\n"
    )
    once = render_run.keep_sections(fresh, original)
    headings = [h for h, _ in render_run.split_sections(once)]
    assert headings == ["", "Headline", "What was measured", "Environment", "Models", "All cells by workload"]
    assert "one verdict" in once and "old verdict" not in once  # the verdicts are the new code's
    assert "the old way" in once and "the new way" not in once  # the method is the measuring code's
    assert "'What was measured', 'Models' are the original report's" in once
    # re-rendering the re-rendered report changes nothing: one note, the same sections
    assert render_run.keep_sections(fresh, once) == once
    assert render_run.keep_sections(fresh, fresh.replace("## What was measured\n\nthe new way\n\n", "")) == fresh
