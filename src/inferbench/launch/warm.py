"""Warm start: cell jobs forked from a process that has already imported the heavy libraries.

Every cell is its own Snakemake job, and under ``--resources gpu=1`` GPU jobs run one after another;
each used to spend 4-15 s importing torch, timm, transformers and ONNX Runtime before measuring
anything (a third of the GPU default's wall time on an H100). When the workflow runs locally,
``onstart`` starts one server per run (``inferbench warm-server``) that imports them once and
listens on a Unix socket. A job's ``python -m inferbench run-cell ...`` then hands its arguments,
environment, working directory and its stdin/stdout/stderr to the server, which forks a child that
runs the command exactly as the job would, and the job exits with the child's exit code.

The child is as fresh as the processes a cell is already measured in (inferbench.launch.processes forks them
after the imports): the server never touches CUDA, runs no computation and starts no threads, so
each child creates its own CUDA context, allocator, engine and thread pools. What it inherits is the
imported code. Imports still count: the server times each library once and a record's
``cold_start_s.import`` is the share of the libraries its engine needs (``preloaded_import_s``).

Anything unusual falls back to running the command in the job's own process: no server (a cluster
job on another node, ``--no-hooks``, the server still importing), another Python or environment
(``--use-conda``), a server that refuses. If the job is killed (Snakemake cancelled, ``kill``), the
server kills the child's process group. Only the standard library is imported at module level.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import selectors
import signal
import socket
import struct
import sys
import time
import traceback
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from inferbench.launch.lifetime import die_with_parent, why_not_fork

SOCKET_ENV = "INFERBENCH_WARM_SOCKET"
#: imported by the server, in this order (torch first: ONNX Runtime's CUDA provider uses its CUDA
#: libraries); then the harness's statistics and the cell job's own code
PRELOAD = ("numpy", "torch", "timm", "transformers", "onnxruntime", "scipy.stats", "inferbench.launch.cell_job")
#: thread-count variables Snakemake sets per job; libraries read them when loaded, i.e. in the server
THREAD_VARIABLES = ("OMP_NUM_THREADS", "MKL_NUM_THREADS")

#: seconds each preloaded module took to import in the server (inherited by its children); empty in
#: a process that was not started by a server
PRELOADED: dict[str, float] = {}
log = logging.getLogger(__name__)

_HEADER = struct.Struct("!I")
#: the largest request accepted (argv and environment as JSON)
_MAX_REQUEST = 8 * 2**20
_CODE = struct.Struct("!i")


def interpreter() -> dict[str, str]:
    """What must match between a job and the server for the server to run the job's command."""
    return {"executable": os.path.realpath(sys.executable), "prefix": sys.prefix, "version": sys.version}


def preloaded_import_s(modules: Sequence[str]) -> float | None:
    """The server's import seconds for the top-level packages in ``modules`` (None without a server)."""
    if not PRELOADED:
        return None
    tops = {m.split(".")[0] for m in modules}
    return sum(s for name, s in PRELOADED.items() if name.split(".")[0] in tops)


# -- the job's side ------------------------------------------------------------------------------


def run_via_server(argv: Sequence[str], socket_path: str | None = None) -> int | None:
    """Run ``inferbench <argv>`` in a child of the warm server and return its exit code, or None
    when there is no server that can run it (the caller then runs the command itself). Which verbs
    come here is the table's business (inferbench.cli.verbs: ``warm``)."""
    socket_path = socket_path or os.environ.get(SOCKET_ENV)
    if not argv or not socket_path:
        return None
    client = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        client.connect(socket_path)
    except OSError:
        client.close()
        return None  # no server (yet, or on this node)
    with client:
        request = json.dumps(
            {"argv": list(argv), "cwd": os.getcwd(), "env": dict(os.environ), **interpreter()}
        ).encode()
        try:
            socket.send_fds(client, [_HEADER.pack(len(request))], [0, 1, 2])
            client.sendall(request)
            reply = _recv_exactly(client, 1)
        except OSError:
            return None  # the server went away before taking the job: nothing ran yet
        if reply != b"S":  # refused: another interpreter or environment
            return None
        try:
            code = _recv_exactly(client, _CODE.size)
        except OSError:
            code = None
    if code is None:
        print("inferbench: the warm-start server went away while running this job", file=sys.stderr)
        return 1
    status = _CODE.unpack(code)[0]
    return status if status >= 0 else 128 - status  # killed by signal N: 128 + N, as a shell reports it


def _recv_exactly(sock: socket.socket, size: int) -> bytes | None:
    data = b""
    while len(data) < size:
        chunk = sock.recv(size - len(data))
        if not chunk:
            return None
        data += chunk
    return data


# -- the server's side ---------------------------------------------------------------------------


def preload(modules: Sequence[str]) -> dict[str, float]:
    """Import ``modules`` one after another; returns each one's seconds (missing ones are skipped)."""
    import importlib

    seconds: dict[str, float] = {}
    for name in modules:
        start = time.perf_counter()
        try:
            importlib.import_module(name)
        except ImportError:
            continue
        seconds[name] = time.perf_counter() - start
    return seconds


def serve(
    socket_path: str | Path,
    entry: Callable[[list[str]], int],
    modules: Sequence[str] = PRELOAD,
    watch_pid: int | None = None,
    poll_s: float = 0.5,
) -> None:
    """Import ``modules``, then fork a child per request until SIGTERM or until ``watch_pid`` (the
    Snakemake process) is gone. ``entry(argv)`` is what a child runs (the command line's main)."""
    from inferbench.launch.lock import MachineLock

    parent_at_start = os.getppid()
    lock = MachineLock()
    lock.shared()  # importing is work: never while a cell measures
    PRELOADED.update(preload(modules))
    lock.close()
    log.info(
        "warm-start server %d: imported %s",
        os.getpid(),
        ", ".join(f"{m} {s:.1f} s" for m, s in PRELOADED.items()),
    )

    path = Path(socket_path)
    path.unlink(missing_ok=True)
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(str(path))
    listener.listen(64)
    stop: list[int] = []
    signal.signal(signal.SIGTERM, lambda signum, frame: stop.append(signum))
    # a finished child (SIGCHLD) wakes the loop at once: its job learns its exit code without waiting
    wake, waker = socket.socketpair()
    for end in (wake, waker):
        end.setblocking(False)
    signal.set_wakeup_fd(waker.fileno(), warn_on_full_buffer=False)
    signal.signal(signal.SIGCHLD, lambda signum, frame: None)
    selector = selectors.DefaultSelector()
    selector.register(listener, selectors.EVENT_READ)
    selector.register(wake, selectors.EVENT_READ)
    children: dict[int, socket.socket] = {}  # child pid -> the job's connection
    try:
        while not stop and (watch_pid is None or _alive(watch_pid, parent_at_start)):
            for key, _ in selector.select(timeout=poll_s):
                if key.fileobj is listener:
                    try:
                        conn, _ = listener.accept()
                        pid = _start(conn, listener, selector, entry, [*children.values(), wake, waker])
                    except Exception:  # one broken request never ends the server (and every job)
                        log.exception("warm-start server: a request failed; its job runs on its own")
                        continue
                    if pid is not None:
                        children[pid] = conn
                        selector.register(conn, selectors.EVENT_READ, pid)
                elif key.fileobj is wake:
                    with contextlib.suppress(BlockingIOError):
                        wake.recv(4096)
                else:  # a job's connection is readable only when the job is gone: end its child
                    _kill_group(key.data)
                    selector.unregister(key.fileobj)
            _reap(children, selector)
    finally:
        for pid in children:
            _kill_group(pid)
        signal.set_wakeup_fd(-1)
        listener.close()
        wake.close()
        waker.close()
        path.unlink(missing_ok=True)


def _alive(pid: int, parent_at_start: int) -> bool:
    """Whether the watched process (the Snakemake run) still runs. When it is the server's parent,
    the parent pid says so without the risk of ``kill(pid, 0)`` finding a reused pid."""
    if pid == parent_at_start:
        return os.getppid() == pid
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # someone else's process of that pid: alive
    return True


def _kill_group(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)


def _start(
    conn: socket.socket,
    listener: socket.socket,
    selector: selectors.BaseSelector,
    entry: Callable[[list[str]], int],
    others: list[socket.socket],
) -> int | None:
    """Read one job's request and fork its child; None if the request was refused or broken."""
    fds: list[int] = []
    try:
        conn.settimeout(10)
        if _peer_uid(conn) != os.getuid():
            raise ValueError("another user's process")
        header, fds, _, _ = socket.recv_fds(conn, _HEADER.size, 3)
        size = _HEADER.unpack(header)[0] if len(header) == _HEADER.size else 0
        if not 0 < size <= _MAX_REQUEST:
            raise ValueError(f"request of {size} bytes")
        request = json.loads(_recv_exactly(conn, size) or b"null")
        if not _well_formed(request) or len(fds) != 3:
            raise ValueError("malformed request")
        if any(request.get(k) != v for k, v in interpreter().items()):
            raise ValueError("another interpreter")
        if (why := why_not_fork()) is not None:
            raise ValueError(why)
        server = os.getpid()
        pid = os.fork()
    except (OSError, ValueError) as error:  # refused: the job runs the command itself
        log.info("warm-start server: refused a job (%s)", error)
        with contextlib.suppress(OSError):
            conn.sendall(b"N")
        for fd in fds:
            os.close(fd)
        conn.close()
        return None
    if pid == 0:  # the job's process from here on; it must end in os._exit, whatever happens
        code: object = 1
        try:
            try:
                die_with_parent(server)
                selector.close()
                listener.close()
                conn.close()
                for other in others:  # other jobs' connections (their EOF must not wait for it), the wake-up pair
                    other.close()
                code = _become_job(request, fds, entry)
            except SystemExit as exit_:  # what `sys.exit(...)` in the command means in a process of its own
                code = exit_.code
                if code is not None and not isinstance(code, int):
                    print(code, file=sys.stderr)
                    code = 1
            except BaseException:
                traceback.print_exc()
                code = 1
            with contextlib.suppress(BaseException):
                sys.stdout.flush()
                sys.stderr.flush()
        finally:
            os._exit(code if isinstance(code, int) else (0 if code is None else 1))
    with contextlib.suppress(OSError):  # OSError: the child set it first, or is gone already
        os.setpgid(pid, pid)  # also here: the group must exist before anyone kills it
    for fd in fds:
        os.close(fd)
    with contextlib.suppress(OSError):  # the job went away: its EOF kills the child in the loop
        conn.sendall(b"S")
    return pid


def _peer_uid(conn: socket.socket) -> int:
    """The user id of the process at the other end of a Unix socket (Linux; elsewhere ours)."""
    if not hasattr(socket, "SO_PEERCRED"):
        return os.getuid()
    _, uid, _ = struct.unpack("3i", conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i")))
    return uid


def _well_formed(request: object) -> bool:
    return (
        isinstance(request, dict)
        and isinstance(request.get("argv"), list)
        and all(isinstance(a, str) for a in request["argv"])
        and isinstance(request.get("cwd"), str)
        and isinstance(request.get("env"), dict)
        and all(isinstance(k, str) and isinstance(v, str) for k, v in request["env"].items())
    )


def _become_job(request: dict[str, Any], fds: list[int], entry: Callable[[list[str]], int]) -> int:
    from inferbench.trackers.memory import note_process_start

    note_process_start()  # the server's memory this job starts with, kept beside its peak
    os.setpgid(0, 0)  # its own process group: killed as a whole (DataLoader workers, repeats) if the job goes
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    signal.set_wakeup_fd(-1)
    for target, fd in enumerate(fds):
        os.dup2(fd, target)
        os.close(fd)
    # the job's own files behind sys.stdin/stdout/stderr, whatever the server's streams were
    sys.stdin = open(0, closefd=False)  # noqa: SIM115 - lives as long as the process
    sys.stdout = open(1, "w", buffering=1, closefd=False)  # noqa: SIM115
    sys.stderr = open(2, "w", buffering=1, closefd=False)  # noqa: SIM115
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    sys.argv = ["inferbench", *request["argv"]]
    threads = request["env"].get("OMP_NUM_THREADS")
    if threads and threads.isdigit() and "torch" in sys.modules:
        # what OMP_NUM_THREADS would have done in a fresh process: libgomp read it in the server
        sys.modules["torch"].set_num_threads(int(threads))
    return entry(list(request["argv"]))


def _reap(children: dict[int, socket.socket], selector: selectors.BaseSelector) -> None:
    """Collect finished children and send each job its exit code."""
    while children:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        conn = children.pop(pid, None)
        if conn is None:
            continue
        _kill_group(pid)  # what the child left running (a repeat's process) ends with it
        with contextlib.suppress(KeyError, ValueError):
            selector.unregister(conn)
        with contextlib.suppress(OSError):  # the job may be gone already
            conn.sendall(_CODE.pack(os.waitstatus_to_exitcode(status)))
        conn.close()


def private_socket_path(owner_pid: int) -> Path:
    """A socket in a new directory only this user can enter (mkdtemp makes it 0700), so no other
    user can connect, or put a socket of theirs where the jobs look. Short: a Unix socket path
    must stay under 108 bytes."""
    import tempfile

    return Path(tempfile.mkdtemp(prefix=f"inferbench-warm-{owner_pid}-")) / "server.sock"


# -- started and stopped by the Snakefile's onstart / onsuccess / onerror -------------------------

_server: Any = None  # the running server's subprocess.Popen, in the Snakemake process


def start_server(log_path: str | Path, package_src: str | Path | None = None) -> Path:
    """Start the server for this Snakemake process (which keeps it as long as it runs) and point
    the jobs it starts at it through ``$INFERBENCH_WARM_SOCKET``. Returns the socket's path."""
    import shutil
    import subprocess

    global _server
    owner = os.getpid()
    path = private_socket_path(owner)
    env = dict(os.environ)
    if package_src is not None:
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(package_src), env.get("PYTHONPATH")]))
    log_path = Path(log_path)
    log_path.parent.mkdir(parents=True, exist_ok=True)
    # the `python` the jobs' shell commands find; the server refuses jobs of another interpreter
    python = shutil.which("python") or sys.executable
    command = [python, "-m", "inferbench", "warm-server", "--socket", str(path), "--watch-pid", str(owner)]
    with log_path.open("w") as log:
        _server = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    os.environ[SOCKET_ENV] = str(path)
    return path


def stop_server(timeout_s: float = 10.0) -> None:
    """Stop the server started by ``start_server`` (no-op if there is none)."""
    global _server
    socket_path = os.environ.pop(SOCKET_ENV, None)
    if _server is None:
        return
    _server.terminate()
    try:
        _server.wait(timeout_s)
    except Exception:
        _server.kill()
    _server = None
    if socket_path:
        with contextlib.suppress(OSError):
            Path(socket_path).unlink(missing_ok=True)
            Path(socket_path).parent.rmdir()
