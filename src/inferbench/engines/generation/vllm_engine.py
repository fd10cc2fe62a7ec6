"""vLLM, the engine many small LLMs are served with: the decoder's checkpoint saved in transformers'
layout and loaded by ``vllm.LLM`` (its own model code, paged KV cache, CUDA graphs for the decode step
unless ``enforce_eager``), run as its users run it: the engine core in its own process, scheduling
asynchronously (vLLM's defaults), requests driven through the ``LLMEngine`` loop ``LLM.generate`` runs.

``LLM.generate`` adds the requests and calls ``LLMEngine.step`` until they finish; each call hands back
the outputs of one iteration of the engine core (a prefill, or one decode token for every running request),
as a streaming server receives them. ``start`` and ``step`` drive that same loop, stopping when every row
has one more token, so that each token is timed on the host clock as it arrives. That the stepping costs
nothing against ``LLM.generate`` itself is measured in every cell (``plain_request``; the scenario records
both). Prefix caching is off: the timed requests rotate through a few seeded prompts, whose prefills a
cache would skip.

vLLM keeps what torch.compile made (``VLLM_CACHE_ROOT``) and reuses it in later processes of the same model
and configuration (its cache key hashes both and vLLM's own code): the cache lives beside the saved
checkpoint, and the record says whether a process found it.

vLLM returns log-probabilities, not logits: the parity call asks for the first token's over the whole
vocabulary, which equal the logits up to a constant per row (the check compares both centred).
Random-weight models have no tokenizer; vLLM takes token ids and is started without one.
"""

from __future__ import annotations

import contextlib
import faulthandler
import importlib.util
import itertools
import json
import math
import os
import re
import signal
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from inferbench.catalog.engines import engine_files_dir
from inferbench.engines.base import cuda_unavailable_reason
from inferbench.engines.generation import VllmOptions
from inferbench.engines.generation.exports import ExportedDecoder, checkpoint_digest, made_once
from inferbench.machine.scratch import scratch_folder
from inferbench.models.registry import InputSpec
from inferbench.trackers.kernel_trace import annotated_kernels

#: vLLM's dtype for each of our precisions, and the bytes of one weight
VLLM_DTYPE = {"fp16": ("float16", 2), "bf16": ("bfloat16", 2)}
#: how the engine core's process starts (``VLLM_WORKER_MULTIPROC_METHOD``): a fresh interpreter, not a fork of
#: the cell's process
ENGINE_CORE_START = "spawn"
#: scheduler steps a request may take to make one token before the engine is called stuck: a prefill
#: split into chunks takes several, a decode token one
MAX_STEPS_PER_TOKEN = 64


#: a call into vLLM's engine outside the timed requests that has not returned after this long (they take
#: seconds) ends the process, every thread's stack written to the cell's log first: a cell's process once
#: waited on its engine core for 9 minutes, the GPU idle, nothing saying where; the cell then fails with a
#: reason instead of holding the machine until the stall watchdog's timeout
STALL_DUMP_S = 180


def compile_cache_dir(checkpoint_dir: Path) -> Path:
    """Where vLLM keeps what torch.compile made for a saved checkpoint (``VLLM_CACHE_ROOT``): beside it, so that
    every process of the model, and vLLM's own benchmarks run at a cell's arguments, find it."""
    return Path(checkpoint_dir).parent / "vllm-cache"


def engine_arguments(
    config: Any, batch: int, prompt: int, new_tokens: int, options: VllmOptions, precision: str
) -> dict[str, Any]:
    """vLLM's engine arguments for a cell of ``batch`` rows of ``prompt`` tokens making ``new_tokens`` each, from
    the model's ``config`` (transformers'): in-process (``LLM(**args)``) and behind ``vllm serve`` alike."""
    # room for the longest request under load too (its lengths within a range ratio below 1 of the prompt and new
    # tokens), within the model's positions
    positions = getattr(config, "max_position_embeddings", None) or 2 * (prompt + new_tokens)
    max_model_len = min(2 * (prompt + new_tokens), positions)
    return {
        "dtype": VLLM_DTYPE[precision][0],
        "seed": 0,
        "max_model_len": max_model_len,
        "max_num_seqs": batch,
        "max_num_batched_tokens": max(batch * max_model_len, 2048),  # a batch's prefill in one step
        "gpu_memory_utilization": float(options.gpu_memory_utilization),
        "enforce_eager": bool(options.enforce_eager),
        "enable_prefix_caching": False,
    }


def decode_iteration(rows: int) -> re.Pattern[str]:
    """The annotation of an iteration of vLLM's worker that decodes ``rows`` requests and prefills none
    (``execute_context_<requests>(<tokens>)_generation_<requests>(<tokens>)``, vLLM 0.24's gpu_worker)."""
    return re.compile(rf"execute_context_0\(0\)_generation_{rows}\({rows}\)")


#: the share of the GPU's memory the tracing engine takes beside the timed one (weights, a small KV cache)
TRACE_GPU_MEMORY = 0.2
#: a tracing process that has not finished after this long is ended, its threads' stacks and its engine core's
#: written to its log first (faulthandler, on SIGABRT); long enough for an engine's start, which compiles
#: (docs/generation.md, vLLM, says how long that takes)
TRACE_TIMEOUT_S = 300
#: the tracing process: a fresh engine with vLLM's torch profiler, the request twice, then once profiled
TRACE_SCRIPT = """
import json, os, sys
from vllm import LLM, SamplingParams
a = json.load(open(sys.argv[1]))
llm = LLM(model=a["model"], skip_tokenizer_init=True, disable_log_stats=True, profiler_config={
    "profiler": "torch", "torch_profiler_dir": a["trace_dir"], "torch_profiler_with_stack": False,
    "torch_profiler_use_gzip": False, "torch_profiler_dump_cuda_time_total": False, "ignore_frontend": True,
}, **a["engine_args"])
prompts = [{"prompt_token_ids": p} for p in a["prompts"]]
params = SamplingParams(max_tokens=a["new_tokens"], temperature=0.0, detokenize=False, ignore_eos=True)
for _ in range(2):
    llm.generate(prompts, params, use_tqdm=False)
llm.start_profile()
llm.generate(prompts, params, use_tqdm=False)
llm.stop_profile()
print("traced", flush=True)
os._exit(0)  # the trace is written; the engine's teardown adds nothing
"""


def _run_traced(arguments: Path, log: Path) -> None:
    """``TRACE_SCRIPT`` in a process group of its own (its engine core with it), ended with its stacks
    dumped if it outlives ``TRACE_TIMEOUT_S``."""
    env = dict(os.environ, PYTHONFAULTHANDLER="1")
    with log.open("w") as out:
        process = subprocess.Popen(
            [sys.executable, "-c", TRACE_SCRIPT, str(arguments)], stdout=out, stderr=subprocess.STDOUT, env=env,
            start_new_session=True,
        )  # fmt: skip
        try:
            code = process.wait(timeout=TRACE_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGABRT)  # faulthandler writes every thread's stack to the log
                with contextlib.suppress(subprocess.TimeoutExpired):
                    process.wait(timeout=5)
                os.killpg(process.pid, signal.SIGKILL)  # its engine core too
            process.wait()
            raise RuntimeError(
                f"vLLM's tracing process had not finished after {TRACE_TIMEOUT_S} s: {_tail(log)}"
            ) from None
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)  # its engine core, where os._exit left it behind
    if code != 0:
        raise RuntimeError(f"vLLM's tracing process failed ({code}): {_tail(log)}")


def _tail(log: Path, chars: int = 3000) -> str:
    return log.read_text(errors="replace")[-chars:] if log.exists() else "(no log)"


@contextlib.contextmanager
def _stacks_dumped_after(seconds: float) -> Iterator[None]:
    faulthandler.dump_traceback_later(seconds, exit=True, file=sys.stderr)
    try:
        yield
    finally:
        faulthandler.cancel_dump_traceback_later()


@dataclass
class VllmRequest:
    """The rows of one batch, each a vLLM request, with the tokens each has made so far."""

    ids: list[str]
    #: the prompt's length, in tokens
    prompt: int
    tokens: dict[str, list[int]] = field(default_factory=dict)

    def made(self) -> int:
        """Tokens every row has (the least of them)."""
        return min(len(self.tokens.get(i, ())) for i in self.ids)


class StepDriver:
    """Drives an ``LLMEngine``-like object (``add_request``, ``step``, ``abort_request``,
    ``has_unfinished_requests``) a scheduler step at a time, collecting each request's tokens."""

    def __init__(self, engine: Any) -> None:
        self.engine = engine
        self._numbers = itertools.count()
        self._open: set[str] = set()  # requests added and not finished

    def add(self, prompts: list[list[int]], params: Any) -> VllmRequest:
        if self.engine.has_unfinished_requests():  # a request left half-way (an interrupted warm-up)
            self.engine.abort_request(sorted(self._open))
        number = next(self._numbers)
        request = VllmRequest([f"{number}-{row}" for row in range(len(prompts))], len(prompts[0]))
        for request_id, prompt in zip(request.ids, prompts, strict=True):
            self.engine.add_request(request_id, {"prompt_token_ids": prompt}, params)
        self._open = set(request.ids)
        return request

    def until(self, request: VllmRequest, tokens: int) -> list[Any]:
        """Step until every row has ``tokens`` tokens; returns the outputs seen."""
        outputs: list[Any] = []
        for _ in range(MAX_STEPS_PER_TOKEN):
            if request.made() >= tokens:
                return outputs
            if not self._open.intersection(request.ids):  # an idle engine's step waits for output forever
                raise RuntimeError(f"the request finished with {request.made()} tokens a row; {tokens} were asked")
            for output in self.engine.step():
                if output.request_id in self._open:
                    request.tokens[output.request_id] = list(output.outputs[0].token_ids)
                    outputs.append(output)
                    if output.finished:
                        self._open.discard(output.request_id)
        if request.made() < tokens:
            raise RuntimeError(f"vLLM made no token in {MAX_STEPS_PER_TOKEN} scheduler steps")
        return outputs


class Vllm(ExportedDecoder):
    options: VllmOptions

    graph = "vllm"
    run_description = (
        "the prefill through vLLM: the prompt's token ids in, the first token's log-probabilities over the "
        "vocabulary back on the host"
    )
    run_gives_log_probabilities = True
    #: the engine core issues every step in its own process (inferbench.scenarios.generation.measure.step_split)
    steps_in_another_process = True
    kernel_trace_description = (
        "vLLM's torch profiler in the engine core of an engine built for it in a fresh process from the cell's "
        "engine arguments, over one request (LLM.generate) after two; the steps that decode every row, told "
        "apart by the annotation vLLM's worker gives each iteration"
    )
    plain_request_description = "LLM.generate: the request's rows added at once, the engine stepped to the end"

    @classmethod
    def unavailable_reason(cls, device: str, precision: str) -> str | None:
        if importlib.util.find_spec("vllm") is None:  # found without importing: vLLM's import is slow
            return (
                "vLLM is not installed here (`pip install vllm`: Linux, a CUDA GPU, and the torch version its "
                "wheel was built against; its CPU backend is a build of its own)"
            )
        if device == "cuda":
            return cuda_unavailable_reason()
        return None

    def prepare(self, artifact: Path | None, inputs: tuple[InputSpec, ...], example: dict[str, np.ndarray]) -> None:
        size = VLLM_DTYPE[self.precision][1]
        lm = self.load_decoder(artifact, size)
        self.vocab_size = int(lm.config.vocab_size)
        with self.cold_start("export"):
            folder = self.checkpoint_dir = self._saved(artifact, lm)
        # torch.compile's output, kept for the next process of this model and configuration (vLLM's own key)
        cache = compile_cache_dir(folder)
        self.compile_cache = "reused" if (cache / "torch_compile_cache").is_dir() else "made"
        os.environ["VLLM_CACHE_ROOT"] = str(cache.resolve())
        # where the engine core writes its kernel traces (traced_kernels), empty between them; named after this
        # process, so that the next process removes it if this one is killed (inferbench.machine.scratch)
        self._trace_scratch = scratch_folder(folder.parent, "vllm-trace-")
        self.trace_dir = Path(self._trace_scratch.name)
        with self.cold_start("import_vllm"):  # here, not with the cell's libraries: after VLLM_CACHE_ROOT
            from vllm import LLM, SamplingParams

        batch, prompt = example["input_ids"].shape
        self.engine_args = engine_arguments(lm.config, batch, prompt, self.new_tokens, self.options, self.precision)
        # the engine core started fresh, as a user's is: vLLM forks it from the caller where CUDA is not yet
        # initialized, and a fork of this process would carry the harness into it (the libraries the warm
        # start loaded, the FP32 model above)
        os.environ["VLLM_WORKER_MULTIPROC_METHOD"] = ENGINE_CORE_START
        with self.cold_start("engine"):  # its process started, weights loaded, KV cache allocated, graphs captured
            self.llm = LLM(
                model=str(folder),
                skip_tokenizer_init=True,
                max_logprobs=self.vocab_size,
                disable_log_stats=True,
                **self.engine_args,
            )
        if self.compile_cache == "made" and (cache / "torch_compile_cache").is_dir():
            # torch.compile ran from nothing in the engine's start: a first process that did primes the cell
            # (inferbench.engines.base.PRIMING_STEPS)
            self.cold_start_s["compile"] = self.cold_start_s.pop("engine")
        self.driver = StepDriver(self.llm.llm_engine)
        self._served: dict[str, list[int]] = {}  # under load: each finished request's tokens, until read
        self.sampling_params = SamplingParams
        self.greedy = {"temperature": 0.0, "detokenize": False, "ignore_eos": True}
        self.generate_params = self._params(self.new_tokens)
        self.logprob_params = self._params(1, logprobs=self.vocab_size)
        config = self.llm.llm_engine.vllm_config
        self.block_size = int(config.cache_config.block_size)
        self.async_scheduling = bool(config.scheduler_config.async_scheduling)

    def _params(self, max_tokens: int, **extra: Any) -> Any:
        """vLLM's sampling parameters for a request: greedy, exactly ``max_tokens`` tokens (no stop at EOS), ids
        only, a new object each call."""
        return self.sampling_params(max_tokens=max_tokens, **self.greedy, **extra)

    def _saved(self, artifact: Path | None, lm: Any) -> Path:
        """The checkpoint in transformers' layout (config.json, safetensors) for vLLM to load, saved once."""
        folder = engine_files_dir(self.options.model_dir) / f"{checkpoint_digest(artifact, self.impl)}-{self.precision}"

        def save(scratch: Path) -> Path:
            lm.save_pretrained(scratch / "hf", safe_serialization=True)
            return scratch / "hf"

        return made_once(folder, "config.json", save)

    def stream(self) -> Any:
        """None: vLLM computes on streams of its own and hands every step's tokens to the host, so each
        token is timed on the host clock, where a server's caller sees it."""
        return None

    def stage(self, batch: dict[str, np.ndarray]) -> list[list[int]]:
        return [[int(t) for t in row] for row in batch["input_ids"]]  # vLLM takes host token ids

    def run(self, staged: list[list[int]]) -> np.ndarray:
        request = self.driver.add(staged, self.logprob_params)
        outputs = {o.request_id: o for o in self.driver.until(request, 1)}
        return np.stack([self._log_probabilities(outputs[i].outputs[0].logprobs[0]) for i in request.ids])

    def _log_probabilities(self, by_token: Any) -> np.ndarray:
        """One position's log-probabilities, vLLM's {token: Logprob} as an array over the vocabulary."""
        row = np.full(self.vocab_size, -math.inf, dtype=np.float32)
        for token, logprob in by_token.items():
            row[token] = logprob.logprob
        if not np.isfinite(row).all():
            got = len(by_token)
            raise RuntimeError(f"vLLM returned {got} log-probabilities of a {self.vocab_size}-token vocabulary")
        return row

    def start(self, staged: list[list[int]]) -> VllmRequest:
        request = self.driver.add(staged, self.generate_params)
        self.driver.until(request, 1)
        return request

    def step(self, request: VllmRequest) -> VllmRequest:
        self.driver.until(request, request.made() + 1)
        return request

    def plain_request(self, staged: list[list[int]]) -> Any:
        """The request as vLLM's users make it: ``LLM.generate``, to the last token."""
        with _stacks_dumped_after(STALL_DUMP_S):
            # parameters of its own: LLM.generate sets the ones it is given to hand back final outputs only, and
            # the stepped requests that shared them then saw no token until their last (vLLM 0.24)
            params = self._params(self.new_tokens)
            return self.llm.generate([{"prompt_token_ids": p} for p in staged], params, use_tqdm=False)

    def traced_decode_steps(self, staged: list[list[int]]) -> list[list[tuple[float, float]]]:
        """The kernels (start, end µs) of each decode step of one request, as vLLM's profiler traced them in an
        engine of their own: a fresh process (``TRACE_SCRIPT``) builds the engine from this cell's arguments with
        vLLM's torch profiler configured (``TRACE_GPU_MEMORY`` of the GPU: this engine keeps its own), answers
        the request twice, then once profiled. Not in the timed engine: twice a cell's process waited on its
        engine core for minutes after a ``stop_profile``, and a profiler configured there
        would run in the engine users time. The iterations are told apart by the annotation vLLM's worker
        gives each (``execute_context_<n>(<tokens>)_generation_<n>(<tokens>)``): the steps that decode every
        row and prefill none. A batch's rows reach the engine core one by one, so its prefill may span
        iterations that decode some rows too; those are left out."""
        decode_only = decode_iteration(len(staged))
        folder = self.trace_dir
        arguments = {
            "model": str(self.checkpoint_dir),
            "engine_args": self.engine_args | {"gpu_memory_utilization": TRACE_GPU_MEMORY},
            "trace_dir": str(folder),
            "prompts": staged,
            "new_tokens": int(self.new_tokens),
        }
        (folder / "arguments.json").write_text(json.dumps(arguments))
        log = folder / "trace.log"
        try:
            _run_traced(folder / "arguments.json", log)
            traces = [
                p for p in folder.iterdir() if p.name.endswith((".json", ".json.gz")) and p.name != "arguments.json"
            ]
            if not traces:
                raise RuntimeError(f"vLLM's profiler wrote no trace into {folder}: {_tail(log)}")
            return [steps for trace in traces for steps in annotated_kernels(trace, decode_only)]
        finally:
            for path in folder.iterdir():
                path.unlink()

    def generated(self, request: VllmRequest) -> np.ndarray:
        return np.array([request.tokens[i] for i in request.ids], dtype=np.int64)

    def cache_bytes(self, request: VllmRequest) -> int:
        """The KV cache blocks the request's rows occupy at their longest (vLLM reserves a pool up front,
        ``gpu_memory_utilization`` of the GPU, and hands blocks of ``block_size`` positions out of it)."""
        blocks = math.ceil((request.prompt + self.new_tokens) / self.block_size)
        return len(request.ids) * blocks * self.block_size * self._kv_bytes_per_position

    def computation(self, workload_kind: str) -> dict[str, Any]:
        eager = bool(self.options.enforce_eager)
        return super().computation(workload_kind) | {
            "precision_mode": "cast" if self.precision != "fp32" else None,
            "cuda_graph": self.device == "cuda" and not eager,
        }

    # -- under load (a step-driven scenario): the same LLMEngine loop LLM.generate runs,
    # requests added as they arrive; the engine core in its own process batches them continuously, as vLLM
    # schedules them (a request added while a step's outputs are awaited reaches it as that call returns)

    def serve_add(self, request_id: str, prompt: list[int], max_tokens: int) -> None:
        """A request for ``max_tokens`` greedy tokens after ``prompt``, no stop at EOS."""
        params = self._params(max_tokens)
        self.llm.llm_engine.add_request(request_id, {"prompt_token_ids": list(prompt)}, params)

    def serve_step(self) -> list[tuple[str, int, bool]]:
        """The outputs of one iteration of the engine core: (request id, tokens made, finished) of each
        request that made a token in it."""
        made = []
        for output in self.llm.llm_engine.step():
            tokens = output.outputs[0].token_ids
            if output.finished:
                self._served[output.request_id] = list(tokens)
            made.append((output.request_id, len(tokens), bool(output.finished)))
        return made

    def serve_busy(self) -> bool:
        return bool(self.llm.llm_engine.has_unfinished_requests())

    def serve_tokens(self, request_id: str) -> list[int]:
        """The tokens a finished request made (forgotten once read)."""
        return self._served.pop(request_id)

    def describe(self) -> dict[str, Any]:
        import vllm

        return super().describe() | {
            "vllm": vllm.__version__,
            "engine_core": f"its own process (vLLM's default), started by {ENGINE_CORE_START}",
            "async_scheduling": self.async_scheduling,
            "compile_cache": self.compile_cache,
            "engine_args": self.engine_args,
            "checkpoint_dir": str(self.checkpoint_dir),
        }
