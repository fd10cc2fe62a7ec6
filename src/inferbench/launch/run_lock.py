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
import sys
from pathlib import Path

from inferbench.launch.lock import lock_holders

RUN_LOCK = Path(".snakemake") / "inferbench-run.lock"

_held: dict[Path, int] = {}  # run-lock path -> the open file holding its flock, for the process's life


def _open(workdir: str | Path, create: bool) -> tuple[Path, int] | None:
    path = (Path(workdir) / RUN_LOCK).resolve()
    if path in _held:
        return None
    if not create and not path.exists():
        return None
    path.parent.mkdir(parents=True, exist_ok=True)
    return path, os.open(path, os.O_RDWR | os.O_CREAT, 0o644)


def clear_stale_locks(workdir: str | Path) -> list[Path]:
    """Start a run in ``workdir``: if no other run of this workflow, and no job of one, is active
    there (the run lock can be had exclusively), remove the Snakemake locks a killed run left, then
    hold the run lock shared for the rest of this process, as its jobs do (``join_run``). Returns
    the files removed."""
    opened = _open(workdir, create=True)
    if opened is None:
        return []
    path, fd = opened
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as error:  # busy, or a filesystem without flock (ENOLCK): leave Snakemake's locks alone
        os.close(fd)
        busy = {pid for pid in lock_holders(path) if pid != os.getpid()}
        if busy and list((Path(workdir) / ".snakemake" / "locks").glob("*.lock")):
            print(
                f"inferbench: processes {sorted(busy)} of another run still work in {Path(workdir).resolve()} "
                "(jobs of a killed run go on until they end): wait for them, or stop them, before re-running",
                file=sys.stderr,
            )
        elif not isinstance(error, BlockingIOError):
            print(f"inferbench: cannot lock {path} ({error}); stale Snakemake locks stay", file=sys.stderr)
        return []
    removed = []
    for lock in sorted((Path(workdir) / ".snakemake" / "locks").glob("*.lock")):
        lock.unlink(missing_ok=True)
        removed.append(lock)
    fcntl.flock(fd, fcntl.LOCK_SH)  # from here on this run shares the lock with its jobs
    _held[path] = fd
    return removed


def join_run(workdir: str | Path = ".") -> bool:
    """A job of a run: hold the run lock shared while it works, so that a run started after a
    ``kill -9`` of Snakemake does not clear the directory under jobs that still write in it. A no-op
    outside a workflow directory (no run lock there). Waits only for the moment a starting run
    holds the lock exclusively to clear stale locks."""
    opened = _open(workdir, create=False)
    if opened is None:
        return (Path(workdir) / RUN_LOCK).resolve() in _held
    path, fd = opened
    try:
        fcntl.flock(fd, fcntl.LOCK_SH)
    except OSError:
        os.close(fd)
        return False
    _held[path] = fd
    return True
