"""Model registry, checkpoints, MLP training and ONNX export parity (shrunk architectures)."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pandas as pd
import pytest
import torch

from inferbench.models import create_model, list_models, make_inputs
from inferbench.models.export import ExportParityError, export_onnx, relative_l2
from inferbench.models.parity import roc_auc
from inferbench.models.registry import load_checkpoint, save_checkpoint
from inferbench.models.training import train_mlp

TINY = {
    "mlp_heart": {"in_features": 22},
    "resnet50": {"layers": [1, 1, 1, 1]},
    "vit_b16": {"depth": 1},
    "bert_base": {"num_hidden_layers": 2, "hidden_size": 64, "num_attention_heads": 2, "intermediate_size": 128},
    "distilbert": {"n_layers": 1, "dim": 64, "n_heads": 2, "hidden_dim": 128},
}


def test_registry_lists_all_workloads_and_rejects_unknown():
    assert list_models() == ["bert_base", "distilbert", "mlp_heart", "mlp_lendingclub", "resnet50", "vit_b16"]
    with pytest.raises(KeyError, match="unknown model 'resnet18'"):
        create_model("resnet18")


def test_make_inputs_shapes_and_seeding():
    spec = create_model("bert_base", **TINY["bert_base"])
    a = make_inputs(spec.inputs, batch=3, seq=17, seed=5)
    assert a["input_ids"].shape == (3, 17) and a["input_ids"].dtype == np.int64
    assert a["input_ids"].max() < spec.module.model.config.vocab_size
    assert (a["attention_mask"] == 1).all()
    assert np.array_equal(a["input_ids"], make_inputs(spec.inputs, 3, 17, 5)["input_ids"])


def test_checkpoint_round_trip(tmp_path):
    spec = create_model("resnet50", seed=1, **TINY["resnet50"])
    save_checkpoint(spec, tmp_path / "m.pt", seed=1, meta={"note": "x"})
    loaded, meta = load_checkpoint(tmp_path / "m.pt")
    x = torch.from_numpy(make_inputs(spec.inputs, 2, 0, 0)["x"])
    with torch.inference_mode():
        assert torch.equal(spec.module(x), loaded.module(x))
    assert meta == {"note": "x"}


def test_checkpoint_restores_buffers_outside_the_state_dict(tmp_path):
    # BERT keeps position ids in a non-persistent buffer; loading builds on the meta device, so the
    # checkpoint must carry it; a buffer it lacks is refused rather than left uninitialised
    spec = create_model("bert_base", **TINY["bert_base"])
    save_checkpoint(spec, tmp_path / "b.pt", seed=0)
    loaded, _ = load_checkpoint(tmp_path / "b.pt")
    assert not any(t.is_meta for t in [*loaded.module.parameters(), *loaded.module.buffers()])
    inputs = {k: torch.from_numpy(v) for k, v in make_inputs(spec.inputs, 2, 9, 0).items()}
    with torch.inference_mode():
        assert torch.equal(spec.module(**inputs), loaded.module(**inputs))
    payload = torch.load(tmp_path / "b.pt", weights_only=True)
    del payload["extra_buffers"]["model.embeddings.position_ids"]
    torch.save(payload, tmp_path / "broken.pt")
    with pytest.raises(ValueError, match=r"no saved values for .*position_ids"):
        load_checkpoint(tmp_path / "broken.pt")
    del payload["extra_buffers"]  # a checkpoint from before they were saved: built the slow way
    torch.save(payload, tmp_path / "old.pt")
    old, _ = load_checkpoint(tmp_path / "old.pt")
    with torch.inference_mode():
        assert torch.equal(spec.module(**inputs), old.module(**inputs))


@pytest.mark.parametrize("name", sorted(TINY))
def test_export_parity_on_larger_batch_than_example(name, tmp_path):
    spec = create_model(name, **TINY[name])
    report = export_onnx(spec, tmp_path / f"{name}.onnx", example_batch=2, check_batch=5, check_seq_len=21)
    assert report["rel_l2"] < 1e-5 and report["simplified"]
    session = ort.InferenceSession(str(tmp_path / f"{name}.onnx"), providers=["CPUExecutionProvider"])
    for axis in session.get_inputs()[0].shape[:1]:
        assert isinstance(axis, str)  # the batch dimension stayed symbolic
    if name in ("bert_base", "distilbert"):
        assert isinstance(session.get_inputs()[0].shape[1], str)
    # and it runs at batch 1 too (a batch-1 example could have specialised this)
    feed = make_inputs(spec.inputs, 1, 9, 2)
    with torch.inference_mode():
        ref = spec.module(**{k: torch.from_numpy(v) for k, v in feed.items()}).numpy()
    assert relative_l2(session.run(None, feed)[0], ref) < 1e-5


def test_export_parity_gate_rejects_and_leaves_no_file(tmp_path):
    spec = create_model("mlp_heart", **TINY["mlp_heart"])
    with pytest.raises(ExportParityError, match="relative L2 error"):
        export_onnx(spec, tmp_path / "m.onnx", max_rel_l2=1e-30, simplify=False)
    assert list(tmp_path.iterdir()) == []


def test_roc_auc_known_values():
    assert roc_auc(np.array([0, 0, 1, 1]), np.array([0.1, 0.2, 0.8, 0.9])) == 1.0
    assert roc_auc(np.array([0, 0, 1, 1]), np.array([0.9, 0.8, 0.2, 0.1])) == 0.0
    assert roc_auc(np.array([0, 1, 0, 1]), np.array([0.5, 0.5, 0.5, 0.5])) == 0.5
    assert roc_auc(np.array([0, 1, 1]), np.array([0.3, 0.2, 0.4])) == 0.5


def test_mlp_learns_a_separable_signal():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(600, 5)).astype(np.float32)
    table = pd.DataFrame(x, columns=[f"f{i}" for i in range(5)])
    table["target"] = (x[:, 0] + 0.5 * x[:, 1] > 0).astype(int)
    spec, metrics, heldout = train_mlp("mlp_heart", table, hidden=[16], epochs=30, batch_size=32, lr=0.01)
    assert len(heldout["x"]) == len(heldout["labels"]) == metrics["n_test"]
    assert metrics["n_test"] == 120 and metrics["n_train"] == 480
    assert metrics["test_auc"] > 0.95 and metrics["test_accuracy"] > 0.85
    assert spec.arch == {"in_features": 5, "hidden": [16]}
