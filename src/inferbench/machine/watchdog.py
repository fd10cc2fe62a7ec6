"""A watchdog per measuring process: a process that makes no progress for ``measure.stall_timeout_s``
(a call that never returns: a GPU hang, a deadlock in a library, a batcher that lost its thread) is
ended by the job that started it, with its descendants, so that the cell gets a ``failed`` record naming
the stall and the machine lock it held is free for the next cell.

Progress is a heartbeat in memory shared with the parent: the measuring process calls ``beat()`` as it
enters each phase and after every timed call, batch or step (outside the timed region: a store to
shared memory). Phases that call nothing for a while (a torch.compile with autotuning, a large export)
are why the default timeout is long.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from typing import Any

from inferbench.machine.lifetime import kill_group

#: the heartbeat of this process, when a watchdog watches it (set in the measuring process)
_current: Heartbeat | None = None


class Heartbeat:
    """The time of a process's last progress and the phase it was in, in shared memory."""

    PHASE_BYTES = 96

    def __init__(self, context: Any) -> None:
        # lock=False: one writer (the measuring process), one reader that tolerates a torn phase name
        self._time = context.Value("d", time.monotonic(), lock=False)
        self._phase = context.Array("c", self.PHASE_BYTES, lock=False)
        self.set("starting")

    def set(self, phase: str | None = None) -> None:
        self._time.value = time.monotonic()
        if phase is not None:
            self._phase.value = phase.encode()[: self.PHASE_BYTES - 1]

    @property
    def idle_s(self) -> float:
        """Seconds since the last beat (CLOCK_MONOTONIC is one clock for every process of the machine)."""
        return time.monotonic() - self._time.value

    @property
    def phase(self) -> str:
        return self._phase.value.decode(errors="replace")


def watch(heartbeat: Heartbeat) -> None:
    """In the measuring process: from now on, ``beat()`` reports to ``heartbeat``. The process leads a
    process group of its own, so that the watchdog can end it with every process it started (a loader's
    workers inherit the machine lock's open file, and with it the lock)."""
    global _current
    _current = heartbeat
    with contextlib.suppress(OSError):
        os.setpgid(0, 0)


def beat(phase: str | None = None) -> None:
    """Progress (and, given, the phase now entered); a no-op where no watchdog watches."""
    if _current is not None:
        _current.set(phase)


def wait_or_end_stalled(process: Any, heartbeat: Heartbeat, stall_timeout_s: float, poll_s: float = 1.0) -> str | None:
    """Wait for ``process`` (a multiprocessing.Process) to end; if its heartbeat stops for
    ``stall_timeout_s``, kill it and its descendants (one of which may hold the lock's file open) and
    return why, naming the phase; None when it ended by itself. (Its group: a process that outlives the
    measuring one, e.g. a worker, would hold the lock.)"""
    while True:
        process.join(poll_s)
        if process.exitcode is not None:
            return None
        idle = heartbeat.idle_s
        if idle >= stall_timeout_s:
            phase = heartbeat.phase
            _kill_tree(process.pid)
            process.join()
            return (
                f"stalled: no progress for {idle:.0f} s while {phase} (measure.stall_timeout_s is "
                f"{stall_timeout_s:g} s); the watchdog ended the measuring process and freed the machine lock"
            )


def _kill_tree(pid: int) -> None:
    """Kill the measuring process's group (it leads one: ``watch``), whose members may hold the lock's
    file, and the process itself (ended before ``watch`` made the group)."""
    kill_group(pid)
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)
