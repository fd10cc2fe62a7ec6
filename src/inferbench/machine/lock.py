"""A machine-wide lock so that no measurement overlaps other work of the workflow.

Measuring takes the lock exclusively; preparation (data, training, export, loading a model) takes it
shared. Snakemake's resources are only counters that the user's command line can replace, so the
package enforces this itself, whatever flags are passed.

A measurement waiting for the lock goes first: it holds a second lock, the queue (``<lock>.queue``),
while it waits, and a process taking the lock shared passes through the queue first. Work already
running finishes its step; work that would start waits behind the measurement. Without the queue, jobs
that kept starting on free cores held the lock shared one after another, and a GPU cell holding the
GPU waited for a gap between them (docs/results/h200/default/2026-11-29-lock-waits).

Only the standard library is imported here: the CLI takes the lock before importing torch, whose import
alone would disturb a measurement.

The lock (and the package's other scratch files) lives in a directory of the user's own:
``$XDG_RUNTIME_DIR/inferbench`` where that is usable, else ``<tempdir>/inferbench-<uid>``, made mode
0700 and refused if another user could have placed or changed it. All runs of one user on a machine
share the lock; runs of different users no longer do. A file every user can open in the shared temp
directory let any local user hold the lock and stall every run, or plant a symlink there that a
run (as root, say) would follow and create; two users measuring on one machine at the same time is
the rarer case, and they can share a lock on purpose by pointing ``$INFERBENCH_LOCK_FILE`` at one file
that each of them can open for writing (made beforehand: inferbench creates its lock files 0600).
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import stat
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from inferbench.core.env_vars import LOCK_FILE
from inferbench.core.errors import UserError
from inferbench.core.fsutil import user_dir

LOCK_ENV = LOCK_FILE.name
#: how long a holder's command line may be in the line that names it
_CMDLINE_CHARS = 200


def lock_path() -> Path:
    """The lock file: ``$INFERBENCH_LOCK_FILE`` or ``measure.lock`` in this user's directory."""
    return LOCK_FILE.read() or user_dir() / "measure.lock"


def open_lock_file(path: Path) -> int:
    """Open (creating it 0600) the lock file ``path``. A symlink there is never followed: with a
    symlink planted at a lock path, opening it would create or lock whatever file it points to."""
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    except OSError as error:
        if error.errno in (errno.ELOOP, errno.EMLINK) and path.is_symlink():
            raise UserError(
                f"the lock file {path} is a symbolic link (to {os.readlink(path)}), which inferbench does not "
                f"follow: remove it (`rm {path}`), or set {LOCK_ENV} to a file of your own"
            ) from None
        if error.errno in (errno.EACCES, errno.EPERM):
            raise UserError(
                f"cannot open the lock file {path} ({error.strerror}): set {LOCK_ENV} to a file of your own, "
                "or unset it to use this user's own directory"
            ) from None
        raise
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise UserError(f"the lock file {path} is not a regular file: remove it, or set {LOCK_ENV} to another path")
    return fd


#: how long a job waits for the machine lock before it gives up, naming the holder (a queue of cells that
#: measure one at a time waits long; a lock held for hours by one process is stuck)
LOCK_WAIT_S = 6 * 3600.0
#: how often a waiting job says again that it waits
LOCK_REMIND_S = 600.0


def tell_console(message: str) -> None:
    """Say ``message`` in the job's log (stderr) and on the terminal the run was started from, where
    there is one: a job's stderr goes to its log file, which nobody reads while a run seems to hang."""
    print(message, file=sys.stderr, flush=True)
    if sys.stderr.isatty():
        return  # stderr is the terminal: said once
    with contextlib.suppress(OSError), open("/dev/tty", "w") as terminal:
        terminal.write(message + "\n")


def queue_path(path: Path) -> Path:
    """The queue beside the lock ``path``: held by a measurement while it waits for the lock."""
    return path.with_name(path.name + ".queue")


class MachineLock:
    """A flock-based lock held for the life of the process (or until released), a waiting measurement
    first (the module's docstring)."""

    def __init__(self, path: Path | None = None) -> None:
        self.path = path or lock_path()
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._fd = open_lock_file(self.path)
        self._queue = open_lock_file(queue_path(self.path))
        self.mode: str | None = None

    def shared(self) -> None:
        if self.mode != "exclusive":  # from exclusive, nobody can be ahead: no need to queue
            self._take(self._queue, fcntl.LOCK_EX, "queue")  # behind a measurement that waits
            fcntl.flock(self._queue, fcntl.LOCK_UN)
        self._take(self._fd, fcntl.LOCK_SH, "shared")
        self.mode = "shared"

    def exclusive(self) -> None:
        # Converting shared -> exclusive is not atomic with flock (it may release first): released here
        # before queueing, so that two measurements waiting at once cannot each hold what the other needs.
        # No state is guarded, only the machine's quietness while measuring.
        self.release()
        self._take(self._queue, fcntl.LOCK_EX, "queue")
        try:
            self._take(self._fd, fcntl.LOCK_EX, "exclusive")
        finally:
            fcntl.flock(self._queue, fcntl.LOCK_UN)
        self.mode = "exclusive"

    def _take(self, fd: int, operation: int, mode: str) -> None:
        """Take the lock (or the queue) on ``fd``; if it is busy, say who holds it (a run that only waits
        looks hung), then wait."""
        try:
            fcntl.flock(fd, operation | fcntl.LOCK_NB)
            return
        except BlockingIOError:
            pass
        name = f"the machine lock {self.path}" if fd == self._fd else f"the queue {queue_path(self.path)}"
        what = f"{name} ({mode})" if fd == self._fd else f"{name} (a measurement waiting for the lock)"
        tell_console(f"inferbench: waiting for {what}, held by {self._holders(fd)}")
        started = said = time.monotonic()
        while True:
            # polled, not blocking, so the wait has a limit; who holds it is read only when it is said
            time.sleep(0.05)
            try:
                fcntl.flock(fd, operation | fcntl.LOCK_NB)
                return
            except BlockingIOError:
                waited = time.monotonic() - started
                if waited >= LOCK_WAIT_S:
                    raise UserError(
                        f"waited {waited / 3600:.1f} h for {name}, still held by "
                        f"{self._holders(fd)}: stop what holds it if it is stuck (kill PID), then run again"
                    ) from None
                if time.monotonic() - said >= LOCK_REMIND_S:
                    said = time.monotonic()
                    tell_console(f"inferbench: still waiting ({waited / 60:.0f} min) for {name}: {self._holders(fd)}")

    def _holders(self, fd: int) -> str:
        return describe_holders(_flock_holders(os.fstat(fd).st_ino))

    def release(self) -> None:
        fcntl.flock(self._fd, fcntl.LOCK_UN)
        self.mode = None

    def close(self) -> None:
        self.release()
        os.close(self._fd)
        os.close(self._queue)

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
    except OSError:
        return set()
    return _flock_holders(inode)


def _flock_holders(inode: int) -> set[int]:
    try:
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


def describe_holders(pids: set[int]) -> str:
    """``pid 12 (python -m inferbench run-cell ...), pid 34`` for a one-line message; the command
    line where /proc lets this user read it."""
    if not pids:
        return "another process (not visible from here)"
    described = []
    for pid in sorted(pids):
        try:
            argv = Path(f"/proc/{pid}/cmdline").read_bytes().rstrip(b"\0").split(b"\0")
        except OSError:
            argv = []
        command = " ".join(arg.decode(errors="replace") for arg in argv)
        command = "".join(c if c.isprintable() else "?" for c in command)  # keeps the message one line
        if len(command) > _CMDLINE_CHARS:
            command = command[: _CMDLINE_CHARS - 3] + "..."
        own = " (this process)" if pid == os.getpid() else ""
        described.append(f"pid {pid}" + (f" ({command})" if command else "") + own)
    return ", ".join(described)
