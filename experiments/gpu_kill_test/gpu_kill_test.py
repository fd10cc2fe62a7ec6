"""A GPU cell killed mid-run gives its device back to the next job (not a test: needs GPUs).

    python experiments/gpu_kill_test/gpu_kill_test.py --gpus 2 --cores 32 RECORD.json [RECORD.json ...]

Re-runs the given cell records with ``snakemake --resources gpu=N --keep-going --forcerun``. Once a
process has held device 0's lock (inferbench.machine.gpu_slots) for ``--after-s`` seconds, it is SIGKILLed,
as the OOM killer would: the measuring process, not Snakemake's job. Prints, as JSON: the killed
pid, how long device 0 stayed locked after the kill, which process took it next and after how
long, the device each job's log says it got (with its time), and which records exist afterwards.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from inferbench.machine.lock import lock_holders, lock_path

T = TypeVar("T")


def wait_for(predicate: Callable[[], T], timeout_s: float, poll_s: float = 0.01) -> T | None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(poll_s)
    return None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("records", nargs="+")
    parser.add_argument("--gpus", type=int, default=2)
    parser.add_argument("--cores", type=int, default=32)
    parser.add_argument("--after-s", type=float, default=3.0)
    args = parser.parse_args()

    device0 = lock_path().parent / "inferbench-gpu-0.lock"
    command = ["snakemake", "--cores", str(args.cores), "--resources", f"gpu={args.gpus}", "--keep-going"]
    command += ["--forcerun", *args.records, "--", *args.records]
    started = time.time()
    run = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    holder = wait_for(lambda: device0.exists() and lock_holders(device0), timeout_s=300)
    result: dict[str, object] = {"command": " ".join(command)}
    if not holder:
        result["error"] = "no job took device 0 within 300 s"
    else:
        victim = min(holder)
        time.sleep(args.after_s)
        if victim in lock_holders(device0):
            os.kill(victim, signal.SIGKILL)
            killed_at = time.time()
            result |= {"killed_pid": victim, "killed_at_s": round(killed_at - started, 3)}
            freed = wait_for(lambda: victim not in lock_holders(device0), timeout_s=30)
            result["device0_locked_after_kill_s"] = round(time.time() - killed_at, 3) if freed else None
            successor = wait_for(lambda: lock_holders(device0) - {victim}, timeout_s=120)
            if successor:
                result |= {"next_holder_pid": min(successor), "next_holder_after_s": round(time.time() - killed_at, 3)}
        else:
            result["error"] = f"pid {victim} let go of device 0 within {args.after_s} s: nothing killed mid-run"
    output, _ = run.communicate(timeout=600)
    result["snakemake_rc"] = run.returncode
    result["snakemake_errors"] = [line for line in output.splitlines() if line.startswith("Error in rule")]
    claims = []
    for log in sorted(Path("logs").rglob("*.log")):
        if log.stat().st_mtime < started:
            continue
        for line in log.read_text(errors="replace").splitlines():
            found = re.match(r"(\S+ \S+) INFO inferbench.machine.gpu_slots: GPU job on device (\S+)", line)
            if found:
                claims.append({"log": str(log), "at": found.group(1), "device": found.group(2)})
    result["claims"] = sorted(claims, key=lambda c: c["at"])
    result["records_after"] = {r: Path(r).exists() for r in args.records}
    print(json.dumps(result, indent=1))
    sys.exit(0 if result.get("next_holder_pid") else 1)


if __name__ == "__main__":
    main()
