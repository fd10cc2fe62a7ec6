"""Text from the config (study names, questions, descriptions) and names and reasons from the records show
as typed in the reports: never as HTML, a link or a heading, and never splitting a table's row.

report.md is checked raw and once rendered to HTML by a CommonMark converter that passes raw HTML through
(markdown-it-py, GitHub's tables), the worst case of the viewers it meets. Snakemake's HTML report
(`snakemake --report`) shows no text of the config but the workload in its captions: those are rendered
here as Snakemake renders them (jinja, then docutils), with a workload name no config would accept.
"""

from __future__ import annotations

import html
import re
import types
from pathlib import Path

import jinja2
import pandas as pd
import pytest
from docutils.core import publish_parts

from inferbench.plan.config import validate_config
from inferbench.plan.grid import resolved_studies
from inferbench.report.markdown import DETAILS_NAME, build_details, build_report, write_report
from inferbench.report.tables import markdown_table
from inferbench.report.text import escape_markdown, inline_code
from tests.conftest import REPO
from tests.test_decisions import cell

pytestmark = pytest.mark.fast  # pure logic: the developer's loop (docs/contributing.md)

LOAN = {
    "workloads": ["mlp_lendingclub"], "engines": ["ort_cpu", "ort_cuda"], "precisions": ["fp32"],
    "devices": ["cpu", "cuda"], "batch_sizes": [1, 10, 100, 1000], "threads": [4], "layout": "by_batch",
    "question": "from which batch does the GPU win?",
}  # fmt: skip


def loan_summary() -> pd.DataFrame:
    """CPU: 0.01 ms per item at every batch. GPU: 1 ms per call end to end, so 1 / batch per item."""
    rows = []
    for b in (1, 10, 100, 1000):
        rows.append(cell(workload="mlp_lendingclub", engine="ort_cpu", engine_impl="ort_cpu", threads=4, batch_size=b,
                         latency_p50_ms=0.01 * b))  # fmt: skip
        rows.append(cell(workload="mlp_lendingclub", engine="ort_cuda", engine_impl="ort_cuda", device="cuda",
                         threads=0, batch_size=b, latency_p50_ms=0.1, e2e_latency_p50_ms=1.0))  # fmt: skip
    return pd.DataFrame(rows)


SCRIPT = "<script>alert(1)</script>"
IMG = "<img src=x onerror=alert(1)>"
LINK = "[link](javascript:alert(1))"
HOSTILE = f"{SCRIPT} | {LINK}"
ESCAPED_SCRIPT = "&lt;script&gt;alert(1)&lt;/script&gt;"
NAME = f"loan {HOSTILE}"
QUESTION = f"does {HOSTILE} show as typed?"
DESCRIPTION = f"# not a heading {IMG} `code` *stars*"


def hostile_config() -> dict:
    """A valid config whose study's name, question and description carry HTML, a pipe, a link and markup."""
    study = {key: LOAN[key] for key in ("workloads", "engines", "precisions", "devices", "batch_sizes", "threads")}
    config = {
        "run": [NAME, "plain"],
        "studies": {
            NAME: {**study, "layout": "by_batch", "question": QUESTION, "description": DESCRIPTION},
            "plain": {**study, "layout": "engines", "question": "which engine?"},
        },
        "engines": {"ort_cpu": {"engine": "ort_cpu"}, "ort_cuda": {"engine": "ort_cuda"}},
    }
    return validate_config(config)  # the schema takes any text for these: the report must escape it


def failed_cell() -> dict:
    """A cell whose record's reason carries HTML, a pipe and a second line."""
    return cell(workload="mlp_lendingclub", engine="ort_cpu", engine_impl="ort_cpu", threads=4, batch_size=10_000,
                status="error", latency_p50_ms=None, reason=f"failed on {HOSTILE}\nTraceback ...")  # fmt: skip


@pytest.fixture(scope="module")
def report_md(tmp_path_factory: pytest.TempPathFactory) -> str:
    """report.md and its appendix written as the workflow's `report` rule writes them, from a summary CSV and
    the studies."""
    out = tmp_path_factory.mktemp("report")
    summary = pd.concat([loan_summary(), pd.DataFrame([failed_cell()])], ignore_index=True)
    summary.to_csv(out / "summary.csv", index=False)
    write_report(out / "summary.csv", out / "report.md", studies=resolved_studies(hostile_config(), has_cuda=True))
    return (out / "report.md").read_text() + "\n" + (out / DETAILS_NAME).read_text()


def tables(markdown: str) -> list[list[str]]:
    """Each table of ``markdown``: its consecutive lines that start with `|`."""
    found: list[list[str]] = []
    previous = False
    for line in markdown.splitlines():
        row = line.startswith("|")
        if row and not previous:
            found.append([])
        if row:
            found[-1].append(line)
        previous = row
    return found


def separators(row: str) -> int:
    """The `|` that split ``row`` into cells (GitHub's tables split on every `|` not escaped by `\\`)."""
    return len(re.findall(r"(?<!\\)\|", row))


def assert_no_live_html(page: str) -> None:
    """No tag but the renderer's own in ``page`` (HTML, or Markdown whose raw HTML a renderer passes on)."""
    assert "<script" not in page.lower() and "<img" not in page.lower()
    assert 'href="javascript:' not in page


def assert_no_live_markdown(markdown: str) -> None:
    """``markdown`` holds no raw HTML and no link of the config's."""
    assert_no_live_html(markdown)
    assert "](javascript:" not in markdown


def render(markdown: str) -> str:
    """``markdown`` as a CommonMark converter with GitHub's tables makes it, raw HTML passed through."""
    markdown_it = pytest.importorskip("markdown_it")
    return markdown_it.MarkdownIt("commonmark", {"html": True}).enable("table").render(markdown)


def shown_text(page: str) -> str:
    """What a reader of the HTML ``page`` reads: tags gone, character references decoded."""
    return html.unescape(re.sub(r"<[^>]+>", "", page))


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (SCRIPT, ESCAPED_SCRIPT),
        ("a | b", "a &#124; b"),
        (LINK, "&#91;link&#93;(javascript:alert(1))"),
        ("`x` *y* a\\b & c", "&#96;x&#96; &#42;y&#42; a&#92;b &amp; c"),
        ("# title", "&#35; title"),
        ("- item", "&#45; item"),
        ("12. item", "12&#46; item"),
        ("~~~ fence", "~~&#126; fence"),
        ("two\nlines\r\n\tand\x00more", "two lines and more"),
        ("torch_eager fp16 cuda", "torch_eager fp16 cuda"),  # plain names stay as they are
        ("-1.5 – 2.5 · #3", "-1.5 – 2.5 · #3"),  # numbers too: no marker where it opens nothing
    ],
)
def test_escape_markdown_makes_text_literal(text, expected):
    assert escape_markdown(text) == expected


def test_inline_code_keeps_a_plain_name_in_a_code_span_and_escapes_the_rest():
    assert inline_code("fp16_vs_fp32") == "`fp16_vs_fp32`"
    assert inline_code("a `b` c") == "a &#96;b&#96; c"  # a backtick would end the span
    assert inline_code(NAME) == escape_markdown(NAME)


def test_report_md_escapes_the_config_text_of_a_study(report_md):
    assert_no_live_markdown(report_md)
    assert f"### Does {ESCAPED_SCRIPT} &#124; &#91;link&#93;(javascript:alert(1)) show as typed?" in report_md
    assert f"Study loan {ESCAPED_SCRIPT} &#124; &#91;link&#93;(javascript:alert(1))." in report_md
    assert "Study `plain`." in report_md  # a plain name keeps its code span
    # the reason's first line, on the first page and in its table cell in the appendix; the second line is left out
    assert f"- 1 error: failed on {ESCAPED_SCRIPT} &#124; &#91;link&#93;(javascript:alert(1)) (" in report_md
    assert f"| failed on {ESCAPED_SCRIPT} &#124; &#91;link&#93;(javascript:alert(1)) |" in report_md
    assert "Traceback" not in report_md


def test_report_md_tables_keep_their_columns(report_md):
    found = tables(report_md)
    assert len(found) >= 4  # the study's per-item table, the engines table, every cell, the failed cells
    for table in found:
        assert len({separators(row) for row in table}) == 1, "\n".join(table)


def test_report_md_rendered_to_html_shows_the_config_text_as_typed(report_md):
    page = render(report_md)
    assert_no_live_html(page)
    assert ESCAPED_SCRIPT in page
    assert "<a " in page and 'href="javascript:' not in page  # the report's own link to its appendix, no other
    assert page.count("<h1>") == 2  # the report's title and the appendix's
    text = shown_text(page)
    assert f"Study {NAME}" in text and QUESTION[:1].upper() + QUESTION[1:] in text
    for table in re.findall(r"<table>.*?</table>", page, flags=re.S):
        widths = {len(re.findall(r"<t[hd][ >]", row)) for row in re.findall(r"<tr>.*?</tr>", table, flags=re.S)}
        assert len(widths) == 1, table


def test_names_from_the_records_are_escaped_in_prose_and_tables():
    """Engine names reach the report from the records too (and a summary can be edited): a name with a
    pipe and HTML keeps the table's columns and becomes no tag."""
    engine = f"ort|cpu{IMG}"
    summary = loan_summary().replace({"engine": {"ort_cpu": engine}})
    study = {**LOAN, "engines": [engine, "ort_cuda"]}
    text = build_report(summary, studies={"loan": study})
    assert_no_live_markdown(text)
    assert "| ort&#124;cpu&lt;img src=x onerror=alert(1)&gt; fp32 cpu 4t |" in text
    for table in tables(text):
        assert len({separators(row) for row in table}) == 1, "\n".join(table)

    table = markdown_table(summary.head(1), [("engine", "engine"), ("batch_size", "batch"), ("latency_p50_ms", "p50")])
    assert table.splitlines()[-1] == "| ort&#124;cpu&lt;img src=x onerror=alert(1)&gt; | 1 | 10.0 µs |"


def test_the_reports_escape_dataset_model_and_profile_text():
    meta = [{"name": f"mlp {SCRIPT}", "n_params": 1000, "training": {"test_auc": 0.9, "n_test": 10}}]
    stats = [{"dataset": f"loans {LINK}", "source": IMG, "rows_raw": 10, "rows_clean": 9, "positive_rate": 0.5,
              "n_features": 3}]  # fmt: skip
    profiles = [{"cell_id": f"cell {SCRIPT}", "status": "error", "reason": HOSTILE}]
    first = build_report(loan_summary(), model_meta=meta, dataset_stats=stats, profiles=profiles)
    text = build_details(loan_summary(), model_meta=meta, dataset_stats=stats, profiles=profiles)
    for markdown in (first, text):
        assert_no_live_markdown(markdown)
    assert f"mlp {ESCAPED_SCRIPT} AUC 0.900 on 10 rows" in first
    assert f"| mlp {ESCAPED_SCRIPT} | 1,000 |" in text
    assert "| loans &#91;link&#93;(javascript:alert(1)) | &lt;img src=x onerror=alert(1)&gt; | 10 | 9 |" in text
    assert f"### cell {ESCAPED_SCRIPT}" in text


@pytest.mark.filterwarnings("ignore:Argument .writer_name.:PendingDeprecationWarning")  # as Snakemake calls it
@pytest.mark.parametrize("caption", sorted((REPO / "workflow" / "report").glob("*.rst")), ids=lambda p: p.name)
def test_snakemake_html_report_captions_show_a_workload_as_typed(caption: Path):
    """Snakemake renders each caption with jinja (no autoescaping) then docutils into the HTML report. The
    workload is an inline literal there: no character of it, not even a bare javascript: address, which
    docutils would otherwise link, becomes markup."""
    workload = f"{HOSTILE} {IMG} javascript:alert(1)"
    snakemake = types.SimpleNamespace(wildcards=types.SimpleNamespace(workload=workload))
    rst = jinja2.Environment().from_string(caption.read_text()).render(snakemake=snakemake)
    page = publish_parts(rst, writer_name="html")["body"]
    assert_no_live_html(page)
    assert "<a " not in page
    if "snakemake.wildcards.workload" in caption.read_text():
        assert ESCAPED_SCRIPT in page
        assert workload in " ".join(shown_text(page).split())
