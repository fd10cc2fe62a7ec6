"""Verbs of the models (inferbench.models): train an MLP, build a model with random weights, export it
to ONNX (plain, fused, fp16/int8 variants), the FP32 eager reference outputs of the parity gate, and a
model's FLOPs and bytes for the roofline."""

from __future__ import annotations

import argparse
import json
import logging
from pathlib import Path
from typing import Any

from inferbench.catalog.workloads import WORKLOADS
from inferbench.cli.args import arguments, json_value, required_paths

log = logging.getLogger("inferbench")


def _write_model_meta(spec: Any, path: Path, extra: dict[str, Any]) -> None:
    from dataclasses import asdict

    from inferbench.core.fsutil import write_json

    write_json(
        path,
        {
            "name": spec.name,
            "arch": spec.arch,
            "n_params": spec.n_params,
            "inputs": [asdict(i) for i in spec.inputs],
            "output_name": spec.output_name,
            **extra,
        },
    )


def _train_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--workload", choices=[w for w, info in WORKLOADS.items() if info.trained], required=True)
    p.add_argument("--data", type=Path, required=True)
    p.add_argument("--options", type=json_value, default={})
    required_paths(p, "--out", "--meta", "--heldout")


@arguments(_train_arguments)
def train_mlp(args: argparse.Namespace) -> None:
    import pandas as pd

    from inferbench.models.parity import save_heldout
    from inferbench.models.registry import save_checkpoint
    from inferbench.models.training import train_mlp

    options = dict(args.options)
    hidden = options.pop("arch", {}).get("hidden")
    train = options.pop("train", {})
    spec, metrics, heldout = train_mlp(args.workload, pd.read_parquet(args.data), hidden=hidden, **train)
    save_checkpoint(spec, args.out, seed=train.get("seed", 0), meta=metrics)
    save_heldout(heldout, args.heldout)
    _write_model_meta(spec, args.meta, {"training": metrics})
    log.info("trained: %s", json.dumps(metrics))


def _build_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--workload", required=True)
    p.add_argument("--arch", type=json_value, default={})
    p.add_argument("--seed", type=int, default=0)
    required_paths(p, "--out", "--meta")


@arguments(_build_arguments)
def build_model(args: argparse.Namespace) -> None:
    from inferbench.models.registry import create_model, save_checkpoint

    spec = create_model(args.workload, seed=args.seed, **args.arch)
    save_checkpoint(spec, args.out, seed=args.seed)
    _write_model_meta(spec, args.meta, {})


def _export_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--checkpoint", type=Path, required=True)
    p.add_argument("--options", type=json_value, default={})
    required_paths(p, "--out", "--report")


@arguments(_export_arguments)
def export_onnx(args: argparse.Namespace) -> None:
    from inferbench.core.fsutil import write_json
    from inferbench.models.export import export_onnx
    from inferbench.models.registry import load_checkpoint

    spec, _ = load_checkpoint(args.checkpoint)
    report = export_onnx(spec, args.out, **args.options)
    write_json(args.report, report)
    log.info("exported: %s", json.dumps(report))


def _fuse_arguments(p: argparse.ArgumentParser) -> None:
    required_paths(p, "--checkpoint", "--out", "--report")


@arguments(_fuse_arguments)
def fuse_onnx(args: argparse.Namespace) -> None:
    from inferbench.catalog.workloads import workload_info
    from inferbench.core.fsutil import write_json
    from inferbench.models.fusions import export_fused
    from inferbench.models.registry import load_checkpoint

    spec, _ = load_checkpoint(args.checkpoint)
    write_json(args.report, export_fused(spec, workload_info(spec.name).kind, args.out))


#: the converted variants of an export, and what makes each
ONNX_CONVERSIONS = {"int8": "quantize_int8", "fp16": "convert_fp16"}


def _convert_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--to", choices=ONNX_CONVERSIONS, required=True)
    required_paths(p, "--source", "--out", "--report")


@arguments(_convert_arguments)
def convert_onnx(args: argparse.Namespace) -> None:
    from inferbench.core.fsutil import write_json
    from inferbench.models import export

    write_json(args.report, getattr(export, ONNX_CONVERSIONS[args.to])(args.source, args.out))


def _reference_arguments(p: argparse.ArgumentParser) -> None:
    required_paths(p, "--checkpoint", "--model-meta")
    p.add_argument("--seq", type=int, default=0)
    p.add_argument("--rows", type=int, default=2)
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--heldout", type=Path, help="a trained model's held-out rows (train-mlp --heldout)")


@arguments(_reference_arguments)
def reference(args: argparse.Namespace) -> None:
    from inferbench.core.fsutil import read_json
    from inferbench.models.parity import make_reference
    from inferbench.models.registry import input_specs

    make_reference(
        args.checkpoint, input_specs(read_json(args.model_meta)), args.seq, args.rows, args.out, args.heldout
    )


def _cost_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--checkpoint", type=Path, required=True)
    p.add_argument("--seq", type=int, default=0)
    p.add_argument("--out", type=Path, required=True)


@arguments(_cost_arguments)
def model_cost(args: argparse.Namespace) -> None:
    from inferbench.core.fsutil import write_json
    from inferbench.models.registry import load_checkpoint
    from inferbench.trackers.roofline import model_cost

    spec, _ = load_checkpoint(args.checkpoint)
    write_json(args.out, model_cost(spec, args.seq))
