"""The committed results under docs/results read correctly on a code host: every file a report or
README links (plots, tables, other results) is in the repository."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.conftest import REPO

pytestmark = pytest.mark.fast  # pure logic: the developer's loop (docs/contributing.md)

DOCS = REPO / "docs" / "results"
#: Markdown links and images: [text](target) / ![alt](target), target without a title
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")


def local_links(markdown: Path) -> list[str]:
    targets = LINK.findall(markdown.read_text())
    return [t for t in targets if not re.match(r"^[a-z]+://|^#|^mailto:", t)]


@pytest.mark.parametrize("markdown", sorted(DOCS.rglob("*.md")), ids=lambda p: str(p.relative_to(DOCS)))
def test_every_linked_file_of_a_committed_result_exists(markdown):
    missing = [t for t in local_links(markdown) if not (markdown.parent / t.split("#")[0]).exists()]
    assert not missing, f"{markdown.relative_to(REPO)} links files that are not committed: {missing[:10]}"


def test_committed_reports_show_their_plots():
    reports = sorted(DOCS.rglob("report.md"))
    assert reports
    for report in reports:
        images = [t for t in local_links(report) if t.endswith((".png", ".svg"))]
        assert images, f"{report.relative_to(REPO)} shows no plot"


def test_a_missing_plot_is_caught(tmp_path):
    report = tmp_path / "report.md"
    report.write_text("![a plot](plots/resnet50/throughput.png) and [a table](summary.csv)\n")
    (tmp_path / "summary.csv").write_text("x\n")
    assert local_links(report) == ["plots/resnet50/throughput.png", "summary.csv"]
    assert not (tmp_path / "plots/resnet50/throughput.png").exists()
