"""docs/results/README.md is the index `inferbench results-index` makes of the committed results: up to
date, one row per committed summary, the newest of each topic current, and a result's code judged against
today's code identity of each of its cells."""

from __future__ import annotations

import shutil
import subprocess
import sys

import pandas as pd
import pytest

from inferbench.cli.results_index import build_index
from inferbench.plan.code import cell_code_roots, code_identity
from tests.conftest import REPO

pytestmark = pytest.mark.fast  # pure logic: the developer's loop (docs/contributing.md)

RESULTS = REPO / "docs" / "results"


def test_the_committed_index_is_up_to_date():
    done = subprocess.run(
        [sys.executable, "-m", "inferbench", "results-index", "--check", "--results", str(RESULTS)],
        capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr


def test_one_row_per_summary_the_newest_of_a_topic_current_and_the_code_judged_per_cell(tmp_path):
    source = RESULTS / "cpu-2core" / "readme_default" / "2026-11-27" / "summary.csv"
    for run, created, code in (("old", "2026-11-01T00:00:00+00:00", "000000000000"), ("new", None, None)):
        folder = tmp_path / "cpu" / "topic" / run
        folder.mkdir(parents=True)
        frame = pd.read_csv(source)
        if created:
            frame["created_at"] = created
        frame["code_job"] = code or [
            code_identity(cell_code_roots(impl, str(scenario))) for impl, scenario in zip(
                frame["engine_impl"], frame["scenario"], strict=True)
        ]  # fmt: skip
        frame.to_csv(folder / "summary.csv", index=False)
    (tmp_path / "cpu" / "topic" / "README.md").write_text("# Two runs of a topic\n")
    text = build_index(tmp_path)
    rows = [line for line in text.splitlines() if line.startswith("| [")]
    assert len(rows) == 2
    new, old = sorted(rows)  # "new" sorts before "old"
    assert "Two runs of a topic" in new and "**current**" in new and "today's" in new
    assert "superseded" in old and "older (26 of 26 cells)" in old
    shutil.rmtree(tmp_path / "cpu" / "topic" / "old")
    assert "not recorded" not in build_index(tmp_path)


def test_hostile_summaries_and_titles_are_refused_or_shown_as_text(tmp_path):
    """Issue 71: raw HTML and a row-splitting `|` from a README title or a gpu field, "current" picked by the text
    of times in two zones, a summary without code called today's, a symlinked summary or a FIFO of that name."""
    import os

    from inferbench.core.errors import UserError

    source = RESULTS / "cpu-2core" / "readme_default" / "2026-11-27" / "summary.csv"
    topic = tmp_path / "cpu" / "topic"
    for run, created in (("a", "2026-11-02T01:00:00+05:00"), ("b", "2026-11-01T23:00:00-05:00")):
        (topic / run).mkdir(parents=True)
        frame = pd.read_csv(source).assign(created_at=created, gpu="<b>H</b> | x")
        frame["code_job"] = None  # no record named its code
        frame.loc[0, "code_job"] = code_identity(cell_code_roots(frame.loc[0, "engine_impl"], "single"))
        frame.to_csv(topic / run / "summary.csv", index=False)
    (topic / "README.md").write_text("# <script>x</script> [a](http://e) | split\n")
    rows = [line for line in build_index(tmp_path).splitlines() if line.startswith("| [")]
    assert all(line.count(" | ") == 6 for line in rows), "no field splits the row"
    assert "<script>" not in "".join(rows) and "<b>" not in "".join(rows) and "](http://e)" not in "".join(rows)
    # b's time is 04:00 UTC on 11-02, after a's 20:00 UTC on 11-01: b is current, though its text sorts first
    a, b = sorted(rows)
    assert "**current**" in b and "superseded by [cpu/topic/b]" in a
    assert "older (25 of 26 cells)" in a, "a cell whose record names no code is not today's"
    # a summary that is a link, a pipe or a folder is refused by name, before any is read
    os.symlink(topic / "a" / "summary.csv", tmp_path / "cpu" / "summary.csv")
    with pytest.raises(UserError, match=r"summary.csv is a symbolic link"):
        build_index(tmp_path)
    (tmp_path / "cpu" / "summary.csv").unlink()
    os.mkfifo(tmp_path / "cpu" / "summary.csv")
    with pytest.raises(UserError, match=r"summary.csv is a pipe"):
        build_index(tmp_path)
    (tmp_path / "cpu" / "summary.csv").unlink()
    pd.read_csv(source).drop(columns="status").to_csv(tmp_path / "cpu" / "summary.csv", index=False)
    with pytest.raises(UserError, match=r"cpu/summary.csv has no status column"):
        build_index(tmp_path)
