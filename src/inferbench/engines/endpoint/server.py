"""Waiting for a server to become healthy: its ``/health`` answering 200, or a clear reason why not (the
process that should serve it ended, or the time allowed passed)."""

from __future__ import annotations

import http.client
import subprocess
import time
import urllib.parse

from inferbench.scenarios.endpoint.stream import EndpointError


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
                f"the server at {url} exited with code {process.returncode} before /health answered 200 "
                f"(last: {last}); see its log"
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
