"""vLLM's batch-1 request pace over time in one fresh process: blocks of LLM.generate requests (prompt 128,
32 greedy tokens), each block's p50, and the engine core's CPU seconds per block. Run by run.sh in several
processes, some with busy-looping neighbours on the other CPUs, to tell a process's placement and the guest's
idle wake-ups apart from drift over time.

    python vllm_host_pace.py CHECKPOINT LABEL [BLOCKS] [REQUESTS_PER_BLOCK]
"""

import json
import os
import sys
import time

import numpy as np

from inferbench.trackers.host_telemetry import read_descendants_cpu_s


def children_cpu_s() -> float:
    """CPU seconds of every process this one started (vLLM's engine core), all their threads."""
    return sum((read_descendants_cpu_s() or {}).values())


def main() -> None:
    checkpoint, label = sys.argv[1], sys.argv[2]
    blocks = int(sys.argv[3]) if len(sys.argv) > 3 else 8
    per_block = int(sys.argv[4]) if len(sys.argv) > 4 else 10
    from vllm import LLM, SamplingParams

    started = time.perf_counter()
    llm = LLM(
        model=checkpoint,
        skip_tokenizer_init=True,
        disable_log_stats=True,
        dtype="float16",
        seed=0,
        max_model_len=320,
        max_num_seqs=1,
        max_num_batched_tokens=2048,
        gpu_memory_utilization=0.5,
        enable_prefix_caching=False,
    )
    engine_s = time.perf_counter() - started
    params = SamplingParams(max_tokens=32, temperature=0.0, detokenize=False, ignore_eos=True)
    rng = np.random.default_rng(0)
    prompt = [{"prompt_token_ids": rng.integers(0, 10000, 128).tolist()}]
    for _ in range(5):
        llm.generate(prompt, params, use_tqdm=False)
    rows = []
    for block in range(blocks):
        cpu_before, latencies = children_cpu_s(), []
        for _ in range(per_block):
            t0 = time.perf_counter()
            llm.generate(prompt, params, use_tqdm=False)
            latencies.append(time.perf_counter() - t0)
        core_cpu_ms = (children_cpu_s() - cpu_before) * 1e3 / (per_block * 32)
        rows.append(
            {
                "block": block,
                "p50_ms": round(float(np.median(latencies)) * 1e3, 2),
                "min_ms": round(min(latencies) * 1e3, 2),
                "core_cpu_ms_per_iter": round(core_cpu_ms, 3),
            }
        )
    p50s = [r["p50_ms"] for r in rows]
    print(
        json.dumps(
            {
                "label": label,
                "engine_s": round(engine_s, 1),
                "p50_ms": round(float(np.median(p50s)), 2),
                "blocks": rows,
                "cpu_affinity": len(os.sched_getaffinity(0)),
            }
        ),
        flush=True,
    )


if __name__ == "__main__":
    main()
