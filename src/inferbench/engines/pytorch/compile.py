"""torch.compile (Inductor); the compile happens in prepare, on the cell's shapes, and is timed.

Two ways to replay the compiled kernels from CUDA graphs: Inductor's own (modes ``reduce-overhead`` and
``max-autotune``: CUDA graph trees, which check on every call that the inputs and the recorded graph
still match), or with ``cuda_graph: true`` one graph of this engine's own around the compiled model (as
``torch_cudagraph`` captures the eager kernels): a call is one input copy and one replay, nothing
checked, which is what a launch-bound call such as BERT-base at batch 1 needs.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch._inductor.config

from inferbench.engines.pytorch import CUDA_GRAPH_MODES, TorchCompileOptions
from inferbench.engines.pytorch.cudagraph import REPLAY_DESCRIPTION, CapturedGraph
from inferbench.engines.pytorch.eager import TorchInference, to_fp8
from inferbench.models.registry import InputSpec

log = logging.getLogger(__name__)


def compile_module(target: Any, mode: str, **options: Any) -> Any:
    """``torch.compile(target, mode=mode, **options)`` (a module or a function), its kernels chosen in this
    process.

    A cell's processes share one compiler cache (inferbench.launch.processes): the later ones load the
    code the first one generated instead of generating it again. What moves between processes is which
    kernel configuration wins a benchmark: Triton's autotuning at the first calls, and in the
    max-autotune modes the choice among GEMM and convolution kernels made while compiling. So the
    autotuner's results are never read from the cache, and a max-autotune compile loads no compiled
    graph: each process benchmarks and chooses anew, and the cell's spread still shows those choices."""
    torch._inductor.config.autotune_local_cache = False
    torch._inductor.config.fx_graph_cache = not mode.startswith("max-autotune")
    return torch.compile(target, mode=mode, **options)


class TorchCompile(TorchInference):
    options: TorchCompileOptions

    graph = "inductor"
    captured: CapturedGraph | None = None  # with cuda_graph: true, once compiled

    @property
    def takes_any_batch(self) -> bool:
        return False  # compiled with dynamic=False: a new batch size compiles again, in the caller's time

    @property
    def stages_apart(self) -> bool:
        return False  # reduce-overhead's CUDA graphs are recorded per thread and stream: run where prepared

    def computation(self, workload_kind: str) -> dict[str, Any]:
        mode = self.options.mode
        computation = super().computation(workload_kind) | {
            # the mode names the graph's compilation; freezing is part of it (the graph's weights become constants)
            "compile_mode": f"{mode} + freezing" if self.options.freezing else mode,
            "cuda_graph": self.device == "cuda" and (mode in CUDA_GRAPH_MODES or self.options.cuda_graph),
        }
        if self.precision == "fp8":
            computation["precision_mode"] = f"torchao {self.options.fp8_scaling} scaling, bf16 elsewhere"
        return computation

    @property
    def run_description(self) -> str:  # type: ignore[override]
        return REPLAY_DESCRIPTION if self.options.cuda_graph else super().run_description

    def prepare(self, artifact: Path | None, inputs: tuple[InputSpec, ...], example: dict[str, np.ndarray]) -> None:
        self.mode = self.options.mode
        if self.options.cuda_graph and (self.device != "cuda" or self.mode in CUDA_GRAPH_MODES):
            raise ValueError(  # before loading anything: the variant is wrong, not this machine
                f"cuda_graph: true captures the compiled model in a CUDA graph of its own: it needs a cuda cell "
                f"and a mode without Inductor's graphs (default or max-autotune-no-cudagraphs), not {self.mode!r} "
                f"on {self.device}"
            )
        module = self._load(artifact, inputs)
        if self.precision == "fp8":  # bf16 weights, their linear layers swapped for torchao's fp8 ones
            self.fp8_layers = to_fp8(module, self.options.fp8_scaling)
        torch._inductor.config.freezing = self.options.freezing  # read when the first call compiles
        self.module = compile_module(module, self.mode, fullgraph=self.options.fullgraph, dynamic=False)
        staged = self.stage(example)
        log.info("compiling (mode %s) on the first calls", self.mode)
        with self.cold_start("compile"):  # the first calls compile (reduce-overhead also records a CUDA graph)
            for _ in range(3):
                self.run(staged)
            self.synchronize()
        log.info("compiled in %.1f s", self.cold_start_s["compile"])
        if self.options.cuda_graph:
            with self.cold_start("capture"):
                self.captured = CapturedGraph(self.forward, staged)

    def stage(self, batch: dict[str, Any]) -> dict[str, torch.Tensor]:
        staged = super().stage(batch)
        if self.captured is not None:
            self.captured.check_shapes(staged)
        return staged

    def run(self, staged: dict[str, torch.Tensor]) -> torch.Tensor:
        return self.captured.replay(staged) if self.captured is not None else self.forward(staged)

    def describe(self) -> dict[str, Any]:
        info = {**super().describe(), "mode": self.mode, "freezing": torch._inductor.config.freezing}
        return info | ({"graph": "compiled, captured once, replayed"} if self.captured is not None else {})
