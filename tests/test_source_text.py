"""The package's source keeps no lab notebook: a figure from a run lives in docs/results, and a comment that
needs one links the page that holds it, never a machine or a date of its own."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

pytestmark = pytest.mark.fast

SOURCE = Path(__file__).resolve().parent.parent / "src" / "inferbench"
#: a lent machine named as where something was seen, or a date of this project's runs (a dataset's dates are data)
RUN_HISTORY = re.compile(r"\b(?:H100|H200|A100|20[2-9]\d-\d\d-\d\d)\b")


def test_the_source_cites_no_machine_or_date_of_a_run():
    found = []
    # the config schema is package data: its descriptions are source text too
    for path in sorted([*SOURCE.rglob("*.py"), *SOURCE.rglob("*.yaml")]):
        for number, line in enumerate(path.read_text().splitlines(), start=1):
            # a path into docs/results names its run's folder: the link, not the history
            if RUN_HISTORY.search(re.sub(r"docs/results/\S+", "", line)):
                found.append(f"{path.relative_to(SOURCE)}:{number}: {line.strip()}")
    assert not found, "run history in src/ (move the figure to docs/results and link it):\n" + "\n".join(found)
