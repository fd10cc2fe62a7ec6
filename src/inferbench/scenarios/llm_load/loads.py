"""Every load of every LLM serving cell (``llm_load``) as one table, ``loads.csv`` beside ``summary.csv``: one row
per cell and load (its capacity run, each load of its sweep, each load of its search, and for a server's endpoint
the client's floor: the capacity's requests against the null server), with what was offered,
arrived and served, the steady window, the TTFT / TPOT / ITL / e2e percentiles, goodput, energy, the verdict and
the constraints that failed. The report's per-load tables, ``inferbench compare`` and the MLflow export read it;
``aggregate`` writes it from the records (their ``serving``)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from inferbench.core.cells import CellRecord
from inferbench.core.errors import UserError
from inferbench.core.fsutil import atomic_path, refuse_non_regular
from inferbench.scenarios.llm_load import SCENARIO, SECTION

#: the file's name, beside summary.csv
LOADS_CSV = "loads.csv"
#: the cell's key, as summary.csv names it, then ``cell_id``
KEY = ("cell_id", "workload", "engine", "precision", "device", "batch_size", "seq_len", "threads")
#: per load: which run of the cell (``capacity``, ``sweep``, ``search``, ``client_floor``), its place in that run,
#: and what it was
LOAD = ("phase", "position", "load", "concurrency", "offered_per_s", "arrived_per_s", "request_per_s",
        "output_tokens_per_s", "window_s", "requests", "served_requests", "mean_in_flight", "goodput_per_s",
        "good_share")  # fmt: skip
PERCENTILES = tuple(f"{figure}_{level}_ms" for figure in ("ttft", "tpot", "itl", "e2e") for level in
                    ("p50", "p90", "p99"))  # fmt: skip
ENERGY = ("energy_j", "energy_per_output_token_mj", "energy_per_request_j", "mean_power_w")
VERDICT = ("valid", "met", "failed", "processes", "request_per_s_spread_pct")
COLUMNS = (*KEY, *LOAD, *PERCENTILES, *ENERGY, *VERDICT)


def load_rows(record: CellRecord) -> list[dict[str, Any]]:
    """One row per load of an llm_load cell's record (none for another cell's): its capacity run, its sweep's
    loads, its search's loads."""
    serving = record.sections.get(SECTION) or {}
    if serving.get("scenario") != SCENARIO:
        return []
    key = record.key
    cell = {"cell_id": key.cell_id, "workload": key.workload, "engine": key.engine, "precision": key.precision,
            "device": key.device, "batch_size": key.batch_size, "seq_len": key.seq_len,
            "threads": key.threads}  # fmt: skip
    search = serving.get("search") or {}
    steps: list[Any] = search["steps"] if isinstance(search.get("steps"), list) else []
    runs = [("capacity", 0, serving["capacity"])]
    runs += [("sweep", i, step) for i, step in enumerate(serving["sweep"])]
    runs += [("search", i, step) for i, step in enumerate(steps)]
    floor = serving.get("client_floor")
    if floor:  # its burst (position 0), then each load of the sweep at its rate
        runs += [
            ("client_floor", 0, floor),
            *(("client_floor", i + 1, s) for i, s in enumerate(floor.get("sweep") or [])),
        ]
    return [cell | _load_row(phase, position, step, serving) for phase, position, step in runs]


def _load_row(phase: str, position: int, step: dict[str, Any], serving: dict[str, Any]) -> dict[str, Any]:
    row: dict[str, Any] = {"phase": phase, "position": position, **{name: step.get(name) for name in LOAD[2:]}}
    row["load"] = step.get("load") if phase in ("sweep", "client_floor") else None
    judged = phase in ("sweep", "search")  # the capacity run and the floor are no loads at a rate: no verdict
    for figure in ("ttft", "tpot", "itl", "e2e"):
        for level in ("p50", "p90", "p99"):
            row[f"{figure}_{level}_ms"] = (step.get(f"{figure}_ms") or {}).get(level)
    energy = step.get("energy") or {}
    row |= {
        "energy_j": energy.get("joules"),
        "energy_per_output_token_mj": energy.get("per_output_token_mj"),
        "energy_per_request_j": energy.get("per_request_j"),
        "mean_power_w": energy.get("mean_power_w"),
        "valid": step.get("valid") if judged else None,
        "met": step.get("met", step.get("objective_met")) if judged else None,
        "failed": "; ".join(step.get("failed") or []) or None,
        "processes": step.get("processes", serving.get("processes", 1)),
        "request_per_s_spread_pct": (step.get("spread_pct") or {}).get("request_per_s"),
    }
    return row


def loads_frame(records: Iterable[CellRecord]) -> pd.DataFrame:
    """The loads of every llm_load cell among ``records``, in COLUMNS' order (an empty table with them where
    there are none)."""
    rows = [row for record in records for row in load_rows(record)]
    return pd.DataFrame(rows, columns=list(COLUMNS))


def write_loads(records: Sequence[CellRecord], out: Path) -> pd.DataFrame:
    frame = loads_frame(records)
    with atomic_path(out) as tmp:
        frame.to_csv(tmp, index=False)
    return frame


def read_loads(path: Path) -> pd.DataFrame | None:
    """``loads.csv`` as written (None where there is none: a run from before it, or without llm_load cells);
    a UserError naming the file where it is no such table."""
    if not path.exists():
        return None
    refuse_non_regular(path)
    try:
        frame = pd.read_csv(path)
    except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError, OSError) as error:
        raise UserError(f"{path} cannot be read as a CSV ({error}): make it again (`inferbench aggregate`)") from None
    missing = [column for column in (*KEY, "phase", "position") if column not in frame.columns]
    if missing:
        raise UserError(f"{path} lacks the column(s) {', '.join(missing)}: it is not a loads.csv `aggregate` wrote")
    return frame


def loads_beside(summary_csv: Path) -> pd.DataFrame | None:
    """The loads.csv beside a summary.csv, or None."""
    return read_loads(Path(summary_csv).parent / LOADS_CSV)
