"""Every value with a limit is refused before any job, by key, value, limit and fix (issue 32, item 3 and
the first half of item 5): non-finite numbers, values past their range, configs that YAML aliases blow
up, sequence lengths past a model's positions, values that name a download, models too large to build."""

from __future__ import annotations

import copy
import math
import os
import subprocess
import sys

import pytest
import yaml

from inferbench.core.cells import CellKey
from inferbench.plan.config import MAX_CONFIG_VALUES, ConfigError, model_positions, validate_config
from inferbench.scenarios.prepare import CellRequest, unavailable
from tests.conftest import REPO

pytestmark = pytest.mark.fast  # pure logic: the developer's loop (docs/contributing.md)

DEFAULT = yaml.safe_load((REPO / "config" / "config.yaml").read_text())


def invalid(mutate) -> str:
    cfg = copy.deepcopy(DEFAULT)
    mutate(cfg)
    with pytest.raises(ConfigError) as error:
        validate_config(cfg)
    return str(error.value)


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        # .inf warmed up forever while holding the machine's measuring lock
        (lambda c: c["measure"].update(warmup_s=math.inf), r"measure\.warmup_s: inf is not a finite number"),
        (lambda c: c["measure"].update(min_time_s=math.nan), r"measure\.min_time_s: nan is not a finite number"),
        # .inf killed the batcher thread and LoadGen waited forever
        (
            lambda c: c["serving"].update(max_queue_delay_ms=-math.inf),
            r"serving\.max_queue_delay_ms: -inf is not a finite number",
        ),
        (
            lambda c: c["engines"]["ort_cpu_wait8"].update(max_queue_delay_ms=math.inf),
            r"engines\.ort_cpu_wait8\.max_queue_delay_ms: inf is not a finite number",
        ),
        (lambda c: c["measure"].update(warmup_s=10_000), r"measure\.warmup_s: 10000 is too large; it must be <= 600"),
        (
            lambda c: c["serving"].update(max_queue_delay_ms=1e6),
            r"serving\.max_queue_delay_ms: 1000000.0 is too large; it must be <= 10,000",
        ),
        # a million threads grew one process to 3.6 GB with no record after 6 minutes
        (
            lambda c: c["studies"]["tabular"].update(threads=[2, 1_000_000]),
            r"studies\.tabular\.threads\[1\]: 1000000 is too large; it must be <= 1,024",
        ),
        (
            lambda c: c["studies"]["tabular"].update(batch_sizes=[10**9]),
            r"studies\.tabular\.batch_sizes\[0\]: 1000000000 is too large; it must be <= 1,048,576",
        ),
        (lambda c: c["measure"].update(repeats=1000), r"measure\.repeats: 1000 is too large; it must be <= 100"),
    ],
)
def test_non_finite_and_out_of_range_values_are_refused_by_key_and_limit(mutate, message):
    assert __import__("re").search(message, invalid(mutate))


def test_yaml_aliases_that_expand_past_the_limit_are_refused():
    # 9 levels of 10 aliases each: ~1e9 values from a few hundred bytes of YAML
    text = "a0: &a0 [1, 2, 3, 4, 5, 6, 7, 8, 9, 10]\n" + "".join(
        f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 10)}]\n" for i in range(1, 9)
    )
    bomb = yaml.safe_load(text)["a8"]
    message = invalid(lambda c: c["models"].update(resnet50={"arch": {"depths": bomb}}))
    assert f"more than {MAX_CONFIG_VALUES:,} values once its YAML aliases" in message


def test_sequence_lengths_past_the_models_positions_are_refused():
    message = invalid(lambda c: c["studies"]["transformers"].update(seq_lens=[128, 1024]))
    assert "studies.transformers.seq_lens: [1024] exceed bert_base's 512 positions" in message
    assert "models.bert_base.arch.max_position_embeddings" in message
    # more positions in arch make the length valid; fewer make a shorter one invalid
    cfg = copy.deepcopy(DEFAULT)
    cfg["studies"]["transformers"]["seq_lens"] = [1024]
    cfg["models"]["bert_base"] = {"arch": {"max_position_embeddings": 1024}}
    cfg["models"]["distilbert"] = {"arch": {"max_position_embeddings": 1024}}
    validate_config(cfg)
    assert model_positions("bert_base", {}) == 512
    assert model_positions("hf:big_bird", {}) == 4096  # an hf: family model: transformers' own default


@pytest.mark.parametrize(
    ("arch", "key"),
    [
        ({"architecture": "hf-hub:timm/resnet18.a1_in1k"}, "architecture"),
        ({"attn_implementation": "kernels-community/flash-attn3"}, "attn_implementation"),
        ({"backbone": "microsoft/resnet-50"}, "backbone"),
        ({"nested": {"url": "https://example.com/weights.bin"}}, "nested.url"),
    ],
)
def test_values_that_name_a_download_are_refused(arch, key):
    message = invalid(lambda c: c["models"].update(resnet50={"arch": arch}))
    assert f"models.resnet50.arch.{key}: " in message and "names something to download" in message


def test_hf_workloads_must_be_text_encoders_of_a_buildable_size():
    def run_hf(model_type, arch=None):
        def mutate(c):
            c["studies"]["text"]["workloads"] = [f"hf:{model_type}"]
            c["run"] = ["text"]
            if arch is not None:
                c["models"][f"hf:{model_type}"] = {"arch": arch}

        return mutate

    assert "the hf: family takes text encoders" in invalid(run_hf("vit"))
    assert "6.6 billion parameters (26 GB of random fp32 weights) is more than the 2 billion allowed" in invalid(
        run_hf("llama")
    )
    cfg = copy.deepcopy(DEFAULT)
    run_hf("llama", {"num_hidden_layers": 2, "hidden_size": 256, "intermediate_size": 512})(cfg)
    validate_config(cfg)


def test_a_cell_with_more_threads_than_its_cpus_is_unavailable_with_the_reason():
    cpus = len(os.sched_getaffinity(0))
    key = CellKey("mlp_heart", "torch_eager", "fp32", "cpu", 1, 0, cpus + 1)
    reason = unavailable(CellRequest(key, {"engine": "torch_eager"}))
    assert reason is not None and f"{cpus + 1} threads" in reason and f"may use {cpus} CPUs" in reason


def test_the_hub_is_offline_in_every_process_that_imports_inferbench():
    code = "import inferbench, huggingface_hub.constants as c; print(c.HF_HUB_OFFLINE)"
    env = {**os.environ, "HF_HUB_OFFLINE": "0", "PYTHONPATH": str(REPO / "src")}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True)
    assert out.stdout.strip() == "True"


@pytest.mark.parametrize("section", ["measure", "serving"])
def test_the_settings_classes_declare_each_default_once_and_the_schema_bounds_each_key(section):
    import dataclasses

    from inferbench.core.settings import SCHEMA, MeasureSettings
    from inferbench.plan.config import config_schema, declared_settings

    settings = {kind.SECTION: kind for kind in (MeasureSettings, *declared_settings())}[section]
    fields = {f.name: f for f in dataclasses.fields(settings)}
    in_file = yaml.safe_load(SCHEMA.read_text())["properties"][section]["properties"]
    assert set(in_file) == set(fields), "a key of one is not a key of the other"
    # the file bounds each key; its default and meaning are the class's alone
    assert all(spec and not {"default", "description"} & set(spec) for spec in in_file.values())
    read = config_schema()["properties"][section]["properties"]
    for name, field in fields.items():
        assert read[name]["description"] == field.metadata["help"] and field.metadata["help"]
        assert read[name].get("default", field.default) == field.default
    # a config that leaves the section out gets the class's defaults, and a bad value is still refused
    bare = copy.deepcopy(DEFAULT)
    bare.pop(section, None)
    filled = validate_config(bare)[section]
    assert filled and settings.from_dict(filled) == settings()
    message = invalid(lambda c: c[section].update({next(iter(in_file)): -1}))
    assert next(iter(in_file)) in message
