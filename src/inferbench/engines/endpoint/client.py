"""One streamed completion from an OpenAI-compatible server, read event by event.

A request is a POST to ``/v1/completions`` with ``stream: true``: the prompt (token ids where the server takes
them, else words of the project's word vocabulary, one token each), ``max_tokens`` and, where the server allows
it, EOS ignored, so that every request makes the tokens it asks for. The server answers with server-sent
events: one ``data:`` line per event, each holding the text (and, from vLLM with ``return_token_ids``, the ids)
of one or more new tokens; the last events carry the usage, and some servers end with ``data: [DONE]``.

``completion_tokens`` yields after every event that held tokens, so that its caller can time each as it
arrives (the engine knows nothing of timing: the scenario timestamps each yield). Where a server writes several
events at once (transformers serve drains its queue into one write), they are read, and yielded, one by one.
A request the server refused, a stream that broke, stopped early, or whose usage differs from what was asked
and streamed raises EndpointError, which says which.
"""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

#: a token of the word vocabulary the project saves beside a checkpoint it serves (``w<id>``)
WORD = re.compile(r"w(\d+)")


class EndpointError(RuntimeError):
    """A server that could not be reached, refused the request or broke its stream: the message says which."""


@dataclass
class Completion:
    """What the client saw of one streamed completion."""

    asked_tokens: int
    #: tokens each event that held any held, in order
    event_tokens: list[int] = field(default_factory=list)
    text: str = ""
    #: the ids sent with the events (``token_ids``), where the server sends them
    token_ids: list[int] = field(default_factory=list)
    finish_reason: str | None = None
    #: the server's own count (the last event's ``usage``), None where it sent none
    usage_tokens: int | None = None
    prompt_tokens: int | None = None
    #: an event ended the stream (``[DONE]``, or one carrying usage)
    ended: bool = False
    #: why the stream broke, where it did (the connection closed or reset before the end)
    broke: str | None = None

    @property
    def tokens(self) -> int:
        return sum(self.event_tokens)

    def ids(self) -> list[int] | None:
        """The generated token ids: those the server sent, else the words of the text mapped back to theirs
        (the project's word vocabulary); None where neither gives one id per token."""
        if len(self.token_ids) == self.tokens:
            return list(self.token_ids)
        words = [int(word) for word in WORD.findall(self.text)]
        return words if len(words) == self.tokens else None

    def add(self, event: dict[str, Any]) -> int:
        """Take one event in; the tokens it held."""
        if "error" in event:
            self.broke = f"the server sent an error: {event['error']}"
            return 0
        held = 0
        for choice in event.get("choices") or []:
            tokens = _tokens_in(choice)
            if tokens:
                self.event_tokens.append(tokens)
                self.text += choice.get("text") or ""
                self.token_ids += choice.get("token_ids") or []
                held += tokens
            self.finish_reason = choice.get("finish_reason") or self.finish_reason
        if event.get("usage"):
            self.usage_tokens = event["usage"].get("completion_tokens")
            self.prompt_tokens = event["usage"].get("prompt_tokens")
            self.ended = True
        return held

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
                f"the server reported {self.usage_tokens} completion tokens, for {self.asked_tokens} asked "
                f"and {self.tokens} streamed"
            )
        if self.tokens > self.asked_tokens:
            return f"the stream held {self.tokens} tokens; {self.asked_tokens} were asked"
        return None


def _tokens_in(choice: dict[str, Any]) -> int:
    """Tokens an event's choice holds: its ids where the server sends them; else, for text of the word
    vocabulary, its words (a server that falls behind its engine sends several tokens in one event, as vLLM
    does under load); else one per text delta (a special token sends none)."""
    if isinstance(choice.get("token_ids"), list):
        return len(choice["token_ids"])
    text = choice.get("text") or ""
    words = text.split()
    if len(words) > 1 and all(WORD.fullmatch(word) for word in words):
        return len(words)
    return 1 if text else 0


async def completion_tokens(session: Any, url: str, body: dict[str, Any], done: Completion) -> AsyncIterator[int]:
    """POST ``body`` (``stream`` set here) to the completions endpoint at ``url`` through the aiohttp
    ``session`` and yield the tokens made so far after each event that held tokens, filling ``done``. Raises
    EndpointError where the server refused the request, or where the completion is not the one asked for
    (``Completion.problem``) once the stream has ended."""
    import aiohttp

    try:
        async with session.post(url, json={**body, "stream": True}) as response:
            if response.status != 200:
                detail = (await response.text())[:400]
                raise EndpointError(f"{url} answered {response.status} {response.reason}: {detail}")
            async for line in response.content:  # one line at a time, as it arrives
                text = line.decode(errors="replace").strip()
                if not text.startswith("data:"):
                    continue  # blank lines between events, comments, other fields
                data = text[len("data:") :].strip()
                if data == "[DONE]":
                    done.ended = True
                    break
                if done.add(json.loads(data)):
                    yield done.tokens
                if done.broke is not None:
                    break
    except (aiohttp.ClientConnectorError, TimeoutError) as error:
        if not done.event_tokens:
            raise EndpointError(f"{url}: {type(error).__name__}: {error}") from error
        done.broke = f"{type(error).__name__}: {error}"
    except (aiohttp.ClientError, ConnectionError) as error:
        done.broke = f"{type(error).__name__}: {error}"
    if done.broke is None and not done.ended and done.finish_reason is None:
        done.broke = "the connection closed before the stream's end (no finish_reason, no usage)"
    problem = done.problem()
    if problem is not None:
        raise EndpointError(f"{url}: {problem}")
