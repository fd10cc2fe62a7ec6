"""The table of verbs: each one's function (``"module:function"``, imported only when the verb runs,
with its arguments declared beside it) and its traits. The parser (inferbench.cli.main), the warm
start (inferbench.__main__) and the GPU slots all read the traits from here."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal


@dataclass(frozen=True)
class Verb:
    target: str
    help: str
    #: takes the machine lock shared before importing heavy libraries, so it never runs while a cell
    #: measures (a verb that measures takes it exclusively meanwhile: ``args.lock``)
    lock: bool = True
    #: imports torch & co.: forked from the warm-start server when a local run has one (inferbench.launch.warm)
    warm: bool = False
    #: claims a GPU of its own (inferbench.launch.gpu_slots): always, or when its ``--device`` is cuda
    gpu: Literal["never", "always", "device"] = "never"

    @property
    def module(self) -> str:
        return self.target.split(":")[0]

    @property
    def function(self) -> str:
        return self.target.split(":")[1]


VERBS: dict[str, Verb] = {
    "generate-data": Verb("inferbench.cli.data:generate_data", "write a synthetic raw dataset in the real format"),
    "download": Verb("inferbench.cli.data:download", "download a real dataset (Kaggle, UCI) and verify it"),
    "prepare-data": Verb(
        "inferbench.cli.data:prepare_data", "clean and encode a raw dataset into a parquet table", warm=True
    ),
    "train-mlp": Verb(
        "inferbench.cli.models:train_mlp", "train a tabular MLP; writes a checkpoint and its metrics", warm=True
    ),
    "build-model": Verb(
        "inferbench.cli.models:build_model", "build a model with random weights and save a checkpoint", warm=True
    ),
    "export-onnx": Verb(
        "inferbench.cli.models:export_onnx", "export a checkpoint to ONNX, simplify, check parity", warm=True
    ),
    "fuse-onnx": Verb(
        "inferbench.cli.models:fuse_onnx",
        "export a checkpoint for ONNX Runtime's transformer fusions, fuse, check parity",
        warm=True,
    ),
    "convert-onnx": Verb(
        "inferbench.cli.models:convert_onnx",
        "make the int8 (dynamic quantization) or fp16 variant of an export",
        warm=True,
    ),
    "reference": Verb(
        "inferbench.cli.models:reference", "FP32 eager reference outputs for the parity check", warm=True
    ),
    "model-cost": Verb(
        "inferbench.cli.models:model_cost", "FLOPs and bytes of one row of a workload at a sequence length", warm=True
    ),
    "build-trt-engine": Verb(
        "inferbench.cli.engines:build_trt_engine",
        "build a native TensorRT engine (plan) from the fp32 ONNX export",
        warm=True,
        gpu="always",
    ),
    "run-cell": Verb("inferbench.cli.cells:run_cell", "measure one cell and write its record", warm=True, gpu="device"),
    "profile-cell": Verb(
        "inferbench.cli.cells:profile_cell",
        "profile one cell (trace + top operators), outside any timed loop",
        warm=True,
        gpu="device",
    ),
    "machine-peaks": Verb(
        "inferbench.cli.cells:machine_peaks",
        "this machine's GEMM FLOP/s per precision and copy bandwidth",
        gpu="device",
    ),
    "aggregate": Verb("inferbench.cli.results:aggregate", "collect cell records into summary.csv and summary.parquet"),
    "plot": Verb("inferbench.cli.results:plot", "plot one workload's cells"),
    "roofline": Verb("inferbench.cli.results:roofline", "place the summary's cells under the machine's peaks"),
    "report": Verb("inferbench.cli.results:report", "write the Markdown report"),
    "compare": Verb(
        "inferbench.cli.results:compare",
        "two runs cell by cell (p50 ratio with a 95%% interval, changes beyond the noise) and their decisions",
        lock=False,
    ),
    "clean": Verb(
        "inferbench.cli.results:clean", "remove records (default: failed ones) so the next run retries them", lock=False
    ),
    "warm-server": Verb(
        "inferbench.cli.tools:warm_server",
        "import torch, timm, transformers and ONNX Runtime once and fork cell jobs from here",
        lock=False,
    ),
    "list": Verb("inferbench.cli.tools:list_", "list engines (with availability here) or workloads", lock=False),
}
