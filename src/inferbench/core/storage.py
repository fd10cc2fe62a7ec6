"""Where a cell's files live beside its record, and how they are written: atomically, and never lost.

``<cell>.json`` is the record (inferbench.core.cells), ``<cell>.samples.npy`` and
``<cell>.e2e_samples.npy`` the raw per-call latencies of its two boundaries, ``<cell>.loadgen/`` the
logs of a serving cell's LoadGen runs.
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

import numpy as np

from inferbench.core.cells import CellRecord
from inferbench.core.errors import UserError
from inferbench.core.fsutil import atomic_path

#: what a single-call cell times: ``device`` (inputs already where the engine computes) and
#: ``end_to_end`` (host arrays in, a host array out)
BOUNDARIES = ("device", "end_to_end")


def samples_path(record_path: str | Path, boundary: str = "device") -> Path:
    """Raw per-call latencies (seconds, float32) live beside the record, one file per boundary."""
    if boundary not in BOUNDARIES:
        raise ValueError(f"boundary must be one of {BOUNDARIES}")
    suffix = ".samples.npy" if boundary == "device" else ".e2e_samples.npy"
    return Path(record_path).with_suffix(suffix)


def loadgen_dir(record_path: str | Path) -> Path:
    """LoadGen's logs of a serving cell live beside its record: ``<record>.loadgen/<run>/``."""
    return Path(record_path).with_suffix(".loadgen")


def save_samples(record_path: str | Path, samples: dict[str, np.ndarray]) -> None:
    for boundary in BOUNDARIES:
        with atomic_path(samples_path(record_path, boundary)) as tmp, tmp.open("wb") as fh:
            # 7 significant digits: 0.1 µs at 1 s, half the bytes
            np.save(fh, np.asarray(samples.get(boundary, np.empty(0)), dtype=np.float32))


def load_samples(record_path: str | Path) -> dict[str, np.ndarray]:
    return {boundary: np.load(samples_path(record_path, boundary)) for boundary in BOUNDARIES}


def save_cell(out: str | Path, record: CellRecord, samples: dict[str, np.ndarray]) -> None:
    """Write a cell's record and samples. If that fails (a full disk, a read-only folder), the
    measurement is not thrown away: it goes to the temp directory (or, failing that, into the job's
    log) and the error names the path, the reason and where the measurement is."""
    try:
        save_samples(out, samples)
        record.save(out)
        return
    except OSError as error:
        reason = f"cannot write {out}: {error.strerror or error}"
    kept = Path(tempfile.gettempdir()) / "inferbench-unsaved" / Path(out).relative_to(Path(out).anchor)
    try:
        save_samples(kept, samples)
        record.save(kept)
        where = f"kept in {kept} (copy it to {out} once there is room, or re-run the cell)"
    except OSError:
        print(json.dumps(record.to_dict()), file=sys.stderr)
        where = "printed above in this job's log"
    raise UserError(f"{reason}; the measurement ({record.status}) is {where}")
