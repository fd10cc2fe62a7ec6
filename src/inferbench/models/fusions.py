"""An ONNX export made for ONNX Runtime's transformer fusions (``onnxruntime.transformers.optimizer``).

The fusions (Attention, SkipLayerNormalization, BiasGelu, EmbedLayerNormalization) match the patterns
that the TorchScript exporter writes for *eager* attention. Measured with onnxruntime 1.31 on BERT and
DistilBERT: the dynamo exporter's graph, or attention exported from PyTorch's SDPA, leaves attention
unfused (only SkipLayerNorm and Gelu fuse). So this export switches the model to eager attention and
uses the TorchScript exporter; the plain export (inferbench.models.export) stays as it is.
"""

from __future__ import annotations

import logging
import time
import warnings
from pathlib import Path
from typing import Any

import torch

from inferbench.core.fsutil import atomic_path
from inferbench.models.export import ExportParityError, relative_l2
from inferbench.models.registry import ModelSpec, make_inputs

log = logging.getLogger(__name__)

#: the optimizer's model type per workload kind (its fusion patterns differ per family)
OPTIMIZER_MODEL_TYPES = {"text": "bert", "vision": "vit", "tabular": "bert"}


def eager_attention(module: torch.nn.Module) -> list[str]:
    """Switch every attention in ``module`` to its eager (matmul, softmax, matmul) form, the one the
    fusions recognise; returns what was switched. transformers models: ``set_attn_implementation``;
    timm blocks: ``fused_attn = False``."""
    switched = []
    for name, child in module.named_modules():
        if hasattr(child, "set_attn_implementation") and getattr(child, "config", None) is not None:
            if child.config._attn_implementation != "eager":
                child.set_attn_implementation("eager")
                switched.append(name or type(child).__name__)
        elif getattr(child, "fused_attn", False) is True:
            child.fused_attn = False
            switched.append(name)
    return switched


def attention_shape(module: torch.nn.Module) -> tuple[int, int]:
    """(heads, hidden size) of the model's attention, which the optimizer needs (its detection fails on
    these graphs); (0, 0) for models without attention."""
    for child in module.modules():
        config = getattr(child, "config", None)
        if config is not None and hasattr(config, "num_attention_heads"):
            return int(config.num_attention_heads), int(config.hidden_size)
        if hasattr(child, "num_heads") and hasattr(child, "head_dim"):
            return int(child.num_heads), int(child.num_heads * child.head_dim)
    return 0, 0


def export_fused(
    spec: ModelSpec,
    kind: str,
    out_path: str | Path,
    example_batch: int = 2,
    example_seq_len: int = 16,
    check_batch: int = 3,
    check_seq_len: int = 24,
    max_rel_l2: float = 1e-4,
) -> dict[str, Any]:
    """Export ``spec`` for the fusions, fuse, check against PyTorch on ONNX Runtime's CPU provider
    (the fused operators have CPU kernels) and save to ``out_path``; return what was done."""
    import onnx
    import onnxruntime as ort
    from onnxruntime.transformers.optimizer import optimize_model

    module = spec.module.eval()
    switched = eager_attention(module)
    heads, hidden = attention_shape(module)
    names = [i.name for i in spec.inputs]
    example = make_inputs(spec.inputs, example_batch, example_seq_len, 0)
    dynamic_axes = {i.name: {a: d for a, d in enumerate(i.shape) if isinstance(d, str)} for i in spec.inputs}
    dynamic_axes[spec.output_name] = {0: "batch"} | ({1: "seq"} if kind == "text" else {})
    report: dict[str, Any] = {
        "model": spec.name,
        "exporter": "torch.onnx TorchScript exporter (dynamo=False), opset 17",
        "eager_attention": switched,
        "optimizer_model_type": OPTIMIZER_MODEL_TYPES[kind],
        "num_heads": heads,
        "hidden_size": hidden,
        "torch": torch.__version__,
        "onnxruntime": ort.__version__,
    }
    with atomic_path(out_path) as tmp:
        start = time.perf_counter()
        with warnings.catch_warnings():  # the TorchScript exporter is deprecated; it is the one the fusions know
            warnings.simplefilter("ignore")
            torch.onnx.export(
                module,
                tuple(torch.from_numpy(example[n]) for n in names),
                str(tmp),
                dynamo=False,
                input_names=names,
                output_names=[spec.output_name],
                dynamic_axes=dynamic_axes,
                opset_version=17,
            )
        report["export_s"] = time.perf_counter() - start
        start = time.perf_counter()
        log.info("fusing (model type %s, %d heads, hidden %d)", OPTIMIZER_MODEL_TYPES[kind], heads, hidden)
        optimized = optimize_model(
            str(tmp), model_type=OPTIMIZER_MODEL_TYPES[kind], num_heads=heads, hidden_size=hidden, opt_level=0
        )
        report["fuse_s"] = time.perf_counter() - start
        report["fused_operators"] = {k: v for k, v in optimized.get_fused_operator_statistics().items() if v}
        optimized.save_model_to_file(str(tmp))
        report["onnx_nodes"] = len(onnx.load(str(tmp)).graph.node)

        check = make_inputs(spec.inputs, check_batch, check_seq_len, 1)
        with torch.inference_mode():
            reference = module(**{k: torch.from_numpy(v) for k, v in check.items()}).numpy()
        session = ort.InferenceSession(str(tmp), providers=["CPUExecutionProvider"])
        actual = session.run(None, check)[0]
        error = relative_l2(actual, reference) if actual.shape == reference.shape else float("inf")
        report |= {"check_batch": check_batch, "rel_l2": error, "max_rel_l2": max_rel_l2}
        if not error <= max_rel_l2:
            raise ExportParityError(
                f"{spec.name}: the fused ONNX model differs from PyTorch at batch {check_batch}: relative L2 "
                f"{error:.3g} > allowed {max_rel_l2:.3g} (shapes {actual.shape} vs {reference.shape})"
            )
    log.info("fused: %s", report["fused_operators"])
    return report
