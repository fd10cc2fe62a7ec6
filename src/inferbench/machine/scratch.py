"""Scratch folders named after the process that made them, so that what a killed process left (nothing of
it runs a clean-up: SIGKILL, the OOM killer, a cancelled job's group) is removed by the next one made in the
same folder: a cell's repeats, an engine's export in the making. Only the standard library is imported."""

from __future__ import annotations

import contextlib
import logging
import os
import re
import shutil
import socket
import tempfile
from pathlib import Path

log = logging.getLogger(__name__)


def scratch_folder(parent: Path, prefix: str) -> tempfile.TemporaryDirectory[str]:
    """A scratch folder in ``parent`` (removed when its ``with`` block ends) named after this
    process: ``<prefix><pid>@<host>-<random>``; first removes those in ``parent`` that processes
    now gone left behind. A job's child killed by the server (SIGKILL, its job gone) or a job killed
    by Snakemake runs no clean-up of its own: its cell's repeats' samples would stay behind each time."""
    remove_orphaned_scratch(parent, prefix)
    return tempfile.TemporaryDirectory(prefix=f"{prefix}{os.getpid()}@{host_name()}-", dir=parent)


def remove_orphaned_scratch(parent: Path, prefix: str) -> list[Path]:
    """Remove the folders ``scratch_folder`` made in ``parent`` whose process is gone; returns them.
    Only this host's: a pid says nothing about a process on another node sharing the file system.
    A folder whose pid runs (or was reused since) is kept: a live job's scratch is never removed."""
    name = re.compile(rf"{re.escape(prefix)}(\d+)@(.+)-[^-]+")
    host = host_name()
    removed: list[Path] = []
    with contextlib.suppress(FileNotFoundError), os.scandir(parent) as entries:
        for entry in entries:
            match = name.fullmatch(entry.name)
            if match is None or match[2] != host or not entry.is_dir(follow_symlinks=False):
                continue
            if not pid_exists(int(match[1])):
                shutil.rmtree(entry.path, ignore_errors=True)
                removed.append(Path(entry.path))
    if removed:
        log.info("removed the scratch of %d killed job(s) in %s", len(removed), parent)
    return removed


def host_name() -> str:
    """This host's name as a folder name may hold it."""
    return re.sub(r"[^A-Za-z0-9._-]", "_", socket.gethostname()) or "localhost"


def pid_exists(pid: int) -> bool:
    """Whether a process of this pid runs on this host (one of another user counts)."""
    if pid <= 0:
        return True  # kill(0 or -1, 0) would ask about a group: never taken for a gone process
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # someone else's process of that pid: alive
    return True
