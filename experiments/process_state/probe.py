"""Probe: do processes forked from one parent agree more than independent starts?

A tiny ONNX MLP (11 µs a call) timed for ``--seconds`` in each of ``--children`` processes per job,
``--jobs`` jobs per start method, the methods interleaved job by job so that they meet the same host:
  fork   a job forked from this process forks its children (as the warm server and the cell job do)
  pad    the same, each child first allocating a random amount of memory (Stabilizer-style layout noise)
  spawn  a job starts its children as new interpreters (exec: fresh layout, fresh imports)
  pin    as fork, each thread on a core of its own: the calling thread on the first, ORT's worker on the second
Prints, per method, the sd of log p50 within jobs and between jobs' means."""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any

import numpy as np


def time_model(path: str, seconds: float, pad: bool, pin: bool = False) -> float:
    import onnxruntime as ort

    keep = bytearray(random.randrange(1, 4 << 20)) if pad else None
    options = ort.SessionOptions()
    options.intra_op_num_threads = 2
    if pin:  # the calling thread on the first core, ORT's one worker thread on the second (ids from 1)
        os.sched_setaffinity(0, {0})
        options.add_session_config_entry("session.intra_op_thread_affinities", "2")
    session = ort.InferenceSession(path, options, providers=["CPUExecutionProvider"])
    name = session.get_inputs()[0].name
    width = session.get_inputs()[0].shape[1]
    x = np.random.default_rng(0).standard_normal((2, width)).astype(np.float32)
    for _ in range(200):
        session.run(None, {name: x})
    times = []
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        t = time.perf_counter_ns()
        session.run(None, {name: x})
        times.append(time.perf_counter_ns() - t)
    del keep
    return float(np.median(times)) / 1e3


def in_fork(work: Callable[[], Any]) -> Any:
    """``work()`` in a forked child; its JSON result, read back through a pipe."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(read)
        os.write(write, json.dumps(work()).encode())
        os._exit(0)
    os.close(write)
    with os.fdopen(read) as f:
        value = json.loads(f.read())
    os.waitpid(pid, 0)
    return value


def job_work(method: str, path: str, seconds: float, children: int) -> list[float]:
    """The job: some allocations of its own, then its children, each forked from it."""
    _ = [bytearray(random.randrange(1, 1 << 16)) for _ in range(random.randrange(1, 50))]
    pad, pin = method == "pad", method == "pin"
    return [in_fork(lambda: time_model(path, seconds, pad, pin)) for _ in range(children)]


def job(method: str, path: str, seconds: float, children: int) -> list[float]:
    if method == "spawn":
        return [
            float(
                subprocess.run(
                    [sys.executable, __file__, "--child", path, "--seconds", str(seconds)],
                    capture_output=True,
                    text=True,
                    check=True,
                ).stdout
            )
            for _ in range(children)
        ]
    return in_fork(lambda: job_work(method, path, seconds, children))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("model")
    parser.add_argument("--jobs", type=int, default=8)
    parser.add_argument("--children", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=1.5)
    parser.add_argument("--child", action="store_true")
    parser.add_argument("--methods", default="fork,pad,spawn,pin")
    args = parser.parse_args()
    if args.child:
        print(time_model(args.model, args.seconds, pad=False))
        return
    import onnxruntime  # noqa: F401  imported once, as the warm server does

    methods = tuple(args.methods.split(","))
    results: dict[str, list[list[float]]] = {m: [] for m in methods}
    for _ in range(args.jobs):
        for method in methods:
            results[method].append(job(method, args.model, args.seconds, args.children))
    for method, jobs in results.items():
        logs = np.log(np.array(jobs))
        within = float(np.sqrt(np.mean(logs.var(axis=1, ddof=1))))
        between = float(logs.mean(axis=1).std(ddof=1))
        excess = float(np.sqrt(max(0.0, between**2 - within**2 / logs.shape[1])))
        print(f"{method:6s} within {within:.3f}  between job means {between:.3f}  beyond within {excess:.3f}")
        print("       ", "; ".join("/".join(f"{v:.1f}" for v in j) for j in jobs))


if __name__ == "__main__":
    main()
