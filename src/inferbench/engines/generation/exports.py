"""Decoders handed to another runtime (ONNX Runtime GenAI, vLLM): the checkpoint loaded on the host for
the byte counts the roofline needs, and turned into the runtime's files once, then reused by every
process of a cell and every later cell of the same checkpoint, precision and device."""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from inferbench.engines.base import Engine, artifact_path
from inferbench.engines.generation import GenerationOptions
from inferbench.engines.generation.transformers import decode_read_bytes, kv_bytes_per_position, weight_bytes
from inferbench.machine.scratch import scratch_folder
from inferbench.models.registry import load_checkpoint


class ExportedDecoder(Engine):
    """A generation engine whose runtime holds the weights at ``element_size`` bytes each: ``load_decoder``
    reads the checkpoint and counts the bytes a step reads and a position of KV cache takes."""

    options: GenerationOptions

    def load_decoder(self, artifact: Path | None, element_size: int) -> Any:
        """The checkpoint's decoder (a transformers causal LM, on the host), its byte counts kept."""
        self.new_tokens = int(self.options.new_tokens)
        with self.cold_start("load_model"):
            spec, _ = load_checkpoint(artifact_path(artifact), "cpu")
        lm: Any = spec.module.model  # the wrapper's transformers causal LM
        self._weights, self._read = weight_bytes(lm, element_size), decode_read_bytes(lm, element_size)
        self._kv_bytes_per_position = kv_bytes_per_position(lm.config, element_size)
        return lm

    def to_numpy(self, output: np.ndarray) -> np.ndarray:
        return output

    def weight_bytes(self) -> int:
        return self._weights

    def decode_read_bytes(self) -> int:
        return self._read


def checkpoint_digest(artifact: Path | None, engine: str) -> str:
    """A short digest of the checkpoint's bytes: the export's folder name starts with it."""
    if artifact is None:
        raise ValueError(f"{engine} is prepared from the workload's checkpoint")
    return hashlib.sha256(Path(artifact).read_bytes()).hexdigest()[:16]


def made_once(folder: Path, marker: str, build: Callable[[Path], Path]) -> Path:
    """``folder``, unless a complete one (holding ``marker``) is there already: ``build(scratch)`` makes it
    inside a scratch folder beside it and returns where; it is moved into place whole, since another
    process may look meanwhile (the first to finish wins, the others' copies go)."""
    if (folder / marker).exists():
        return folder
    folder.parent.mkdir(parents=True, exist_ok=True)
    # named after this process: the scratch of a killed build (75 MB for ORT GenAI) goes with the next one here
    with scratch_folder(folder.parent, "export-") as scratch:
        built = build(Path(scratch))
        if not (built / marker).exists():
            raise RuntimeError(f"the export into {built} made no {marker}")
        try:
            os.replace(built, folder)
        except OSError:
            if not (folder / marker).exists():
                raise
    return folder
