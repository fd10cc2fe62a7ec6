"""The summary columns of llm_load cells (their declaration's ``columns``): their section keeps LoadGen's result
shape for what a load sweep has (the rate served within the objective, the bracket, capacity, percentiles), so the
summary reads it as the serving scenarios' columns. Light: the summary is made where no engine is installed."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from inferbench.scenarios.llm_load import SECTION
from inferbench.scenarios.serving.columns import section_columns

if TYPE_CHECKING:
    from inferbench.core.cells import CellRecord


def columns(record: CellRecord) -> dict[str, Any]:
    return section_columns(record.sections.get(SECTION) or {})
