"""The watchdog per measuring process (issue 32, item 4): a process that stops making progress is ended,
with the processes it started, its cell gets a `failed` record naming the stall, and the machine lock
it held is free."""

from __future__ import annotations

import fcntl
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from inferbench.core.cells import CellKey
from inferbench.launch.processes import run_in_fresh_processes
from inferbench.machine.lock import MachineLock
from inferbench.machine.watchdog import beat
from inferbench.scenarios.prepare import CellRequest
from inferbench.scenarios.run import failed_record

pytestmark = pytest.mark.fast  # pure logic: the developer's loop (docs/contributing.md)

KEY = CellKey("mlp_heart", "noop", "fp32", "cpu", 1, 0, 1)


def _hang_holding_the_lock(lock_path: Path, pid_file: Path, out: Path) -> None:
    """A measuring process that takes the lock, starts a helper process (which inherits the lock's open
    file, as a loader's workers do), makes progress once and then never again."""
    lock = MachineLock(lock_path)
    lock.exclusive()
    helper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"], pass_fds=(lock._fd,))
    pid_file.write_text(str(helper.pid))
    beat("measuring (a call that never returns)")
    time.sleep(600)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # a zombie (killed, not yet reaped by its parent) counts as ended
    return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"


def test_a_stalled_measuring_process_ends_failed_naming_the_stall_and_frees_the_lock(tmp_path):
    lock_path, pid_file = tmp_path / "machine.lock", tmp_path / "helper.pid"
    request = CellRequest(KEY, {"engine": "noop"})
    started = time.monotonic()
    record, samples = run_in_fresh_processes(
        lambda out, index: _hang_holding_the_lock(lock_path, pid_file, out),
        tmp_path / "cells" / KEY.relpath,
        repeats=2,
        stall_timeout_s=3,
        failed=lambda why: failed_record(request, why),
    )
    assert time.monotonic() - started < 60, "ended by the watchdog, not by the sleep"
    assert record.status == "failed" and record.key == KEY
    assert record.reason.startswith("stalled: no progress for ")
    assert "while measuring (a call that never returns)" in record.reason and "stall_timeout_s" in record.reason
    assert (record.repeats or {}).get("n") == 1, "a broken process ends the cell"
    assert all(len(s) == 0 for s in samples.values())
    # the helper that held the lock's file went with it, and the lock is free
    helper = int(pid_file.read_text())
    deadline = time.monotonic() + 10
    while _alive(helper) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not _alive(helper)
    fd = os.open(lock_path, os.O_RDWR)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # raises BlockingIOError if anyone still holds it
    finally:
        os.close(fd)


def test_a_process_that_keeps_making_progress_is_not_ended(tmp_path):
    def busy(out: Path, index: int) -> None:
        for _ in range(30):  # 3 s of progress against a 1.5 s timeout
            time.sleep(0.1)
            beat()
        failed_record(CellRequest(KEY, {"engine": "noop"}), "finished on its own").save(out)
        from inferbench.core.storage import save_samples

        save_samples(out, {})

    record, _ = run_in_fresh_processes(busy, tmp_path / "cells" / KEY.relpath, repeats=1, stall_timeout_s=1.5)
    assert record.reason == "finished on its own"


def test_a_measuring_process_that_dies_without_a_record_gives_the_cell_a_failed_record(tmp_path):
    """A segfault or the OOM killer leaves no record: the cell is recorded failed, naming the signal, so
    that the job writes its output and the run reaches its summary."""

    def killed(out: Path, index: int) -> None:
        os.kill(os.getpid(), 9)

    request = CellRequest(KEY, {"engine": "noop"})
    record, _ = run_in_fresh_processes(
        killed, tmp_path / "cells" / KEY.relpath, repeats=2, failed=lambda why: failed_record(request, why)
    )
    assert record.status == "failed" and "crashed: exited with signal SIGKILL and wrote no record" in record.reason
