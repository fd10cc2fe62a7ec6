"""Warm start: cell jobs forked from a process that has already imported the heavy libraries.

Every cell is its own Snakemake job, and under ``--resources gpu=1`` GPU jobs run one after another;
each used to spend seconds importing torch, timm, transformers and ONNX Runtime before measuring
anything, a large share of the GPU default's wall time (docs/results/h100/between_runs). When the
workflow runs locally,
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

The server reads requests a piece at a time as they arrive, in its one loop (no thread: it forks),
so that no client holds up another: at most 8 MiB, whole within 10 s of connecting, for a verb the
table marks ``warm``. Whatever goes wrong with one (not JSON, nested past the decoder's recursion,
too large, too slow, another verb), the client is answered ``N`` and why, and the descriptors it
passed are closed. A killed job leaves its repeats' scratch folder behind (nothing of it runs a
clean-up): inferbench.machine.scratch names each after its process, and the next one made beside it
removes those whose process is gone.
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
from collections.abc import Callable, Collection, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from inferbench.core.env_vars import OMP_NUM_THREADS, WARM_SOCKET
from inferbench.core.errors import UserError
from inferbench.machine.lifetime import die_with_parent, kill_group, why_not_fork
from inferbench.machine.scratch import pid_exists

if TYPE_CHECKING:
    pass

SOCKET_ENV = WARM_SOCKET.name
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
#: seconds from connecting to the request's last byte: a job sends it at once, so a slower client
#: is stuck or hostile, and is refused (its job runs the command itself)
_REQUEST_S = 10.0
#: requests arriving at once; more are refused at once (each holds descriptors and a buffer)
_MAX_PENDING = 64
#: the most bytes read from a client in one go, so that one large request never holds up the loop
_CHUNK = 2**20
#: the most bytes of a refusal's reason sent back
_MAX_REASON = 1000
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
    come here is the table's business (inferbench.catalog.verbs: ``warm``)."""
    socket_path = socket_path or WARM_SOCKET.read()
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


def served_verbs() -> frozenset[str]:
    """The verbs a server runs: those the table marks ``warm`` (inferbench.catalog.verbs). A job of any
    other verb never comes here, so a request for one is refused rather than run."""
    from inferbench.catalog.verbs import VERBS

    return frozenset(name for name, verb in VERBS.items() if verb.warm)


def serve(
    socket_path: str | Path,
    entry: Callable[[list[str]], int],
    modules: Sequence[str] = PRELOAD,
    watch_pid: int | None = None,
    poll_s: float = 0.5,
    verbs: Collection[str] | None = None,
    request_s: float = _REQUEST_S,
) -> None:
    """Import ``modules``, then fork a child per request until SIGTERM or until ``watch_pid`` (the
    Snakemake process) is gone. ``entry(argv)`` is what a child runs (the command line's main), for
    requests whose verb is one of ``verbs`` (default: ``served_verbs()``); a request must arrive
    whole within ``request_s`` seconds of its connection."""
    from inferbench.machine.lock import MachineLock

    parent_at_start = os.getppid()
    served = frozenset(served_verbs() if verbs is None else verbs)
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
    listener.setblocking(False)  # a client that connects and goes away at once never blocks accept()
    stop: list[int] = []
    signal.signal(signal.SIGTERM, lambda signum, frame: stop.append(signum))
    server = _Server(listener, entry, served, request_s)
    # a finished child (SIGCHLD) wakes the loop at once: its job learns its exit code without waiting
    signal.set_wakeup_fd(server.waker.fileno(), warn_on_full_buffer=False)
    signal.signal(signal.SIGCHLD, lambda signum, frame: None)
    try:
        while not stop and (watch_pid is None or _alive(watch_pid, parent_at_start)):
            server.step(poll_s)
    finally:
        signal.set_wakeup_fd(-1)
        server.close()
        path.unlink(missing_ok=True)


def _alive(pid: int, parent_at_start: int) -> bool:
    """Whether the watched process (the Snakemake run) still runs. When it is the server's parent,
    the parent pid says so without the risk of ``kill(pid, 0)`` finding a reused pid."""
    if pid == parent_at_start:
        return os.getppid() == pid
    return pid_exists(pid)


class _Refused(Exception):
    """Why the server does not run a request; the job is told and runs the command itself."""


class _ClientGone(Exception):
    """The client closed its connection before its request was whole."""


class _Pending:
    """A connection whose request is still arriving. It is read a piece at a time whenever the
    socket is readable, from the server's one loop: no client, however slow, holds up another."""

    def __init__(self, conn: socket.socket, deadline: float) -> None:
        self.conn = conn
        self.deadline = deadline
        self.data = bytearray()
        #: descriptors received so far; the server owns them and closes them on every path
        self.fds: list[int] = []
        self.size: int | None = None

    def read(self) -> bool:
        """Read what has arrived; True once the whole request is in."""
        want = _HEADER.size + (self.size or 0)
        try:
            chunk, fds, _, _ = socket.recv_fds(self.conn, min(want - len(self.data), _CHUNK), 3)
        except (BlockingIOError, InterruptedError):
            return False
        self.fds.extend(fds)
        if len(self.fds) > 3:  # a job passes its stdin, stdout and stderr once; more would pile up here
            raise _Refused(f"{len(self.fds)} descriptors passed (a job passes 3)")
        if not chunk:
            raise _ClientGone
        self.data += chunk
        if self.size is None and len(self.data) == _HEADER.size:
            self.size = _HEADER.unpack(self.data)[0]
            if not 0 < self.size <= _MAX_REQUEST:
                raise _Refused(f"a request of {self.size} bytes (at most {_MAX_REQUEST} are read)")
        return self.size is not None and len(self.data) == _HEADER.size + self.size

    def close_fds(self) -> None:
        while self.fds:  # popped first: a descriptor number is never closed twice (it may be reused)
            with contextlib.suppress(OSError):
                os.close(self.fds.pop())


#: how long a job whose client is gone has to end by itself after SIGTERM (a cell's job: kill its measuring
#: process, remove its scratch), before the server kills its process group
END_GRACE_S = 10.0


class _Server:
    """The server's state: the listening socket, requests still arriving, and the children running
    jobs, each with its job's connection (readable only once the job is gone)."""

    def __init__(
        self, listener: socket.socket, entry: Callable[[list[str]], int], verbs: frozenset[str], request_s: float
    ) -> None:
        self.listener = listener
        self.entry = entry
        self.verbs = verbs
        self.request_s = request_s
        self.wake, self.waker = socket.socketpair()
        for end in (self.wake, self.waker):
            end.setblocking(False)
        self.selector = selectors.DefaultSelector()
        self.selector.register(listener, selectors.EVENT_READ)
        self.selector.register(self.wake, selectors.EVENT_READ)
        self.pending: dict[socket.socket, _Pending] = {}
        #: jobs whose client is gone, asked to end (SIGTERM), by when they are killed (SIGKILL)
        self.ending: dict[int, float] = {}
        self.children: dict[int, socket.socket] = {}  # child pid -> the job's connection

    def step(self, poll_s: float) -> None:
        """Wait up to ``poll_s`` (less while a request's time runs out) and handle what happened."""
        timeout = poll_s
        if self.pending:
            first = min(p.deadline for p in self.pending.values())
            timeout = max(0.0, min(timeout, first - time.monotonic()))
        for key, _ in self.selector.select(timeout):
            try:
                self._handle(key)
            except Exception:  # one broken connection never ends the server (and every job)
                log.exception("warm-start server: handling a connection failed")
        now = time.monotonic()
        for pending in [p for p in self.pending.values() if p.deadline <= now]:
            self._drop(pending, f"no whole request within {self.request_s:g} s")
        for pid in [pid for pid, deadline in self.ending.items() if deadline <= now]:
            kill_group(pid)
            del self.ending[pid]
        _reap(self.children, self.selector)
        for pid in [pid for pid in self.ending if pid not in self.children]:
            del self.ending[pid]  # reaped: ended within its grace

    def _handle(self, key: selectors.SelectorKey) -> None:
        if key.fileobj is self.listener:
            self._accept()
        elif key.fileobj is self.wake:
            with contextlib.suppress(BlockingIOError):
                self.wake.recv(4096)
        elif isinstance(key.data, _Pending):
            self._receive(key.data)
        else:  # a job's connection is readable only when the job is gone: end its child
            # SIGTERM first: a cell's job then ends its measuring process, removes its scratch and frees
            # its lock (inferbench.launch.processes.end_on_sigterm); SIGKILL if it has not within the grace
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(key.data, signal.SIGTERM)
            self.ending[key.data] = time.monotonic() + END_GRACE_S
            self.selector.unregister(key.fileobj)

    def _accept(self) -> None:
        try:
            conn, _ = self.listener.accept()
        except (BlockingIOError, InterruptedError):
            return
        conn.setblocking(False)  # read only when readable, from this loop
        pending = _Pending(conn, time.monotonic() + self.request_s)
        try:
            if _peer_uid(conn) != os.getuid():
                raise _Refused("another user's process")
            if len(self.pending) >= _MAX_PENDING:
                raise _Refused(f"{_MAX_PENDING} requests are arriving already")
            self.selector.register(conn, selectors.EVENT_READ, pending)
            self.pending[conn] = pending
        except Exception as error:
            self._drop(pending, _reason(error))

    def _receive(self, pending: _Pending) -> None:
        """Read more of a request; once it is whole, refuse it or fork its child. Whatever goes
        wrong, the client is answered and the descriptors it passed are closed."""
        try:
            if not pending.read():
                return
            self._forget(pending)
            request = self._check(pending)
            pid = self._fork(pending, request)
        except (_ClientGone, ConnectionError):  # nobody left to answer
            self._drop(pending, None)
            return
        except Exception as error:
            if not isinstance(error, _Refused):
                log.exception("warm-start server: a request failed")
            self._drop(pending, _reason(error))
            return
        self.children[pid] = pending.conn
        self.selector.register(pending.conn, selectors.EVENT_READ, pid)

    def _check(self, pending: _Pending) -> dict[str, Any]:
        """The request, once it is one this server runs."""
        try:
            request = json.loads(pending.data[_HEADER.size :])
        except RecursionError:  # json's decoder recurses once per level of nesting
            raise _Refused("a request nested too deeply") from None
        except ValueError as error:
            raise _Refused(f"not JSON ({error})") from None
        if not _well_formed(request) or len(pending.fds) != 3:
            raise _Refused("malformed request")
        verb = request["argv"][0] if request["argv"] else ""
        if verb not in self.verbs:
            raise _Refused(f"verb {verb!r} is not one this server runs ({', '.join(sorted(self.verbs))})")
        if any(request.get(k) != v for k, v in interpreter().items()):
            raise _Refused("another interpreter")
        if (why := why_not_fork()) is not None:
            raise _Refused(why)
        return request

    def _fork(self, pending: _Pending, request: dict[str, Any]) -> int:
        """Fork the job's child; in the parent, the child's pid once the job is told it started."""
        server = os.getpid()
        pid = os.fork()
        if pid == 0:  # the job's process from here on; it must end in os._exit, whatever happens
            code: object = 1
            try:
                try:
                    die_with_parent(server)
                    self._close_in_child(pending)
                    code = _become_job(request, pending.fds, self.entry)
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
        pending.close_fds()
        with contextlib.suppress(OSError):  # the job went away: its EOF kills the child in the loop
            pending.conn.sendall(b"S")
        return pid

    def _close_in_child(self, own: _Pending) -> None:
        """What a job's child must not keep: other jobs' connections and descriptors (their EOF must
        not wait for it), the listener, the wake-up pair; its own connection (its job's EOF is the
        server's to see)."""
        self.selector.close()
        self.listener.close()
        own.conn.close()
        for other in self.pending.values():
            other.conn.close()
            other.close_fds()
        for conn in self.children.values():
            conn.close()
        self.wake.close()
        self.waker.close()

    def _forget(self, pending: _Pending) -> None:
        self.pending.pop(pending.conn, None)
        with contextlib.suppress(KeyError, ValueError):
            self.selector.unregister(pending.conn)

    def _drop(self, pending: _Pending, reason: str | None) -> None:
        """End a request that will not run: close what it passed, and tell the client why (``b"N"``,
        then the reason's length and text), unless it is gone."""
        self._forget(pending)
        pending.close_fds()
        if reason is not None:
            log.info("warm-start server: refused a job (%s)", reason)
            text = reason.encode(errors="replace")[:_MAX_REASON]
            with contextlib.suppress(OSError):  # e.g. the client is gone already
                pending.conn.sendall(b"N" + _HEADER.pack(len(text)) + text)
        pending.conn.close()

    def close(self) -> None:
        for pid in self.children:
            kill_group(pid)
        for pending in list(self.pending.values()):
            self._drop(pending, "the server is stopping")
        self.selector.close()
        self.listener.close()
        self.wake.close()
        self.waker.close()


def _reason(error: Exception) -> str:
    return str(error) if isinstance(error, _Refused) else f"{type(error).__name__}: {error}"


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
    try:
        threads = OMP_NUM_THREADS.read()
    except UserError:
        threads = None  # the command refuses it by name as it starts (inferbench.cli.main)
    if threads and "torch" in sys.modules:
        # what OMP_NUM_THREADS would have done in a fresh process: libgomp read it in the server
        sys.modules["torch"].set_num_threads(threads)
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
        kill_group(pid)  # what the child left running (a repeat's process) ends with it
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
