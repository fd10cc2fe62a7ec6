"""One streamed completion from an OpenAI-compatible server, timed on the client as its events arrive.

A request is a POST to ``/v1/completions`` with ``stream: true``: the prompt (token ids where the server takes
them, else text of a known token count), ``max_tokens`` and, where the server allows it, EOS ignored, so that
every request makes the tokens it asks for. The server answers with server-sent events: one ``data:`` line per
event, each holding the text (and, from vLLM with ``return_token_ids``, the ids) of one or more new tokens;
the last events carry the usage, and some servers end with ``data: [DONE]``.

The client's clock starts before the request is sent. An event's time is when its line has been read: where
a server writes several events at once (transformers serve drains its queue into one write), the later ones
read at nearly the same time, and their gaps are recorded as they were seen. Time to first token is the first
event that holds a token; every later such event adds an inter-token gap (ITL, per event, as `vllm bench
serve` counts it); TPOT is (last - first) / (tokens - 1).

Only the standard library: the client's own cost is what the null server measures (``null_server``).
"""

from __future__ import annotations

import http.client
import json
import time
import urllib.parse
from dataclasses import dataclass, field
from typing import Any


class EndpointError(RuntimeError):
    """A server that could not be reached, refused the request or broke its stream: the message says which."""


@dataclass
class StreamedCompletion:
    """What the client saw of one streamed completion (seconds on the client's clock)."""

    asked_tokens: int
    #: per event that held tokens: seconds since the request was sent, and how many tokens it held
    event_s: list[float] = field(default_factory=list)
    event_tokens: list[int] = field(default_factory=list)
    text: str = ""
    token_ids: list[int] = field(default_factory=list)
    finish_reason: str | None = None
    #: the server's own count (the last event's ``usage``), None where it sent none
    usage_tokens: int | None = None
    prompt_tokens: int | None = None
    #: seconds from the request to the stream's end
    total_s: float | None = None
    #: why the stream broke, where it did (the connection closed or reset before the end)
    broke: str | None = None

    @property
    def tokens(self) -> int:
        return sum(self.event_tokens)

    @property
    def ttft_s(self) -> float | None:
        return self.event_s[0] if self.event_s else None

    @property
    def itl_s(self) -> list[float]:
        """The gaps between successive events that held tokens."""
        return [b - a for a, b in zip(self.event_s, self.event_s[1:], strict=False)]

    @property
    def tpot_s(self) -> float | None:
        if self.tokens < 2:
            return None
        return (self.event_s[-1] - self.event_s[0]) / (self.tokens - 1)

    def problem(self) -> str | None:
        """Why this completion is not the one asked for, or None: the stream broke, stopped early, or the
        server's count differs from what it streamed or from what was asked."""
        if self.broke is not None:
            return f"the stream broke after {self.tokens} of {self.asked_tokens} tokens: {self.broke}"
        if self.tokens < self.asked_tokens:
            reason = f" (finish_reason {self.finish_reason})" if self.finish_reason else ""
            return f"the stream stopped after {self.tokens} of {self.asked_tokens} tokens{reason}"
        if self.usage_tokens is not None and self.usage_tokens != self.asked_tokens:
            return (
                f"the server reported {self.usage_tokens} completion tokens; {self.asked_tokens} were asked "
                f"and {self.tokens} streamed"
            )
        if self.tokens > self.asked_tokens:
            return f"the stream held {self.tokens} tokens; {self.asked_tokens} were asked"
        return None


def _tokens_in(choice: dict[str, Any]) -> int:
    """Tokens an event's choice holds: its ids where the server sends them, else one per text delta (a server
    that sends text sends one delta per token; a special token sends none)."""
    if isinstance(choice.get("token_ids"), list):
        return len(choice["token_ids"])
    return 1 if choice.get("text") else 0


def stream_completion(url: str, body: dict[str, Any], asked_tokens: int, timeout_s: float = 60.0) -> StreamedCompletion:
    """POST ``body`` (``stream`` set here) to the completions endpoint at ``url`` and read its events as they
    arrive. A refused request raises EndpointError; a stream that breaks is returned with ``broke`` set."""
    parts = urllib.parse.urlsplit(url)
    connection = http.client.HTTPConnection(parts.hostname or "127.0.0.1", parts.port or 80, timeout=timeout_s)
    payload = json.dumps({**body, "stream": True}).encode()
    done = StreamedCompletion(asked_tokens)
    started = time.perf_counter()
    try:
        connection.request("POST", parts.path or "/v1/completions", payload, {"Content-Type": "application/json"})
        response = connection.getresponse()
        if response.status != 200:
            detail = response.read(400).decode(errors="replace")
            raise EndpointError(f"{url} answered {response.status} {response.reason}: {detail}")
        _read_events(response, done, started)
    except (ConnectionRefusedError, TimeoutError) as error:
        if not done.event_s:
            raise EndpointError(f"{url}: {type(error).__name__}: {error}") from error
        done.broke = f"{type(error).__name__}: {error}"
    except (http.client.HTTPException, ConnectionError, OSError) as error:
        done.broke = f"{type(error).__name__}: {error}"
    finally:
        connection.close()
    done.total_s = time.perf_counter() - started
    return done


def _read_events(response: http.client.HTTPResponse, done: StreamedCompletion, started: float) -> None:
    """Read ``data:`` lines until ``[DONE]`` or the stream's end; a stream that ends with no final event (no
    finish_reason, no usage) broke."""
    ended = False
    while True:
        line = response.readline()
        if not line:
            break
        seen = time.perf_counter() - started
        text = line.decode(errors="replace").strip()
        if not text.startswith("data:"):
            continue  # blank lines between events, comments, other fields
        data = text[len("data:") :].strip()
        if data == "[DONE]":
            ended = True
            break
        event = json.loads(data)
        if "error" in event:
            done.broke = f"the server sent an error: {event['error']}"
            return
        for choice in event.get("choices") or []:
            tokens = _tokens_in(choice)
            if tokens:
                done.event_s.append(seen)
                done.event_tokens.append(tokens)
                done.text += choice.get("text") or ""
                done.token_ids += choice.get("token_ids") or []
            done.finish_reason = choice.get("finish_reason") or done.finish_reason
        if event.get("usage"):
            done.usage_tokens = event["usage"].get("completion_tokens")
            done.prompt_tokens = event["usage"].get("prompt_tokens")
            ended = True
    if not ended and done.finish_reason is None:
        done.broke = "the connection closed before the stream's end (no finish_reason, no usage)"
