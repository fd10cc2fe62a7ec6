"""Endpoint engines (inferbench.engines.endpoint): a decoder behind an OpenAI-compatible server.

``prepare`` saves the workload's checkpoint where the server loads it from (with a word vocabulary: token ``i``
is the word ``w<i>``, so that a prompt of N words is N tokens and a text reply maps back to ids), starts the
server on a free loopback port (inferbench.engines.endpoint.server: it ends with this process), waits for its
``/health``, and counts the weights' bytes for the scenario's roofline. Then:

- under load (a stream-driven scenario): ``serve_stream`` sends one streamed request and
  yields the tokens made so far after each event, on the scenario's event loop;
- one request at a time (a step-driven scenario): ``start`` sends one streamed request per row of the
  batch, at once, and returns when every row has its first token; ``step`` when every row has one more.

Requests go through one aiohttp session per event loop (kept-alive connections, as ``vllm bench serve`` keeps
them). The first call (``run``) asks for one token per row; the server's output is tokens, not logits, so the
cell's parity is its tokens against FP32 eager's greedy ones (``run_gives_tokens``).
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib.util
import itertools
import shutil
import sys
from collections.abc import AsyncIterator, Coroutine, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from inferbench.catalog.engines import engine_files_dir, is_loopback, url_problem
from inferbench.engines.base import cuda_unavailable_reason
from inferbench.engines.endpoint import EndpointOptions, TransformersServeOptions, UrlOptions, VllmServeOptions
from inferbench.engines.endpoint.client import Completion, EndpointError, completion_tokens
from inferbench.engines.endpoint.server import ServerProcess, free_port, loopback_url
from inferbench.engines.generation.exports import ExportedDecoder, checkpoint_digest, made_once
from inferbench.engines.generation.vllm_engine import VLLM_DTYPE, compile_cache_dir, engine_arguments
from inferbench.models.registry import InputSpec

#: the server's dtype for each of our precisions, and the bytes of one weight (as VLLM_DTYPE for vLLM)
SERVED_DTYPE = {"fp32": ("float32", 4), "fp16": ("float16", 2), "bf16": ("bfloat16", 2)}
#: seconds an idle kept-alive connection is kept for the next request: below the 5 s after which uvicorn (transformers
#: serve, vllm serve) closes one, so that no request is sent on a connection the server is closing (a reset)
KEEPALIVE_S = 2.0
#: a stream that sends nothing for this long is broken (a server that hangs without closing)
READ_TIMEOUT_S = 300.0
#: ``transformers serve`` with this interpreter (its console script, ``transformers``, may be another's)
TRANSFORMERS_CLI = "import sys; from transformers.cli.transformers import main; sys.argv[0] = 'transformers'; main()"
#: seconds a request that failed waits for the server's exit to be seen, to name it in the reason
SERVER_EXIT_S = 2.0
#: seconds the null server may take to answer /health (it imports nothing heavy)
NULL_START_S = 60.0


def word_tokenizer(vocab_size: int) -> Any:
    """A tokenizer whose token ``i`` is the word ``w<i>``: whitespace-split words, no special tokens, so that
    N words are N tokens and a server streams one word per token."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    tokenizer = Tokenizer(models.WordLevel(vocab={f"w{i}": i for i in range(vocab_size)}, unk_token="w0"))
    tokenizer.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tokenizer.decoder = decoders.WordPiece()  # joins the words with spaces
    return PreTrainedTokenizerFast(tokenizer_object=tokenizer)  # no special token: w0 is streamed like any other


def save_served_checkpoint(lm: Any, folder: Path) -> None:
    """``lm`` (a transformers causal LM) saved for a server: its weights, its word vocabulary, and no EOS in
    its config or generation config, so that every request makes exactly the tokens it asks for (transformers
    serve refuses ``ignore_eos``)."""
    from transformers import GenerationConfig

    lm.config.eos_token_id = lm.config.bos_token_id = lm.config.pad_token_id = None
    lm.generation_config = GenerationConfig(eos_token_id=None, bos_token_id=None, pad_token_id=None)
    lm.save_pretrained(folder, safe_serialization=True)
    word_tokenizer(int(lm.config.vocab_size)).save_pretrained(folder)


@dataclass
class EndpointRequest:
    """One streamed request per row of a batch (one request at a time), with its tokens so far."""

    ids: list[str]
    prompt: int
    streams: list[AsyncIterator[int]]
    made: list[int] = field(default_factory=list)
    #: every row's tokens, once their streams have ended
    tokens: np.ndarray | None = None

    def least(self) -> int:
        return min(self.made)


class EndpointEngine(ExportedDecoder):
    """What every endpoint engine shares: the client side. A subclass says where the server is (``serve``)
    and how its requests are written (``prompt_format``, ``extra_body``)."""

    options: EndpointOptions
    graph = "server"
    run_gives_tokens = True
    run_description = "one streamed request per row for one token: the prompt sent, the first token back"
    #: the server computes in processes of its own: no kernel of a step runs in the cell's process
    steps_in_another_process = True
    #: how prompts are sent: ``token_ids`` (a list of ids) or ``words`` (text of the word vocabulary)
    prompt_format: ClassVar[str] = "words"
    #: why the generated tokens are not held to FP32 eager's, where they are not (the scenarios read it)
    tokens_unchecked: ClassVar[str | None] = None

    def extra_body(self) -> dict[str, Any]:
        """Fields every request carries besides the prompt and its length."""
        return {}

    def serve(self, artifact: Path | None, lm: Any, example: dict[str, np.ndarray]) -> None:
        """Start the server (or find it) and set ``url``, ``model_name`` and ``server``."""
        raise NotImplementedError

    @classmethod
    def unavailable_reason(cls, device: str, precision: str) -> str | None:
        if importlib.util.find_spec("aiohttp") is None:
            return "aiohttp is not installed here (`pip install aiohttp`): the endpoint client sends its requests"
        return cuda_unavailable_reason() if device == "cuda" else None

    def prepare(self, artifact: Path | None, inputs: tuple[InputSpec, ...], example: dict[str, np.ndarray]) -> None:
        lm = self.load_decoder(artifact, SERVED_DTYPE[self.precision][1])
        self.vocab_size = int(lm.config.vocab_size)
        self.server: ServerProcess | None = None
        self.url, self.model_name = "", ""
        self.serve(artifact, lm, example)
        self._loop = asyncio.new_event_loop()  # requests sent one at a time (start, step) run on it
        self._sessions: dict[asyncio.AbstractEventLoop, Any] = {}
        self._served: dict[str, list[int] | None] = {}
        # at most the cell's batch of requests in flight, the others waiting here in arrival order, as the
        # in-process engines queue them (transformers serve has no limit of its own on requests running)
        self._running = int(example["input_ids"].shape[0])
        self._slots: dict[asyncio.AbstractEventLoop, asyncio.Semaphore] = {}
        self._numbers = itertools.count()

    def _body(self, prompt: list[int], max_tokens: int) -> dict[str, Any]:
        sent: Any = list(prompt) if self.prompt_format == "token_ids" else " ".join(f"w{t}" for t in prompt)
        return {
            "model": self.model_name,
            "prompt": sent,
            "max_tokens": int(max_tokens),
            "temperature": 0.0,
            "stream_options": {"include_usage": True},
            **self.extra_body(),
        }

    def _session(self) -> Any:
        """The aiohttp session of the running event loop (a session belongs to one loop)."""
        import aiohttp

        loop = asyncio.get_running_loop()
        if loop not in self._sessions:
            timeout = aiohttp.ClientTimeout(total=None, sock_read=READ_TIMEOUT_S)
            connector = aiohttp.TCPConnector(limit=0, keepalive_timeout=KEEPALIVE_S)
            self._sessions[loop] = aiohttp.ClientSession(timeout=timeout, connector=connector)
        return self._sessions[loop]

    async def serve_stream(self, request_id: str, prompt: list[int], max_tokens: int) -> AsyncIterator[int]:
        """One streamed request: the tokens made so far after each event (a stream-driven scenario's)."""
        done = Completion(max_tokens)
        slots = self._slots.setdefault(asyncio.get_running_loop(), asyncio.Semaphore(self._running))
        try:
            async with slots:  # a request waits for a slot in arrival order: asyncio's semaphore is fair
                async for made in completion_tokens(
                    self._session(), f"{self.url}/v1/completions", self._body(prompt, max_tokens), done
                ):
                    yield made
        except EndpointError as error:
            raise EndpointError(f"request {request_id}: {error}{self._server_note()}") from None
        self._served[request_id] = done.ids()

    def _server_note(self) -> str:
        """Where the run's server has ended: how, and its log's tail."""
        ended = self.server.exited(within_s=SERVER_EXIT_S) if self.server is not None else None
        if ended is None:
            return ""
        return f"; the server {ended}, its log ends: {self.server.log_tail(600)}"  # type: ignore[union-attr]

    @contextlib.contextmanager
    def client_floor(self) -> Iterator[str]:
        """This client pointed at the null server (inferbench.engines.endpoint.null_server), started in a process
        of its own for the duration: what the client and its event loop take with no model behind them. Yields
        what the null server is, for the record."""
        port = free_port()
        null = ServerProcess(null_server_command(port), loopback_url(port), self._log_folder() / f"null-{port}.log")
        real = self.url, self.server
        try:
            null.wait_healthy(NULL_START_S)
            self.url, self.server = null.url, null
            yield "the null server: canned tokens streamed at once, one event each, on loopback"
        finally:
            self.url, self.server = real
            null.stop()
            self._served.clear()

    def _log_folder(self) -> Path:
        return engine_files_dir("results/engines/endpoint_logs")

    def serve_tokens(self, request_id: str) -> list[int]:
        """The tokens a finished request made (forgotten once read)."""
        tokens = self._served.pop(request_id)
        if tokens is None:
            raise EndpointError(
                f"request {request_id}: the server sent no token ids and its text is not the word vocabulary's"
            )
        return tokens

    def serve_close(self) -> None:
        """Close the sessions, each on its loop (the scenario closes its loop after this)."""
        for loop, session in getattr(self, "_sessions", {}).items():
            if not loop.is_closed() and not loop.is_running():
                loop.run_until_complete(session.close())
        self._sessions = {}

    def close(self) -> None:
        """The sessions on this engine's loop closed, then the server stopped (where this process started it);
        from wherever ``prepare`` got to."""
        self.serve_close()
        loop = getattr(self, "_loop", None)
        if loop is not None and not loop.is_closed():
            loop.close()
        server: ServerProcess | None = getattr(self, "server", None)
        if server is not None:
            server.stop()

    # -- one request at a time (start, step): each row its own stream, on this engine's loop

    def _run_all(self, works: list[Coroutine[Any, Any, None]]) -> None:
        """Run ``works`` together on this engine's loop (gathered inside it: a gather made outside a running
        loop would belong to whichever loop is current)."""

        async def together() -> None:
            await asyncio.gather(*works)

        self._loop.run_until_complete(together())

    def stage(self, batch: dict[str, np.ndarray]) -> list[list[int]]:
        return [[int(t) for t in row] for row in batch["input_ids"]]

    def _open(self, staged: list[list[int]], max_tokens: int) -> EndpointRequest:
        number = next(self._numbers)
        ids = [f"g{number}-{row}" for row in range(len(staged))]
        streams = [self.serve_stream(i, prompt, max_tokens) for i, prompt in zip(ids, staged, strict=True)]
        return EndpointRequest(ids, len(staged[0]), streams, [0] * len(staged))

    def _advance(self, request: EndpointRequest, tokens: int) -> EndpointRequest:
        """Read each row's events until every row has ``tokens`` tokens (an event may bring several)."""

        async def row_until(row: int) -> None:
            while request.made[row] < tokens:
                request.made[row] = await anext(request.streams[row])

        self._run_all([row_until(row) for row in range(len(request.ids))])
        return request

    def _finish(self, request: EndpointRequest) -> np.ndarray:
        """Read every row's stream to its end (the server's usage checked) and return the tokens (kept: a
        request's tokens may be asked for again)."""
        if request.tokens is not None:
            return request.tokens

        async def drain(stream: AsyncIterator[int]) -> None:
            async for _ in stream:
                pass

        self._run_all([drain(stream) for stream in request.streams])
        request.tokens = np.array([self.serve_tokens(i) for i in request.ids], dtype=np.int64)
        return request.tokens

    def run(self, staged: list[list[int]]) -> np.ndarray:
        """The first token of each row (rows, 1): the cell's first call."""
        return self._finish(self._advance(self._open(staged, 1), 1))

    def to_numpy(self, output: np.ndarray) -> np.ndarray:
        return output

    def start(self, staged: list[list[int]]) -> EndpointRequest:
        return self._advance(self._open(staged, self.new_tokens), 1)

    def step(self, request: EndpointRequest) -> EndpointRequest:
        return self._advance(request, request.least() + 1)

    def generated(self, request: EndpointRequest) -> np.ndarray:
        return self._finish(request)

    def stream(self) -> Any:
        """None: the tokens arrive on the host, where each is timed."""
        return None

    def cache_bytes(self, request: EndpointRequest) -> int:
        """The KV cache the request's rows take at their longest, as the model lays it out (the server's own
        pool, and how it pages it, is not visible from the client)."""
        return len(request.ids) * (request.prompt + self.new_tokens) * self._kv_bytes_per_position

    def describe(self) -> dict[str, Any]:
        described = super().describe() | {"url": self.url, "model": self.model_name}
        if self.server is not None:
            # the command and the environment it ran in: enough to start the same server again (vllm_bench_serve.py)
            described |= {"server_command": " ".join(self.server.command), "server_environment": self.server.env,
                          "server_log": str(self.server.log)}  # fmt: skip
        return described


class StartedServer(EndpointEngine):
    """An endpoint engine whose server this process starts on loopback and stops at its end."""

    def server_command(self, folder: Path, port: int, example: dict[str, np.ndarray]) -> list[str]:
        raise NotImplementedError

    def saved_checkpoint(self, artifact: Path | None, lm: Any) -> Path:
        """The checkpoint saved for the server, once (``model_dir``), with its word vocabulary and no EOS."""
        folder = engine_files_dir(self.options.model_dir)  # type: ignore[attr-defined]
        folder = folder / f"{checkpoint_digest(artifact, self.impl)}-{self.precision}"

        def save(scratch: Path) -> Path:
            save_served_checkpoint(lm, scratch / "hf")
            return scratch / "hf"

        return made_once(folder, "tokenizer.json", save)

    def server_environment(self, folder: Path) -> dict[str, str]:
        return {}

    def serve(self, artifact: Path | None, lm: Any, example: dict[str, np.ndarray]) -> None:
        with self.cold_start("export"):
            folder = self.saved_checkpoint(artifact, lm)
        port = free_port()
        self.url, self.model_name = loopback_url(port), str(folder)
        log = self._log_folder() / f"{self.impl}-{port}.log"
        with self.cold_start("server_start"):
            self.server = ServerProcess(
                self.server_command(folder, port, example), self.url, log, self.server_environment(folder)
            )
            self.server.wait_healthy(float(self.options.start_timeout_s))

    def describe(self) -> dict[str, Any]:
        return super().describe() | {"server": "started on loopback by the cell's process, stopped at its end"}


class TransformersServe(StartedServer):
    """``transformers serve`` on loopback, the checkpoint preloaded, continuous batching where set."""

    options: TransformersServeOptions
    prompt_format = "words"  # its /v1/completions takes text only

    @classmethod
    def unavailable_reason(cls, device: str, precision: str) -> str | None:
        needed = ("fastapi", "uvicorn", "openai", "accelerate")  # transformers' `serving` extra
        missing = [name for name in needed if importlib.util.find_spec(name) is None]
        if missing:
            return (
                f"transformers serve needs {', '.join(missing)}, not installed here (`pip install "
                "'transformers[serving]'`)"
            )
        return super().unavailable_reason(device, precision)

    def server_command(self, folder: Path, port: int, example: dict[str, np.ndarray]) -> list[str]:
        dtype = SERVED_DTYPE[self.precision][0]
        command = [sys.executable, "-c", TRANSFORMERS_CLI, "serve", str(folder), "--device",
                   "cpu" if self.device == "cpu" else "cuda:0", "--dtype", dtype, "--host", "127.0.0.1",
                   "--port", str(port), "--log-level", "warning"]  # fmt: skip
        if self.options.continuous_batching:
            command.append("--continuous-batching")
        return command

    def server_environment(self, folder: Path) -> dict[str, str]:
        # the cell's threads, as the in-process engines run with (the server inherits this process's cores)
        return {"OMP_NUM_THREADS": str(self.threads)} if self.device == "cpu" else {}

    def describe(self) -> dict[str, Any]:
        import transformers

        return super().describe() | {"transformers": transformers.__version__}


class VllmServe(StartedServer):
    """``vllm serve`` on loopback with the engine arguments of the in-process vllm engine at this cell's shape."""

    options: VllmServeOptions
    prompt_format = "token_ids"

    def extra_body(self) -> dict[str, Any]:
        return {"ignore_eos": True, "return_token_ids": True}

    @classmethod
    def unavailable_reason(cls, device: str, precision: str) -> str | None:
        if importlib.util.find_spec("vllm") is None:
            return "vLLM is not installed here (`pip install vllm`: Linux, a CUDA GPU, its wheel's torch)"
        if shutil.which("vllm") is None and importlib.util.find_spec("vllm.entrypoints.cli") is None:
            return "vLLM's command-line entry point (vllm serve) is not installed here"
        return super().unavailable_reason(device, precision)

    def server_command(self, folder: Path, port: int, example: dict[str, np.ndarray]) -> list[str]:
        batch, prompt = example["input_ids"].shape
        from transformers import AutoConfig

        args = engine_arguments(AutoConfig.from_pretrained(folder), batch, prompt, self.new_tokens,
                                self.options, self.precision)  # fmt: skip
        self.engine_args = args
        command = [sys.executable, "-m", "vllm.entrypoints.cli.main", "serve", str(folder), "--host", "127.0.0.1",
                   "--port", str(port), "--dtype", args["dtype"], "--seed", str(args["seed"]),
                   "--max-model-len", str(args["max_model_len"]), "--max-num-seqs", str(args["max_num_seqs"]),
                   "--max-num-batched-tokens", str(args["max_num_batched_tokens"]),
                   "--gpu-memory-utilization", str(args["gpu_memory_utilization"]),
                   "--no-enable-prefix-caching", "--disable-log-stats"]  # fmt: skip
        return command + (["--enforce-eager"] if args["enforce_eager"] else [])

    def server_environment(self, folder: Path) -> dict[str, str]:
        # torch.compile's output kept beside the checkpoint for the next process (as the in-process engine)
        return {"VLLM_CACHE_ROOT": str(compile_cache_dir(folder).resolve()), "VLLM_NO_USAGE_STATS": "1"}

    def describe(self) -> dict[str, Any]:
        import vllm

        return super().describe() | {"vllm": vllm.__version__, "engine_args": getattr(self, "engine_args", None),
                                     "dtype": VLLM_DTYPE[self.precision][0]}  # fmt: skip


class NullEndpoint(StartedServer):
    """The null server (inferbench.engines.endpoint.null_server) in a process of its own: canned tokens at
    once. Its figures are the client's floor; its environment may ask it to misbehave (tests)."""

    prompt_format = "token_ids"
    tokens_unchecked = "the null server streams canned tokens, with no model behind them"

    def saved_checkpoint(self, artifact: Path | None, lm: Any) -> Path:
        folder = engine_files_dir("results/engines/null_endpoint")
        folder.mkdir(parents=True, exist_ok=True)
        return folder

    def server_command(self, folder: Path, port: int, example: dict[str, np.ndarray]) -> list[str]:
        return null_server_command(port)


def null_server_command(port: int) -> list[str]:
    return [sys.executable, "-m", "inferbench.engines.endpoint.null_server", "--port", str(port)]


class Endpoint(EndpointEngine):
    """A server already running at ``url``; this process neither starts nor stops it. It serves a model of its
    own: the workload's checkpoint gives the prompts' shape and the byte counts, and its tokens are not held
    to the checkpoint's."""

    options: UrlOptions
    tokens_unchecked = "a server at a URL serves a model of its own: its tokens are not held to the workload's"

    @property
    def prompt_format(self) -> str:  # type: ignore[override]
        return str(self.options.prompt_format)

    def extra_body(self) -> dict[str, Any]:
        extra: dict[str, Any] = {"ignore_eos": True} if self.options.ignore_eos else {}
        return extra | ({"return_token_ids": True} if self.prompt_format == "token_ids" else {})

    def serve(self, artifact: Path | None, lm: Any, example: dict[str, np.ndarray]) -> None:
        url = str(self.options.url).rstrip("/")
        # the config check refuses these first (catalog.engines.url_problem); a cell run by hand meets them here
        if (problem := url_problem(url)) is not None:
            raise ValueError(f"the endpoint engine's url: {problem}")
        if not is_loopback(url) and not self.options.allow_remote:
            raise ValueError(
                f"{url} is not on this machine: a remote server's figures include the network; set "
                "`allow_remote: true` in the variant to measure it anyway"
            )
        self.url, self.model_name = url, str(self.options.model)
        from inferbench.engines.endpoint.server import wait_healthy

        with self.cold_start("server_health"):
            wait_healthy(self.url, float(self.options.start_timeout_s))
