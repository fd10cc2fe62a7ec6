"""Train the tabular MLP on a processed dataset; held-out AUC and accuracy are saved beside the weights."""

from __future__ import annotations

import logging
import time
from typing import Any

import numpy as np
import pandas as pd
import torch
from scipy.stats import rankdata

from inferbench.models.registry import ModelSpec, create_model

log = logging.getLogger(__name__)


def roc_auc(labels: np.ndarray, scores: np.ndarray) -> float:
    """Area under the ROC curve via the Mann-Whitney U statistic (ties get average ranks)."""
    labels = np.asarray(labels).astype(bool)
    n_pos, n_neg = int(labels.sum()), int((~labels).sum())
    if n_pos == 0 or n_neg == 0:
        return float("nan")
    ranks = rankdata(scores)
    return float((ranks[labels].sum() - n_pos * (n_pos + 1) / 2) / (n_pos * n_neg))


def train_mlp(
    workload: str,
    table: pd.DataFrame,
    hidden: list[int] | None = None,
    epochs: int = 10,
    batch_size: int = 256,
    lr: float = 1e-3,
    seed: int = 0,
    test_fraction: float = 0.2,
) -> tuple[ModelSpec, dict[str, Any]]:
    """Train on a seeded split of ``table`` (features + ``target``); return the model and its metrics."""
    features = table.drop(columns=["target"]).to_numpy(np.float32)
    labels = table["target"].to_numpy(np.int64)
    order = np.random.default_rng(seed).permutation(len(table))
    n_test = max(1, round(test_fraction * len(table)))
    test_idx, train_idx = order[:n_test], order[n_test:]

    arch = {"in_features": features.shape[1]} | ({"hidden": hidden} if hidden else {})
    spec = create_model(workload, seed=seed, **arch)
    model = spec.module.train()
    optimiser = torch.optim.Adam(model.parameters(), lr=lr)
    loss_fn = torch.nn.CrossEntropyLoss()
    x_train, y_train = torch.from_numpy(features[train_idx]), torch.from_numpy(labels[train_idx])
    generator = torch.Generator().manual_seed(seed)
    start = time.perf_counter()
    log.info("training %s on %d rows (%d features) for %d epochs", workload, len(train_idx), features.shape[1], epochs)
    for epoch in range(epochs):
        for batch in torch.randperm(len(x_train), generator=generator).split(batch_size):
            optimiser.zero_grad()
            loss = loss_fn(model(x_train[batch]), y_train[batch])
            loss.backward()
            optimiser.step()
        log.info(
            "epoch %d/%d: last batch loss %.4f (%.1f s)", epoch + 1, epochs, loss.item(), time.perf_counter() - start
        )
    train_s = time.perf_counter() - start
    model.eval()
    with torch.inference_mode():
        logits = model(torch.from_numpy(features[test_idx]))
        prob = torch.softmax(logits, dim=1)[:, 1].numpy()
    y_test = labels[test_idx]
    metrics = {
        "workload": workload,
        "n_train": len(train_idx),
        "n_test": len(test_idx),
        "n_features": features.shape[1],
        "positive_rate_test": float(y_test.mean()),
        "test_auc": roc_auc(y_test, prob),
        "test_accuracy": float(((prob > 0.5).astype(np.int64) == y_test).mean()),
        "epochs": epochs,
        "batch_size": batch_size,
        "lr": lr,
        "train_s": train_s,
        "final_train_loss": float(loss.item()),
    }
    return spec, metrics
