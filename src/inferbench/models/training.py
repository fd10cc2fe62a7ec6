"""Train the tabular MLP on a processed dataset; held-out AUC and accuracy are saved beside the weights."""

from __future__ import annotations

import logging
import time
from typing import Any

import numpy as np
import pandas as pd
import torch

from inferbench.models.parity import roc_auc
from inferbench.models.registry import ModelSpec, create_model

log = logging.getLogger(__name__)


def train_mlp(
    workload: str,
    table: pd.DataFrame,
    hidden: list[int] | None = None,
    epochs: int = 10,
    batch_size: int = 256,
    lr: float = 1e-3,
    seed: int = 0,
    test_fraction: float = 0.2,
) -> tuple[ModelSpec, dict[str, Any], dict[str, np.ndarray]]:
    """Train on a seeded split of ``table`` (features + ``target``); return the model, its metrics and the
    held-out rows (``x``, ``labels``): every engine's cell scores them again, so that a precision's or an
    engine's AUC is that of the model as it ran (inferbench.scenarios.prepare.check_parity)."""
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
    return spec, metrics, {"x": features[test_idx], "labels": y_test}
