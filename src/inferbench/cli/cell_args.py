"""Arguments of the verbs that name a cell or an engine variant (run-cell, profile-cell, build-trt-engine)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from inferbench.cli.args import json_value


def engine_variant(text: str) -> dict[str, Any]:
    """An engine variant as JSON, checked against its implementation's declared options."""
    from inferbench.engines.registry import ENGINES, option_problems

    variant = json_value(text)
    if not isinstance(variant, dict) or variant.get("engine") not in ENGINES:
        raise argparse.ArgumentTypeError(f"needs a JSON object whose `engine` is one of {', '.join(ENGINES)}")
    problems = option_problems(variant["engine"], variant)
    if problems:
        raise argparse.ArgumentTypeError("; ".join(problems))
    return variant


def add_cell_arguments(p: argparse.ArgumentParser) -> None:
    """What names a cell and what it is prepared from: shared by run-cell, prime-cell and profile-cell."""
    p.add_argument("--workload", required=True)
    p.add_argument("--engine", required=True, help="the engine variant's name (config key under `engines`)")
    p.add_argument("--engine-options", type=engine_variant, required=True, help="the variant's config, JSON (checked)")
    p.add_argument("--precision", required=True)
    p.add_argument("--device", required=True)
    p.add_argument("--batch", type=int, required=True)
    p.add_argument("--seq", type=int, default=0)
    p.add_argument("--threads", type=int, default=0)
    p.add_argument("--model-meta", type=Path)
    p.add_argument("--artifact", type=Path)
    p.add_argument("--measure", type=json_value, default={}, help="config `measure`, JSON (defaults: the schema's)")
    p.add_argument("--data", type=Path, help="the workload's processed dataset (engines that train on it)")


def plain_request(args: argparse.Namespace, **measure: Any) -> Any:
    """The plain-scenario cell that ``add_cell_arguments`` named, with no parity reference (prime-cell and
    profile-cell check none): an inferbench.scenarios.prepare.CellRequest, its measure settings ``--measure``
    with ``measure`` over them."""
    from inferbench.catalog.scenarios import PLAIN
    from inferbench.core.cells import CellKey
    from inferbench.core.settings import MeasureSettings
    from inferbench.scenarios.prepare import CellInputs, CellRequest

    key = CellKey.of_fields(vars(args), PLAIN)
    inputs = CellInputs(args.model_meta, args.artifact, None, args.data)
    return CellRequest(key, args.engine_options, inputs, MeasureSettings.from_dict({**args.measure, **measure}))


#: the kinds of file an engine is prepared from (inferbench.catalog.engines.EngineInfo.artifact): name, suffixes
ARTIFACT_KINDS = {
    "checkpoint": ("a PyTorch checkpoint", (".pt",)),
    "onnx": ("an ONNX model", (".onnx",)),
    "trt_plan": ("a TensorRT plan", (".plan",)),
}


def check_artifact(args: argparse.Namespace) -> None:
    """A UserError where ``--artifact`` is not the kind of file the variant's engine runs (an ONNX model given
    to a PyTorch engine, a checkpoint to ONNX Runtime): the engine would fail reading it as if it were damaged."""
    from inferbench.core.errors import UserError
    from inferbench.engines.registry import engine_info

    impl = args.engine_options["engine"]
    kind = engine_info(impl).artifact
    if args.artifact is None or kind not in ARTIFACT_KINDS or args.artifact.suffix in ARTIFACT_KINDS[kind][1]:
        return
    suffix = args.artifact.suffix
    given = next((name for name, suffixes in ARTIFACT_KINDS.values() if suffix in suffixes), f"a '{suffix}' file")
    wanted, suffixes = ARTIFACT_KINDS[kind]
    raise UserError(
        f"--artifact {args.artifact} is {given}, but engine {args.engine} ({impl}) runs {wanted} "
        f"({' or '.join(suffixes)}): give it {wanted} of this workload, or a variant whose engine runs this file"
    )
