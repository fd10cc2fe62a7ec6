"""The engine interface. Engines prepare, stage inputs and run; they never time themselves."""

from __future__ import annotations

import time
from abc import ABC, abstractmethod
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from inferbench.catalog.engines import COMPUTATION_KEYS, EngineOptions
from inferbench.catalog.targets import load_target
from inferbench.engines.registry import engine_info
from inferbench.models.registry import InputSpec

#: cold-start steps that compile into caches the cell's later processes load: torch.compile's, and vLLM's beside
#: its checkpoint where its engine start made it. A process that ran one primes the cell: its timing is left out
#: (inferbench.launch.processes.primes). Not TensorRT's ``build``: built in a job of its own, every process loads it.
PRIMING_STEPS: tuple[str, ...] = ("compile",)


def compiled_for_others(cold_start_s: Mapping[str, float]) -> bool:
    """Whether a process's cold start (its steps, seconds each) ran a step of ``PRIMING_STEPS``: it primes the cell."""
    return any(step in cold_start_s for step in PRIMING_STEPS)


def artifact_path(artifact: Path | None) -> Path:
    """The file an engine is prepared from, which the workflow always gives an engine that needs one."""
    if artifact is None:
        raise ValueError("this engine is prepared from a file (a checkpoint or an ONNX export), and none was given")
    return artifact


class Engine(ABC):
    """One way of executing a model. It knows nothing of timing: a scenario (inferbench.scenarios)
    decides how its calls are timed.

    Life cycle, driven by the scenario's runner: ``unavailable_reason`` (class-level, cheap), ``prepare``
    (load, export, compile, capture: cold start; it gets an example batch of the cell's shape),
    ``stage`` (put inputs where the engine computes), then ``run`` repeatedly, each followed by
    ``synchronize``. What an engine says of itself, for the scenario to use: ``stream()`` (the CUDA
    stream its work is queued on), ``staged_on_device`` (whether ``stage`` leaves the inputs on the
    device), ``run_description`` (what one ``run`` does).
    """

    #: how the model is executed (a column of the summary: see ``computation``)
    graph: ClassVar[str] = "none"
    #: False for engines that return a constant: no output parity check applies
    computes: ClassVar[bool] = True
    #: whether ``run`` returns log-probabilities (the logits up to a constant per row, as a serving engine
    #: hands them out) rather than logits: the parity check then compares both centred
    run_gives_log_probabilities: ClassVar[bool] = False
    #: whether ``run`` returns the next tokens, not scores (a server's endpoint): no logits to compare; the
    #: scenarios of a decoder compare the tokens it generates with FP32 eager's instead
    run_gives_tokens: ClassVar[bool] = False
    #: what one ``run()`` does, in words (the record's boundary descriptions quote it)
    run_description: str = "one forward pass on the staged inputs; the output stays where it was computed"

    def __init__(self, device: str, precision: str, threads: int, variant: dict[str, Any]) -> None:
        self.device, self.precision, self.threads = device, precision, threads
        #: the engine's name in the registry (the variant's ``engine``); its class says no name of its own,
        #: so that a class and its registry entry cannot disagree
        self.impl: str = variant["engine"]
        info = engine_info(self.impl)
        if load_target(info.target) is not type(self):
            raise TypeError(f"{type(self).__name__} is not the class of engine {self.impl!r} ({info.target})")
        #: the variant's options, typed, the engine's declared defaults filled in (inferbench.catalog.engines)
        self.options: EngineOptions = info.typed_options(variant)
        #: named cold-start costs measured inside prepare (compile, capture, build...), in seconds
        self.cold_start_s: dict[str, float] = {}
        #: the workload's processed dataset, set by the runner for engines that need it (before prepare)
        self.dataset: Path | None = None

    @property
    def takes_any_batch(self) -> bool:
        """Whether ``run`` serves any batch size as fast as the one it was prepared for. False for
        engines fixed to their prepared shapes (a captured CUDA graph, a compiled or built engine), which
        a scenario serving batches of any size prepares at a ladder of batch sizes."""
        return True

    @property
    def stages_apart(self) -> bool:
        """Whether ``stage`` may run on another thread and CUDA stream while ``run`` computes the previous
        batch: it copies into fresh buffers and waits only for its own stream. A scenario that serves
        batches may then overlap the next batch's copy in with this one's compute."""
        return False

    @property
    def overlaps_copies(self) -> bool:
        """Whether end-to-end calls run as a server's pipelined loop: the next batch staged on a CUDA stream
        of its own while this one computes, in the same thread (inferbench.scenarios.single.measure). An option
        of the engines that take it (``host_overlap``)."""
        return False

    @property
    def staged_on_device(self) -> bool:
        """Whether ``stage`` leaves the inputs on a device apart from the host, where ``run`` computes: then
        a call is timed at two boundaries, the device's compute and end to end (inferbench.scenarios.single.measure).
        False on the CPU, whose inputs never leave the host: its two boundaries differed by a cast or a
        layout change at most, their noise made one read below the other, and timing both doubled a cell's
        calls (a p99 cell's 100 became 200: BERT-base b8 s384 on 4 threads, 6 minutes). False as well for
        engines whose ``run`` takes host arrays."""
        return self.device == "cuda"

    def stream(self) -> Any:
        """The CUDA stream (a ``torch.cuda.Stream``) the engine queues its work on: GPU events recorded
        on it bracket a call's device work. PyTorch's current stream by default; None on the CPU."""
        if self.device != "cuda":
            return None
        import torch

        return torch.cuda.current_stream()

    @classmethod
    def unavailable_reason(cls, device: str, precision: str) -> str | None:
        """Why this engine cannot run here with this device and precision, or None if it can."""
        return None

    @abstractmethod
    def prepare(self, artifact: Path | None, inputs: tuple[InputSpec, ...], example: dict[str, np.ndarray]) -> None:
        """Load the model from ``artifact`` and get ready to run batches shaped like ``example``."""

    def host_batches(self, batches: list[dict[str, np.ndarray]]) -> list[dict[str, Any]]:
        """The seeded host batches as this engine's caller holds them before a call (``stage`` takes
        them): as drawn by default; an engine with options of its own (pinned memory, the model's dtype)
        converts them here, once, before any timed call."""
        return batches

    @abstractmethod
    def stage(self, batch: dict[str, np.ndarray]) -> Any:
        """Move host inputs to where the engine computes; the result is what ``run`` takes."""

    @abstractmethod
    def run(self, staged: Any) -> Any:
        """Compute once on staged inputs. May return before the device has finished."""

    def close(self) -> None:  # noqa: B027  (most engines start nothing outside their process)
        """Stop what ``prepare`` started outside this process (a server and its children): called once the
        cell's process is done with the engine, whether it measured or failed."""

    def synchronize(self) -> None:  # noqa: B027  (a no-op is right for engines that compute synchronously)
        """Block until all work issued by ``run`` has finished."""

    @abstractmethod
    def to_numpy(self, output: Any) -> np.ndarray:
        """The output as a host float32 array (for parity checks; never timed)."""

    def profile(self, batch: dict[str, np.ndarray], n_calls: int, out_dir: Path, top: int) -> dict[str, Any]:
        """Profile ``n_calls`` warm calls on ``batch``, write the trace into ``out_dir`` and return the
        top operators (see inferbench.trackers.profiling). torch.profiler by default: it sees PyTorch's
        operators and, on CUDA, the kernels of any library in the process."""
        from inferbench.trackers.profiling import torch_profile

        staged = self.stage(batch)
        return torch_profile(lambda: self.run(staged), self.synchronize, n_calls, out_dir, self.device, top)

    def attention_kernel(self, staged: Any) -> dict[str, str | None]:
        """Which attention kernel a call on ``staged`` runs (inferbench.trackers.attention) and how that
        was found; called once after the timed calls (it may run a profiler). None for engines that do not say."""
        return {"kernel": None, "source": None}

    def describe(self) -> dict[str, Any]:
        """Versions and the provider or device actually in use."""
        return {"impl": self.impl, "options": self.options.as_dict()}

    def computation(self, workload_kind: str) -> dict[str, Any]:
        """What changes the computation, one key per summary column (``COMPUTATION_KEYS``), from the
        engine's settings alone (no preparation needed): how the model runs (``graph``: eager,
        torchscript, inductor, cuda_graph, onnxruntime, tensorrt), how a low precision is reached
        (``precision_mode``), channels-last, the compile mode, whether a CUDA graph replays the
        work, IO binding, TF32 math for fp32. None where a key does not apply."""
        return dict.fromkeys(COMPUTATION_KEYS) | {"graph": self.graph, "cuda_graph": False}

    @contextmanager
    def cold_start(self, name: str) -> Iterator[None]:
        """Time a named preparation step (e.g. ``compile``) into ``cold_start_s``."""
        start = time.perf_counter()
        try:
            yield
        finally:
            self.cold_start_s[name] = time.perf_counter() - start


def cuda_unavailable_reason() -> str | None:
    import torch

    if not torch.cuda.is_available():
        built = torch.version.cuda or "no CUDA"
        return f"no CUDA device visible to PyTorch {torch.__version__} (built with {built}) on this machine"
    return None
