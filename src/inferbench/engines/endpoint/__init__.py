"""Endpoint engines: a decoder behind an OpenAI-compatible server, driven through streamed ``/v1/completions``
requests, as ``vllm bench serve``, AIPerf or guidellm drive one.

The cell's process starts the server on loopback (``transformers serve`` on the CPU, ``vllm serve`` on a GPU,
or the null server, which streams canned tokens at once: the client's own floor), waits for its health, and
stops it when it ends; or it sends to a server already running at a URL (``endpoint``). Every request asks for
exactly its tokens (EOS ignored), and the server's count is checked against what was asked and streamed. The
engine sends one request per row of a batch at once, or each request when a scenario sends it (at a rate, many
in flight), each timed as its events arrive. The code is in this package's modules, imported only when a cell runs.
"""

from dataclasses import dataclass

from inferbench.catalog.engines import EngineInfo, option
from inferbench.engines.generation import GenerationOptions, VllmOptions


@dataclass(frozen=True)
class EndpointOptions(GenerationOptions):
    """What every endpoint engine takes: how long its server may take to become healthy."""

    start_timeout_s: float = option(
        600.0, "seconds a server may take to answer /health with 200 (vLLM's start compiles: a minute or more)",
        minimum=1,
    )  # fmt: skip


@dataclass(frozen=True)
class TransformersServeOptions(EndpointOptions):
    continuous_batching: bool = option(
        True, "transformers serve --continuous-batching: requests batched as they arrive (else one at a time)"
    )
    model_dir: str = option(
        "results/engines/transformers_serve", "where the checkpoint is saved for the server to load",
        engine_folder=True,
    )  # fmt: skip


@dataclass(frozen=True)
class VllmServeOptions(EndpointOptions, VllmOptions):
    model_dir: str = option(
        "results/engines/vllm_serve", "where the checkpoint is saved for the server to load", engine_folder=True
    )


@dataclass(frozen=True)
class UrlOptions(EndpointOptions):
    url: str = option("", "the running server's base URL, such as http://127.0.0.1:8000", url_remote_by="allow_remote")
    model: str = option("", "the model name to send with each request (the server's /v1/models lists it)")
    prompt_format: str = option(
        "token_ids", "how prompts are sent: token ids, or words of the project's word vocabulary",
        ("token_ids", "words"),
    )  # fmt: skip
    ignore_eos: bool = option(True, "send ignore_eos (vLLM, SGLang): every request makes its max_tokens")
    allow_remote: bool = option(False, "allow a URL that is not on this machine (loopback)")


#: what every endpoint engine has in common, beside its own description and options
_COMMON = {
    "mode": "generate",
    "workload_kinds": ("decoder",),
    "libraries": ("torch", "transformers", "aiohttp"),
}

ENGINES = {
    "transformers_serve": EngineInfo(
        "inferbench.engines.endpoint.engine:TransformersServe",
        ("cpu", "cuda"),
        ("fp32", "fp16", "bf16"),
        "checkpoint",
        "transformers serve (FastAPI, its continuous batching) started on loopback with the checkpoint and a word "
        "vocabulary saved for it, no EOS; streamed /v1/completions requests",
        options_type=TransformersServeOptions,
        **_COMMON,  # type: ignore[arg-type]
    ),
    "vllm_serve": EngineInfo(
        "inferbench.engines.endpoint.engine:VllmServe",
        ("cuda",),
        ("fp16", "bf16"),
        "checkpoint",
        "vllm serve (its OpenAI-compatible front end) started on loopback with the engine arguments of the "
        "in-process vllm engine; streamed /v1/completions requests with token-id prompts, EOS ignored",
        options_type=VllmServeOptions,
        **_COMMON,  # type: ignore[arg-type]
    ),
    "null_endpoint": EngineInfo(
        "inferbench.engines.endpoint.engine:NullEndpoint",
        ("cpu", "cuda"),
        ("fp32", "fp16", "bf16"),
        "checkpoint",
        "the null server: canned tokens streamed at once, no model behind them; the client's own floor",
        options_type=EndpointOptions,
        **_COMMON,  # type: ignore[arg-type]
    ),
    "endpoint": EngineInfo(
        "inferbench.engines.endpoint.engine:Endpoint",
        ("cpu", "cuda"),
        ("fp32", "fp16", "bf16"),
        "checkpoint",
        "a server already running at a URL (on this machine unless allow_remote): streamed /v1/completions "
        "requests; the workload's checkpoint gives the byte counts and the reference tokens",
        options_type=UrlOptions,
        **_COMMON,  # type: ignore[arg-type]
    ),
}
