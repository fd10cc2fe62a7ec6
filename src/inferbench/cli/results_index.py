"""The index of committed results (verb ``results-index``): ``docs/results/README.md``, one row per committed
summary. A row says what ran (the topic folder and its README's first line), where, when, which code, and
whether that code still measures as today's does. The newest summary of each topic is its current result;
older ones, and the topics a later topic replaced (``REPLACED_BY``), are marked superseded.

Whether a result's measuring code is today's: since records name the code identity of their job
(``code_job``: the hash of the code the job ran, inferbench.plan.code), each cell's is compared with the
identity today's source gives the same engine and scenario. Older summaries do not carry it: their rows
say so, and their README names the commit.
"""

from __future__ import annotations

import argparse
import functools
import re
from pathlib import Path
from typing import Any

from inferbench.cli.args import arguments

#: the index's title and what it is; the table follows
HEADER = """# Committed results

Made by `python -m inferbench results-index` (tests/test_results_index.py checks it is up to date): one row
per committed summary. **current**: the newest summary of its topic. **code**: whether its cells were
measured by the code that measures them today (each record names its job's code identity); older summaries
did not record it, and their README names the commit. Each folder's README says what ran and what it shows.

| result | what ran | machine | measured | cells | code | status |
| --- | --- | --- | --- | --- | --- | --- |
"""


#: topics whose results a later topic's replaced (the same question, measured again under another name)
REPLACED_BY = {"h100/default": "h100/readme_default", "h100/default_leases": "h100/readme_default"}


def _results_index_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--results", type=Path, default=Path("docs/results"), help="the committed results folder")
    p.add_argument("--out", type=Path, help="write the index here (default: RESULTS/README.md)")
    p.add_argument("--check", action="store_true", help="only say whether the index is up to date (exit 1 if not)")


@arguments(_results_index_arguments)
def results_index(args: argparse.Namespace) -> None:
    from inferbench.core.errors import UserError

    out = args.out or args.results / "README.md"
    text = build_index(args.results)
    if args.check:
        if not out.exists() or out.read_text() != text:
            raise UserError(f"{out} is not up to date: run `python -m inferbench results-index`")
        print(f"{out} is up to date")
        return
    out.write_text(text)
    print(f"{out}: {text.count(chr(10)) - HEADER.count(chr(10))} results")


def build_index(results: Path) -> str:
    """The index's Markdown for the summaries under ``results``."""
    rows = [_describe(path, results) for path in sorted(results.rglob("summary.csv"))]
    newest: dict[str, str] = {}
    for row in rows:
        if row["topic"] not in newest or row["measured"] > newest[row["topic"]]:
            newest[row["topic"]] = row["measured"]
    lines = []
    for row in rows:
        if row["topic"] in REPLACED_BY:
            status = f"superseded by [{REPLACED_BY[row['topic']]}]({REPLACED_BY[row['topic']]}/)"
        else:
            status = "**current**" if row["measured"] == newest[row["topic"]] else "superseded"
        link = f"[{row['folder']}]({row['folder']}/)"
        lines.append(
            f"| {link} | {row['what']} | {row['machine']} | {row['measured'][:10]} | {row['cells']} | {row['code']} "
            f"| {status} |"
        )
    return HEADER + "\n".join(lines) + "\n"


def _describe(summary: Path, results: Path) -> dict[str, Any]:
    from inferbench.analysis.summary import read_summary_csv

    frame = read_summary_csv(summary)
    folder = summary.parent.relative_to(results).as_posix()
    topic = "/".join(folder.split("/")[:2])
    gpus = sorted({str(g) for g in frame.get("gpu", []) if isinstance(g, str) and g})
    cpus = sorted({str(c) for c in frame.get("cpu", []) if isinstance(c, str) and c})
    created = sorted(str(c) for c in frame.get("created_at", []) if isinstance(c, str))
    return {
        "folder": folder,
        "topic": topic,
        "what": _readme_line(summary.parent, results),
        "machine": ", ".join(gpus) if gpus else (cpus[0] if cpus else "–"),
        "measured": created[-1] if created else "",
        "cells": f"{int((frame['status'] == 'ok').sum())} ok of {len(frame)}",
        "code": _code_status(frame),
    }


def _readme_line(folder: Path, results: Path) -> str:
    """The title of the nearest README above the summary (its first heading, without the #), or –."""
    depth = len(folder.relative_to(results).parts)  # the folders from the summary's up to below ``results``
    for directory in [folder, *folder.parents][:depth]:
        readme = directory / "README.md"
        if readme.exists():
            title = next((line.lstrip("# ").strip() for line in readme.read_text().splitlines() if line.strip()), "")
            return re.sub(r"\s*\|\s*", " ", title) or "–"
    return "–"


def _code_status(frame: Any) -> str:
    """``today's`` where every cell's job ran today's code, ``older (n of m cells)`` where some did not,
    ``not recorded`` for a summary made before records named their code."""
    if "code_job" not in frame or frame["code_job"].isna().all():
        return "not recorded"
    rows = frame.dropna(subset=["code_job"])
    current = sum(
        _current_identity(str(impl), str(scenario or "single")) == code
        for impl, scenario, code in zip(
            rows["engine_impl"], rows.get("scenario", ["single"] * len(rows)), rows["code_job"], strict=True
        )
    )
    return "today's" if current == len(rows) else f"older ({len(rows) - current} of {len(rows)} cells)"


@functools.cache
def _current_identity(engine_impl: str, scenario: str) -> str | None:
    from inferbench.catalog.verbs import cell_code_roots
    from inferbench.plan.code import code_identity

    try:
        return code_identity(cell_code_roots(engine_impl, scenario))
    except (KeyError, ValueError, ModuleNotFoundError):  # an engine or scenario that no longer exists
        return None
