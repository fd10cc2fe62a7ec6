"""The streaming client of an OpenAI-compatible server (inferbench.scenarios.endpoint), against the null server
on loopback: a correct stream is timed token by token, and every way a server can go wrong is a clear reason."""

from __future__ import annotations

import socket
import subprocess
import sys

import pytest

from inferbench.scenarios.endpoint.health import wait_healthy
from inferbench.scenarios.endpoint.null_server import Misbehaviour, NullServer
from inferbench.scenarios.endpoint.stream import EndpointError, stream_completion

pytestmark = pytest.mark.fast


def _complete(server: NullServer, asked: int = 16):
    return stream_completion(f"{server.url}/v1/completions", {"prompt": [1, 2, 3], "max_tokens": asked}, asked)


def test_a_stream_is_timed_as_its_tokens_arrive():
    with NullServer() as server:
        assert wait_healthy(server.url, timeout_s=10) >= 0
        done = _complete(server)
    assert done.problem() is None
    assert done.tokens == done.usage_tokens == 16 and done.prompt_tokens == 3 and done.finish_reason == "length"
    assert len(done.event_s) == 16 and len(done.itl_s) == 15, "one event per token, one gap between each two"
    assert 0 < done.ttft_s <= done.event_s[-1] <= done.total_s
    assert all(gap >= 0 for gap in done.itl_s) and done.tpot_s == pytest.approx(sum(done.itl_s) / 15)
    assert done.token_ids == list(range(16))


@pytest.mark.parametrize(
    ("misbehaviour", "reason"),
    [
        (Misbehaviour(stop_after=5), "the stream stopped after 5 of 16 tokens (finish_reason stop)"),
        (Misbehaviour(break_after=3), "the stream broke after 3 of 16 tokens"),
        (Misbehaviour(usage_tokens=20), "the server reported 20 completion tokens; 16 were asked and 16 streamed"),
    ],
)
def test_a_stream_that_is_not_the_one_asked_for_says_why(misbehaviour, reason):
    with NullServer(misbehaviour=misbehaviour) as server:
        done = _complete(server)
    assert done.problem() is not None and done.problem().startswith(reason), done.problem()


def test_a_server_that_never_becomes_healthy_is_named_with_its_last_answer():
    with NullServer(misbehaviour=Misbehaviour(unhealthy=True)) as server, pytest.raises(EndpointError) as error:
        wait_healthy(server.url, timeout_s=0.5, poll_s=0.05)
    assert "did not answer /health with 200 within 0.5 s (last: 503 Service Unavailable)" in str(error.value)


def test_a_server_process_that_exits_before_it_is_healthy_is_named_with_its_code():
    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    server = subprocess.Popen([sys.executable, "-c", "import sys; sys.exit(3)"])
    with pytest.raises(EndpointError, match="exited with code 3 before /health answered 200"):
        wait_healthy(f"http://127.0.0.1:{port}", timeout_s=30, process=server, poll_s=0.05)


def test_a_refused_request_is_an_error_that_names_the_server():
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    with pytest.raises(EndpointError, match=rf"127.0.0.1:{port}/v1/completions: ConnectionRefusedError"):
        stream_completion(f"http://127.0.0.1:{port}/v1/completions", {"prompt": "w1", "max_tokens": 2}, 2)


def test_a_request_the_server_refuses_gives_its_answer():
    with NullServer() as server, pytest.raises(EndpointError, match="answered 404 Not Found"):
        stream_completion(f"{server.url}/v1/chat", {"prompt": "w1", "max_tokens": 2}, 2)
