"""The warm-start server (inferbench.launch.warm): jobs run in its forked children with their own argv,
environment, working directory and output files, get the child's exit code, and a killed job takes
its child with it. Anything else falls back to running in the job's own process."""

from __future__ import annotations

import multiprocessing
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from inferbench.catalog.verbs import VERBS
from inferbench.launch import warm
from tests.conftest import REPO

pytestmark = pytest.mark.fast  # pure logic: the developer's loop (docs/contributing.md)


def fake_job(argv: list[str]) -> int:
    """Stands in for the CLI in the server's children."""
    if argv[1] == "sleep":
        Path(os.environ["PID_FILE"]).write_text(str(os.getpid()))
        time.sleep(60)
        return 0
    if argv[1] == "exit":  # the CLI's sys.exit(...), or a flush that fails on the way out
        raise SystemExit(int(argv[2]))
    if argv[1] == "leave-behind":  # a job that leaves a process of its own running (a repeat)
        if os.fork() == 0:
            Path(os.environ["PID_FILE"]).write_text(str(os.getpid()))
            time.sleep(60)
            os._exit(0)
        while not Path(os.environ["PID_FILE"]).exists():
            time.sleep(0.01)
        return 0
    print(f"argv={argv[1:]} cwd={os.getcwd()} FOO={os.environ.get('FOO')} preloaded={sorted(warm.PRELOADED)}")
    print("to stderr", file=sys.stderr)
    return int(argv[1])


def start_server(path: Path, poll_s: float = 0.05) -> multiprocessing.Process:
    """A server (importing only json, running fake_job) listening at ``path``."""
    process = multiprocessing.get_context("fork").Process(
        target=warm.serve, args=(path, fake_job, ("json",), os.getpid(), poll_s), daemon=True
    )
    process.start()
    deadline = time.monotonic() + 20
    while not path.exists():
        assert time.monotonic() < deadline, "the server did not start listening"
        time.sleep(0.02)
    return process


@pytest.fixture
def server(tmp_path):
    path = tmp_path / "warm.sock"
    process = start_server(path)
    yield path
    os.kill(process.pid, signal.SIGTERM)
    process.join(10)
    assert not path.exists(), "a stopped server removes its socket"


def job(socket_path: Path, *args: str, cwd: Path, **env: str) -> subprocess.Popen:
    """A job as Snakemake starts one: `python -m inferbench <verb> ...` with its output in files."""
    environment = {**os.environ, warm.SOCKET_ENV: str(socket_path), "PYTHONPATH": str(REPO / "src"), **env}
    out, err = (cwd / "out.log").open("w"), (cwd / "err.log").open("w")
    return subprocess.Popen(
        [sys.executable, "-m", "inferbench", *args], cwd=cwd, env=environment, stdout=out, stderr=err
    )


def test_a_job_runs_in_a_child_of_the_server_with_its_own_argv_env_cwd_and_files(server, tmp_path):
    work = tmp_path / "job"
    work.mkdir()
    code = job(server, "run-cell", "7", cwd=work, FOO="bar").wait(30)
    assert code == 7, (work / "err.log").read_text()
    out = (work / "out.log").read_text()
    assert f"argv=['7'] cwd={work} FOO=bar preloaded=['json']" in out
    assert "to stderr" in (work / "err.log").read_text()


def test_killing_the_job_kills_its_child(server, tmp_path):
    pid_file = tmp_path / "child.pid"
    client = job(server, "run-cell", "sleep", cwd=tmp_path, PID_FILE=str(pid_file))
    deadline = time.monotonic() + 20
    while not pid_file.exists() or not pid_file.read_text():
        assert time.monotonic() < deadline and client.poll() is None, "the child never started"
        time.sleep(0.02)
    child = int(pid_file.read_text())
    client.kill()
    client.wait(10)
    deadline = time.monotonic() + 10
    while Path(f"/proc/{child}").exists() and "Z" not in _state(child):
        assert time.monotonic() < deadline, "the child outlived its job"
        time.sleep(0.05)


def _state(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(")")[1].split()[0]
    except (FileNotFoundError, IndexError):
        return "Z"


def test_no_server_other_verbs_and_another_interpreter_fall_back_to_the_job(server, tmp_path, monkeypatch):
    assert warm.run_via_server(["run-cell", "1"], str(tmp_path / "none.sock")) is None  # no server
    # a verb that imports nothing heavy (the table's `warm: false`) runs in the job's own process
    assert not VERBS["list"].warm
    assert job(server, "list", "workloads", cwd=tmp_path).wait(60) == 0
    out = (tmp_path / "out.log").read_text()
    assert "mlp_heart" in out and "argv=" not in out
    monkeypatch.setattr(
        warm, "interpreter", lambda: {"executable": "/other/python", "prefix": "/other", "version": "?"}
    )
    assert warm.run_via_server(["run-cell", "1"], str(server)) is None  # the server refuses it


def test_a_server_in_which_cuda_is_initialised_forks_no_job(tmp_path, monkeypatch):
    """A child forked after CUDA is initialised could not use the GPU: the job runs on its own."""
    monkeypatch.setattr(warm, "why_not_fork", lambda: "CUDA is initialised in this process")
    path = tmp_path / "warm.sock"
    process = start_server(path)  # forked: it keeps the patched check
    try:
        assert warm.run_via_server(["run-cell", "1"], str(path)) is None
    finally:
        os.kill(process.pid, signal.SIGTERM)
        process.join(10)


def test_a_record_counts_the_imports_the_server_made_for_its_engine(monkeypatch):
    monkeypatch.setattr(warm, "PRELOADED", {"numpy": 0.2, "torch": 3.0, "timm": 1.5, "onnxruntime": 0.4})
    assert warm.preloaded_import_s(["onnxruntime"]) == pytest.approx(0.4)
    assert warm.preloaded_import_s(["timm", "torch", "inferbench.engines.pytorch.eager"]) == pytest.approx(4.5)
    monkeypatch.setattr(warm, "PRELOADED", {})
    assert warm.preloaded_import_s(["torch"]) is None  # not forked from a server: the job timed its own


def test_an_exiting_job_gets_its_code_and_the_server_keeps_serving(server, tmp_path):
    assert job(server, "run-cell", "exit", "3", cwd=tmp_path).wait(30) == 3
    assert job(server, "run-cell", "5", cwd=tmp_path).wait(30) == 5, "the server still runs jobs"


def test_nothing_a_job_left_running_outlives_it(server, tmp_path):
    pid_file = tmp_path / "left.pid"
    assert job(server, "run-cell", "leave-behind", cwd=tmp_path, PID_FILE=str(pid_file)).wait(30) == 0
    left = int(pid_file.read_text())
    deadline = time.monotonic() + 10
    while Path(f"/proc/{left}").exists() and "Z" not in _state(left):
        assert time.monotonic() < deadline, "a process of the finished job is still running"
        time.sleep(0.05)


@pytest.mark.parametrize("payload", [b"[1, 2]", b"{not json", b'{"argv": "run-cell", "cwd": 1, "env": {}}'])
def test_a_malformed_request_is_refused_and_the_server_keeps_serving(server, tmp_path, payload):
    import socket

    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as raw:
        raw.connect(str(server))
        socket.send_fds(raw, [warm._HEADER.pack(len(payload))], [0, 1, 2])
        raw.sendall(payload)
        assert raw.recv(1) == b"N"
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as huge:
        huge.connect(str(server))
        socket.send_fds(huge, [warm._HEADER.pack(2**31)], [0, 1, 2])
        assert huge.recv(1) == b"N"
    assert job(server, "run-cell", "4", cwd=tmp_path).wait(30) == 4


def test_a_job_child_dies_with_the_server(tmp_path):
    path = tmp_path / "warm.sock"
    server = start_server(path)
    pid_file = tmp_path / "child.pid"
    client = job(path, "run-cell", "sleep", cwd=tmp_path, PID_FILE=str(pid_file))
    while not pid_file.exists() or not pid_file.read_text():
        time.sleep(0.02)
    child = int(pid_file.read_text())
    os.kill(server.pid, signal.SIGKILL)  # e.g. the OOM killer picks the server
    server.join(10)
    deadline = time.monotonic() + 10
    while Path(f"/proc/{child}").exists() and "Z" not in _state(child):
        assert time.monotonic() < deadline, "the job's child outlived the server"
        time.sleep(0.05)
    assert client.wait(10) != 0, "the job reports that its command did not finish"


def test_the_socket_lives_in_a_directory_only_its_user_can_enter():
    path = warm.private_socket_path(os.getpid())
    try:
        assert path.parent.stat().st_mode & 0o777 == 0o700
        assert len(str(path)) < 100
    finally:
        path.parent.rmdir()


def test_a_finished_child_wakes_the_server_at_once(tmp_path):
    path = tmp_path / "warm.sock"
    slow_poll = start_server(path, poll_s=120.0)
    try:  # without SIGCHLD waking it, the server would notice the child only at its next 120 s poll
        assert job(path, "run-cell", "6", cwd=tmp_path).wait(60) == 6
    finally:
        os.kill(slow_poll.pid, signal.SIGTERM)
        slow_poll.join(10)
