"""Output parity: every cell's engine is run once on fixed reference inputs and compared with the FP32
eager output of the same workload. A cell out of tolerance is ``invalid``: it keeps its timings but never
counts as a speed-up.

The reference holds a few rows; a batch of any size is those rows repeated (inference computes every
row independently), so one small reference per workload and sequence length serves every batch size.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from inferbench.core.fsutil import atomic_path
from inferbench.models.registry import InputSpec, load_checkpoint, make_inputs

REFERENCE_SEED = 1234


def roc_auc(labels: np.ndarray, scores: np.ndarray) -> float:
    """Area under the ROC curve via the Mann-Whitney U statistic (ties get average ranks)."""
    from scipy.stats import rankdata  # here: the registries that import this module stay light

    labels = np.asarray(labels).astype(bool)
    n_pos, n_neg = int(labels.sum()), int((~labels).sum())
    if n_pos == 0 or n_neg == 0:
        return float("nan")
    ranks = rankdata(scores)
    return float((ranks[labels].sum() - n_pos * (n_pos + 1) / 2) / (n_pos * n_neg))


#: held-out rows every cell scores again: a random sample of the split (it is shuffled) of at most this many,
#: so that a cell at batch 1 on the whole Kaggle dataset does not make 270,000 calls before it is timed
HELDOUT_ROWS = 10_000


def save_heldout(heldout: dict[str, np.ndarray], out: str | Path) -> None:
    """A trained model's held-out rows and labels (npz: ``x``, ``labels``), the first ``HELDOUT_ROWS``."""
    with atomic_path(out) as tmp, tmp.open("wb") as fh:
        np.savez(fh, **{name: values[:HELDOUT_ROWS] for name, values in heldout.items()})


def make_reference(
    checkpoint: str | Path,
    inputs: tuple[InputSpec, ...],
    seq_len: int,
    rows: int,
    out: str | Path,
    heldout: str | Path | None = None,
) -> None:
    """FP32 eager outputs on the CPU for ``rows`` seeded input rows, saved with the inputs (npz); with a
    trained model's ``heldout`` rows (``save_heldout``), those and their labels too (``heldout_*``)."""
    spec, _ = load_checkpoint(checkpoint)
    feed = make_inputs(inputs, rows, seq_len, REFERENCE_SEED)
    import torch

    tensors = {k: torch.from_numpy(v) for k, v in feed.items()}
    with torch.inference_mode():
        output = spec.module(**tensors).float().numpy()
    extra = {}
    if spec.output_name == "next_token_logits":  # a decoder: its greedy tokens too, through transformers' generate
        extra["tokens"] = greedy_tokens(spec.module.model, tensors, REFERENCE_TOKENS)
    if heldout is not None:
        with np.load(heldout) as data:
            extra |= {"heldout_x": data["x"], "heldout_labels": data["labels"]}
    with atomic_path(out) as tmp, tmp.open("wb") as fh:
        np.savez(fh, output=output, **extra, **{f"input_{k}": v for k, v in feed.items()})


def load_heldout(path: str | Path) -> tuple[np.ndarray, np.ndarray] | None:
    """A trained model's held-out rows and labels from its reference (None: the model was not trained)."""
    with np.load(path) as data:
        if "heldout_x" not in data.files:
            return None
        return data["heldout_x"], data["heldout_labels"]


def heldout_batches(rows: np.ndarray, batch: int) -> list[np.ndarray]:
    """``rows`` in calls of exactly ``batch`` rows (engines built for one shape take no other), the last
    one filled up with the first rows; the caller keeps the first ``len(rows)`` outputs."""
    count = -(-len(rows) // batch)
    index = np.arange(count * batch) % len(rows)
    return [np.ascontiguousarray(rows[index[i * batch : (i + 1) * batch]]) for i in range(count)]


#: the greedy tokens a decoder's reference keeps: a generation cell's first tokens must equal them
REFERENCE_TOKENS = 8


def greedy_tokens(model: Any, feed: dict[str, Any], count: int) -> np.ndarray:
    """``count`` tokens per row picked greedily by transformers' ``generate`` (no stop before ``count``)."""
    import torch

    with torch.inference_mode():
        out = model.generate(
            **feed, max_new_tokens=count, min_new_tokens=count, do_sample=False, pad_token_id=0
        )  # fmt: skip
    return out[:, feed["input_ids"].shape[1] :].numpy()


def load_reference_tokens(path: str | Path, batch: int) -> tuple[dict[str, np.ndarray], np.ndarray] | None:
    """A decoder's reference prompts and greedy tokens, tiled to ``batch`` rows (None: not a decoder's)."""
    with np.load(path) as data:
        if "tokens" not in data.files:
            return None
        tokens = data["tokens"]
    inputs, _ = load_reference(path, batch)
    return inputs, tokens[np.arange(batch) % tokens.shape[0]]


def load_reference(path: str | Path, batch: int) -> tuple[dict[str, np.ndarray], np.ndarray]:
    """Reference inputs and outputs tiled to ``batch`` rows."""
    with np.load(path) as data:
        inputs = {k.removeprefix("input_"): data[k] for k in data.files if k.startswith("input_")}
        output = data["output"]
    rows = output.shape[0]
    index = np.arange(batch) % rows
    return {k: np.ascontiguousarray(v[index]) for k, v in inputs.items()}, output[index]


def compare(actual: np.ndarray, reference: np.ndarray) -> dict[str, Any]:
    """Max absolute error, relative L2 error, cosine similarity; top-1 agreement for (batch, classes)."""
    if actual.shape != reference.shape:
        return {"shape": list(actual.shape), "reference_shape": list(reference.shape), "rel_l2": float("inf")}
    a, r = actual.astype(np.float64).ravel(), reference.astype(np.float64).ravel()
    norm_r, norm_a = np.linalg.norm(r), np.linalg.norm(a)
    metrics: dict[str, Any] = {
        "max_abs": float(np.max(np.abs(a - r))) if a.size else 0.0,
        "rel_l2": float(np.linalg.norm(a - r) / norm_r) if norm_r > 0 else float(np.linalg.norm(a)),
        "cosine": float(a @ r / (norm_a * norm_r)) if norm_a > 0 and norm_r > 0 else float("nan"),
        "finite": bool(np.isfinite(a).all()),
    }
    if actual.ndim == 2 and actual.shape[1] > 1:
        metrics["top1_agreement"] = float((actual.argmax(1) == reference.argmax(1)).mean())
    return metrics


def centred(values: np.ndarray) -> np.ndarray:
    """Each row less its mean: logits and their log-probabilities (logits less a constant per row, the
    log-sum-exp) become equal, so an engine that returns log-probabilities is held to the logits."""
    values = values.astype(np.float64)
    return values - values.mean(axis=-1, keepdims=True)


def violations(metrics: dict[str, Any], tolerance: dict[str, float]) -> list[str]:
    """What is out of tolerance (empty when the output is acceptable)."""
    problems = []
    if not metrics.get("finite", True):
        problems.append("non-finite outputs")
    if "reference_shape" in metrics:
        problems.append(f"output shape {metrics['shape']} differs from the reference {metrics['reference_shape']}")
        return problems
    if (limit := tolerance.get("max_rel_l2")) is not None and not metrics["rel_l2"] <= limit:
        problems.append(f"relative L2 error {metrics['rel_l2']:.3g} > {limit:g}")
    if (limit := tolerance.get("min_cosine")) is not None and not metrics["cosine"] >= limit:
        problems.append(f"cosine similarity {metrics['cosine']:.6f} < {limit:g}")
    top1 = metrics.get("top1_agreement")
    if (limit := tolerance.get("min_top1_agreement")) is not None and top1 is not None and top1 < limit:
        problems.append(f"top-1 agreement {top1:.3f} < {limit:g}")
    return problems
