"""The index of committed results (verb ``results-index``): ``docs/results/README.md``, one row per committed
summary. A row says what ran (the folder and its nearest README's first line), where, when, which code, and
whether that code still measures as today's does. A result is superseded where a newer one on the same
machine measured every cell it did (its grid, or a larger one); else it is current. Folder names play no
part: a run of another grid, however named, supersedes nothing.

Whether a result's measuring code is today's: since records name the code identity of their job
(``code_job``: the hash of the code the job ran, inferbench.plan.code), each cell's is compared with the
identity today's source gives the same engine and scenario. Older summaries do not carry it: their rows
say so, and their README names the commit.
"""

from __future__ import annotations

import argparse
import functools
import math
import re
from pathlib import Path
from typing import Any

from inferbench.cli.args import arguments

#: the index's title and what it is; the table follows
HEADER = """# Committed results

Made by `python -m inferbench results-index` (tests/test_results_index.py checks it is up to date): one row
per committed summary. **current**: no newer summary on the same machine measured every cell it did; else it
is superseded by the newest that did. **code**: whether its cells were measured by the code that measures
them today (each record names its job's code identity); older summaries did not record it, and their README
names the commit. Each folder's README says what ran and what it shows.

| result | what ran | machine | measured | cells | code | status |
| --- | --- | --- | --- | --- | --- | --- |
"""


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
    """The index's Markdown for the summaries under ``results``: each a regular file (a link, a pipe or a folder of
    that name is refused by name before any is read)."""
    from inferbench.core.fsutil import refuse_non_regular

    paths = sorted(results.rglob("summary.csv"))
    for path in paths:
        refuse_non_regular(path)
    rows = [_describe(path, results) for path in paths]
    lines = []
    for row in rows:
        newer = superseded_by(row, rows)
        status = "**current**" if newer is None else f"superseded by [{newer['folder']}]({newer['folder']}/)"
        link = f"[{row['folder']}]({row['folder']}/)"
        lines.append(
            f"| {link} | {row['what']} | {row['machine']} | {row['measured'][:10]} | {row['cells']} | {row['code']} "
            f"| {status} |"
        )
    return HEADER + "\n".join(lines) + "\n"


def superseded_by(row: dict[str, Any], rows: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The newest result that supersedes ``row``: measured later, on the same machine, every cell of its grid."""
    newer = [
        other
        for other in rows
        if other["machine_key"] == row["machine_key"]
        and other["measured"] > row["measured"]
        and other["grid"] >= row["grid"]
    ]
    return max(newer, key=lambda other: other["measured"]) if newer and row["grid"] else None


def _key_text(value: Any) -> str:
    """A key value as text, alike in every summary: 1.0 read from a column with gaps is 1."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return ""
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def _grid(frame: Any) -> frozenset[tuple[str, ...]]:
    """The cells a run measured, each by its key (inferbench.analysis.summary.KEY_COLUMNS), whatever their status."""
    from inferbench.analysis.summary import KEY_COLUMNS, with_scenario

    keys = with_scenario(frame).reindex(columns=KEY_COLUMNS)
    return frozenset(tuple(_key_text(v) for v in row) for row in keys.itertuples(index=False))


def _describe(summary: Path, results: Path) -> dict[str, Any]:
    from inferbench.analysis.summary import read_summary_csv
    from inferbench.core.errors import UserError
    from inferbench.report.text import escape_markdown, prose_with_code

    try:
        frame = read_summary_csv(summary)
    except (OSError, ValueError, UnicodeDecodeError) as error:
        raise UserError(f"{summary} cannot be read as a summary ({type(error).__name__}: {str(error)[:200]})") from None
    if "status" not in frame:
        raise UserError(f"{summary} has no status column: it is not a summary inferbench wrote")
    folder = summary.parent.relative_to(results).as_posix()
    gpus = sorted({str(g) for g in frame.get("gpu", []) if isinstance(g, str) and g})
    cpus = sorted({str(c) for c in frame.get("cpu", []) if isinstance(c, str) and c})
    created = sorted(_utc(c) for c in frame.get("created_at", []) if isinstance(c, str) and _utc(c))
    return {
        "folder": folder,
        "what": prose_with_code(_readme_line(summary.parent, results)),
        "machine": escape_markdown(", ".join(gpus) if gpus else (cpus[0] if cpus else "–")),
        # the same GPUs, or on a machine without one the same CPUs: a run elsewhere supersedes nothing here
        "machine_key": tuple(gpus) or tuple(cpus),
        "grid": _grid(frame),
        "measured": created[-1] if created else "",
        "cells": f"{int((frame['status'] == 'ok').sum())} ok of {len(frame)}",
        "code": _code_status(frame),
    }


def _utc(created_at: str) -> str:
    """A record's time as UTC ISO text (ordered as text by time, whatever zone it was written in); empty where it
    is no time."""
    from datetime import UTC, datetime

    try:
        moment = datetime.fromisoformat(created_at)
    except ValueError:
        return ""
    return (moment if moment.tzinfo else moment.replace(tzinfo=UTC)).astimezone(UTC).isoformat()


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
    rows = frame.dropna(subset=["code_job"])  # a cell whose record names no code counts as older
    current = sum(
        _current_identity(str(impl), str(scenario or "single")) == code
        for impl, scenario, code in zip(
            rows["engine_impl"], rows.get("scenario", ["single"] * len(rows)), rows["code_job"], strict=True
        )
    )
    return "today's" if current == len(frame) else f"older ({len(frame) - current} of {len(frame)} cells)"


@functools.cache
def _current_identity(engine_impl: str, scenario: str) -> str | None:
    from inferbench.plan.code import cell_code_roots, code_identity

    try:
        return code_identity(cell_code_roots(engine_impl, scenario))
    except (KeyError, ValueError, ModuleNotFoundError):  # an engine or scenario that no longer exists
        return None
