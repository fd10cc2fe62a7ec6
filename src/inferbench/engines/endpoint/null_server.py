"""A null OpenAI-compatible server on loopback: it streams canned tokens at once, with no model behind them,
so that a client's time to first token and its inter-token gaps against it are the client's and the event
loop's own floor (what an endpoint cell records beside its figures, as the batcher's harness floor is for
LoadGen). It speaks just enough HTTP/1.1 for ``/health`` and a streamed ``/v1/completions``.

Paced (``Pace``), it waits before its first token and between tokens as a model would: against it, a client's
figures minus the pace are its own cost while as many streams run at once as against a real server.

For tests it can misbehave on purpose: never become healthy, stop a stream early, break it mid-way, report a
token count other than the one it streamed, or exit in the middle of a request (as a server that dies), set by
``Misbehaviour`` or, for a server the run starts, by the environment (``MISBEHAVE_ENV``, as JSON).

    python -m inferbench.engines.endpoint.null_server --port 8011
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import itertools
import json
import os
import threading
import time
from dataclasses import dataclass

#: the environment variable a null server started as a process reads its misbehaviour from (JSON of
#: ``Misbehaviour``'s fields), for tests of a server the run starts
MISBEHAVE_ENV = "INFERBENCH_NULL_SERVER_MISBEHAVE"


@dataclass(frozen=True)
class Misbehaviour:
    """What the null server does wrong, for tests of the client (all off: a correct server)."""

    #: /health answers 503 for ever
    unhealthy: bool = False
    #: the stream ends normally (finish_reason "stop", usage) after this many tokens
    stop_after: int | None = None
    #: the connection is closed without an end after this many tokens
    break_after: int | None = None
    #: the usage reports this many completion tokens instead of those streamed
    usage_tokens: int | None = None
    #: the whole process exits (code 1) after the first token of its request number this (from 1)
    exit_in_request: int | None = None

    @classmethod
    def from_environment(cls) -> Misbehaviour:
        return cls(**json.loads(os.environ.get(MISBEHAVE_ENV) or "{}"))

    def to_environment(self) -> dict[str, str]:
        return {MISBEHAVE_ENV: json.dumps(dataclasses.asdict(self))}


@dataclass(frozen=True)
class Pace:
    """How long the null server waits before a stream's first token and between its tokens (none: at once)."""

    first_token_s: float = 0.0
    token_s: float = 0.0


class NullServer:
    """The null server on ``127.0.0.1:port`` (0: a free port, ``port`` after ``start``), its event loop in a
    thread of its own; ``with NullServer() as server:`` starts and stops it."""

    def __init__(self, port: int = 0, misbehaviour: Misbehaviour = Misbehaviour(), pace: Pace = Pace()) -> None:
        self.port = port
        self.misbehaviour = misbehaviour
        self.pace = pace
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="null-server", daemon=True)
        self._server: asyncio.Server | None = None
        self._open: set[asyncio.StreamWriter] = set()
        self._requests = itertools.count(1)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> NullServer:
        self._thread.start()
        started = asyncio.run_coroutine_threadsafe(
            asyncio.start_server(self._serve, "127.0.0.1", self.port), self._loop
        )
        self._server = started.result(timeout=10)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    def stop(self) -> None:
        """Close the server and its open connections in its own loop (asyncio objects belong to their loop's
        thread), then end the loop."""
        if self._server is not None:
            asyncio.run_coroutine_threadsafe(self._close(), self._loop).result(timeout=10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=10)

    async def _close(self) -> None:
        assert self._server is not None
        self._server.close()
        for writer in list(self._open):
            writer.transport.abort()
        await self._server.wait_closed()

    def __enter__(self) -> NullServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._open.add(writer)
        try:
            while True:  # keep-alive: one request after another on the connection
                head = await reader.readuntil(b"\r\n\r\n")
                request_line, *header_lines = head.decode().split("\r\n")
                method, path, _ = request_line.split(" ", 2)
                headers = dict(line.split(": ", 1) for line in header_lines if ": " in line)
                length = int(headers.get("Content-Length", headers.get("content-length", "0")))
                body = json.loads(await reader.readexactly(length)) if length else {}
                if path == "/health":
                    healthy = not self.misbehaviour.unhealthy
                    await _reply(writer, 200 if healthy else 503, {"status": "ok" if healthy else "unhealthy"})
                elif method == "POST" and path == "/v1/completions" and body.get("stream"):
                    if not await self._stream(writer, body):
                        return
                else:
                    await _reply(writer, 404, {"error": f"{method} {path}: the null server serves /health and a "
                                                        "streamed /v1/completions"})  # fmt: skip
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            self._open.discard(writer)
            writer.close()

    async def _stream(self, writer: asyncio.StreamWriter, body: dict) -> bool:
        """Stream ``max_tokens`` canned tokens, each its own event and write; False where the connection was
        broken on purpose."""
        asked = int(body.get("max_tokens", 16))
        wrong = self.misbehaviour
        made = min(asked, wrong.stop_after) if wrong.stop_after is not None else asked
        number = next(self._requests)
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n")
        created = int(time.time())
        for index in range(made):
            wait = self.pace.first_token_s if index == 0 else self.pace.token_s
            if wait:
                await asyncio.sleep(wait)
            if wrong.break_after is not None and index == wrong.break_after:
                writer.transport.abort()
                return False
            if wrong.exit_in_request == number and index == 1:
                os._exit(1)  # a server that dies: no reply, no clean-up
            choice = {"index": 0, "text": f" w{index % 100}", "token_ids": [index % 100]}
            await _event(writer, {"id": "null", "object": "text_completion", "created": created, "choices": [choice]})
        finish = "length" if made == asked else "stop"
        completion = wrong.usage_tokens if wrong.usage_tokens is not None else made
        prompt = _prompt_tokens(body.get("prompt"))
        usage = {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}
        last = {"index": 0, "text": "", "finish_reason": finish}
        await _event(writer, {"id": "null", "object": "text_completion", "choices": [last], "usage": usage})
        writer.write(_chunk(b"data: [DONE]\n\n") + b"0\r\n\r\n")
        await writer.drain()
        return True


def _prompt_tokens(prompt: object) -> int:
    """The prompt's tokens: its ids, or its words (the tokenizer the project saves maps a word to a token)."""
    if isinstance(prompt, list):
        return len(prompt)
    return len(str(prompt or "").split())


def _chunk(data: bytes) -> bytes:
    return f"{len(data):x}\r\n".encode() + data + b"\r\n"


async def _event(writer: asyncio.StreamWriter, event: dict) -> None:
    writer.write(_chunk(f"data: {json.dumps(event)}\n\n".encode()))
    await writer.drain()


async def _reply(writer: asyncio.StreamWriter, status: int, payload: dict) -> None:
    body = json.dumps(payload).encode()
    reason = {200: "OK", 404: "Not Found", 503: "Service Unavailable"}[status]
    writer.write(f"HTTP/1.1 {status} {reason}\r\nContent-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
                 .encode() + body)  # fmt: skip
    await writer.drain()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=8011)
    parser.add_argument("--first-token-ms", type=float, default=0.0, help="wait before a stream's first token")
    parser.add_argument("--token-ms", type=float, default=0.0, help="wait between a stream's tokens")
    args = parser.parse_args()
    pace = Pace(args.first_token_ms / 1e3, args.token_ms / 1e3)
    with NullServer(args.port, Misbehaviour.from_environment(), pace) as server:
        print(f"null server on {server.url}", flush=True)
        threading.Event().wait()  # until the process is ended


if __name__ == "__main__":
    main()
