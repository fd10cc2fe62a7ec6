"""The table of verbs: where each one's function lives (``inferbench.cli.<home>``, named as the verb with
``_`` for ``-``, imported only when the verb runs, its arguments declared beside it) and its traits. The
parser and the claim of a GPU slot (inferbench.cli.main), the warm start (inferbench.__main__) and the
workflow's code identities (workflow/rules/common.smk) read them here."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal


@dataclass(frozen=True)
class Verb:
    name: str
    #: the module of ``inferbench.cli`` that holds the verb's function
    home: str
    help: str
    #: takes the machine lock shared before importing heavy libraries, so it never runs while a cell
    #: measures (a verb that measures takes it exclusively meanwhile: ``args.lock``)
    lock: bool = True
    #: imports torch & co.: forked from the warm-start server when a local run has one (inferbench.launch.warm)
    warm: bool = False
    #: claims a GPU of its own (inferbench.machine.gpu_slots): always, or when its ``--device`` is cuda
    gpu: Literal["never", "always", "device"] = "never"
    #: the function's name where it is not the verb's (a builtin's name)
    function_name: str | None = None

    @property
    def module(self) -> str:
        return f"inferbench.cli.{self.home}"

    @property
    def function(self) -> str:
        return self.function_name or self.name.replace("-", "_")

    @property
    def target(self) -> str:
        """``"module:function"``: a root of the code identity of the verb's jobs (inferbench.plan.code)."""
        return f"{self.module}:{self.function}"


VERBS: dict[str, Verb] = {
    verb.name: verb
    for verb in (
        # datasets
        Verb("generate-data", "data", "write a synthetic raw dataset in the real format"),
        Verb("download", "data", "download a real dataset (Kaggle, UCI) and verify it"),
        Verb("prepare-data", "data", "clean and encode a raw dataset into a parquet table", warm=True),
        # models and what cells are prepared from
        Verb("train-mlp", "models", "train a tabular MLP; writes a checkpoint and its metrics", warm=True),
        Verb("build-model", "models", "build a model with random weights and save a checkpoint", warm=True),
        Verb("export-onnx", "models", "export a checkpoint to ONNX, simplify, check parity", warm=True),
        Verb("fuse-onnx", "models", "export for ONNX Runtime's transformer fusions, check parity", warm=True),
        Verb("convert-onnx", "models", "the int8 (dynamic quantization) or fp16 variant of an export", warm=True),
        Verb("reference", "models", "FP32 eager reference outputs for the parity check", warm=True),
        Verb("model-cost", "models", "FLOPs and bytes of one row of a workload at a sequence length", warm=True),
        Verb("build-trt-engine", "engines", "a native TensorRT plan from the ONNX export", warm=True, gpu="always"),
        # measuring
        Verb("run-cell", "cells", "measure one cell and write its record", warm=True, gpu="device"),
        Verb(
            "run-interleaved",
            "cells",
            "measure cells that differ only in their engine variant, one process of each in turn",
            warm=True,
            gpu="device",
        ),
        # no GPU slot: on one GPU it compiles beside the cell jobs' queue (inferbench.launch.cell_job)
        Verb("prime-cell", "cells", "compile one cell into the caches its measuring processes load", warm=True),
        Verb("profile-cell", "cells", "profile one cell, outside any timed loop", warm=True, gpu="device"),
        Verb("machine-peaks", "cells", "this machine's GEMM FLOP/s per precision and copy bandwidth", gpu="device"),
        # results
        Verb("aggregate", "results", "collect cell records into summary.csv and summary.parquet"),
        Verb("plot", "results", "plot one workload's cells"),
        Verb("roofline", "results", "place the summary's cells under the machine's peaks"),
        Verb("report", "results", "write the Markdown report"),
        Verb("compare", "results", "two runs cell by cell (p50 ratios, intervals) and their claims", lock=False),
        Verb("export", "results", "the summary's cells as runs of an experiment tracker (mlflow)", lock=False),
        Verb("clean", "results", "remove records (default: failed ones) so the next run retries them", lock=False),
        Verb("rerender", "rerender", "make a run's summary, plots and report again with today's report code"),
        Verb(
            "results-index",
            "results_index",
            "write the index of committed results (docs/results/README.md)",
            lock=False,
        ),
        # around the workflow
        Verb("warm-server", "tools", "import torch & co. once and fork cell jobs from here", lock=False),
        Verb("list", "tools", "list engines (with availability here) or workloads", lock=False, function_name="list_"),
    )
}


#: the module every job starts in: it routes argv to a verb (directly or through the warm start), and its
#: ``main`` sets up what a measuring job measures under (the GPU slot, the machine lock, the cores kept apart)
DISPATCHER = "inferbench.__main__"
