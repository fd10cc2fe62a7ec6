"""transformers decoders generating greedily, one token per step, with the model's own KV cache.

``start`` runs the prefill (the whole prompt, the cache filled) and picks the first token; ``step`` feeds
the last token and picks the next. Tokens are picked on the device (argmax) and stay there, so nothing
waits for the host between steps, as in a server's decode loop; ``generated`` brings them back.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

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
    graph = "eager"
    run_description = "the prefill: the whole prompt through the model, the last position's logits"

    def prepare(self, artifact: Path | None, inputs: tuple[InputSpec, ...], example: dict[str, np.ndarray]) -> None:
        self.module = self._load(artifact, inputs)  # the prompt -> last-position logits wrapper (parity)
        self.lm = self.module.model
        self.new_tokens = int(self.options.new_tokens)

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


def weight_bytes(lm: torch.nn.Module, element_size: int | None = None) -> int:
    """The weights' bytes in memory (at ``element_size`` bytes each, where another runtime holds them)."""
    return sum(p.numel() * (element_size or p.element_size()) for p in lm.parameters())


def decode_read_bytes(lm: torch.nn.Module, element_size: int | None = None) -> int:
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

    graph = "compiled"

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
        request.position.add_(1)  # queued after the replay, which copied it into its own input
        return request
