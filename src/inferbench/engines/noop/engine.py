"""The no-op engine: returns a constant, so the harness's own overhead can be measured (as LoadGen's
``backend_null``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from inferbench.engines.base import Engine, cuda_unavailable_reason
from inferbench.models.registry import InputSpec


class NoopEngine(Engine):
    computes = False
    run_description = "returns a constant without any work: what remains is the harness's own per-call overhead"

    @classmethod
    def unavailable_reason(cls, device: str, precision: str) -> str | None:
        return cuda_unavailable_reason() if device == "cuda" else None

    def stream(self) -> Any:
        """None: it queues no GPU work, so its calls are timed on the host clock, on the GPU too."""
        return None

    def prepare(self, artifact: Path | None, inputs: tuple[InputSpec, ...], example: dict[str, np.ndarray]) -> None:
        self._output = np.zeros(1, dtype=np.float32)

    def stage(self, batch: dict[str, np.ndarray]) -> Any:
        return batch

    def run(self, staged: Any) -> Any:
        return self._output

    def to_numpy(self, output: Any) -> np.ndarray:
        return np.asarray(output, dtype=np.float32)
