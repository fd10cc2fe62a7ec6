"""Generation engines: a decoder LM (an ``llm:`` workload) answering a request token by token, greedy.

A generation engine runs the model and keeps its KV cache; the generation scenario
(inferbench.scenarios.generation) decides how a request is timed: ``start`` (the prefill: the prompt in,
the first token out), then ``step`` once per further token. The code is in this package's modules,
imported only when a cell runs.
"""

from dataclasses import dataclass

from inferbench.catalog.engines import EngineInfo, EngineOptions, option, precision_mode
from inferbench.engines.pytorch import COMPILE_MODES, TorchEngineOptions

#: the most tokens a request may generate: a request of a billion held the machine lock for the watchdog's
#: whole timeout; a decoder's positions (prompt + new_tokens) bound it further (inferbench.plan.config)
MAX_NEW_TOKENS = 4096


@dataclass(frozen=True)
class GenerationOptions(EngineOptions):
    """What every generation engine takes: how many tokens a request generates (the output length)."""

    new_tokens: int = option(
        32,
        "tokens each request generates after its prompt (greedy, no stop at EOS)",
        minimum=2,
        maximum=MAX_NEW_TOKENS,
    )


@dataclass(frozen=True)
class HfGenerateOptions(GenerationOptions, TorchEngineOptions):
    # fp16/bf16 weights, as LLMs are served
    precision_mode: str = precision_mode("cast")


@dataclass(frozen=True)
class HfGenerateStaticOptions(HfGenerateOptions):
    mode: str = option("reduce-overhead", "torch.compile mode of the decode step", COMPILE_MODES)


@dataclass(frozen=True)
class OrtGenAIOptions(GenerationOptions):
    model_dir: str = option("results/engines/ort_genai", "where the builder's exports are kept", engine_folder=True)


@dataclass(frozen=True)
class VllmOptions(GenerationOptions):
    gpu_memory_utilization: float = option(
        0.5,
        "the share of the GPU's memory vLLM takes for weights and its KV-cache pool",
        minimum=0,
        exclusive=True,
        maximum=1,
    )
    enforce_eager: bool = option(False, "no CUDA graphs: every decode step launched kernel by kernel")
    model_dir: str = option(
        "results/engines/vllm", "where the checkpoint is saved for vLLM to load", engine_folder=True
    )


ENGINES = {
    "hf_generate": EngineInfo(
        "inferbench.engines.generation.transformers:HfGenerate",
        ("cpu", "cuda"),
        ("fp32", "fp16", "bf16"),
        "checkpoint",
        "transformers eager: the model's forward with its dynamic KV cache, one token per step, greedy on the device",
        mode="generate",
        workload_kinds=("decoder",),
        libraries=("torch", "transformers"),
        options_type=HfGenerateOptions,
    ),
    "hf_generate_static": EngineInfo(
        "inferbench.engines.generation.transformers:HfGenerateStatic",
        ("cpu", "cuda"),
        ("fp32", "fp16", "bf16"),
        "checkpoint",
        "transformers with a static KV cache and the decode step under torch.compile (reduce-overhead: CUDA "
        "graphs on a GPU), as transformers documents; the prefill runs eager",
        mode="generate",
        workload_kinds=("decoder",),
        libraries=("torch", "transformers"),
        options_type=HfGenerateStaticOptions,
        compiles=True,
    ),
    "ort_genai": EngineInfo(
        "inferbench.engines.generation.ort_genai:OrtGenAI",
        ("cpu", "cuda"),
        ("fp32", "fp16", "bf16"),
        "checkpoint",
        "ONNX Runtime GenAI: the decoder exported by its model builder, generated with its Generator (greedy)",
        mode="generate",
        workload_kinds=("decoder",),
        libraries=("onnxruntime_genai", "torch", "transformers"),
        exported_context="ONNX Runtime GenAI's context_length",
        options_type=OrtGenAIOptions,
    ),
    "vllm": EngineInfo(
        "inferbench.engines.generation.vllm_engine:Vllm",
        ("cpu", "cuda"),
        ("fp16", "bf16"),
        "checkpoint",
        "vLLM: the checkpoint loaded by vllm.LLM (its model code, paged KV cache, CUDA graphs for decode), "
        "requests stepped through its engine one scheduler iteration at a time (greedy)",
        mode="generate",
        workload_kinds=("decoder",),
        # not vllm itself: its engine core must be told to stay in-process before vLLM is imported
        libraries=("torch", "transformers"),
        options_type=VllmOptions,
    ),
}
