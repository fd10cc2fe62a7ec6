"""Typed engine options: each implementation declares its options (inferbench.engines.registry); a
misspelled option, an option of another engine or a value of the wrong type stops the run before any
job, naming the allowed keys; engines and records carry the effective options, defaults included."""

from __future__ import annotations

import ast
import copy
import dataclasses
import inspect
import json
import subprocess
import sys
import textwrap

import pytest
import yaml

from inferbench.engines.registry import ENGINES, load_engine_class, option_problems
from inferbench.plan.config import ConfigError, validate_config
from tests.conftest import REPO

pytestmark = pytest.mark.fast  # pure logic: the developer's loop (docs/contributing.md)

BASE = yaml.safe_load((REPO / "config" / "config.yaml").read_text())


def config_with(**variants: dict) -> dict:
    config = copy.deepcopy(BASE)
    config["engines"].update(variants)
    return config


def test_a_misspelled_option_is_rejected_with_the_allowed_keys():
    config = config_with(ort_cuda_host={"engine": "ort_cuda", "io_bindng": False})
    with pytest.raises(ConfigError) as error:
        validate_config(config)
    message = str(error.value)
    assert "engines.ort_cuda_host: 'io_bindng' is not an option of ort_cuda" in message
    assert (
        "allowed keys: fusions, io_binding, tf32, cuda_graph, prefer_nhwc, cudnn_conv_algo_search, engine, devices,"
        " precisions" in message
    )


def test_an_option_of_another_engine_is_rejected_naming_its_owner():
    config = config_with(torch_eager={"engine": "torch_eager", "workers": 2})
    with pytest.raises(
        ConfigError, match=r"'workers' is not an option of torch_eager \(an option of torch_train_epoch\)"
    ):
        validate_config(config)


@pytest.mark.parametrize(
    ("variant", "message"),
    [
        ({"engine": "torch_train_epoch", "workers": True}, "workers: True is not a int"),
        ({"engine": "torch_train_epoch", "workers": -1}, "workers: -1 must be >= 0"),
        ({"engine": "torch_compile", "mode": "fastest"}, "mode: 'fastest' is not one of default, reduce-overhead"),
        ({"engine": "ort_cuda", "io_binding": "no"}, "io_binding: 'no' is not a bool"),
        ({"engine": "torch_train", "lr": 0}, "lr: 0 must be > 0"),
        ({"engine": "torch_train", "lr": float("nan")}, "lr: nan is not a finite number"),
        (
            {"engine": "ort_trt", "cache_dir": "/etc/cron.d"},
            "cache_dir: '/etc/cron.d' must be a relative path under results/engines/",
        ),
        ({"engine": "ort_trt", "cache_dir": "results/../../x"}, "must be a relative path under results/engines/"),
        ({"engine": "tensorrt", "workspace_gib": float("inf")}, "workspace_gib: inf is not a finite number"),
    ],
)
def test_values_of_the_wrong_type_or_range_are_rejected(variant, message):
    assert any(message in problem for problem in option_problems(variant["engine"], variant))


def test_every_variant_of_the_shipped_configs_is_valid():
    for name, variant in BASE["engines"].items():
        assert option_problems(variant["engine"], variant) == [], name


def test_engines_carry_their_effective_options_defaults_included():
    from inferbench.engines.ort.engine import OrtCuda
    from inferbench.engines.pytorch.torchscript import TorchScript

    assert OrtCuda("cuda", "fp32", 0, {"engine": "ort_cuda"}).options.as_dict() == {
        "io_binding": True,
        "tf32": "all",  # the CUDA provider's own default
        "fusions": False,
        "cuda_graph": False,
        "prefer_nhwc": False,
        "cudnn_conv_algo_search": "EXHAUSTIVE",
    }
    script = TorchScript("cpu", "fp16", 1, {"engine": "torchscript", "channels_last": True})
    assert script.options.channels_last is True and script.options.optimize is True  # read by attribute
    assert script.options.as_dict() == {
        "channels_last": True,
        "tf32": "conv",  # PyTorch's default
        "precision_mode": "cast",
        "optimize": True,
        "host_memory": "pageable",  # the host input a caller hands over, by default as the data loader makes it
        "host_dtype": "fp32",
        "host_overlap": False,
    }
    assert script.computation("vision")["precision_mode"] == "cast"
    assert set(ENGINES["torch_train_epoch"].options) > set(ENGINES["torch_train"].options)


def test_typed_options_refuse_what_the_engine_does_not_declare():
    from inferbench.engines.ort.engine import OrtCpu, OrtCuda

    ort_cpu = OrtCpu("cpu", "fp32", 1, {"engine": "ort_cpu"})
    with pytest.raises(AttributeError, match="io_bindng"):
        ort_cpu.options.io_bindng  # noqa: B018  (a misspelled option is an error, never a silent default)
    # so is an option of another engine of the family: nothing supplies a default for it
    with pytest.raises(AttributeError, match="cuda_graph"):
        ort_cpu.options.cuda_graph  # noqa: B018
    assert ort_cpu.cuda_graph is False and "cuda_graph" not in ort_cpu.options.as_dict()
    with pytest.raises(dataclasses.FrozenInstanceError):
        ort_cpu.options.fusions = True
    assert ENGINES["torch_train"].typed_options({"lr": 1}).lr == 1.0  # a float option holds a float
    assert isinstance(ENGINES["torch_train"].typed_options({"lr": 1}).lr, float)
    # a class and its registry entry cannot disagree: the class says no name; the variant's engine must be it
    with pytest.raises(TypeError, match="is not the class of engine 'ort_cpu'"):
        OrtCuda("cuda", "fp32", 0, {"engine": "ort_cpu"})


def test_run_cell_refuses_a_misspelled_option_before_measuring(tmp_path):
    out = tmp_path / "cell.json"
    result = subprocess.run(
        [sys.executable, "-m", "inferbench", "run-cell", "--workload", "mlp_heart", "--engine", "x",
         "--engine-options", json.dumps({"engine": "torch_eager", "chanels_last": True}),
         "--precision", "fp32", "--device", "cpu", "--batch", "1", "--out", str(out)],
        capture_output=True, text=True, cwd=tmp_path, env={"PYTHONPATH": str(REPO / "src"), "PATH": ""},
    )  # fmt: skip
    assert result.returncode == 2
    assert "'chanels_last' is not an option of torch_eager; allowed keys: " in result.stderr
    assert "channels_last" in result.stderr.split("allowed keys: ")[1]
    assert not out.exists()


def options_read(engine_class: type) -> set[str]:
    """The options (``self.options.<name>``) that the code of ``engine_class`` reads: each method as its
    classes resolve it, the first of the package's classes in its method order that defines it."""
    read: set[str] = set()
    resolved: set[str] = set()
    for klass in engine_class.__mro__:
        if klass.__module__.split(".")[0] not in ("inferbench", "tests"):
            continue  # the libraries' classes (ABC, object) read no option
        body = ast.parse(textwrap.dedent(inspect.getsource(klass))).body[0].body  # type: ignore[attr-defined]
        for method in (node for node in body if isinstance(node, ast.FunctionDef) and node.name not in resolved):
            resolved.add(method.name)
            read |= {
                node.attr
                for node in ast.walk(method)
                if isinstance(node, ast.Attribute)
                and isinstance(node.value, ast.Attribute)
                and node.value.attr == "options"
                and isinstance(node.value.value, ast.Name)
                and node.value.value.id == "self"
            }
    return read - {"as_dict"}


def test_the_walk_finds_the_options_a_class_reads_as_its_methods_resolve():
    class Base:
        def a(self):
            return self.options.base_only

        def b(self):
            return self.options.shared

    class Child(Base):
        def a(self):  # replaces Base.a: base_only is never read for Child
            return self.options.child_only

    assert options_read(Child) == {"child_only", "shared"}


@pytest.mark.parametrize("impl", sorted(ENGINES))
def test_an_engine_reads_only_the_options_it_declares(impl):
    # no fallback supplies an option an engine lacks: code shared by engines that differ in their options
    # lives in a class of those that take them (e.g. inferbench.engines.pytorch.eager.TorchInference)
    assert options_read(load_engine_class(impl)) <= set(ENGINES[impl].options)
