"""Resume after ``kill -9``: a killed run's Snakemake lock is removed when no other run holds the directory.

Snakemake locks the working directory (``.snakemake/locks/``) while a run executes and removes the
lock when the run ends, normally or by an error or Ctrl-C. A run killed outright (``kill -9``, the
OOM killer, a cancelled cluster job) leaves the lock behind, and the next ``snakemake`` stops with
"Directory cannot be locked" until ``snakemake --unlock``. So every run of this workflow also holds
an ``flock`` on ``.snakemake/inferbench-run.lock`` from the moment its Snakefile is read until its
process ends, however it ends (the kernel drops the lock with the process). A run that gets that
lock knows that no other run of this workflow is active in the directory: Snakemake locks found
there are stale, and are removed before Snakemake takes its own. A run that does not get it looks
at who holds it: while the run that owns the directory (its pid in ``.snakemake/inferbench-run.pid``)
is alive, Snakemake's locks stay and Snakemake reports the directory as locked, as it should while
another run works in it; when only jobs of a killed run hold it (Snakemake's ``kill -9`` does not
reach its jobs), the new run waits for them to end, since they still write in the directory and
their outputs are re-made anyway (Snakemake marked them incomplete). And since ``snakemake --unlock``
removes a live run's Snakemake lock too, a run about to execute jobs refuses while another run owns the
directory (``live_run``). Only the standard library is imported here.
"""

from __future__ import annotations

import fcntl
import os
import sys
import time
from pathlib import Path

from inferbench.machine.lock import describe_holders, lock_holders

RUN_LOCK = Path(".snakemake") / "inferbench-run.lock"
RUN_OWNER = Path(".snakemake") / "inferbench-run.pid"  # the pid of the run that cleared the directory last

_held: dict[Path, int] = {}  # run-lock path -> the open file holding its flock, for the process's life
#: how long a starting run waits for the jobs a killed run left (they end with their cells: minutes at most)
ORPHAN_WAIT_S = 600.0


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
    there (the run lock can be had exclusively, at once or once the jobs a killed run left have
    ended), remove the Snakemake locks a killed run left, then hold the run lock shared for the rest
    of this process, as its jobs do (``join_run``), and own the directory. Returns the files removed."""
    opened = _open(workdir, create=True)
    if opened is None:
        return []
    path, fd = opened
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as error:  # busy, or a filesystem without flock (ENOLCK)
        if not isinstance(error, BlockingIOError):
            os.close(fd)
            print(f"inferbench: cannot lock {path} ({error}); stale Snakemake locks stay", file=sys.stderr)
            return []
        if not _wait_for_orphaned_jobs(workdir, path, fd):
            os.close(fd)
            return []  # a live run works here: Snakemake reports its lock
    removed = []
    for lock in sorted((Path(workdir) / ".snakemake" / "locks").glob("*.lock")):
        lock.unlink(missing_ok=True)
        removed.append(lock)
    fcntl.flock(fd, fcntl.LOCK_SH)  # from here on this run shares the lock with its jobs
    (Path(workdir) / RUN_OWNER).write_text(f"{os.getpid()}\n")
    _held[path] = fd
    return removed


def _wait_for_orphaned_jobs(workdir: str | Path, path: Path, fd: int) -> bool:
    """The run lock is busy. If the run that owns the directory still holds it, return False at
    once; if only jobs of a killed run do, wait (blocking) until they end and the lock is this
    run's, and return True."""
    holders = {pid for pid in lock_holders(path) if pid != os.getpid()}
    owner = _run_owner(workdir)
    if owner in holders or not holders:  # a live run, or holders this process cannot see: not ours to wait on
        return False
    print(
        f"inferbench: waiting up to {ORPHAN_WAIT_S:.0f} s for {len(holders)} job(s) of a killed run still working in "
        f"{Path(workdir).resolve()} to end: {describe_holders(holders)} (stop them to go on at once)",
        file=sys.stderr,
        flush=True,
    )
    deadline = time.monotonic() + ORPHAN_WAIT_S
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return True
        except BlockingIOError:
            if time.monotonic() >= deadline:
                still = describe_holders({pid for pid in lock_holders(path) if pid != os.getpid()})
                print(
                    f"inferbench: gave up after {ORPHAN_WAIT_S:.0f} s: {still} still hold {path}; stop them "
                    "(kill PID) and run again; meanwhile Snakemake's lock of the killed run stays",
                    file=sys.stderr,
                    flush=True,
                )
                return False
            time.sleep(0.5)


def live_run(workdir: str | Path) -> int | None:
    """The pid of another run of this workflow working in ``workdir`` now (it owns the directory and holds
    the run lock), else None. Snakemake's own lock cannot say so once ``snakemake --unlock`` removed it:
    a run about to execute jobs asks this instead, and refuses to measure beside a live one."""
    owner = _run_owner(workdir)
    if owner is None or owner == os.getpid():
        return None
    return owner if owner in lock_holders((Path(workdir) / RUN_LOCK).resolve()) else None


def _run_owner(workdir: str | Path) -> int | None:
    try:
        return int((Path(workdir) / RUN_OWNER).read_text().strip())
    except (OSError, ValueError):
        return None


def join_run(workdir: str | Path = ".") -> Path | None:
    """A job of a run: hold the run lock shared while it works, so that a run started after a
    ``kill -9`` of Snakemake does not clear the directory under jobs that still write in it. A no-op
    outside a workflow directory (no run lock there). Waits only for the moment a starting run
    holds the lock exclusively to clear stale locks. Returns the lock joined, for ``leave_run`` (None
    where nothing was joined now: no run lock, or this process holds it already)."""
    opened = _open(workdir, create=False)
    if opened is None:
        return None
    path, fd = opened
    try:
        fcntl.flock(fd, fcntl.LOCK_SH)
    except OSError:
        os.close(fd)
        return None
    _held[path] = fd
    return path


def leave_run(path: Path | None) -> None:
    """Let go of a run lock ``join_run`` took once the verb that needed it is done: a process that runs
    verbs in-process (a test, a notebook) would otherwise hold it for its life, and a later run would
    wait for it as for a job of a killed run."""
    if path is not None and (fd := _held.pop(path, None)) is not None:
        os.close(fd)
