"""A machine-wide lock so that no measurement overlaps other work of the workflow.

Measuring takes the lock exclusively; preparation (data, training, export, loading a model) takes it
shared. Snakemake's resources are only counters that the user's command line can replace, so the
package enforces this itself, whatever flags are passed. Only the standard library is imported
here: the CLI takes the lock before importing torch, whose import alone would disturb a measurement.
"""

from __future__ import annotations

import fcntl
import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

LOCK_ENV = "INFERBENCH_LOCK_FILE"


def lock_path() -> Path:
    """The lock file: ``$INFERBENCH_LOCK_FILE`` or one file per machine in the temp directory."""
    return Path(os.environ.get(LOCK_ENV) or Path(tempfile.gettempdir()) / "inferbench-measure.lock")


class MachineLock:
    """A flock-based lock held for the life of the process (or until released)."""

    def __init__(self, path: Path | None = None) -> None:
        self.path = path or lock_path()
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o666)
        self.mode: str | None = None

    def shared(self) -> None:
        fcntl.flock(self._fd, fcntl.LOCK_SH)
        self.mode = "shared"

    def exclusive(self) -> None:
        # Converting shared -> exclusive is not atomic with flock (it may release first); that is fine:
        # no state is guarded, only the machine's quietness while measuring.
        fcntl.flock(self._fd, fcntl.LOCK_EX)
        self.mode = "exclusive"

    def release(self) -> None:
        fcntl.flock(self._fd, fcntl.LOCK_UN)
        self.mode = None

    def close(self) -> None:
        self.release()
        os.close(self._fd)

    @contextmanager
    def exclusively(self) -> Iterator[None]:
        """Hold the lock exclusively for the block, then go back to shared."""
        self.exclusive()
        try:
            yield
        finally:
            self.shared()


def lock_holders(path: Path) -> set[int]:
    """Pids holding an flock on ``path`` (from /proc/locks: Linux; elsewhere, or for a missing file,
    empty). A lock inherited through fork is listed under the process that took it."""
    try:
        inode = os.stat(path).st_ino
        table = Path("/proc/locks").read_text()
    except OSError:
        return set()
    holders = set()
    for line in table.splitlines():
        fields = line.split()
        if len(fields) < 6 or "->" in fields:
            continue  # a waiter, not a holder
        if fields[1] == "FLOCK" and fields[5].count(":") == 2 and int(fields[5].split(":")[2]) == inode:
            holders.add(int(fields[4]))
    return holders
