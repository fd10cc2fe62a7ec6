"""The machine lock and scratch files live in a directory of the user's own, never reached through a
symlink another user planted; a run waiting on the lock names who holds it; outputs get the mode the
user's umask gives (issue 32, item 5)."""

from __future__ import annotations

import fcntl
import os
import queue
import re
import stat
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

import numpy as np
import pytest

import inferbench
from inferbench.core import storage
from inferbench.core.cells import CellKey, CellRecord
from inferbench.core.errors import UserError
from inferbench.machine.gpu_slots import claim_gpu
from inferbench.machine.lock import LOCK_ENV, MachineLock, describe_holders, lock_path, user_dir
from tests.conftest import disk_full_at

pytestmark = pytest.mark.fast  # pure logic: the developer's loop (docs/contributing.md)

#: the children import the package this test imported
SRC = Path(inferbench.__file__).resolve().parents[1]
#: generous: a busy 2-core machine may take long to start a Python, but a working lock never waits this long
PATIENCE_S = 60


@pytest.fixture
def tmp_only(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """No lock override and no runtime dir: the per-user directory goes under a temp dir of the test's."""
    monkeypatch.delenv(LOCK_ENV, raising=False)
    monkeypatch.delenv("XDG_RUNTIME_DIR", raising=False)
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(tmp))
    return tmp


def _mine(tmp: Path) -> Path:
    return tmp / f"inferbench-{os.getuid()}"


def test_the_lock_is_in_a_private_directory_of_the_user(tmp_only):
    old = os.umask(0)  # even a umask that lets everyone write does not open the directory
    try:
        lock = MachineLock()
    finally:
        os.umask(old)
    assert lock.path == _mine(tmp_only) / "measure.lock" == lock_path()
    assert stat.S_IMODE(os.stat(_mine(tmp_only)).st_mode) == 0o700
    assert stat.S_IMODE(os.stat(lock.path).st_mode) == 0o600
    lock.exclusive()
    other = MachineLock()  # another run of the same user shares it
    with pytest.raises(BlockingIOError):
        fcntl.flock(other._fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    other.close()
    lock.close()


def test_the_runtime_dir_is_used_when_it_is_usable(tmp_only, tmp_path, monkeypatch):
    runtime = tmp_path / "run"
    runtime.mkdir(mode=0o700)
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(runtime))
    assert lock_path() == runtime / "inferbench" / "measure.lock"
    assert stat.S_IMODE(os.stat(runtime / "inferbench").st_mode) == 0o700
    runtime.chmod(0o777)  # not a runtime dir to trust (nor one the spec allows): the temp dir instead
    assert user_dir() == _mine(tmp_only)


def test_gpu_slot_locks_are_beside_the_lock(tmp_only):
    slot = claim_gpu(["0"])
    assert (_mine(tmp_only) / "inferbench-gpu-0.lock").exists()
    slot.release()


def test_a_symlink_at_the_lock_path_is_not_followed(tmp_path):
    target = tmp_path / "elsewhere" / "created-by-the-lock"
    target.parent.mkdir()
    link = tmp_path / "measure.lock"
    link.symlink_to(target)
    with pytest.raises(UserError, match=f"{re.escape(str(link))}.* symbolic link"):
        MachineLock(link)
    assert not target.exists(), "the symlink's target was created"
    slot_link = tmp_path / "inferbench-gpu-0.lock"
    slot_link.symlink_to(target)
    with pytest.raises(UserError, match="symbolic link"):
        claim_gpu(["0"], tmp_path)
    assert not target.exists()


def _plant(kind: str, path: Path, tmp_path: Path) -> None:
    if kind == "symlink":
        victim = tmp_path / "victim"
        victim.mkdir(mode=0o700)
        path.symlink_to(victim)
    elif kind == "world-writable":
        path.mkdir()
        path.chmod(0o777)
    elif kind == "file":
        path.write_text("")
    elif kind == "another user's":
        path.mkdir(mode=0o700)
        os.chown(path, os.getuid() + 4242, -1)


@pytest.mark.parametrize(
    ("kind", "says"),
    [
        pytest.param("symlink", "is a symbolic link.*rm -r", id="symlink"),
        pytest.param("world-writable", "is writable by other users \\(mode 777\\).*chmod 700", id="world-writable"),
        pytest.param("file", "is not a directory.*rm -r", id="file"),
        pytest.param(
            "another user's",
            "belongs to uid .*rm -r",
            marks=pytest.mark.skipif(os.getuid() != 0, reason="only root can give a directory away"),
            id="another-users",
        ),
    ],
)
def test_an_untrusted_user_dir_is_refused(tmp_only, tmp_path, kind, says):
    planted = _mine(tmp_only)
    _plant(kind, planted, tmp_path)
    with pytest.raises(UserError, match=f"{re.escape(str(planted))} {says}"):
        MachineLock()
    assert not (tmp_path / "victim" / "measure.lock").exists()


def test_a_lock_taken_at_once_says_nothing(tmp_path, capfd):
    lock = MachineLock(tmp_path / "lock")
    lock.shared()
    lock.exclusive()
    with lock.exclusively():
        pass
    lock.close()
    assert capfd.readouterr().err == ""


def test_holders_are_described_with_their_command_lines():
    described = describe_holders({os.getpid()})
    assert described.startswith(f"pid {os.getpid()} (") and "(this process)" in described
    assert Path(sys.executable).name in described or "python" in described
    assert "not visible" in describe_holders(set())


def _child(code: str, lock: Path) -> subprocess.Popen[str]:
    env = {**os.environ, "PYTHONPATH": str(SRC), LOCK_ENV: str(lock)}
    pipes = {"stdin": subprocess.PIPE, "stdout": subprocess.PIPE, "stderr": subprocess.PIPE, "text": True}
    return subprocess.Popen([sys.executable, "-c", code, "holder-marker"], env=env, **pipes)


def _lines(stream) -> queue.Queue[str]:
    """The lines of ``stream`` as they come, read by one thread (so a line that came late is not lost)."""
    lines: queue.Queue[str] = queue.Queue()
    threading.Thread(target=lambda: [lines.put(line) for line in stream], daemon=True).start()
    return lines


def _next(lines: queue.Queue[str], timeout_s: float) -> str:
    """The next line, or "" if none comes in time (so a broken lock fails the test, never hangs it)."""
    try:
        return lines.get(timeout=timeout_s)
    except queue.Empty:
        return ""


@pytest.mark.skipif(not Path("/proc/locks").exists(), reason="holders are read from /proc/locks (Linux)")
def test_a_run_waiting_for_the_lock_names_its_holder(tmp_path):
    lock = tmp_path / "measure.lock"
    take = "from inferbench.machine.lock import MachineLock\nlock = MachineLock()\n"
    holder = _child(take + "lock.exclusive()\nprint('held', flush=True)\ninput()\n", lock)
    waiter = None
    try:
        assert _next(_lines(holder.stdout), PATIENCE_S).strip() == "held", holder.stderr.read()
        waiter = _child(take + "lock.shared()\nprint('got', flush=True)\n", lock)
        out, err = _lines(waiter.stdout), _lines(waiter.stderr)
        line = _next(err, PATIENCE_S)
        assert f"waiting for the machine lock {lock} (shared), held by pid {holder.pid} (" in line
        assert "holder-marker" in line, "the holder's command line is shown"
        assert _next(out, 1) == "", "the waiter waits while the lock is held"
        holder.stdin.close()  # the holder ends, and its lock with it
        assert _next(out, PATIENCE_S).strip() == "got"
        assert waiter.wait(PATIENCE_S) == 0
    finally:
        for process in (holder, waiter):
            if process is not None and process.poll() is None:
                process.kill()
                process.wait()


@pytest.mark.parametrize(("umask", "mode"), [(0o022, 0o644), (0o077, 0o600), (0o002, 0o664)])
def test_outputs_follow_the_umask(tmp_path, umask, mode):
    code = (
        "import sys\nimport numpy as np\n"
        "from inferbench.core.fsutil import write_json\nfrom inferbench.core.storage import save_samples\n"
        "write_json(sys.argv[1] + '/r.json', {'a': 1})\n"
        "save_samples(sys.argv[1] + '/r.json', {'device': np.ones(3)})\n"
    )
    env = {**os.environ, "PYTHONPATH": str(SRC)}
    done = subprocess.run(
        [sys.executable, "-c", code, str(tmp_path)], env=env, umask=umask, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr
    for name in ("r.json", "r.samples.npy", "r.e2e_samples.npy"):
        assert stat.S_IMODE(os.stat(tmp_path / name).st_mode) == mode, name


def _record() -> CellRecord:
    return CellRecord(CellKey("mlp_heart", "noop", "fp32", "cpu", 1, 0, 1), "ok", "noop", latency_ms={"p50": 1.25})


def test_an_unsaved_measurement_goes_to_the_users_own_dir(tmp_only, tmp_path, monkeypatch):
    out = tmp_path / "cells" / "r.json"
    disk_full_at(monkeypatch, out)
    with pytest.raises(UserError, match=f"is kept in {re.escape(str(_mine(tmp_only) / 'unsaved'))}"):
        storage.save_cell(out, _record(), {"device": np.ones(7)})
    kept = _mine(tmp_only) / "unsaved" / out.relative_to(out.anchor)
    assert CellRecord.load(kept).latency_ms["p50"] == 1.25
    assert not (tmp_only / "inferbench-unsaved").exists(), "nothing in the shared temp directory"


def test_an_unsaved_measurement_is_not_written_through_a_planted_symlink(tmp_only, tmp_path, monkeypatch, capsys):
    _plant("symlink", _mine(tmp_only), tmp_path)
    out = tmp_path / "cells" / "r.json"
    disk_full_at(monkeypatch, out)
    with pytest.raises(UserError, match=r"printed above in this job's log .*symbolic link"):
        storage.save_cell(out, _record(), {"device": np.ones(7)})
    assert list((tmp_path / "victim").iterdir()) == []
    assert '"p50": 1.25' in capsys.readouterr().err, "the measurement is in the log"
