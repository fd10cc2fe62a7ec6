"""ONNX Runtime GenAI (``onnxruntime-genai``): the decoder exported by its own model builder
(``onnxruntime_genai.models.builder``, from the checkpoint's weights saved in transformers' layout) and
generated with its ``Generator``, greedy, on the CPU or CUDA.

The builder wants a tokenizer beside the weights; random-weight models have none, so a word-level one
over the model's vocabulary stands in (ids in, ids out: nothing is ever tokenized). The export is made
once per checkpoint, precision and device, under ``model_dir``, and reused by the cell's other processes.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from inferbench.catalog.engines import engine_files_dir
from inferbench.engines.generation import OrtGenAIOptions
from inferbench.engines.generation.exports import ExportedDecoder, checkpoint_digest, made_once
from inferbench.models.registry import InputSpec

#: the builder's precision for each of ours, and the bytes of one weight
BUILDER_PRECISION = {"fp32": ("fp32", 4), "fp16": ("fp16", 2), "bf16": ("bf16", 2)}


@dataclass
class GenAIRequest:
    generator: Any
    prompt: int


class OrtGenAI(ExportedDecoder):
    options: OrtGenAIOptions

    graph = "onnx"
    run_description = "the prefill through ONNX Runtime GenAI: the prompt appended, the last position's logits"

    @classmethod
    def unavailable_reason(cls, device: str, precision: str) -> str | None:
        try:
            import onnxruntime_genai as og
        except ImportError as error:
            return f"onnxruntime-genai is not installed here ({error}); pyproject.toml declares it"
        if device == "cuda" and not og.is_cuda_available():
            return "this onnxruntime-genai build has no CUDA (install onnxruntime-genai-cuda)"
        if device == "cpu" and precision == "bf16":
            # seen with onnxruntime 1.31: "Could not find an implementation for Where(16)" on the builder's graph
            return (
                "ONNX Runtime's CPU provider has no bf16 kernels for nodes of the model builder's bf16 graph "
                "(Where, in its attention-mask subgraph): bf16 through ONNX Runtime GenAI needs the CUDA provider"
            )
        return None

    def prepare(self, artifact: Path | None, inputs: tuple[InputSpec, ...], example: dict[str, np.ndarray]) -> None:
        import onnxruntime_genai as og

        _, size = BUILDER_PRECISION[self.precision]
        lm = self.load_decoder(artifact, size)
        with self.cold_start("export"):
            folder = self._export(artifact, lm)
        genai_config = og.Config(str(folder))
        genai_config.clear_providers()
        if self.device == "cuda":
            genai_config.append_provider("cuda")
        elif self.threads > 0:
            threads = {"intra_op_num_threads": self.threads, "inter_op_num_threads": 1}
            genai_config.overlay(json.dumps({"model": {"decoder": {"session_options": threads}}}))
        self.model = og.Model(genai_config)

    def _export(self, artifact: Path | None, lm: Any) -> Path:
        """The builder's export of this checkpoint at this precision and device (made once, then reused)."""
        precision, _ = BUILDER_PRECISION[self.precision]
        folder = (
            engine_files_dir(self.options.model_dir)
            / f"{checkpoint_digest(artifact, self.impl)}-{precision}-{self.device}"
        )

        def build(scratch: Path) -> Path:
            weights, built = scratch / "hf", scratch / "onnx"
            lm.save_pretrained(weights)
            _stand_in_tokenizer(lm.config.vocab_size).save_pretrained(weights)
            command = [sys.executable, "-m", "onnxruntime_genai.models.builder", "-i", str(weights), "-o", str(built),
                       "-p", precision, "-e", self.device, "-c", str(scratch / "cache")]  # fmt: skip
            done = subprocess.run(command, capture_output=True, text=True, env={**os.environ, "HF_HUB_OFFLINE": "1"})
            if done.returncode != 0 or not (built / "genai_config.json").exists():
                raise RuntimeError(f"onnxruntime-genai's model builder failed: {done.stderr.strip()[-800:]}")
            return built

        return made_once(folder, "genai_config.json", build)

    def stage(self, batch: dict[str, np.ndarray]) -> np.ndarray:
        return np.ascontiguousarray(batch["input_ids"], dtype=np.int32)  # the generator takes host ids

    def _generator(self, ids: np.ndarray) -> Any:
        import onnxruntime_genai as og

        params = og.GeneratorParams(self.model)
        params.set_search_options(max_length=ids.shape[1] + self.new_tokens, do_sample=False, batch_size=ids.shape[0])
        generator = og.Generator(self.model, params)
        generator.append_tokens(ids)  # the prefill
        return generator

    def run(self, staged: np.ndarray) -> np.ndarray:
        return self._generator(staged).get_logits()[:, -1, :].astype(np.float32)

    def start(self, staged: np.ndarray) -> GenAIRequest:
        request = GenAIRequest(self._generator(staged), staged.shape[1])
        return self.step(request)  # the first token is picked from the prefill's logits

    def step(self, request: GenAIRequest) -> GenAIRequest:
        request.generator.generate_next_token()
        request.generator.get_next_tokens()  # the token on the host: the step is done (on a GPU too)
        return request

    def generated(self, request: GenAIRequest) -> np.ndarray:
        rows = request.generator.get_next_tokens().shape[0]
        sequences = [np.asarray(request.generator.get_sequence(row)) for row in range(rows)]
        return np.stack(sequences)[:, request.prompt :]

    def cache_bytes(self, request: GenAIRequest) -> int:
        """The KV cache GenAI allocates: every position up to the request's longest, for each row."""
        rows = request.generator.get_next_tokens().shape[0]
        return rows * (request.prompt + self.new_tokens) * self._kv_bytes_per_position


def _stand_in_tokenizer(vocab_size: int) -> Any:
    """A word-level tokenizer over ``vocab_size`` ids, for a builder that needs one beside the weights."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    tokenizer = Tokenizer(models.WordLevel(vocab={f"t{i}": i for i in range(vocab_size)}, unk_token="t0"))
    tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
    return PreTrainedTokenizerFast(tokenizer_object=tokenizer, unk_token="t0", bos_token="t1", eos_token="t2")
