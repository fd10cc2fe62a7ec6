"""Verbs of the engines' own artifacts: a native TensorRT plan, built once per cell shape."""

from __future__ import annotations

import argparse
import json
import logging
from pathlib import Path

from inferbench.cli.args import arguments, required_paths
from inferbench.cli.cell_args import engine_variant
from inferbench.engines.tensorrt import PRECISIONS

log = logging.getLogger("inferbench")


def _build_arguments(p: argparse.ArgumentParser) -> None:
    required_paths(p, "--onnx", "--model-meta")
    p.add_argument("--precision", choices=PRECISIONS, required=True)
    p.add_argument("--batch", type=int, required=True)
    p.add_argument("--seq", type=int, default=0)
    p.add_argument(
        "--options", type=engine_variant, default={"engine": "tensorrt"}, help="the tensorrt engine variant, JSON"
    )
    p.add_argument("--data", type=Path, help="processed dataset whose rows calibrate int8 (tabular workloads)")
    p.add_argument("--out", type=Path, required=True)


@arguments(_build_arguments)
def build_trt_engine(args: argparse.Namespace) -> None:
    from inferbench.core.fsutil import read_json, write_json
    from inferbench.engines.registry import engine_info
    from inferbench.engines.tensorrt.build import build_engine, calibration_batches
    from inferbench.engines.tensorrt.plans import build_report_path
    from inferbench.models.registry import input_specs

    inputs = input_specs(read_json(args.model_meta))
    options = engine_info("tensorrt").typed_options(args.options)
    calibration = None
    if args.precision == "int8":
        features = None
        if args.data:  # tabular workloads calibrate on their real, encoded rows
            import pandas as pd

            features = pd.read_parquet(args.data).drop(columns=["target"]).to_numpy()
        n_batches = options.calibration_batches
        calibration = calibration_batches(inputs, args.batch, args.seq, n_batches, features)
    report = build_engine(
        args.onnx,
        inputs,
        args.precision,
        args.batch,
        args.seq,
        args.out,
        calibration,
        workspace_gib=options.workspace_gib,
    )
    write_json(build_report_path(args.out), report)
    log.info("built: %s", json.dumps(report))
