"""An independent timing loop for the GPU default's reference cells, sharing no code with inferbench:
the models built from timm and transformers directly, each call timed by CUDA events on the current
stream with the next call queued while the device runs this one, as the workflow's `device` boundary
claims to time them (and, for reference, one call at a time). Run it in the same
lease, right after the workflow, and set its p50s beside the workflow's (`--summary`).

    python benchmarks/tools/independent_loop.py --out independent.json [--summary results/summary.csv]

Cells (the workflow's names): ResNet-50 fp16 b32 channels-last as a CUDA graph (`torch_cudagraph`)
and through TorchScript (`torchscript`), BERT-base fp16 b1 s128 as a CUDA graph (`torch_cudagraph`),
BERT-base fp32 b1 s128 eager (`torch_eager`, strict fp32). The first two and the third are
device-bound on an H100, the others host-bound.

Each round of a cell is a fresh (spawned) process, as each of the workflow's measuring processes is:
a cell's p50 moves a few percent from one process to the next (its memory layout, the kernels cuDNN
picks), so rounds within one process would understate the spread the comparison is judged against.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch

BATCHES = 4  # inputs rotate through this many batches, as the workflow's do
WARMUP_S = 1.0
CALLS = 300


def resnet50(precision: torch.dtype, batch: int) -> tuple[torch.nn.Module, list[dict[str, torch.Tensor]]]:
    import timm

    torch.manual_seed(0)
    model = timm.create_model("resnet50", pretrained=False).eval().cuda().to(memory_format=torch.channels_last)
    model = model.to(precision)
    generator = torch.Generator().manual_seed(0)
    inputs = [
        {"x": torch.randn(batch, 3, 224, 224, generator=generator).to("cuda", precision)
         .contiguous(memory_format=torch.channels_last)}
        for _ in range(BATCHES)
    ]  # fmt: skip
    return model, inputs


class Encoder(torch.nn.Module):
    def __init__(self, model: torch.nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        return self.model(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state


def bert_base(precision: torch.dtype, batch: int, seq: int = 128) -> tuple[torch.nn.Module, list[dict]]:
    from transformers import BertConfig, BertModel

    torch.manual_seed(0)
    model = Encoder(BertModel(BertConfig(), add_pooling_layer=False)).eval().cuda().to(precision)
    generator = torch.Generator().manual_seed(0)
    inputs = [
        {
            "input_ids": torch.randint(0, 30522, (batch, seq), generator=generator).cuda(),
            "attention_mask": torch.ones(batch, seq, dtype=torch.int64).cuda(),
        }
        for _ in range(BATCHES)
    ]
    return model, inputs


def eager(model: torch.nn.Module, inputs: list[dict]) -> Callable[[int], object]:
    def call(i: int) -> object:
        with torch.inference_mode():
            return model(**inputs[i % BATCHES])

    return call


def torchscript(model: torch.nn.Module, inputs: list[dict]) -> Callable[[int], object]:
    with torch.inference_mode():
        traced = torch.jit.trace(model, example_kwarg_inputs=inputs[0], strict=False, check_trace=False)
        scripted = torch.jit.optimize_for_inference(torch.jit.freeze(traced.eval()))
        for _ in range(3):
            scripted(**inputs[0])
    return eager(scripted, inputs)


def cuda_graph(model: torch.nn.Module, inputs: list[dict]) -> Callable[[int], object]:
    static = {name: tensor.clone() for name, tensor in inputs[0].items()}
    with torch.inference_mode():
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(3):
                model(**static)
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            output = model(**static)
    torch.cuda.synchronize()

    def call(i: int) -> object:
        for name, tensor in inputs[i % BATCHES].items():
            static[name].copy_(tensor, non_blocking=True)
        graph.replay()
        return output

    return call


def time_calls(call: Callable[[int], object]) -> dict[str, np.ndarray]:
    """Milliseconds per call, CUDA events around each call on the current stream, two ways: with the next
    call queued while the device runs this one (``queued``: the device's time for the call, what the
    workflow's device boundary claims), and one call at a time, synchronised after each (``one_at_a_time``:
    the host's issuing of the call inside the window too)."""
    began, i = time.perf_counter(), 0
    while time.perf_counter() - began < WARMUP_S:
        call(i)
        torch.cuda.synchronize()
        i += 1
    events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(CALLS)]
    for i, (start, stop) in enumerate(events):
        start.record()
        call(i)
        stop.record()
        if i:
            events[i - 1][1].synchronize()  # one call in flight while the next is issued
    torch.cuda.synchronize()
    queued = [start.elapsed_time(stop) for start, stop in events]
    one_at_a_time = []
    start, stop = events[0]
    for i in range(CALLS):
        start.record()
        call(i)
        stop.record()
        stop.synchronize()
        one_at_a_time.append(start.elapsed_time(stop))
    return {"queued": np.asarray(queued), "one_at_a_time": np.asarray(one_at_a_time)}


#: (workload, engine, precision, batch, seq) -> how it is built and run
CELLS = {
    ("resnet50", "torch_cudagraph", "fp16", 32, 0): (lambda: resnet50(torch.float16, 32), cuda_graph),
    ("resnet50", "torchscript", "fp16", 32, 0): (lambda: resnet50(torch.float16, 32), torchscript),
    ("bert_base", "torch_cudagraph", "fp16", 1, 128): (lambda: bert_base(torch.float16, 1), cuda_graph),
    ("bert_base", "torch_eager", "fp32", 1, 128): (lambda: bert_base(torch.float32, 1), eager),
}


def round_p50(cell: tuple) -> dict[str, float]:
    """One fresh build of the cell in this process, its p50s in ms (run in a spawned process)."""
    torch.backends.cudnn.benchmark = True
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False  # strict fp32
    build, compile_ = CELLS[cell]
    model, inputs = build()
    return {way: float(np.median(ms)) for way, ms in time_calls(compile_(model, inputs)).items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--summary", type=Path, help="the workflow's summary.csv: its p50s beside these")
    parser.add_argument("--rounds", type=int, default=3, help="fresh processes per cell (the spread between them)")
    args = parser.parse_args()
    workflow = {}
    if args.summary:
        import pandas as pd

        summary = pd.read_csv(args.summary)
        for row in summary[summary["device"] == "cuda"].itertuples():
            workflow[(row.workload, row.engine, row.precision, int(row.batch_size), int(row.seq_len))] = row
    rows = []
    spawn = multiprocessing.get_context("spawn")
    for cell in CELLS:
        rounds = []
        for _ in range(args.rounds):
            with spawn.Pool(1) as process:  # one process per round, one round at a time
                rounds.append(process.apply(round_p50, (cell,)))
        theirs = workflow.get(cell)
        row = {
            "cell": "/".join(map(str, cell)),
            "independent_p50_ms": float(np.median([r["queued"] for r in rounds])),
            "independent_p50_by_round_ms": [r["queued"] for r in rounds],
            "one_at_a_time_p50_by_round_ms": [r["one_at_a_time"] for r in rounds],
            "workflow_p50_ms": None if theirs is None else float(theirs.latency_p50_ms),
            "workflow_bound": None if theirs is None else theirs.bound,
        }
        if row["workflow_p50_ms"]:
            row["workflow_over_independent"] = row["workflow_p50_ms"] / row["independent_p50_ms"]
        rows.append(row)
        print(json.dumps(row))
    args.out.write_text(
        json.dumps(
            {
                "gpu": torch.cuda.get_device_name(),
                "torch": torch.__version__,
                "rounds": "one fresh process each",
                "cells": rows,
            }
        )
    )


if __name__ == "__main__":
    main()
