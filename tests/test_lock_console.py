"""A job waiting for the machine lock says so on the terminal the run was started from, not only in its
log, and gives up after a stated time, naming the holder; a measurement that waits goes before work that
would start after it."""

from __future__ import annotations

import os
import pty
import select
import sys
import threading
import time

import pytest

from inferbench.core.errors import UserError
from inferbench.machine import lock as machine_lock
from inferbench.machine.lock import MachineLock

pytestmark = pytest.mark.fast


def test_a_wait_is_told_on_the_terminal_while_stderr_goes_to_the_log(tmp_path):
    path = tmp_path / "machine.lock"
    holder = MachineLock(path)
    holder.exclusive()
    log = tmp_path / "job.log"
    pid, terminal = pty.fork()
    if pid == 0:  # the job: a controlling terminal, its stderr in a log file as a rule's job has it
        fd = os.open(log, os.O_WRONLY | os.O_CREAT)
        os.dup2(fd, 2)
        sys.stderr = open(2, "w", closefd=False)  # noqa: SIM115
        waiting = MachineLock(path)
        waiting.shared()
        os._exit(0)
    seen = b""
    deadline = time.monotonic() + 20
    while b"waiting for the machine lock" not in seen and time.monotonic() < deadline:
        if select.select([terminal], [], [], 0.5)[0]:
            seen += os.read(terminal, 4096)
    holder.release()
    os.waitpid(pid, 0)
    os.close(terminal)
    assert b"waiting for the machine lock" in seen and f"pid {os.getpid()}".encode() in seen
    assert "waiting for the machine lock" in log.read_text(), "the log says it too"


def test_a_wait_gives_up_after_its_limit_naming_the_holder(tmp_path, monkeypatch):
    path = tmp_path / "machine.lock"
    holder = MachineLock(path)
    holder.exclusive()
    monkeypatch.setattr(machine_lock, "LOCK_WAIT_S", 0.5)
    with pytest.raises(UserError, match=rf"machine lock {path}, still held by .*pid {os.getpid()}"):
        MachineLock(path).shared()
    holder.release()


def _said(capsys: pytest.CaptureFixture[str], words: str, seen: list[str]) -> None:
    """Wait (20 s at most) until a waiting thread has said ``words`` on stderr."""
    deadline = time.monotonic() + 20
    while not any(words in line for line in seen) and time.monotonic() < deadline:
        seen.extend(capsys.readouterr().err.splitlines())
        time.sleep(0.02)
    assert any(words in line for line in seen), seen


def test_a_waiting_measurement_goes_before_work_that_would_start_after_it(tmp_path, capsys):
    path = tmp_path / "machine.lock"
    running = MachineLock(path)  # a job preparing: the lock held shared
    running.shared()
    measuring, starting = MachineLock(path), MachineLock(path)  # separate descriptors: flock tells them apart
    order: list[str] = []

    def measure() -> None:
        measuring.exclusive()
        order.append("measured")
        measuring.release()

    def start() -> None:
        starting.shared()
        order.append("started")
        starting.release()

    seen: list[str] = []
    measurement, starter = threading.Thread(target=measure, daemon=True), threading.Thread(target=start, daemon=True)
    try:
        measurement.start()
        _said(capsys, "(exclusive)", seen)  # it waits for the running job, holding the queue
        starter.start()
        _said(capsys, "a measurement waiting for the lock", seen)  # without the queue it would have the lock now
        assert order == []
    finally:
        running.release()  # the running job's step ends: the measurement first, then the work that waited
        measurement.join(20)
        starter.join(20)
    assert order == ["measured", "started"]
    for lock in (running, measuring, starting):
        lock.close()
