"""Processes that must not outlive the process that started them, and when a process may be forked.

A cell's measuring process is a forked child (of the warm-start server, or of the cell's own
``run-cell`` process for each repeat). If its parent is SIGKILLed (an OOM kill, ``kill -9``, a
cancelled cluster job), nothing else would stop it: it would go on holding a GPU and the machine
lock, and write a record after its job was reported failed. Linux's parent-death signal ends it
with its parent. Only the standard library is imported here.

One fork policy for every process inferbench forks (the warm-start server's jobs, a cell's fresh
processes): never from a process in which CUDA is initialised, since the child could not use the GPU
("Cannot re-initialize CUDA in forked subprocess"); ``why_not_fork`` says so, and the callers fall back
to a process that starts afresh.
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import os
import signal
import sys

_PR_SET_PDEATHSIG = 1


def die_with_parent(expected_parent: int) -> None:
    """Have the kernel SIGKILL this process when its parent ends; exit now if ``expected_parent``
    (the parent's pid, read before forking) is already gone. Linux only; elsewhere a no-op."""
    if not sys.platform.startswith("linux"):
        return
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) != 0:
            raise OSError(ctypes.get_errno(), "prctl(PR_SET_PDEATHSIG)")
    except (OSError, AttributeError) as error:
        logging.getLogger(__name__).warning("cannot tie this process to its parent: %s", error)
        return
    if os.getppid() != expected_parent:  # the parent died between fork and prctl
        os._exit(1)


def why_not_fork() -> str | None:
    """Why this process must not fork a child that may use the GPU (CUDA is initialised here), or None."""
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_initialized():
        return "CUDA is initialised in this process: a forked child could not use the GPU"
    return None


def kill_group(pid: int) -> None:
    """SIGKILL the process group ``pid`` leads, with everything in it (already gone: nothing to do)."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)
