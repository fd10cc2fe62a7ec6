"""The warm-start server against clients that misbehave (issue 32, item 6): each is answered ``N`` and
why, the descriptors it passed are closed, no client holds up another, and only the table's warm
verbs run. And a killed job's repeats scratch is removed by the next cell beside it, never a live one's.

Timeouts are generous (a busy 2-core machine): the tests assert what happens and in which order, not
how fast."""

from __future__ import annotations

import contextlib
import json
import multiprocessing
import os
import select
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from inferbench.launch import warm
from inferbench.machine import scratch
from tests.conftest import REPO

WAIT_S = 60.0


def fake_job(argv: list[str]) -> int:
    """Stands in for the CLI in the server's children: ``run-cell <code>`` exits with it, ``run-cell
    wait <file>`` says it started (``<file>.started``), then waits for the file to exist."""
    if argv[1] == "wait":
        Path(argv[2] + ".started").touch()
        deadline = time.monotonic() + 3 * WAIT_S  # outlives every wait of a test
        while not Path(argv[2]).exists() and time.monotonic() < deadline:
            time.sleep(0.02)
        return 0
    return int(argv[1])


def start_server(path: Path, **options: float) -> multiprocessing.Process:
    process = multiprocessing.get_context("fork").Process(
        target=warm.serve, args=(path, fake_job, ("json",), os.getpid(), 0.05), kwargs=options, daemon=True
    )
    process.start()
    deadline = time.monotonic() + WAIT_S
    while not path.exists():
        assert time.monotonic() < deadline, "the server did not start listening"
        time.sleep(0.02)
    return process


@pytest.fixture
def serving(tmp_path: Path) -> Iterator[Callable[..., Path]]:
    """Starts servers (with the given ``serve`` options) and stops them after the test."""
    processes = []

    def start(**options: float) -> Path:
        path = tmp_path / f"warm{len(processes)}.sock"
        processes.append(start_server(path, **options))
        return path

    yield start
    for process in processes:
        os.kill(process.pid, signal.SIGTERM)
        process.join(WAIT_S)


def connect(path: Path) -> socket.socket:
    client = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    client.settimeout(WAIT_S)  # a server that never answers fails the test instead of hanging it
    client.connect(str(path))
    return client


def passed_pipe() -> tuple[int, list[int]]:
    """A pipe's read end, and its write end three times over as a job's stdin/stdout/stderr."""
    read, write = os.pipe()
    return read, [write, write, write]


def send_request(client: socket.socket, fds: list[int], payload: bytes, size: int | None = None) -> None:
    """Send a request as run_via_server does (``size`` in the header, if it is to lie), then close
    this process's copy of the descriptors: the pipe's write end is then open only where the server
    (or a child of it) still holds it."""
    socket.send_fds(client, [warm._HEADER.pack(len(payload) if size is None else size)], fds)
    for fd in set(fds):
        os.close(fd)
    with _suppress_gone():
        client.sendall(payload)


def answer(client: socket.socket) -> tuple[bytes, str]:
    """The server's reply: ``S``, or ``N`` with its reason."""
    code = client.recv(1)
    if code != b"N":
        return code, ""
    size = warm._HEADER.unpack(_recv(client, warm._HEADER.size))[0]
    return code, _recv(client, size).decode()


def _recv(client: socket.socket, size: int) -> bytes:
    data = b""
    while len(data) < size:
        chunk = client.recv(size - len(data))
        assert chunk, "the server closed the connection mid-reply"
        data += chunk
    return data


def _suppress_gone() -> contextlib.suppress:
    """A server that refused may close the connection before the client has sent everything."""
    return contextlib.suppress(BrokenPipeError, ConnectionResetError)


def assert_closed_everywhere(read: int) -> None:
    """The pipe reads as ended only once every copy of its write end is closed, the server's too."""
    try:
        ready, _, _ = select.select([read], [], [], WAIT_S)
        assert ready and os.read(read, 1) == b"", "the server (or a child of it) kept the descriptors the client passed"
    finally:
        os.close(read)


def request(argv: list[str], cwd: Path) -> bytes:
    return json.dumps({"argv": argv, "cwd": str(cwd), "env": {}, **warm.interpreter()}).encode()


def test_a_deeply_nested_request_is_answered_and_its_descriptors_closed(serving, tmp_path):
    server = serving()
    read, fds = passed_pipe()
    nested = b'{"argv": ' + b"[" * 200_000 + b"]" * 200_000 + b"}"
    with connect(server) as client:
        send_request(client, fds, nested)
        code, reason = answer(client)
    assert code == b"N" and "nested" in reason
    assert_closed_everywhere(read)
    assert warm.run_via_server(["run-cell", "4"], str(server)) == 4, "the server still runs jobs"


def test_a_slow_client_holds_up_no_other_job(serving, tmp_path):
    server = serving(request_s=600.0)  # the slow client stays unanswered for the whole test
    with connect(server) as slow:
        read, fds = passed_pipe()
        socket.send_fds(slow, [warm._HEADER.pack(100)], fds)  # promises 100 bytes ...
        for fd in set(fds):
            os.close(fd)
        slow.sendall(b"{")  # ... and sends one
        # another job is served while the slow one's request is still arriving (a server reading it
        # on the accept path serves this job only once it has given up on the slow one)
        assert warm.run_via_server(["run-cell", "5"], str(server)) == 5
        slow.sendall(b'"')
        assert not select.select([slow], [], [], 0.5)[0], "the slow client was answered before the other job"
    # the slow client is gone: what it passed is closed
    assert_closed_everywhere(read)


def test_a_request_must_arrive_whole_in_time(serving, tmp_path):
    server = serving(request_s=1.0)
    read, fds = passed_pipe()
    with connect(server) as dribbling:
        connected = time.monotonic()
        send_request(dribbling, fds, b"{", size=1000)
        deadline = connected + WAIT_S
        # a byte every 0.2 s: never idle long, never whole
        while not select.select([dribbling], [], [], 0.2)[0]:
            assert time.monotonic() < deadline, "a client that never finishes its request is never refused"
            with _suppress_gone():
                dribbling.send(b" ")
        code, reason = answer(dribbling)
    assert code == b"N" and "within 1 s" in reason
    assert time.monotonic() - connected >= 1.0, "refused only once its time was up"
    assert_closed_everywhere(read)


def test_a_verb_outside_the_warm_set_is_refused_by_name(serving, tmp_path):
    server = serving()
    read, fds = passed_pipe()
    with connect(server) as client:
        send_request(client, fds, request(["format-disk", "9"], tmp_path))
        code, reason = answer(client)
    assert code == b"N" and "'format-disk'" in reason
    assert_closed_everywhere(read)
    # a verb the table does not mark warm is not run in the server's child either: the job runs it
    assert warm.run_via_server(["list", "7"], str(server)) is None
    assert warm.run_via_server(["run-cell", "7"], str(server)) == 7


def test_an_oversized_request_is_refused_with_its_size(serving, tmp_path):
    server = serving()
    read, fds = passed_pipe()
    too_large = warm._MAX_REQUEST + 1
    with connect(server) as client:
        send_request(client, fds, b"{" * 1000, size=too_large)
        code, reason = answer(client)
    assert code == b"N" and str(too_large) in reason
    assert_closed_everywhere(read)


def test_a_jobs_child_keeps_no_descriptors_of_requests_still_arriving(serving, tmp_path):
    """A child forked while another request is arriving must not hold that client's files open."""
    server = serving(request_s=600.0)
    release = tmp_path / "release"
    results: list[int | None] = []
    with connect(server) as pending:
        read, fds = passed_pipe()
        socket.send_fds(pending, [warm._HEADER.pack(100)], fds)
        for fd in set(fds):
            os.close(fd)
        job = threading.Thread(
            target=lambda: results.append(warm.run_via_server(["run-cell", "wait", str(release)], str(server)))
        )
        job.start()
        deadline = time.monotonic() + WAIT_S
        while not Path(f"{release}.started").exists():  # forked while the other request is arriving
            assert time.monotonic() < deadline and job.is_alive(), "the job's child never started"
            time.sleep(0.02)
    try:  # the pending client is gone (its descriptors closed by the server), the job's child still runs
        assert_closed_everywhere(read)
        assert job.is_alive(), "the job's child ended before the check"
    finally:
        release.touch()
        job.join(WAIT_S)
    assert results == [0]


# -- scratch left by killed jobs -------------------------------------------------------------------


def _gone_pid() -> int:
    done = subprocess.Popen([sys.executable, "-c", "pass"])
    done.wait()
    assert not Path(f"/proc/{done.pid}").exists() or sys.platform != "linux"
    return done.pid


def test_scratch_of_a_gone_process_is_removed_and_a_live_ones_kept(tmp_path):
    host, gone = scratch.host_name(), _gone_pid()
    stale = tmp_path / f"repeats-{gone}@{host}-k1ll3d_x"
    (stale / "caches0" / "deep").mkdir(parents=True)
    (stale / "repeat0.json").write_text("{}")
    live = tmp_path / f"repeats-{os.getpid()}@{host}-l1ve_y"
    other_node = tmp_path / f"repeats-{gone}@another-node-z9"  # its pid means nothing here
    unnamed = tmp_path / "repeats-abc123_q"  # no pid in its name: whose it is, is unknown
    for folder in (live, other_node, unnamed):
        folder.mkdir()
    other_scratch = tmp_path / f"caches-{gone}@{host}-abc"  # another prefix
    other_scratch.mkdir()

    with scratch.scratch_folder(tmp_path, "repeats-") as mine:
        assert not stale.exists(), "the scratch of a process that is gone is removed"
        assert live.exists() and other_node.exists() and unnamed.exists() and other_scratch.exists()
        assert Path(mine).name.startswith(f"repeats-{os.getpid()}@{host}-"), "named after its process"
    assert not Path(mine).exists()
    assert scratch.remove_orphaned_scratch(tmp_path, "repeats-") == [], "a live process's scratch is kept"
    assert scratch.remove_orphaned_scratch(tmp_path / "missing", "repeats-") == []


@pytest.mark.slow
def test_the_next_cell_removes_the_scratch_of_a_killed_job(tmp_path):
    """A cell's job killed while its repeats run (SIGKILL: no clean-up runs) leaves its scratch; the
    next cell in the same folder removes it, and leaves the scratch of a job still running."""
    out = tmp_path / "cells" / "r.json"
    env = {**os.environ, "PYTHONPATH": str(REPO / "src"), "INFERBENCH_LOCK_FILE": str(tmp_path / "lock")}
    env.pop(warm.SOCKET_ENV, None)

    def cell(min_time_s: float) -> list[str]:
        measure = json.dumps({"warmup_s": 0, "min_time_s": min_time_s, "repeats": 2})
        return [
            sys.executable, "-m", "inferbench", "run-cell", "--workload", "mlp_heart", "--engine", "noop",
            "--engine-options", '{"engine": "noop"}', "--precision", "fp32", "--device", "cpu", "--batch", "1",
            "--threads", "1", "--measure", measure, "--out", str(out),
        ]  # fmt: skip

    killed = subprocess.Popen(cell(120), env=env, stderr=subprocess.DEVNULL, start_new_session=True)
    deadline = time.monotonic() + 120
    while not list(out.parent.glob(f"repeats-{killed.pid}@*")):
        assert time.monotonic() < deadline and killed.poll() is None, "the cell never made its scratch"
        time.sleep(0.1)
    os.killpg(killed.pid, signal.SIGKILL)  # the job and its repeat, as the warm-start server kills them
    killed.wait(WAIT_S)
    (left,) = out.parent.glob(f"repeats-{killed.pid}@*")
    live = out.parent / f"repeats-{os.getpid()}@{scratch.host_name()}-still_running"
    live.mkdir()

    done = subprocess.run(cell(0.05), env=env, capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr
    assert not left.exists(), "the next cell removed the killed job's scratch"
    assert live.exists(), "and kept a running job's"
    assert sorted(out.parent.glob("repeats-*")) == [live]
