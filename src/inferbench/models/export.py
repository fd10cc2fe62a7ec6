"""ONNX export with dynamic batch (and sequence) dimensions, onnxsim simplification, and a parity check
against PyTorch on inputs larger than the export example."""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

from inferbench.core.env_vars import OMP_NUM_THREADS
from inferbench.core.errors import CorruptArtifact
from inferbench.core.fsutil import atomic_path
from inferbench.models.registry import ModelSpec, make_inputs

log = logging.getLogger(__name__)


class ExportParityError(RuntimeError):
    """The exported model does not compute what the PyTorch model computes."""


def relative_l2(actual: np.ndarray, reference: np.ndarray) -> float:
    reference = reference.astype(np.float64)
    denom = np.linalg.norm(reference)
    return float(np.linalg.norm(actual.astype(np.float64) - reference) / (denom if denom > 0 else 1.0))


def export_onnx(
    spec: ModelSpec,
    out_path: str | Path,
    example_batch: int = 2,
    example_seq_len: int = 16,
    check_batch: int = 3,
    check_seq_len: int = 24,
    max_rel_l2: float = 1e-5,
    simplify: bool = True,
) -> dict[str, Any]:
    """Export ``spec`` to ``out_path`` (one file, weights inside); return what was done and measured.

    The batch-2 example keeps the batch dimension symbolic (a batch-1 example can specialise it).
    Raises ExportParityError, leaving no file behind, when ONNX Runtime disagrees with PyTorch.
    """
    import onnx
    import onnxruntime as ort

    example = {k: torch.from_numpy(v) for k, v in make_inputs(spec.inputs, example_batch, example_seq_len, 0).items()}
    dims = {"batch": torch.export.Dim("batch"), "seq": torch.export.Dim("seq")}
    dynamic_shapes = {
        i.name: {axis: dims[d] for axis, d in enumerate(i.shape) if isinstance(d, str)} for i in spec.inputs
    }
    report: dict[str, Any] = {
        "model": spec.name,
        "arch": spec.arch,
        "torch": torch.__version__,
        "onnx": onnx.__version__,
        "example_batch": example_batch,
    }
    with atomic_path(out_path) as tmp:
        start = time.perf_counter()
        torch.onnx.export(
            spec.module,
            (),
            kwargs=example,
            f=str(tmp),
            dynamo=True,
            dynamic_shapes=dynamic_shapes,
            input_names=[i.name for i in spec.inputs],
            output_names=[spec.output_name],
            external_data=False,
            verbose=False,
        )
        report["export_s"] = time.perf_counter() - start
        model = onnx.load(str(tmp))
        report["simplified"] = False
        if simplify:
            import onnxsim

            start = time.perf_counter()
            log.info("simplifying with onnxsim")
            simplified, ok = onnxsim.simplify(model)
            report["simplify_s"] = time.perf_counter() - start
            if not ok:
                raise ExportParityError(f"onnxsim could not validate the simplified {spec.name}")
            model, report["simplified"] = simplified, True
            onnx.save(model, str(tmp))
        report["onnx_nodes"] = len(model.graph.node)

        check = make_inputs(spec.inputs, check_batch, check_seq_len, 1)
        with torch.inference_mode():
            reference = spec.module(**{k: torch.from_numpy(v) for k, v in check.items()}).numpy()
        options = ort.SessionOptions()
        # the cores the job was given (Snakemake's `threads:` reaches torch through OMP_NUM_THREADS)
        options.intra_op_num_threads = OMP_NUM_THREADS.read() or 0
        session = ort.InferenceSession(str(tmp), options, providers=["CPUExecutionProvider"])
        actual = session.run(None, check)[0]
        error = relative_l2(actual, reference) if actual.shape == reference.shape else float("inf")
        report.update(
            {
                "check_batch": check_batch,
                "check_shape": list(actual.shape),
                "rel_l2": error,
                "max_abs": float(np.max(np.abs(actual - reference))) if np.isfinite(error) else None,
                "max_rel_l2": max_rel_l2,
                "onnxruntime": ort.__version__,
            }
        )
        if not error <= max_rel_l2:
            raise ExportParityError(
                f"{spec.name}: ONNX output differs from PyTorch at batch {check_batch}: relative L2 error "
                f"{error:.3g} > allowed {max_rel_l2:.3g} (shapes {actual.shape} vs {reference.shape})"
            )
    return report


def read_onnx(path: str | Path) -> Any:
    """An ONNX model made by an earlier step; a damaged file is named with the command that rebuilds it."""
    import onnx

    try:
        return onnx.load(str(path))
    except FileNotFoundError:
        raise
    except Exception as error:  # protobuf's DecodeError says nothing about which file
        raise CorruptArtifact(path, error) from error


def quantize_int8(src: str | Path, dst: str | Path) -> dict[str, Any]:
    """Dynamic int8 quantization (weights int8, activations quantized at run time) of MatMul/Gemm."""
    from onnxruntime.quantization import QuantType, quantize_dynamic

    read_onnx(src)  # a damaged source is named here, not deep inside the quantizer
    start = time.perf_counter()
    with atomic_path(dst) as tmp:
        quantize_dynamic(str(src), str(tmp), weight_type=QuantType.QInt8, op_types_to_quantize=["MatMul", "Gemm"])
    return {
        "variant": "int8",
        "source": str(src),
        "convert_s": time.perf_counter() - start,
        "method": "onnxruntime.quantization.quantize_dynamic, QInt8 weights, MatMul/Gemm",
    }


def convert_fp16(src: str | Path, dst: str | Path) -> dict[str, Any]:
    """fp16 weights and compute, fp32 inputs and outputs (so engines stage the same arrays)."""
    import onnx
    from onnxruntime.transformers.float16 import convert_float_to_float16

    start = time.perf_counter()
    model = convert_float_to_float16(read_onnx(src), keep_io_types=True)
    with atomic_path(dst) as tmp:
        onnx.save(model, str(tmp))
    return {
        "variant": "fp16",
        "source": str(src),
        "convert_s": time.perf_counter() - start,
        "method": "onnxruntime.transformers.float16.convert_float_to_float16, keep_io_types",
    }
