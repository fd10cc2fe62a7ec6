"""One-off probe (issue 57): does vLLM 0.24's torch profiler (LLM.start_profile / stop_profile, the engine core in
its own process) start twice in one engine, and what do its traces hold (kernels, per-iteration annotations)?
A cell's process hung after its first stop_profile on an H100 (2026-11-27): the second start never returned.

    python experiments/vllm_profile_probe/vllm_profile_probe.py MODEL_DIR MODE    (MODE: twice | once)
Prints one JSON line per profiled request: trace files, kernels, their union, annotation names seen.
"""

from __future__ import annotations

import collections
import json
import sys
import tempfile
import time
from pathlib import Path


def read(trace: Path) -> dict:
    events = json.loads(trace.read_text()).get("traceEvents", [])
    kernels = sorted((e["ts"], e["ts"] + e.get("dur", 0)) for e in events if e.get("cat") == "kernel")
    busy, reach = 0.0, None
    for start, end in kernels:
        if reach is None or start > reach:
            busy, reach = busy + end - start, end
        elif end > reach:
            busy, reach = busy + end - reach, end
    cats = collections.Counter(e.get("cat") for e in events)
    names = collections.Counter(e["name"] for e in events if e.get("cat") in ("user_annotation", "gpu_user_annotation"))
    return {"kernels": len(kernels), "busy_us": busy, "cats": dict(cats), "annotations": dict(names.most_common(8))}


def main() -> None:
    model, mode = sys.argv[1], sys.argv[2]
    from vllm import LLM, SamplingParams

    if mode == "cuda":  # as a cell's process: CUDA in use in the client too, NVML sampled from a thread
        import threading

        import pynvml
        import torch

        torch.zeros(1, device="cuda")
        pynvml.nvmlInit()
        handle = pynvml.nvmlDeviceGetHandleByIndex(0)

        def sample() -> None:
            while True:
                pynvml.nvmlDeviceGetUtilizationRates(handle)
                time.sleep(0.05)

        threading.Thread(target=sample, daemon=True).start()
    folder = Path(tempfile.mkdtemp(prefix="probe-trace-"))
    profiler = {"profiler": "torch", "torch_profiler_dir": str(folder), "torch_profiler_with_stack": False,
                "torch_profiler_use_gzip": False, "torch_profiler_dump_cuda_time_total": False,
                "ignore_frontend": True}  # fmt: skip
    llm = LLM(model=model, skip_tokenizer_init=True, dtype="float16", max_model_len=160, max_num_seqs=16,
              gpu_memory_utilization=0.5, enable_prefix_caching=False, profiler_config=profiler)  # fmt: skip
    rows = 16 if mode in ("stepped", "cuda") else 1
    prompt = [{"prompt_token_ids": list(range(1000 + r, 1128 + r))} for r in range(rows)]
    greedy = {"temperature": 0.0, "detokenize": False, "ignore_eos": True}
    for _ in range(3):
        llm.generate(prompt, SamplingParams(max_tokens=32, **greedy), use_tqdm=False)
    if mode in ("stepped", "cuda"):  # as a cell does before it profiles: requests stepped through the engine's own loop
        sys.path.insert(0, "src")
        from inferbench.engines.generation.vllm_engine import StepDriver

        driver = StepDriver(llm.llm_engine)
        for _ in range(3):
            request = driver.add([p["prompt_token_ids"] for p in prompt], SamplingParams(max_tokens=32, **greedy))
            for made in range(1, 33):
                driver.until(request, made)
        print(
            json.dumps({"stepped": request.made(), "unfinished": llm.llm_engine.has_unfinished_requests()}), flush=True
        )
    sessions = [[1], [32]] if mode in ("twice", "stepped", "cuda") else [[1, 32]]
    for tokens_list in sessions:
        before = set(folder.iterdir())
        started = time.perf_counter()
        llm.start_profile()
        for tokens in tokens_list:
            llm.generate(prompt, SamplingParams(max_tokens=tokens, **greedy), use_tqdm=False)
        llm.stop_profile()
        written = sorted(set(folder.iterdir()) - before)
        print(json.dumps({"tokens": tokens_list, "s": time.perf_counter() - started, "files": [p.name for p in written],
                          **(read(written[0]) if written else {})}), flush=True)  # fmt: skip


if __name__ == "__main__":
    main()
