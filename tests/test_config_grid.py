"""Config validation messages and the cell grid."""

from __future__ import annotations

import copy

import pytest
import yaml

from inferbench.core.cells import CellKey
from inferbench.engines.registry import ENGINES
from inferbench.plan.config import ConfigError, validate_config
from inferbench.plan.grid import cell_scenario_settings, config_cells, resolve_devices
from tests.conftest import REPO

pytestmark = pytest.mark.fast  # pure logic: the developer's loop (docs/contributing.md)

DEFAULT = yaml.safe_load((REPO / "config" / "config.yaml").read_text())


def config(**studies):
    cfg = copy.deepcopy(DEFAULT)
    if studies:
        cfg["studies"] = studies
        cfg["run"] = list(studies)
    return cfg


def test_default_config_is_valid_and_gets_defaults():
    cfg = {
        "run": ["s"],
        "studies": {"s": {"workloads": ["resnet50"], "engines": ["e"], "batch_sizes": [1]}},
        "engines": {"e": {"engine": "torch_eager"}},
    }
    validate_config(cfg)
    study = cfg["studies"]["s"]
    assert study["precisions"] == ["fp32"] and study["devices"] == ["auto"] and study["threads"] == [2]
    assert cfg["measure"]["min_iters"] == 5 and cfg["export"]["example_batch"] == 2
    validate_config(config())


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (
            lambda c: c["studies"]["vision"].update(batch_sizes=[1, 0]),
            r"studies\.vision\.batch_sizes\[1\]: 0 is too small; it must be >= 1",
        ),
        (
            lambda c: c["studies"]["text"].update(engines=["torch_eager", "tensorrt_magic"]),
            r"studies\.text\.engines\[1\]: unknown engine 'tensorrt_magic'; defined engine variants .*ort_cpu",
        ),
        (
            lambda c: c["studies"]["vision"].update(workloads=["resnet50", "resnet18"]),
            r"studies\.vision\.workloads\[1\]: 'resnet18' is not allowed; allowed values: mlp_lendingclub, "
            r"mlp_heart, resnet50, vit_b16, bert_base, distilbert",
        ),
        (
            lambda c: c["studies"]["tabular"].update(threads=[-2]),
            r"studies\.tabular\.threads\[0\]: -2 is too small; it must be >= 1",
        ),
        (
            lambda c: c["studies"]["text"].update(precisions=["int4"]),
            r"studies\.text\.precisions\[0\]: 'int4' is not allowed; allowed values: fp32, fp16, bf16, int8",
        ),
        (
            lambda c: c["engines"].update(trt={"engine": "tensorrt9"}),
            # every implementation the registry found, in its order (each family's package adds its own)
            r"engines\.trt\.engine: 'tensorrt9' is not allowed; allowed values: " + ", ".join(ENGINES) + "$",
        ),
        (lambda c: c.update(run=["tabular", "nope"]), r"run\[1\]: unknown study 'nope'"),
        (lambda c: c["measure"].update(min_iters="ten"), r"measure\.min_iters: 'ten' has the wrong type"),
    ],
)
def test_invalid_config_names_key_and_allowed_values(mutate, message):
    cfg = config()
    mutate(cfg)
    with pytest.raises(ConfigError, match=message):
        validate_config(cfg)


def _study(**over):
    base = {
        "workloads": ["resnet50", "bert_base", "mlp_heart"],
        "engines": ["torch_eager", "ort_cpu"],
        "precisions": ["fp32", "fp16"],
        "devices": ["cpu", "cuda"],
        "batch_sizes": [1, 8],
        "seq_lens": [64, 128],
        "threads": [1, 4],
    }
    return base | over


def test_grid_excludes_combinations_that_never_make_sense():
    cfg = config(s=_study())
    validate_config(cfg)
    cells = config_cells(cfg, has_cuda=False)
    assert not [c for c in cells if c.engine == "ort_cpu" and (c.device == "cuda" or c.precision != "fp32")]
    assert {c.seq_len for c in cells if c.workload != "bert_base"} == {0}
    assert {c.seq_len for c in cells if c.workload == "bert_base"} == {64, 128}
    assert {c.threads for c in cells if c.device == "cuda"} == {0}
    # torch_eager: 2 precisions x (cpu 2 threads + cuda 1) x 2 batches x (1 + 1 + 2 seq) workload-seq pairs
    torch_cells = [c for c in cells if c.engine == "torch_eager"]
    assert len(torch_cells) == 2 * 3 * 2 * 4
    ort_cells = [c for c in cells if c.engine == "ort_cpu"]
    assert len(ort_cells) == 1 * 2 * 2 * 4
    assert len(cells) == len(set(cells))


def test_cell_in_two_studies_is_one_cell():
    a = _study(
        workloads=["resnet50"],
        engines=["torch_eager"],
        precisions=["fp32"],
        devices=["cpu"],
        batch_sizes=[1, 8],
        threads=[2],
    )
    b = a | {"batch_sizes": [8, 16]}
    cfg = config(a=a, b=b)
    validate_config(cfg)
    assert [c.batch_size for c in config_cells(cfg, has_cuda=False)] == [1, 8, 16]


def test_auto_device_resolution():
    assert resolve_devices(["auto"], has_cuda=False) == ["cpu"]
    assert resolve_devices(["auto", "cpu"], has_cuda=True) == ["cuda", "cpu"]
    assert resolve_devices(["cpu", "auto"], has_cuda=False) == ["cpu"]


INFERENCE = {"noop", "torch_eager", "torch_eager_cl", "torchscript", "torch_cudagraph", "torch_compile",
             "torch_compile_ro", "ort_cpu", "ort_cuda", "ort_cuda_host", "ort_trt", "tensorrt"}  # fmt: skip


def test_gpu_only_studies_and_variants_vanish_without_a_gpu():
    cfg = config()
    validate_config(cfg)
    cpu_cells = config_cells(cfg, has_cuda=False)
    assert {c.device for c in cpu_cells} == {"cpu"}
    assert {c.engine for c in cpu_cells} == {"torch_eager", "ort_cpu", "openvino", "train_epoch"}
    # seed 000's 5 ORT CPU batches + seed 003's 12 ORT CPU cells + seed 004's CPU epoch + 8 cpu_engines cells
    # (ORT and OpenVINO fp32 and int8, eager fp32, on 2 workloads; ORT fp32 LendingClub b1 shared with seed 000,
    # ORT fp32 DistilBERT b1 s32 with seed 003) + cpu_vision's 10 (the same five on ResNet-50 and ViT-B/16)
    assert len(cpu_cells) == 36
    assert {c.precision for c in cpu_cells if c.engine == "openvino"} == {"fp32", "int8"}
    assert {c.precision for c in cpu_cells if c.engine == "ort_cpu"} == {"fp32", "int8"}
    gpu_cells = config_cells(cfg, has_cuda=True)
    # the CPU halves of the studies that span devices stay on a GPU machine; the CPU runtimes' studies
    # (OpenVINO, int8, eager on the CPU: skip_with_gpu) are left to CPU machines
    assert {c.engine for c in gpu_cells if c.device == "cpu"} == {"ort_cpu", "train_epoch"}
    engines = {cfg["engines"][c.engine]["engine"] for c in gpu_cells}
    assert engines == {
        "torch_eager",
        "torchscript",
        "torch_compile",
        "ort_cpu",
        "ort_cuda",
        "ort_trt",
        "torch_train",
        "torch_train_epoch",
    }  # the seeds' engines; CUDA graphs and native TensorRT are the presets' (peak, repeatability)
    # a variant's `precisions` option narrows a study's precisions (compile alone is fp32 only)
    assert {c.precision for c in gpu_cells if c.engine == "torch_compile_plain"} == {"fp32"}
    assert {c.precision for c in gpu_cells if c.engine == "torch_compile"} == {"fp16"}
    # training: ResNet-50 fp32 baseline against bf16 AMP + channels-last + compile; heart epochs on
    # the CPU and the GPU (the `auto` device adds cuda beside cpu), the epoch engine only on tabular
    training = {c.cell_id for c in gpu_cells if cfg["engines"][c.engine]["engine"].startswith("torch_train")}
    assert {"resnet50/train-fp32/cuda/b32-s0-t0", "resnet50/train_fast-bf16/cuda/b32-s0-t0"} <= training
    assert {c.split("/")[2] for c in training if c.startswith("mlp_heart/train_epoch-")} == {"cpu", "cuda"}
    assert not [c for c in training if "train_epoch" in c and not c.startswith("mlp_")]
    # ort engines have no bf16: those combinations are left out, not recorded
    assert not [c for c in gpu_cells if c.engine.startswith("ort") and c.precision == "bf16"]


def test_tf32_cells_on_the_gpu_are_held_to_the_tf32_tolerance():
    from inferbench.plan.config import cell_tolerance

    cfg = config()
    validate_config(cfg)
    tolerances = cfg["parity"]["tolerances"]
    tf32 = cfg["engines"]["torch_eager_tf32"]
    assert cell_tolerance(tolerances, tf32, "fp32", "cuda") == {"max_rel_l2": 5.0e-3}
    assert cell_tolerance(tolerances, tf32, "fp32", "cpu") == {"max_rel_l2": 1.0e-4}, "no TF32 on the CPU"
    # PyTorch's default math has TF32 in convolutions: the baseline is held to the TF32 gate; strict fp32 is not
    assert cell_tolerance(tolerances, cfg["engines"]["torch_eager"], "fp32", "cuda") == {"max_rel_l2": 5.0e-3}
    assert cell_tolerance(tolerances, cfg["engines"]["torch_eager_strict"], "fp32", "cuda") == {"max_rel_l2": 1.0e-4}


def test_serving_studies_make_scenario_cells_with_the_tightest_bound():
    serve = _study(
        workloads=["mlp_heart"],
        engines=["ort_cpu", "ort_cpu_wait8", "train_epoch"],
        precisions=["fp32"],
        devices=["cpu"],
        batch_sizes=[1, 8],
        threads=[2],
        layout="serving",
        scenarios=["server", "offline"],
        latency_bound_ms=30,
    )
    tighter = serve | {"batch_sizes": [8], "scenarios": ["server"], "latency_bound_ms": 10}
    cfg = config(a=serve, b=tighter)
    validate_config(cfg)
    cells = config_cells(cfg, has_cuda=False)
    assert {c.scenario for c in cells} == {"server", "offline"}
    assert not [c for c in cells if c.engine == "train_epoch"], "training engines serve no queries"
    settings = cell_scenario_settings(cfg, has_cuda=False)
    assert set(settings) == set(cells)
    b8_server = CellKey("mlp_heart", "ort_cpu", "fp32", "cpu", 8, 0, 2, "server")
    assert settings[b8_server]["latency_bound_ms"] == 10, "a cell in two studies takes the tightest bound"
    b1_server = CellKey("mlp_heart", "ort_cpu", "fp32", "cpu", 1, 0, 2, "server")
    assert settings[b1_server]["latency_bound_ms"] == 30
    waits = {c.engine: s["max_queue_delay_ms"] for c, s in settings.items()}
    assert waits == {"ort_cpu": cfg["serving"]["max_queue_delay_ms"], "ort_cpu_wait8": 8}


@pytest.mark.parametrize(
    "study",
    [
        {"layout": "serving"},  # serving layout, single scenario
        {"scenarios": ["server"]},  # server cells in an engines section
        {"layout": "serving", "scenarios": ["single", "server"]},
    ],
)
def test_serving_and_single_cells_live_in_studies_of_their_own(study):
    cfg = config(s=_study(**study))
    with pytest.raises(ConfigError, match="studies of their own"):
        validate_config(cfg)
