"""A server the run starts for its endpoint cells, and the wait for its health.

The server is a child of the cell's process, in a process group of its own (its own children, such as vLLM's
engine core, with it), its output in a log beside the cell's files. It ends with the process that started it
whatever way that ends: asked to stop (``stop``: SIGTERM to its group, then SIGKILL), at the process's exit
(a multiprocessing finaliser), or killed (the kernel sends it SIGTERM when its parent dies: PR_SET_PDEATHSIG),
so that no server outlives its cell on success, failure or interruption.
"""

from __future__ import annotations

import contextlib
import ctypes
import http.client
import os
import signal
import socket
import subprocess
import time
import urllib.parse
from collections.abc import Sequence
from multiprocessing import util
from pathlib import Path

from inferbench.engines.endpoint.client import EndpointError

#: a server asked to stop that is still running after this long is killed, its group with it
STOP_GRACE_S = 10.0
#: Linux's prctl option that sends a child a signal when its parent dies
PR_SET_PDEATHSIG = 1


def free_port() -> int:
    """A port on loopback that nothing listens on now (the server binds it a moment later)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def loopback_url(port: int) -> str:
    return f"http://127.0.0.1:{port}"


def _end_with_parent() -> None:
    """In the server's process before it runs: SIGTERM when the process that started it dies (Linux)."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)


class ServerProcess:
    """A server started from ``command`` (its output in ``log``), which answers on ``url`` once healthy."""

    def __init__(self, command: Sequence[str], url: str, log: Path, env: dict[str, str] | None = None) -> None:
        self.command, self.url, self.log, self.env = list(command), url, log, dict(env or {})
        log.parent.mkdir(parents=True, exist_ok=True)
        with log.open("wb") as out:
            self.process = subprocess.Popen(
                self.command, stdout=out, stderr=subprocess.STDOUT, env={**os.environ, **self.env},
                start_new_session=True, preexec_fn=_end_with_parent,
            )  # fmt: skip
        # at this process's normal exit too (a measuring process returns its record and exits)
        self._finalizer = util.Finalize(self, self.stop, exitpriority=10)

    def wait_healthy(self, timeout_s: float) -> float:
        """Seconds until ``/health`` answered 200; EndpointError (with the log's tail) where the server
        exited first or ``timeout_s`` passed, the server stopped."""
        try:
            return wait_healthy(self.url, timeout_s, self.process)
        except EndpointError as error:
            self.stop()
            raise EndpointError(f"{error}. The server's log ends: {self.log_tail()}") from None

    def exited(self, within_s: float = 0.0) -> str | None:
        """How the server ended, where it has by ``within_s`` from now ("exited with code 1", "ended by
        SIGKILL"), else None. A broken stream is seen before the kernel has marked its server's exit: wait."""
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.process.wait(timeout=within_s)
        code = self.process.poll()
        if code is None:
            return None
        return f"ended by {signal.Signals(-code).name}" if code < 0 else f"exited with code {code}"

    def log_tail(self, chars: int = 1500) -> str:
        text = self.log.read_text(errors="replace") if self.log.exists() else ""
        return text[-chars:].strip() or "(nothing)"

    def stop(self) -> None:
        """SIGTERM to the server's group; SIGKILL to it after ``STOP_GRACE_S``. Idempotent."""
        if self.process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.process.pid, signal.SIGTERM)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.process.wait(timeout=STOP_GRACE_S)
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.process.pid, signal.SIGKILL)  # what it left of its group (an engine core)
        self.process.wait()


def wait_healthy(url: str, timeout_s: float, process: subprocess.Popen | None = None, poll_s: float = 0.2) -> float:
    """Poll ``url``'s ``/health`` until it answers 200; the seconds that took. Raises EndpointError where
    ``process`` (the server, where this run started it) ends first, or ``timeout_s`` passes, naming the
    last answer or error seen."""
    parts = urllib.parse.urlsplit(url)
    started = time.perf_counter()
    last = "no answer yet"
    while True:
        if process is not None and process.poll() is not None:
            raise EndpointError(
                f"the server at {url} exited with code {process.returncode} before /health answered 200 (last: {last})"
            )
        try:
            connection = http.client.HTTPConnection(parts.hostname or "127.0.0.1", parts.port or 80, timeout=poll_s * 5)
            connection.request("GET", "/health")
            response = connection.getresponse()
            response.read()
            connection.close()
            if response.status == 200:
                return time.perf_counter() - started
            last = f"{response.status} {response.reason}"
        except (ConnectionError, OSError, http.client.HTTPException) as error:
            last = f"{type(error).__name__}: {error}"
        if time.perf_counter() - started > timeout_s:
            raise EndpointError(
                f"the server at {url} did not answer /health with 200 within {timeout_s:g} s (last: {last})"
            )
        time.sleep(poll_s)
