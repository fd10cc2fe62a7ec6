"""A summary beyond its size limits is refused with the limit named (issue 71): it builds a 100,800-row
summary, so it is not in the fast tier."""

from __future__ import annotations

import pandas as pd
import pytest

from inferbench.core.errors import UserError
from inferbench.report.markdown import write_report
from tests.test_summary_checks import _set, _summary

pytestmark = pytest.mark.slow


def test_a_summary_beyond_its_size_limits_is_refused_with_the_limit_named(tmp_path):
    """Issue 71: a 10^6-row summary exhausted 23 GB in the report; a 5,000,000-character field was copied whole."""
    huge = _summary(tmp_path, _set("reason", "x" * 5_000_000))
    with pytest.raises(UserError, match=r"column reason of row 1 .* \(5,000,00\d characters\), not a field of at most "
                                        r"100,000 characters") as raised:  # fmt: skip
        write_report(huge, tmp_path / "report.md")
    assert len(str(raised.value)) < 2_000, "the message quotes the start of the field, not all of it"
    many = _summary(tmp_path, lambda f: pd.concat([f] * 2_800, ignore_index=True))
    with pytest.raises(UserError, match=r"has 100,800 rows: .* reads at most 100,000"):
        write_report(many, tmp_path / "report.md")
