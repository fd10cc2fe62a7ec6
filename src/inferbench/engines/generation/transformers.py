"""transformers decoders generating greedily, one token per step, with the model's own KV cache.

``start`` runs the prefill (the whole prompt, the cache filled) and picks the first token; ``step`` feeds
the last token and picks the next. Tokens are picked on the device (argmax) and stay there, so nothing
waits for the host between steps, as in a server's decode loop; ``generated`` brings them back.

Under load (a step-driven scenario: ``serve_add``, ``serve_step``, ``serve_busy``) the
requests go through transformers' own continuous batching (``model.init_continuous_batching``: a paged KV
cache, a FIFO scheduler that admits waiting requests between steps, prefills split to a token budget), stepped
one scheduler iteration per ``serve_step`` in the caller's thread rather than by its background thread, so
that the scenario times each token as the step that made it returns (``ServingBatcher``).
"""

from __future__ import annotations

import inspect
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import numpy as np
import torch

from inferbench.engines.generation import HfGenerateOptions, HfGenerateStaticOptions
from inferbench.engines.pytorch.compile import compile_module
from inferbench.engines.pytorch.eager import TorchEngine
from inferbench.models.registry import InputSpec


@dataclass
class Request:
    """One request being generated: its cache, attention mask and the tokens picked so far (on the device)."""

    cache: Any
    mask: torch.Tensor
    tokens: list[torch.Tensor] = field(default_factory=list)
    #: a static cache's next position to write, on the device where its decode step reads it: advanced in
    #: place, since a new tensor from the host would be a pageable copy, which waits for the GPU to finish
    #: the step before
    position: torch.Tensor | None = None


class HfGenerate(TorchEngine):
    options: HfGenerateOptions

    graph = "eager"
    run_description = "the prefill: the whole prompt through the model, the last position's logits"

    def prepare(self, artifact: Path | None, inputs: tuple[InputSpec, ...], example: dict[str, np.ndarray]) -> None:
        self.module = self._load(artifact, inputs)  # the prompt -> last-position logits wrapper (parity)
        self.lm: Any = self.module.model  # the wrapper's transformers causal LM
        self.new_tokens = int(self.options.new_tokens)
        # under load: the most requests running at once (the cell's batch) and its prompt length
        self.serve_shape = tuple(example["input_ids"].shape)
        self.batcher: ServingBatcher | None = None

    def run(self, staged: dict[str, torch.Tensor]) -> torch.Tensor:
        with torch.inference_mode(), self._autocast():
            return self.module(**staged)

    def _forward(self, input_ids: torch.Tensor, mask: torch.Tensor, cache: Any) -> torch.Tensor:
        """The next token of each row after ``input_ids`` (the cache updated in place)."""
        with torch.inference_mode(), self._autocast():
            out = self.lm(input_ids=input_ids, attention_mask=mask, past_key_values=cache, use_cache=True)
        return out.logits[:, -1, :].argmax(-1, keepdim=True)

    def _new_cache(self) -> Any:
        from transformers import DynamicCache

        try:  # transformers >= 4.56 lays the cache out per layer from the config
            return DynamicCache(config=self.lm.config)
        except TypeError:
            return DynamicCache()

    def start(self, staged: dict[str, torch.Tensor]) -> Request:
        """The prefill: the prompt through the model, its KV cache filled, the first token picked."""
        ids, mask = staged["input_ids"], staged["attention_mask"]
        request = Request(self._new_cache(), mask)
        request.tokens.append(self._forward(ids, mask, request.cache))
        return request

    def step(self, request: Request) -> Request:
        """One decode step: the last token in, the next one picked."""
        request.mask = torch.cat([request.mask, request.mask.new_ones(request.mask.shape[0], 1)], dim=1)
        token = self._forward(request.tokens[-1], request.mask, request.cache)
        request.tokens.append(token)
        return request

    def generated(self, request: Request) -> np.ndarray:
        """The request's tokens on the host, (batch, tokens)."""
        return torch.cat(request.tokens, dim=1).cpu().numpy()

    def cache_bytes(self, request: Request) -> int:
        """The KV cache's bytes (its tensors as allocated: a static cache's full length)."""
        seen: set[int] = set()
        total = 0
        for tensor in _tensors(request.cache):
            if tensor.data_ptr() not in seen:
                seen.add(tensor.data_ptr())
                total += tensor.numel() * tensor.element_size()
        return total

    def weight_bytes(self) -> int:
        return weight_bytes(self.lm)

    def decode_read_bytes(self) -> int:
        return decode_read_bytes(self.lm)

    # -- under load (a step-driven scenario) --

    @property
    def serve_graphs(self) -> bool:
        """Whether the continuous batcher replays its steps as CUDA graphs (here: no, eager kernels)."""
        return False

    @classmethod
    def serve_unavailable_reason(cls, device: str, precision: str) -> str | None:
        """Why this engine cannot serve under load on ``device`` at ``precision`` (None: it can)."""
        return None

    def _batcher(self) -> ServingBatcher:
        """The continuous batcher, made at the first request (a cell timed one request at a time never makes
        one): up to the cell's batch running at once, each up to twice the prompt and new tokens long (a
        length range ratio is below 1)."""
        if self.batcher is None:
            running, prompt = self.serve_shape
            positions = getattr(self.lm.config, "max_position_embeddings", None) or 2 * (prompt + self.new_tokens)
            longest = min(2 * (prompt + self.new_tokens), positions)
            self.batcher = ServingBatcher(self.lm, running, longest, self._autocast, graphs=self.serve_graphs)
        return self.batcher

    def serve_add(self, request_id: str, prompt: list[int], max_tokens: int) -> None:
        """A request waits for the scheduler: ``max_tokens`` greedy tokens after ``prompt``, no stop at EOS."""
        self._batcher().add(request_id, prompt, max_tokens)

    def serve_step(self) -> list[tuple[str, int, bool]]:
        """One scheduler iteration: waiting requests admitted as the cache allows, one forward pass over the
        running ones (prefill chunks and one decode token each); (request id, tokens made, finished) of each
        request that made a token."""
        return self._batcher().step()

    def serve_busy(self) -> bool:
        """Whether a request is waiting or running."""
        return self.batcher is not None and self.batcher.busy()

    def serve_tokens(self, request_id: str) -> list[int]:
        """The tokens a finished request made (forgotten once read)."""
        return self._batcher().tokens(request_id)

    def serve_close(self) -> None:
        """The model's own attention back, for the cell's calls after serving (the batcher's is paged)."""
        if self.batcher is not None:
            self.batcher.close()
            self.batcher = None


class ServingBatcher:
    """transformers' continuous batching stepped by hand: the manager ``init_continuous_batching`` makes,
    its batch processor made once and driven one ``prepare_next_batch`` / forward / ``update_batch`` at a
    time (what its background thread's loop does), synchronously: no double-buffered async batching, no
    prefix sharing (every prompt is new, as vLLM's cells run without a prefix cache), SDPA kept rather than
    switched to flash attention (as the engine's other cells). The cache holds ``running`` sequences of
    ``longest`` tokens in pages of PAGE_SIZE; a forward takes at most MAX_BATCH_TOKENS tokens, so a longer
    prefill is split over steps (vLLM's chunked prefill). ``graphs``: CUDA graphs of the steps (a GPU).

    At most ``running`` requests are in transformers' scheduler at once; the others wait here, in arrival
    order, and one is admitted between steps as soon as one finishes (vLLM's ``max_num_seqs``). transformers'
    own limit is per forward, not per running request: given every request, it admitted them all into a
    cache sized for ``running``, stepped a few of them at a time and evicted others to prefill them again
    (on 2 CPU cores, TPOT grew 15x and throughput fell 11x at a load the cell's capacity run served)."""

    #: tokens per page of the paged KV cache
    PAGE_SIZE = 64
    #: tokens one forward pass takes at most, prefill chunks and decode tokens together (vLLM's
    #: max_num_batched_tokens of 2,048 where its chunked prefill is on)
    MAX_BATCH_TOKENS = 2048

    def __init__(self, lm: Any, running: int, longest: int, autocast: Any, graphs: bool = False) -> None:
        from transformers import ContinuousBatchingConfig, GenerationConfig

        self.attention = lm.config._attn_implementation  # the model's own, put back by close()
        pages = -(-longest // self.PAGE_SIZE)
        config = ContinuousBatchingConfig(
            num_blocks=running * pages + 1,
            max_batch_tokens=max(self.MAX_BATCH_TOKENS, running),
            max_requests_per_batch=running,
            allow_block_sharing=False,
            use_async_batching=False,
            use_cuda_graph=graphs,
            **_across_versions(ContinuousBatchingConfig, lm, self.PAGE_SIZE),
        )
        # greedy, and no EOS: every request makes the tokens it asks for
        generation = GenerationConfig(do_sample=False, eos_token_id=-1, pad_token_id=0)
        self.lm, self.autocast, self.running = lm, autocast, running
        self.manager = lm.init_continuous_batching(generation_config=generation, continuous_batching_config=config)
        self.processor = self.manager._create_batch_processor()
        self.manager.batch_processor = self.processor
        self.waiting: deque[tuple[str, list[int], int]] = deque()
        self.admitted: set[str] = set()
        self.finished: dict[str, list[int]] = {}

    def add(self, request_id: str, prompt: list[int], max_tokens: int) -> None:
        self.waiting.append((request_id, list(prompt), max_tokens))

    def busy(self) -> bool:
        return bool(self.waiting or self.admitted)

    def step(self) -> list[tuple[str, int, bool]]:
        while self.waiting and len(self.admitted) < self.running:
            request_id, prompt, max_tokens = self.waiting.popleft()
            self.manager.add_request(
                prompt, request_id=request_id, max_new_tokens=max_tokens, streaming=True, eos_token_id=-1
            )
            self.admitted.add(request_id)
        with torch.inference_mode(), self.autocast():
            if self.processor.prepare_next_batch():
                self.processor._generation_step(self.lm)
                self.processor.update_batch()
        progress: dict[str, tuple[int, bool]] = {}
        outputs = self.manager.output_router.output_queue
        while not outputs.empty():
            output = outputs.get_nowait()
            if getattr(output, "error", None):
                raise RuntimeError(f"continuous batching failed request {output.request_id}: {output.error}")
            finished = output.is_finished()
            progress[output.request_id] = (len(output.generated_tokens), finished)
            if finished:
                self.finished[output.request_id] = list(output.generated_tokens)
                self.admitted.discard(output.request_id)
        return [(request_id, made, finished) for request_id, (made, finished) in progress.items()]

    def tokens(self, request_id: str) -> list[int]:
        return self.finished.pop(request_id)

    def close(self) -> None:
        """The model's attention as it was before batching (transformers puts it back only when its manager
        stops a background thread, and this one ran none)."""
        if self.lm.config._attn_implementation != self.attention:
            self.lm.set_attn_implementation(self.attention)


def _across_versions(config_class: type, lm: Any, page_size: int) -> dict[str, Any]:
    """The continuous-batching settings whose names changed after transformers 5.17 (the GPU machine's): the
    page's size (``block_size`` then), and SDPA kept. 5.17 has no ``auto_switch_to_flash``; it keeps an
    attention implementation already paged, as its own warning advises."""
    accepted = inspect.signature(config_class).parameters
    settings: dict[str, Any] = {"page_size" if "page_size" in accepted else "block_size": page_size}
    if "auto_switch_to_flash" in accepted:
        settings["auto_switch_to_flash"] = False
    elif "paged|" not in lm.config._attn_implementation:
        lm.set_attn_implementation(f"paged|{lm.config._attn_implementation}")
    return settings


def weight_bytes(lm: torch.nn.Module, element_size: int | None = None) -> int:
    """The weights' bytes in memory (at ``element_size`` bytes each, where another runtime holds them)."""
    return sum(p.numel() * (element_size or p.element_size()) for p in lm.parameters())


def decode_read_bytes(lm: Any, element_size: int | None = None) -> int:
    """The weights' bytes a decode step reads: all of them but the input embedding table, of which a step
    reads one row per token (unless it is tied to the output layer, which reads it whole)."""
    total = weight_bytes(lm, element_size)
    embedding = lm.get_input_embeddings().weight
    output = lm.get_output_embeddings()
    if output is not None and output.weight.data_ptr() == embedding.data_ptr():
        return total  # tied: parameters() lists it once, and the output layer reads all of it
    return total - embedding.numel() * (element_size or embedding.element_size())


def kv_bytes_per_position(config: Any, element_size: int) -> int:
    """The KV cache's bytes for one position of one sequence: keys and values of every layer's KV heads."""
    heads = getattr(config, "num_key_value_heads", None) or config.num_attention_heads
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
    return 2 * config.num_hidden_layers * heads * head_dim * element_size


def _tensors(cache: Any) -> list[torch.Tensor]:
    """The key and value tensors of a transformers cache, whatever its version lays them out as."""
    layers = getattr(cache, "layers", None)
    if layers is not None:  # transformers >= 4.56: one object per layer
        return [t for layer in layers for t in (getattr(layer, "keys", None), getattr(layer, "values", None))
                if isinstance(t, torch.Tensor)]  # fmt: skip
    return [
        t for t in [*getattr(cache, "key_cache", []), *getattr(cache, "value_cache", [])] if isinstance(t, torch.Tensor)
    ]


class HfGenerateStatic(HfGenerate):
    """A static KV cache (allocated once, for the prompt and every new token, and reset per request) and
    the decode step compiled, as transformers documents for fast generation: positions come from
    ``cache_position``, no attention mask (prompts are unpadded); with ``mode: reduce-overhead`` on a GPU
    the step is a replayed CUDA graph, whose output is cloned before the next replay overwrites it."""

    options: HfGenerateStaticOptions

    graph = "compiled"

    # under load: transformers' continuous batching with its steps replayed as CUDA graphs (the static cache and
    # the compiled step are the one-request path's), which a GPU has
    @property
    def serve_graphs(self) -> bool:
        return True

    @classmethod
    def serve_unavailable_reason(cls, device: str, precision: str) -> str | None:
        if device != "cuda":
            return (
                "under load the static engine replays transformers' continuous batching steps as CUDA graphs, which "
                "need a GPU; on the CPU its steps under torch.compile recompiled through the timed runs (the "
                "capacity run measured below the load it served later), and its eager steps are hf_generate's"
            )
        return None

    def prepare(self, artifact: Path | None, inputs: tuple[InputSpec, ...], example: dict[str, np.ndarray]) -> None:
        super().prepare(artifact, inputs, example)
        batch, prompt = example["input_ids"].shape
        self.static_cache = self._static_cache(batch, prompt + self.new_tokens)
        self.decode = compile_module(self._decode_step, self.options.mode, fullgraph=True)
        with self.cold_start("compile"):  # every shape the cell will meet, compiled before any timing
            for _ in range(2):
                request = self.start(self.stage(example))
                for _ in range(self.new_tokens - 1):
                    self.step(request)
            self.synchronize()

    def computation(self, workload_kind: str) -> dict[str, Any]:
        return super().computation(workload_kind) | {"compile_mode": self.options.mode}

    def _static_cache(self, batch: int, length: int) -> Any:
        from transformers import StaticCache

        try:  # transformers >= 4.56: sized and placed on first use
            return StaticCache(config=self.lm.config, max_cache_len=length)
        except TypeError:  # older: sized and placed up front
            dtype = self.low_dtype if self.precision_mode == "cast" and self.low_dtype is not None else torch.float32
            return StaticCache(
                config=self.lm.config, max_batch_size=batch, max_cache_len=length, device=self.device, dtype=dtype
            )

    def start(self, staged: dict[str, torch.Tensor]) -> Request:
        ids = staged["input_ids"]
        request = Request(self.static_cache, staged["attention_mask"])
        positions = torch.arange(ids.shape[1], device=ids.device)
        with torch.inference_mode(), self._autocast():
            self.static_cache.reset()  # its tensors were made in inference mode
            logits = self.lm(input_ids=ids, past_key_values=self.static_cache, cache_position=positions).logits
        request.tokens.append(logits[:, -1, :].argmax(-1, keepdim=True))
        request.position = positions[-1:] + 1  # made on the device: nothing waits for the GPU
        return request

    def _decode_step(self, token: torch.Tensor, position: torch.Tensor) -> torch.Tensor:
        logits = self.lm(input_ids=token, past_key_values=self.static_cache, cache_position=position).logits
        return logits[:, -1, :].argmax(-1, keepdim=True)

    def step(self, request: Request) -> Request:
        if self.device == "cuda":
            torch.compiler.cudagraph_mark_step_begin()  # the previous replay's output has been consumed
        with torch.inference_mode(), self._autocast():
            token = self.decode(request.tokens[-1], request.position)
        request.tokens.append(token.clone())  # the graph's output buffer is overwritten by the next replay
        cast(torch.Tensor, request.position).add_(1)  # queued after the replay, which copied it into its input
        return request
