"""``name -> builder`` registry, in the manner of timm's ``@register_model`` / ``create_model``.

A builder returns a ``ModelSpec``: the module (random weights, seeded) plus its input description with
symbolic ``batch`` / ``seq`` dimensions, so inputs of any batch and sequence length can be made.
"""

from __future__ import annotations

import fnmatch
import functools
from pathlib import Path
from typing import Any

import numpy as np

from inferbench.core.errors import CorruptArtifact
from inferbench.core.fsutil import atomic_path
from inferbench.models.spec import BUILDERS, FAMILY_BUILDERS, InputSpec, ModelSpec

__all__ = ["InputSpec", "ModelSpec", "create_model", "input_specs", "list_models", "make_inputs"]


def list_models(pattern: str = "*") -> list[str]:
    _load_builders()
    return sorted(n for n in BUILDERS if fnmatch.fnmatch(n, pattern))


def create_model(name: str, seed: int = 0, **arch: Any) -> ModelSpec:
    """Build ``name`` with random weights drawn from ``seed``; ``arch`` overrides the architecture."""
    import torch

    from inferbench.catalog.workloads import WORKLOADS, family_of

    _load_builders()
    declared = WORKLOADS.get(name)
    family = family_of(declared.model if declared is not None and declared.model else name)
    if name in BUILDERS:
        build = BUILDERS[name]
    elif family is not None and family[0] in FAMILY_BUILDERS:  # the family's model, named as the workload
        build = functools.partial(FAMILY_BUILDERS[family[0]], family[1], workload=name)
    else:
        raise KeyError(f"unknown model {name!r}; known: {', '.join(sorted(BUILDERS))}, or timm:<name>, hf:<type>")
    torch.manual_seed(seed)
    spec = build(**arch)
    spec.module.eval()
    return spec


def _load_builders() -> None:
    from inferbench.models import builders  # noqa: F401  (registers on import)


def input_specs(model_meta: dict[str, Any]) -> tuple[InputSpec, ...]:
    """The input specs a model's description (``results/models/<workload>.json``) lists."""
    return tuple(InputSpec(**{**i, "shape": tuple(i["shape"])}) for i in model_meta["inputs"])


def make_inputs(inputs: tuple[InputSpec, ...], batch: int, seq: int, seed: int) -> dict[str, np.ndarray]:
    """Seeded synthetic inputs: standard normal floats, uniform token ids, all-ones attention masks."""
    rng = np.random.default_rng(seed)
    out: dict[str, np.ndarray] = {}
    for spec in inputs:
        shape = spec.concrete_shape(batch, seq)
        if spec.kind == "tokens":
            out[spec.name] = rng.integers(0, spec.high, shape).astype(spec.dtype)
        elif spec.kind == "mask":
            out[spec.name] = np.ones(shape, dtype=spec.dtype)
        else:
            out[spec.name] = rng.standard_normal(shape, dtype=np.float32).astype(spec.dtype, copy=False)
    return out


def save_checkpoint(spec: ModelSpec, path: str | Path, seed: int, meta: dict[str, Any] | None = None) -> None:
    import torch

    state = spec.module.state_dict()
    payload = {
        "name": spec.name,
        "arch": spec.arch,
        "seed": seed,
        "meta": meta or {},
        "state_dict": state,
        # buffers left out of the state dict (e.g. BERT's position ids): loading builds on the meta
        # device, where nothing is initialised, so every tensor must come from the file
        "extra_buffers": {name: b for name, b in spec.module.named_buffers() if name not in state},
    }
    with atomic_path(path) as tmp:
        torch.save(payload, tmp)


def load_checkpoint(path: str | Path, device: str = "cpu") -> tuple[ModelSpec, dict[str, Any]]:
    """Rebuild the architecture and load the saved weights onto ``device``; returns (spec, meta).

    The file is memory-mapped and the module built on the meta device (no random initialisation),
    then the saved tensors are assigned to it: for BERT-sized models that is seconds saved in every
    cell compared with building with random weights and copying the loaded ones over them.
    """
    import torch

    try:
        payload = torch.load(path, map_location="cpu", weights_only=True, mmap=True)
        if not isinstance(payload, dict) or not {"name", "arch", "state_dict", "meta"} <= payload.keys():
            raise ValueError("not a checkpoint written by inferbench")
    except FileNotFoundError:
        raise
    except Exception as error:  # torch says "mmap", "zip archive" or "unpickling": name the file instead
        raise CorruptArtifact(path, error) from error
    if "extra_buffers" not in payload:  # written before checkpoints carried every buffer: build, then load
        spec = create_model(payload["name"], seed=payload["seed"], **payload["arch"])
        spec.module.load_state_dict(payload["state_dict"])
        spec.module.to(device).eval()
        return spec, payload["meta"]
    with torch.device("meta"):
        spec = create_model(payload["name"], seed=payload["seed"], **payload["arch"])
    module = spec.module
    module.load_state_dict(payload["state_dict"], assign=True)
    for name, tensor in payload["extra_buffers"].items():
        owner, _, attr = name.rpartition(".")
        module.get_submodule(owner).register_buffer(attr, tensor, persistent=False)
    left = [n for n, t in [*module.named_parameters(), *module.named_buffers()] if t.is_meta]
    if left:
        raise ValueError(f"{path}: no saved values for {left[:5]}; rebuild the checkpoint with this version")
    module.to(device).eval()
    return spec, payload["meta"]
