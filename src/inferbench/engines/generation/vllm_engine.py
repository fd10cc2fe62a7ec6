"""vLLM, the engine many small LLMs are served with: the decoder's checkpoint saved in transformers'
layout and loaded by ``vllm.LLM`` (its own model code, paged KV cache, CUDA graphs for the decode step
unless ``enforce_eager``), requests driven through its ``LLMEngine`` one scheduler step at a time.

One step of vLLM's engine is one scheduler iteration: the prefill of newly added requests (the prompt
in, the first token out), or one decode token for every running request. So ``start`` adds the batch's
rows as requests and steps until each has its first token, and ``step`` steps until each has one more;
the tokens come back on the host with every step, as vLLM returns them to a server. That holds with
the engine core in this process (``VLLM_ENABLE_V1_MULTIPROCESSING=0``, set before vLLM is imported):
in its own process the core would run ahead of ``step`` calls, and the tokens of several iterations
could arrive at once. Prefix caching is off: the timed requests rotate through a few seeded prompts,
whose prefills a cache would skip.

vLLM returns log-probabilities, not logits: the parity call asks for the first token's over the whole
vocabulary, which equal the logits up to a constant per row (the check compares both centred).
Random-weight models have no tokenizer; vLLM takes token ids and is started without one.
"""

from __future__ import annotations

import importlib.util
import itertools
import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from inferbench.catalog.engines import engine_files_dir
from inferbench.engines.base import cuda_unavailable_reason
from inferbench.engines.generation.exports import ExportedDecoder, checkpoint_digest, made_once
from inferbench.models.registry import InputSpec

#: vLLM's dtype for each of our precisions, and the bytes of one weight
VLLM_DTYPE = {"fp16": ("float16", 2), "bf16": ("bfloat16", 2)}
#: scheduler steps a request may take to make one token before the engine is called stuck: a prefill
#: split into chunks takes several, a decode token one
MAX_STEPS_PER_TOKEN = 64


@dataclass
class VllmRequest:
    """The rows of one batch, each a vLLM request, with the tokens each has made so far."""

    ids: list[str]
    #: the prompt's length, in tokens
    prompt: int
    tokens: dict[str, list[int]] = field(default_factory=dict)

    def made(self) -> int:
        """Tokens every row has (the least of them)."""
        return min(len(self.tokens.get(i, ())) for i in self.ids)


class StepDriver:
    """Drives an ``LLMEngine``-like object (``add_request``, ``step``, ``abort_request``,
    ``has_unfinished_requests``) a scheduler step at a time, collecting each request's tokens."""

    def __init__(self, engine: Any) -> None:
        self.engine = engine
        self._numbers = itertools.count()
        self._open: set[str] = set()  # requests added and not finished

    def add(self, prompts: list[list[int]], params: Any) -> VllmRequest:
        if self.engine.has_unfinished_requests():  # a request left half-way (an interrupted warm-up)
            self.engine.abort_request(sorted(self._open))
        number = next(self._numbers)
        request = VllmRequest([f"{number}-{row}" for row in range(len(prompts))], len(prompts[0]))
        for request_id, prompt in zip(request.ids, prompts, strict=True):
            self.engine.add_request(request_id, {"prompt_token_ids": prompt}, params)
        self._open = set(request.ids)
        return request

    def until(self, request: VllmRequest, tokens: int) -> list[Any]:
        """Step until every row has ``tokens`` tokens; returns the outputs seen."""
        outputs = []
        for _ in range(MAX_STEPS_PER_TOKEN):
            if request.made() >= tokens:
                return outputs
            for output in self.engine.step():
                if output.request_id in self._open:
                    request.tokens[output.request_id] = list(output.outputs[0].token_ids)
                    outputs.append(output)
                    if output.finished:
                        self._open.discard(output.request_id)
        if request.made() < tokens:
            raise RuntimeError(f"vLLM made no token in {MAX_STEPS_PER_TOKEN} scheduler steps")
        return outputs


class Vllm(ExportedDecoder):
    graph = "vllm"
    run_description = (
        "the prefill through vLLM: the prompt's token ids in, the first token's log-probabilities over the "
        "vocabulary back on the host"
    )
    run_gives_log_probabilities = True

    @classmethod
    def unavailable_reason(cls, device: str, precision: str) -> str | None:
        if importlib.util.find_spec("vllm") is None:  # found without importing: vLLM's import is slow
            return (
                "vLLM is not installed here (`pip install vllm`: Linux, a CUDA GPU, and the torch version its "
                "wheel was built against; its CPU backend is a build of its own)"
            )
        if device == "cuda":
            return cuda_unavailable_reason()
        return None

    def prepare(self, artifact: Path | None, inputs: tuple[InputSpec, ...], example: dict[str, np.ndarray]) -> None:
        # the engine core in this process: one step() is one scheduler iteration (see the module's docstring)
        os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
        with self.cold_start("import_vllm"):  # here, not with the cell's libraries: after the line above
            from vllm import LLM, SamplingParams

        dtype, size = VLLM_DTYPE[self.precision]
        lm = self.load_decoder(artifact, size)
        self.vocab_size = int(lm.config.vocab_size)
        with self.cold_start("export"):
            folder = self._saved(artifact, lm)
        batch, prompt = example["input_ids"].shape
        max_model_len = prompt + self.new_tokens
        with self.cold_start("engine"):  # weights loaded, KV cache allocated, CUDA graphs captured
            self.llm = LLM(
                model=str(folder),
                skip_tokenizer_init=True,
                dtype=dtype,
                seed=0,
                max_model_len=max_model_len,
                max_num_seqs=batch,
                max_num_batched_tokens=max(batch * max_model_len, 2048),  # a batch's prefill in one step
                gpu_memory_utilization=float(self.options.gpu_memory_utilization),
                enforce_eager=bool(self.options.enforce_eager),
                enable_prefix_caching=False,
                max_logprobs=self.vocab_size,
                disable_log_stats=True,
            )
        self.driver = StepDriver(self.llm.llm_engine)
        greedy = {"temperature": 0.0, "detokenize": False, "ignore_eos": True}
        self.generate_params = SamplingParams(max_tokens=self.new_tokens, min_tokens=self.new_tokens, **greedy)
        self.logprob_params = SamplingParams(max_tokens=1, logprobs=self.vocab_size, **greedy)
        cache = getattr(self.llm.llm_engine, "cache_config", None) or self.llm.llm_engine.vllm_config.cache_config
        self.block_size = int(cache.block_size)

    def _saved(self, artifact: Path | None, lm: Any) -> Path:
        """The checkpoint in transformers' layout (config.json, safetensors) for vLLM to load, saved once."""
        folder = engine_files_dir(self.options.model_dir) / f"{checkpoint_digest(artifact, self.impl)}-{self.precision}"

        def save(scratch: Path) -> Path:
            lm.save_pretrained(scratch / "hf", safe_serialization=True)
            return scratch / "hf"

        return made_once(folder, "config.json", save)

    def stream(self) -> Any:
        """None: vLLM computes on streams of its own and hands every step's tokens to the host, so each
        token is timed on the host clock, where a server's caller sees it."""
        return None

    def stage(self, batch: dict[str, np.ndarray]) -> list[list[int]]:
        return [[int(t) for t in row] for row in batch["input_ids"]]  # vLLM takes host token ids

    def run(self, staged: list[list[int]]) -> np.ndarray:
        request = self.driver.add(staged, self.logprob_params)
        outputs = {o.request_id: o for o in self.driver.until(request, 1)}
        return np.stack([self._log_probabilities(outputs[i].outputs[0].logprobs[0]) for i in request.ids])

    def _log_probabilities(self, by_token: Any) -> np.ndarray:
        """One position's log-probabilities, vLLM's {token: Logprob} as an array over the vocabulary."""
        row = np.full(self.vocab_size, -math.inf, dtype=np.float32)
        for token, logprob in by_token.items():
            row[token] = logprob.logprob
        if not np.isfinite(row).all():
            got = len(by_token)
            raise RuntimeError(f"vLLM returned {got} log-probabilities of a {self.vocab_size}-token vocabulary")
        return row

    def start(self, staged: list[list[int]]) -> VllmRequest:
        request = self.driver.add(staged, self.generate_params)
        self.driver.until(request, 1)
        return request

    def step(self, request: VllmRequest) -> VllmRequest:
        self.driver.until(request, request.made() + 1)
        return request

    def generated(self, request: VllmRequest) -> np.ndarray:
        return np.array([request.tokens[i] for i in request.ids], dtype=np.int64)

    def cache_bytes(self, request: VllmRequest) -> int:
        """The KV cache blocks the request's rows occupy at their longest (vLLM reserves a pool up front,
        ``gpu_memory_utilization`` of the GPU, and hands blocks of ``block_size`` positions out of it)."""
        blocks = math.ceil((request.prompt + self.new_tokens) / self.block_size)
        return len(request.ids) * blocks * self.block_size * self._kv_bytes_per_position

    def computation(self, workload_kind: str) -> dict[str, Any]:
        eager = bool(self.options.enforce_eager)
        return super().computation(workload_kind) | {
            "precision_mode": "cast" if self.precision != "fp32" else None,
            "cuda_graph": self.device == "cuda" and not eager,
        }

    def describe(self) -> dict[str, Any]:
        import vllm

        return super().describe() | {"vllm": vllm.__version__}
