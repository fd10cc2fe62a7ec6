"""What an engine declares about itself, without importing anything heavy: the devices and precisions
it runs, what it is prepared from, its options with their types and defaults.

Each engine family (a package under ``inferbench.engines``: ``pytorch``, ``ort``, ``tensorrt``,
``noop``) declares its implementations in its ``__init__.py`` as ``ENGINES = {name: EngineInfo(...)}``
and keeps the code that runs them in modules of its own, imported only when a cell runs
(``EngineInfo.target``). inferbench.engines.registry finds the families.
"""

from __future__ import annotations

import dataclasses
import math
import typing
import urllib.parse
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path, PurePosixPath
from typing import Any, Literal

from inferbench.catalog.targets import target_module

#: what ``Engine.computation`` says of a cell, one summary column each, with the plain setting of each:
#: what a cell computes with when no option changes it (the report names every other setting, and a
#: speed-up is attributed to the step from a plain setting to another: inferbench.analysis.decisions)
PLAIN_COMPUTATION: dict[str, Any] = {
    "graph": "eager",
    "precision_mode": None,
    "channels_last": False,
    "compile_mode": None,
    "cuda_graph": False,
    "io_binding": False,
    "tf32": False,
    "fusions": False,
    # how the host holds a call's inputs before the copy in (None: pageable fp32 arrays, as drawn)
    "host_input": None,
}
COMPUTATION_KEYS = tuple(PLAIN_COMPUTATION)
#: the precision every speed-up is measured from
PLAIN_PRECISION = "fp32"

ALL_PRECISIONS = ("fp32", "fp16", "bf16")
#: keys every variant may have besides its engine's options: which implementation, where it runs, how
#: long the dynamic batcher of its serving cells waits for a batch to fill (inferbench.scenarios.serving),
#: and a slowdown planted to calibrate the verdict rule (inferbench.scenarios.prepare.plant_slowdown)
VARIANT_KEYS = ("engine", "devices", "precisions", "max_queue_delay_ms", "planted_slowdown")


#: where engines keep what they build (exports, caches, engine plans), relative to the working directory
ENGINE_FILES = PurePosixPath("results/engines")


def engine_files_problem(value: str, workdir: Path | None = None) -> str | None:
    """Why ``value`` is not a folder inside ``ENGINE_FILES`` of ``workdir`` (the current directory), as
    written and with its symlinks resolved, or None. Checked when the config is, and again by the engine
    before it writes there (``engine_files_dir``)."""
    path = PurePosixPath(value)
    allowed = f"a relative path under {ENGINE_FILES}/ (e.g. {ENGINE_FILES}/mine)"
    if not value or "\\" in value or "\0" in value or path.is_absolute() or ".." in path.parts:
        return f"{value!r} must be {allowed}, with no leading /, no .. and no NUL"
    if not path.is_relative_to(ENGINE_FILES):
        return f"{value!r} must be {allowed}: elsewhere, what the engine writes could land among the records"
    root = (workdir or Path.cwd()).resolve()
    if not Path(root, value).resolve().is_relative_to(Path(root, ENGINE_FILES).resolve()):
        return f"{value!r} leads outside {ENGINE_FILES}/ through a symlink ({Path(root, value).resolve()}): {allowed}"
    return None


def engine_files_dir(value: str) -> Path:
    """The folder an engine writes, checked again where the job runs (a symlink made since the config was
    checked counts too)."""
    if (problem := engine_files_problem(value)) is not None:
        raise ValueError(problem)
    return Path(value)


@dataclass(frozen=True)
class Option:
    """One option of an engine implementation: its type, default and what it does."""

    type: type
    default: Any
    help: str
    choices: tuple[Any, ...] | None = None
    #: numbers: the smallest value allowed, and whether it is allowed itself; the largest allowed
    minimum: float | None = None
    exclusive: bool = False
    maximum: float | None = None
    #: strings: a folder the engine writes, which must stay inside ``ENGINE_FILES`` of the working directory,
    #: symlinks resolved: what a job creates must not land anywhere a config string points, nor among the
    #: records, which `clean` removes
    engine_folder: bool = False
    #: booleans: another boolean option of the same engine that must be true when this one is
    requires: str | None = None
    #: strings: a server's http(s) URL, required, on this machine unless the boolean option named here is true
    #: (a remote server's figures include the network)
    url_remote_by: str | None = None

    def problem(self, value: Any) -> str | None:
        """Why ``value`` is not a valid setting of this option, or None."""
        if self.choices is not None and value not in self.choices:  # YAML reads `off` as false: name the choices
            return f"{value!r} is not one of {', '.join(map(str, self.choices))}"
        if not self.takes(value):
            return f"{value!r} is not a {self.type.__name__}"
        if isinstance(value, float) and not math.isfinite(value):
            return f"{value!r} is not a finite number"
        if self.engine_folder and (problem := engine_files_problem(value)) is not None:
            return problem
        if self.url_remote_by is not None and (problem := url_problem(value)) is not None:
            return problem
        if self.minimum is not None and (value < self.minimum or (self.exclusive and value == self.minimum)):
            return f"{value!r} must be {'>' if self.exclusive else '>='} {self.minimum}"
        if self.maximum is not None and value > self.maximum:
            return f"{value!r} must be <= {self.maximum}"
        return None

    def takes(self, value: Any) -> bool:
        """Whether ``value`` is of the option's type. bool is a subclass of int: a bool is right only for a bool
        option (`workers: true` is not an int); a float option also takes an int."""
        accepted = (int, float) if self.type is float else self.type
        return isinstance(value, bool) == (self.type is bool) and isinstance(value, accepted)


#: the host names of this machine a server's URL may have without its engine's remote option
LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "::1")


def url_problem(value: str) -> str | None:
    """Why ``value`` is not a server's http(s) URL, or None."""
    parts = urllib.parse.urlsplit(value)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return f"{value!r} is not a server's URL: give one such as http://127.0.0.1:8000"
    return None


def is_loopback(url: str) -> bool:
    return urllib.parse.urlsplit(url).hostname in LOOPBACK_HOSTS


def option(
    default: Any,
    help: str,
    choices: tuple[Any, ...] | None = None,
    *,
    minimum: float | None = None,
    exclusive: bool = False,
    maximum: float | None = None,
    engine_folder: bool = False,
    requires: str | None = None,
    url_remote_by: str | None = None,
) -> Any:
    """A field of an engine's options class (``EngineOptions``): its default, what it does and the values it
    takes (``Option``'s rules); its type is the field's annotation."""
    rules = {"choices": choices, "minimum": minimum, "exclusive": exclusive, "maximum": maximum,
             "engine_folder": engine_folder, "requires": requires, "url_remote_by": url_remote_by}  # fmt: skip
    return field(default=default, metadata={"help": help, **rules})


@dataclass(frozen=True)
class EngineOptions:
    """An engine's options, typed: a frozen dataclass written in its family's ``__init__.py``, one field per
    option (``option``: default, help, allowed values), so that a default is declared once, a type checker
    and a reader see every option, and an option an engine does not have is an error. Options shared by
    engines are classes of their own that an engine's options class derives from; code shared by engines with
    different options lives in a class of the engines that declare them
    (inferbench.engines.pytorch.eager.TorchInference)."""

    def as_dict(self) -> dict[str, Any]:
        """The options by name (what a record says its engine ran with)."""
        return dataclasses.asdict(self)

    @classmethod
    def declared(cls) -> dict[str, Option]:
        """Each option as its rules (``Option``), by name: what the config check and the docs read."""
        types = typing.get_type_hints(cls)
        rules = ("choices", "minimum", "exclusive", "maximum", "engine_folder", "requires", "url_remote_by")
        return {
            f.name: Option(types[f.name], f.default, f.metadata["help"], **{k: f.metadata[k] for k in rules})
            for f in dataclasses.fields(cls)
        }


#: TF32 tensor-core math for fp32 on a GPU, by what it covers: none (``strict``: fp32 means fp32), cuDNN's
#: convolutions only (``conv``: PyTorch's default), or convolutions and matmuls (``all``: ONNX Runtime's and
#: TensorRT's default; timm's benchmark.py sets it for PyTorch). Listed plainest first.
TF32_SETTINGS = ("strict", "conv", "all")


@dataclass(frozen=True)
class Tf32Options(EngineOptions):
    tf32: str = option(
        "conv",
        "TF32 math for fp32 on a GPU: strict (none), conv (cuDNN convolutions: PyTorch's default) or all "
        "(convolutions and matmuls)",
        TF32_SETTINGS,
    )


def tf32_setting(value: Any) -> Any:
    """A summary's ``tf32`` as a setting of ``TF32_SETTINGS``: summaries from before the settings wrote a
    boolean (true: TF32 in convolutions and matmuls, false: none); empty and other values stay as they are."""
    spelled = str(value).lower()
    return {"true": "all", "false": "strict"}.get(spelled, value)


@dataclass(frozen=True)
class ChannelsLastOptions(EngineOptions):
    channels_last: bool = option(False, "channels-last memory format for image models")


@dataclass(frozen=True)
class HostInputOptions(EngineOptions):
    """How the host holds an end-to-end call's inputs, as a server's would (GPU engines that copy them in)."""

    host_memory: str = option(
        "pageable",
        "where the host's input arrays live: pageable memory, or page-locked (pinned) memory that the GPU "
        "copies from directly and asynchronously, as a server stages its batches",
        ("pageable", "pinned"),
    )
    host_dtype: str = option(
        "fp32",
        "the dtype of the host's float inputs: fp32, or the model's (fp16/bf16 where the weights are cast), "
        "halving the bytes copied in, as a server that receives or decodes into that dtype",
        ("fp32", "model"),
    )
    host_overlap: bool = option(
        False,
        "end to end, the next batch's copy in on a CUDA stream of its own while this batch computes, as a "
        "server's pipelined loop does (needs host_memory: pinned, on a GPU): the end-to-end figure is then the "
        "time per call of that loop, not one request's latency",
    )


def precision_mode(default: str) -> Any:
    """The ``precision_mode`` option with ``default``: how fp16/bf16 are reached."""
    return option(default, "fp16/bf16 by autocast, or by casting weights and inputs", ("autocast", "cast"))


@dataclass(frozen=True)
class EngineInfo:
    target: str  # "module:Class"
    devices: tuple[str, ...]
    precisions: tuple[str, ...]
    #: what the engine is prepared from; trt_plan: a TensorRT engine built by the workflow from the fp32 ONNX
    artifact: Literal["checkpoint", "onnx", "trt_plan", "none"]
    description: str
    #: ONNX file variant per precision (results/onnx/<workload>.<variant>.onnx); absent: the fp32 export
    onnx_variants: dict[str, str] = field(default_factory=dict)
    #: inference, train (its cells are timed by the training scenario: one call is a training step, or an
    #: epoch where the engine reads the workload's dataset) or generate (a decoder answering requests
    #: token by token: the generation scenario)
    mode: Literal["inference", "train", "generate"] = "inference"
    #: workload kinds (see inferbench.catalog.workloads) the engine can run
    workload_kinds: tuple[str, ...] = ("tabular", "vision", "text")
    #: the engine reads the workload's processed dataset (given to the cell as an input)
    needs_dataset: bool = False
    #: the harness's own baseline (the no-op engine), not an engine a study compares
    harness: bool = False
    #: libraries its cells import, imported (and timed) once before the cell's fresh processes start
    libraries: tuple[str, ...] = ("torch",)
    #: the options a variant of it may set (config `engines.<variant>`): a dataclass written in its family
    options_type: type[EngineOptions] = EngineOptions
    #: it compiles while preparing (tens of seconds): True, or the boolean option that turns it on
    compiles: bool | str = False
    #: generation engines that export the decoder for a fixed longest sequence: what the export calls it.
    #: A request whose prompt plus new tokens pass it fails at its first call (ONNX Runtime GenAI: "max_length
    #: (68) > context_length (64)"); the config check reads it with inferbench.plan.sizing.context_length
    exported_context: str | None = None

    @property
    def module(self) -> str:
        """The module that runs the engine (imported only when a cell runs)."""
        return target_module(self.target)

    def compiles_with(self, variant: dict[str, Any]) -> bool:
        """Whether a cell of this variant compiles before it measures."""
        return (
            bool(getattr(self.typed_options(variant), self.compiles))
            if isinstance(self.compiles, str)
            else self.compiles
        )

    @cached_property
    def options(self) -> dict[str, Option]:
        """The options a variant may set, by name, each with its type, default, help and rules."""
        return self.options_type.declared()

    def effective_options(self, variant: dict[str, Any]) -> dict[str, Any]:
        """The variant's options with the defaults filled in (what a record says it ran with)."""
        return {key: variant.get(key, option.default) for key, option in self.options.items()}

    def typed_options(self, variant: dict[str, Any]) -> EngineOptions:
        """The variant's options, typed (``options_type``), defaults filled in."""
        values = self.effective_options(variant)
        for name, option in self.options.items():  # a float option set as an int (`lr: 1`) holds a float
            if option.type is float and isinstance(values[name], int) and not isinstance(values[name], bool):
                values[name] = float(values[name])
        return self.options_type(**values)
