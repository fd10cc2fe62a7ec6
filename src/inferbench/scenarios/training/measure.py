"""The training scenario: cells of training engines (EngineInfo.mode ``train``), timed one call at a
time like inference calls (inferbench.scenarios.single.measure), where a call is one training step on a
staged batch (the batch's items), or, for engines that read the workload's dataset, one epoch over
it (the dataset's rows, from host memory: timed end to end)."""

from __future__ import annotations

from inferbench.scenarios.prepare import Measured, PreparedCell
from inferbench.scenarios.single.measure import time_calls


def measure(cell: PreparedCell) -> Measured:
    if cell.info.needs_dataset:
        import pyarrow.parquet as pq

        # a cell without its dataset is recorded unavailable before it is prepared (scenarios.prepare)
        return time_calls(cell, items_per_call=pq.read_metadata(cell.inputs.dataset).num_rows)
    return time_calls(cell, items_per_call=cell.key.batch_size)
