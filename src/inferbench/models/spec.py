"""What a model is to the rest of the package: its module and a description of its inputs with symbolic
``batch`` / ``seq`` dimensions (so inputs of any batch and sequence length can be made), and the
registries that builders add themselves to (inferbench.models.builders; inferbench.models.registry
builds from them)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # torch is imported where a model is built or loaded: input specs need only numpy
    import torch

Dim = int | str  # "batch" or "seq" for the symbolic dimensions


@dataclass(frozen=True)
class InputSpec:
    name: str  # also the forward() argument name (used for ONNX dynamic shapes and feeds)
    shape: tuple[Dim, ...]
    dtype: str  # numpy dtype name
    kind: str = "normal"  # normal | tokens | mask
    high: int = 0  # exclusive upper bound of token ids

    def concrete_shape(self, batch: int, seq: int) -> tuple[int, ...]:
        sizes = {"batch": batch, "seq": seq}
        return tuple(sizes[d] if isinstance(d, str) else d for d in self.shape)


@dataclass
class ModelSpec:
    name: str
    module: torch.nn.Module
    inputs: tuple[InputSpec, ...]
    output_name: str
    arch: dict[str, Any] = field(default_factory=dict)

    @property
    def n_params(self) -> int:
        return sum(p.numel() for p in self.module.parameters())


BUILDERS: dict[str, Callable[..., ModelSpec]] = {}


def register_model(name: str) -> Callable[[Callable[..., ModelSpec]], Callable[..., ModelSpec]]:
    def wrap(builder: Callable[..., ModelSpec]) -> Callable[..., ModelSpec]:
        if name in BUILDERS:
            raise ValueError(f"model {name!r} registered twice")
        BUILDERS[name] = builder
        return builder

    return wrap


#: builders of the workload families (inferbench.catalog.workloads.FAMILIES): family -> builder(name, **arch)
FAMILY_BUILDERS: dict[str, Callable[..., ModelSpec]] = {}


def register_family(family: str) -> Callable[[Callable[..., ModelSpec]], Callable[..., ModelSpec]]:
    def wrap(builder: Callable[..., ModelSpec]) -> Callable[..., ModelSpec]:
        FAMILY_BUILDERS[family] = builder
        return builder

    return wrap
