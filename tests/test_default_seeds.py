"""The default run answers the five seed studies: its cells cover each seed's axes on a GPU machine (the
CPU side of seeds 000, 003 and 004 measured there too), and on a CPU machine the GPU halves are named as
needing a GPU rather than left out in silence."""

from __future__ import annotations

import pytest
import yaml

from inferbench.catalog.layouts import study_percentiles
from inferbench.core.cells import CellKey
from inferbench.plan.config import validate_config
from inferbench.plan.grid import config_cells, resolved_studies, study_cells
from tests.conftest import REPO

pytestmark = pytest.mark.fast  # pure logic: the developer's loop (docs/contributing.md)


@pytest.fixture(scope="module")
def default() -> dict:
    return validate_config(yaml.safe_load((REPO / "config" / "config.yaml").read_text()))


def cells(config: dict, has_cuda: bool) -> set[tuple]:
    """(workload, engine, precision, device, batch, seq) of every cell the default makes."""
    return {(c.workload, c.engine, c.precision, c.device, c.batch_size, c.seq_len)
            for c in config_cells(config, has_cuda)}  # fmt: skip


def computes(config: dict, engine: str) -> dict:
    """An engine variant's options (what it computes with)."""
    return config["engines"][engine]


def test_seed_000_loan_mlp_on_ort_cpu_cuda_and_tensorrt_at_batch_1_to_10000_on_one_gpu_machine(default):
    made = cells(default, has_cuda=True)
    for batch in (1, 10, 100, 1000, 10000):
        for engine, device in (("ort_cpu", "cpu"), ("ort_cuda", "cuda"), ("ort_trt", "cuda")):
            assert ("mlp_lendingclub", engine, "fp32", device, batch, 0) in made, (engine, batch)


def test_seed_001_resnet50_and_vit_in_fp32_and_fp16_eager_and_torchscript_at_batch_32(default):
    made = cells(default, has_cuda=True)
    for workload in ("resnet50", "vit_b16"):
        for engine in ("torch_eager", "torchscript"):
            for precision in ("fp32", "fp16"):
                assert (workload, engine, precision, "cuda", 32, 0) in made, (workload, engine, precision)


def test_seed_002_baseline_against_amp_channels_last_and_compile_alone_and_together(default):
    made = cells(default, has_cuda=True)
    inference = {(e, p) for w, e, p, d, b, _ in made if w == "resnet50" and d == "cuda" and b == 32}
    variants = {(e, p): computes(default, e) for e, p in inference}
    # the baseline, and each optimisation alone: AMP (eager fp16), channels-last (eager fp32), compile (fp32)
    assert ("torch_eager", "fp32") in variants and ("torch_eager", "fp16") in variants
    assert any(o.get("channels_last") and o["engine"] == "torch_eager" and p == "fp32"
               for (_, p), o in variants.items())  # fmt: skip
    assert any(o["engine"] == "torch_compile" and not o.get("channels_last") and p == "fp32"
               for (_, p), o in variants.items())  # fmt: skip
    # the three together
    assert any(o["engine"] == "torch_compile" and o.get("channels_last") and p == "fp16"
               for (_, p), o in variants.items())  # fmt: skip
    training = {e for w, e, p, d, b, _ in made if w == "resnet50" and computes(default, e)["engine"] == "torch_train"}
    assert {"train", "train_fast"} <= training
    studies = resolved_studies(default, has_cuda=True)
    assert "p95" in studies["gpu_efficiency"]["percentiles"]


def test_seed_003_encoders_on_ort_cpu_and_cuda_at_two_batches_and_three_lengths_with_p99(default):
    made = cells(default, has_cuda=True)
    study = resolved_studies(default, has_cuda=True)["transformers"]
    assert len(study["seq_lens"]) >= 3 and {"p90", "p99"} <= set(study_percentiles(study))
    for workload in ("bert_base", "distilbert"):
        for engine, device in (("ort_cpu", "cpu"), ("ort_cuda", "cuda")):
            for batch in (1, 8):
                for seq in study["seq_lens"]:
                    assert (workload, engine, "fp32", device, batch, seq) in made


def test_seed_004_heart_mlp_epochs_on_cpu_and_gpu(default):
    made = cells(default, has_cuda=True)
    trains_epochs = {e for e in default["engines"] if computes(default, e)["engine"] == "torch_train_epoch"}
    epochs = {d for w, e, _, d, _, _ in made if w == "mlp_heart" and e in trains_epochs}
    assert {"cpu", "cuda"} <= epochs


def test_cpu_only_engines_keep_their_cells_on_a_gpu_machine(default):
    """The studies that name the CPU (`devices: [cpu]`, or `[cpu, auto]`: they span devices) keep every CPU cell
    on a GPU machine, unless they are questions for CPU machines alone (`skip_with_gpu`); a study on `auto`
    alone moves to the GPU, as a user with a GPU wants it."""
    on_gpu = cells(default, has_cuda=True)
    for name in default["run"]:
        study = default["studies"][name]
        if "cpu" in study["devices"] and not study["skip_with_gpu"]:
            mine = {(c.workload, c.engine, c.precision, c.device, c.batch_size, c.seq_len)
                    for c in study_cells(study, default["engines"], has_cuda=False)}  # fmt: skip
            assert mine <= on_gpu, name
    assert any(c[1] == "ort_cpu" and c[3] == "cpu" for c in on_gpu)


def test_on_a_cpu_machine_the_gpu_halves_are_named_as_needing_a_gpu(default):
    studies = resolved_studies(default, has_cuda=False)
    for name in ("vision_fp16", "gpu_efficiency", "gpu_training"):
        assert studies[name]["left_out"] == [{"what": "every cell", "why": "needs a GPU, and none is visible here"}]
    for name in ("loan_default", "transformers", "heart_training"):
        assert {"what": "the GPU side", "why": "needs a GPU, and none is visible here"} in studies[name]["left_out"]
    # the cells a CPU machine makes are CPU cells only
    assert all(isinstance(c, CellKey) and c.device == "cpu" for c in config_cells(default, has_cuda=False))
