"""Every workload sized and every decoder checked before any job (issue 56, item 4): parameters counted on
the meta device against a stated limit and this machine's memory, an llm: decoder's arch and lengths
(prompt + new_tokens within its positions and ONNX Runtime GenAI's context), decoder types only, llm:
workloads beside generation engines only, engine options with maxima, and a generation cell that beats the
stall watchdog through a long request, named as generating when it stalls."""

from __future__ import annotations

import copy
import multiprocessing
import re
import time

import numpy as np
import pytest
import yaml

from inferbench.core.cells import CellKey
from inferbench.core.settings import MeasureSettings
from inferbench.engines.registry import ENGINES
from inferbench.machine import watchdog
from inferbench.machine.lock import MachineLock
from inferbench.plan import sizing
from inferbench.plan.config import ConfigError, validate_config
from inferbench.scenarios.generation import measure as generation
from inferbench.scenarios.prepare import CellRequest, PreparedCell
from tests.conftest import REPO

pytestmark = pytest.mark.fast  # meta-device counts and fake engines: no weights, no workflow run

DEFAULT = yaml.safe_load((REPO / "config" / "config.yaml").read_text())
#: a GPT-2 small enough to count in a blink, 64 positions
GPT2 = {"n_layer": 1, "n_embd": 32, "n_head": 2, "n_positions": 64, "vocab_size": 128}
LLAMA = {"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4,
         "num_key_value_heads": 2, "vocab_size": 128, "max_position_embeddings": 64}  # fmt: skip


@pytest.fixture(autouse=True)
def fresh_counts():
    """Counts are cached per process: a test that fakes one must not leave it to the next."""
    sizing._size.cache_clear()
    yield
    sizing._size.cache_clear()


def refusal(workload, arch=None, engines=("hf_eager",), seq_lens=(8,), variants=None, precisions=("fp32",)):
    """What validate_config says of a config that runs one study of ``workload`` (None: it is valid)."""
    cfg = copy.deepcopy(DEFAULT)
    cfg["studies"]["probe"] = {
        "layout": "generation" if workload.startswith("llm:") and "ort_cpu" not in engines else "engines",
        "workloads": [workload], "engines": list(engines), "precisions": list(precisions), "devices": ["cpu"],
        "batch_sizes": [1], "seq_lens": list(seq_lens), "threads": [1],
    }  # fmt: skip
    cfg["run"] = ["probe"]
    cfg["engines"].update(variants or {})
    if arch is not None:
        cfg["models"][workload] = {"arch": arch}
    try:
        validate_config(cfg)
    except ConfigError as error:
        return str(error)
    return None


def test_an_llm_default_past_the_decoder_limit_is_refused_with_its_count_the_limit_and_the_fix():
    # qwen2's default is 12 billion parameters: 48 GB in fp32, OOM-killed in build_model before
    message = refusal("llm:qwen2", precisions=("fp32", "bf16"))
    limit = f"{sizing.MAX_DECODER_PARAMETERS / 1e9:g} billion allowed for llm: decoders"
    assert "llm:qwen2: 12.0 billion parameters (48 GB of random fp32 weights) is more than the " + limit in message
    assert "at bf16 its weights take 24.1 GB" in message and "KV cache" in message
    assert "shrink it in models.llm:qwen2.arch (e.g. num_hidden_layers, hidden_size)" in message
    # shrunk, it passes; the README's TinyLlama-shaped llm:llama fits as it is
    assert refusal("llm:qwen2", {"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
                                 "num_attention_heads": 4, "num_key_value_heads": 2}) is None  # fmt: skip
    assert refusal("llm:llama") is None


def test_a_deep_stack_is_counted_from_two_layers_and_refused_without_building_it(monkeypatch):
    built = []
    count = sizing._meta_count
    monkeypatch.setattr(
        sizing, "_meta_count", lambda w, arch: built.append(arch["num_hidden_layers"]) or count(w, arch)
    )
    message = refusal("llm:llama", {"num_hidden_layers": 2000})
    assert re.search(r"llm:llama: about 88\.\d billion parameters", message)
    assert built == [1, 2]  # never the 2,000 layers


def test_a_model_whose_fp32_weights_pass_this_machine_s_memory_is_refused(monkeypatch):
    # a fake type of a declared size stands in for a real large default: 1.5 billion parameters (under the
    # limit), 6 GB in fp32, on a machine of 4 GB
    monkeypatch.setattr(sizing, "_meta_count", lambda workload, arch: 1_500_000_000)
    monkeypatch.setattr(sizing, "host_memory_bytes", lambda: 4 * 10**9)
    message = refusal("llm:gpt2", precisions=("fp32", "fp16"))
    assert "llm:gpt2: 1.5 billion parameters (6 GB of random fp32 weights) is more than this machine's 4 GB" in message
    assert "at fp16 its weights take 3.0 GB" in message and "models.llm:gpt2.arch (e.g. n_layer, n_embd)" in message
    monkeypatch.setattr(sizing, "host_memory_bytes", lambda: 64 * 10**9)
    sizing._size.cache_clear()
    assert refusal("llm:gpt2") is None


@pytest.mark.parametrize(
    ("workload", "arch", "message"),
    [
        # every kind is sized: a timm model, a declared one given an arch, an MLP's hidden layers
        (
            "timm:resnet18",
            {"num_classes": 10**7},
            r"timm:resnet18: 5\.\d billion parameters .* than the 2 billion allowed; .*models\.timm:resnet18\.arch",
        ),
        ("vit_b16", {"depth": 100_000}, r"vit_b16: about \d+\.\d billion parameters"),
        ("mlp_heart", {"hidden": [100_000, 100_000]}, r"mlp_heart: at least 10\.0 billion parameters"),
        ("mlp_heart", {"hidden": [32, -1]}, r"models\.mlp_heart\.arch: hidden: \[32, -1\] must be a list of positive"),
        ("mlp_heart", {"hiden": [8]}, r"models\.mlp_heart\.arch: arch keys hiden are not taken by an MLP"),
        # an arch the builder refuses is said before any job, not in build_model
        ("resnet50", {"dept": 3}, r"models\.resnet50\.arch: the model cannot be built with it: .*dept"),
    ],
)
def test_every_workload_kind_is_sized_and_built_on_the_meta_device_before_any_job(workload, arch, message):
    found = refusal(workload, arch, engines=("torch_eager",), seq_lens=(8,))
    assert found is not None and re.search(message, found), found


def test_hf_encoders_keep_their_limit():
    assert "6.6 billion parameters (26 GB of random fp32 weights) is more than the 2 billion allowed" in refusal(
        "hf:llama", engines=("torch_eager",)
    )


@pytest.mark.parametrize(
    ("arch", "message"),
    [
        ({**LLAMA, "num_key_value_heads": 3}, "num_key_value_heads 3 does not divide num_attention_heads 4 (each "
         "key/value head serves an equal share of the attention heads); give one of 1, 2, 4"),
        ({**LLAMA, "hidden_size": 30}, "hidden_size 30 is not a multiple of num_attention_heads 4 (each attention "
         "head takes hidden_size / num_attention_heads dimensions); give e.g. hidden_size 28 or 32"),
        ({**LLAMA, "num_hidden_layers": -1}, "models.llm:llama.arch.num_hidden_layers: -1 must be a positive integer"),
        ({**LLAMA, "intermediate_size": 0}, "models.llm:llama.arch.intermediate_size: 0 must be a positive integer"),
        ({**LLAMA, "num_hiden_layers": 1}, "models.llm:llama.arch.num_hiden_layers: not a key of transformers' llama "
         "config (LlamaConfig); did you mean num_hidden_layers?"),
        # the builder's shape (TinyLlama's 4 key/value heads) counts: 6 heads cannot share them
        ({"num_attention_heads": 6, "hidden_size": 60}, "num_key_value_heads 4 does not divide num_attention_heads 6"),
    ],
)  # fmt: skip
def test_an_llm_arch_that_would_fail_late_is_refused_by_key_and_fix(arch, message):
    found = refusal("llm:llama", arch)
    assert found is not None and message in found, found


def test_gpt2_s_heads_are_checked_under_its_own_keys():
    found = refusal("llm:gpt2", {**GPT2, "n_embd": 30, "n_head": 4})
    assert "n_embd 30 is not a multiple of n_head 4" in found


@pytest.mark.parametrize(
    ("workload", "message"),
    [
        ("llm:t5", "transformers has no causal language model (AutoModelForCausalLM) of type 't5'"),
        ("llm:vit", "transformers has no causal language model (AutoModelForCausalLM) of type 'vit'"),
        # in transformers' causal-LM mapping as BertLMHeadModel, yet an encoder: it was measured as a decoder
        ("llm:bert", "bert is an encoder: transformers maps it to a masked LM, and its causal-LM class "
         "(BertLMHeadModel) is the encoder made a decoder for fine-tuning"),
        ("llm:roberta", "roberta is an encoder"),
        ("llm:bart", "bart is an encoder-decoder"),
    ],
)  # fmt: skip
def test_only_decoder_lm_types_are_llm_workloads(workload, message):
    found = refusal(workload)
    assert found is not None and f"studies.probe.workloads[0]: {message}" in found, found


def test_a_prompt_and_new_tokens_past_the_decoder_s_positions_are_refused():
    # GPT-2: 60 + 8 past its 64 positions was a bare IndexError in the first call
    found = refusal(
        "llm:gpt2", GPT2, seq_lens=(32, 60), variants={"hf_eager": {"engine": "hf_generate", "new_tokens": 8}}
    )
    assert (
        "studies.probe.seq_lens: prompts [60] + engines.hf_eager.new_tokens 8 exceed llm:gpt2's 64 positions "
        "(n_positions); list prompts up to 56, lower engines.hf_eager.new_tokens, or give the model more in "
        "models.llm:gpt2.arch.n_positions"
    ) in found
    assert (
        refusal("llm:gpt2", GPT2, seq_lens=(56,), variants={"hf_eager": {"engine": "hf_generate", "new_tokens": 8}})
        is None
    )
    # the engine's default new_tokens (32) counts where the variant sets none
    assert "prompts [40] + engines.hf_eager.new_tokens 32 exceed" in refusal("llm:gpt2", GPT2, seq_lens=(40,))


def test_onnx_runtime_genai_s_max_length_past_its_context_length_is_refused_before_any_job():
    # "max_length (68) > context_length (64)" came from the exported model, after the export
    found = refusal("llm:llama", LLAMA, engines=("ort_genai",), seq_lens=(60,),
                    variants={"ort_genai": {"engine": "ort_genai", "new_tokens": 8}})  # fmt: skip
    assert (
        "prompts [60] + engines.ort_genai.new_tokens 8 exceed llm:llama's 64 positions (max_position_embeddings)"
        in found
    )
    assert "which is ONNX Runtime GenAI's context_length" in found
    assert sizing.context_length(type("C", (), {"seq_length": 48, "max_position_embeddings": 64})()) == 48


def test_an_llm_workload_beside_no_generation_engine_is_refused_with_the_engines_that_run_it():
    found = refusal("llm:gpt2", GPT2, engines=("ort_cpu",))
    generation_engines = [name for name, info in ENGINES.items() if info.mode == "generate"]
    assert (
        "studies.probe.workloads[0]: llm:gpt2 is a decoder LM, and ort_cpu (ort_cpu) is not a generation engine; "
        f"llm: workloads run on generation engines: {', '.join(generation_engines)}"
    ) in found
    assert "no cells" not in found
    # and a generation engine in a study of encoders only
    found = refusal("bert_base", engines=("torch_eager", "hf_eager"))
    assert "studies.probe.engines[1]: hf_eager (hf_generate) runs decoder workloads (a generation engine" in found


@pytest.mark.parametrize(
    ("variant", "message"),
    [
        # a billion tokens held the machine lock for the watchdog's 30 minutes
        ({"engine": "hf_generate", "new_tokens": 10**9}, "new_tokens: 1000000000 must be <= 4096"),
        ({"engine": "openvino", "num_streams": 2**40}, "num_streams: 1099511627776 must be <= 1024"),
    ],
)
def test_engine_options_have_maxima(variant, message):
    cfg = copy.deepcopy(DEFAULT)
    cfg["engines"]["probe"] = variant
    with pytest.raises(ConfigError, match=re.escape(f"engines.probe: {message}")):
        validate_config(cfg)


def test_the_default_config_counts_nothing_on_the_meta_device(monkeypatch):
    # its declared models at their declared shapes fit; counting them would import torch in every dry run
    monkeypatch.setattr(sizing, "_meta_count", lambda workload, arch: pytest.fail(f"{workload} counted"))
    validate_config(copy.deepcopy(DEFAULT))


class SlowDecoder:
    """A generation engine whose steps take ``step_s``, or never end from token ``hang_at`` on."""

    def __init__(self, new_tokens: int, step_s: float, hang_at: int | None = None) -> None:
        self.new_tokens, self.step_s, self.hang_at = new_tokens, step_s, hang_at

    def stage(self, batch):
        return batch

    def start(self, staged):
        return [0]

    def step(self, request):
        if self.hang_at is not None and len(request) >= self.hang_at:
            time.sleep(3600)
        time.sleep(self.step_s)
        return [*request, len(request)]

    def generated(self, request):
        return np.asarray([request])

    def cache_bytes(self, request):
        return 0

    def weight_bytes(self):
        return 1

    def decode_read_bytes(self):
        return 1


def _measure(engine: SlowDecoder) -> None:
    """The generation scenario on ``engine``, entered as the cell runner enters it: in its phase of any scenario."""
    watchdog.beat("measuring (single scenario: warm-up, timed calls)")
    key = CellKey("llm:gpt2", "hf_eager", "fp32", "cpu", 1, 4, 1)
    settings = MeasureSettings(warmup_s=0, min_time_s=0, min_iters=1, repeats=1)
    request = CellRequest(key, {"engine": "hf_generate"}, settings=settings)
    cell = PreparedCell(request, ENGINES["hf_generate"], engine, (), [{"input_ids": np.zeros((1, 4))}], MachineLock())
    generation.measure(cell)


def _watched(work, stall_timeout_s: float) -> str | None:
    """Why the watchdog ended a process doing ``work`` (None: it ended by itself)."""
    context = multiprocessing.get_context("fork")
    heartbeat = watchdog.Heartbeat(context)

    def child() -> None:
        watchdog.watch(heartbeat)
        watchdog.beat("starting")
        work()

    process = context.Process(target=child)
    process.start()
    return watchdog.wait_or_end_stalled(process, heartbeat, stall_timeout_s, poll_s=0.1)


def test_a_generation_request_longer_than_the_stall_timeout_beats_the_watchdog():
    # one request of 2.7 s (90 steps of 30 ms) against a watchdog that waits 2 s for a beat (the margin: a
    # loaded machine's scheduling)
    engine = SlowDecoder(new_tokens=91, step_s=0.03)
    assert _watched(lambda: generation.generate_request(engine, {"input_ids": np.zeros((1, 4))}, None), 2.0) is None


def test_a_stalled_generation_cell_is_named_as_generating_not_as_a_single_scenario(monkeypatch):
    monkeypatch.setattr(generation, "copy_bandwidth", lambda device: 1e10)
    why = _watched(lambda: _measure(SlowDecoder(new_tokens=81, step_s=0, hang_at=5)), stall_timeout_s=1.0)
    assert why is not None and "while generating (warm-up, then requests of 4 prompt + 81 new tokens)" in why
    assert "single scenario" not in why
