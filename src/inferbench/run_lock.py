"""Resume after ``kill -9``: a killed run's Snakemake lock is removed when no other run holds the directory.

Snakemake locks the working directory (``.snakemake/locks/``) while a run executes and removes the
lock when the run ends, normally or by an error or Ctrl-C. A run killed outright (``kill -9``, the
OOM killer, a cancelled cluster job) leaves the lock behind, and the next ``snakemake`` stops with
"Directory cannot be locked" until ``snakemake --unlock``. So every run of this workflow also holds
an ``flock`` on ``.snakemake/inferbench-run.lock`` from the moment its Snakefile is read until its
process ends, however it ends (the kernel drops the lock with the process). A run that gets that
lock knows that no other run of this workflow is active in the directory: Snakemake locks found
there are stale, and are removed before Snakemake takes its own. A run that does not get it leaves
them alone, and Snakemake reports the directory as locked, as it should while another run works in it.
Only the standard library is imported here.
"""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

RUN_LOCK = Path(".snakemake") / "inferbench-run.lock"

_held: dict[Path, int] = {}  # run-lock path -> the open file holding its flock, for the process's life


def hold_run_lock(workdir: str | Path) -> bool:
    """Take this process's run lock for ``workdir`` (kept until the process ends); False if another
    process holds it."""
    path = (Path(workdir) / RUN_LOCK).resolve()
    if path in _held:
        return True
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return False
    _held[path] = fd
    return True


def clear_stale_locks(workdir: str | Path) -> list[Path]:
    """Remove the Snakemake locks a killed run left in ``workdir``, if this process holds the run
    lock (no other run of this workflow is active there). Returns the files removed."""
    if not hold_run_lock(workdir):
        return []
    removed = []
    for lock in sorted((Path(workdir) / ".snakemake" / "locks").glob("*.lock")):
        lock.unlink(missing_ok=True)
        removed.append(lock)
    return removed
