"""One GPU per running GPU job: Snakemake's `gpu` resource only counts jobs, it never says which
device a job may use. A GPU job claims a free device from the pool by locking its lock file and
sets CUDA_VISIBLE_DEVICES to it before anything imports CUDA; the lock is the open file, so the
device is released when the process ends, however it ends (success, exception, kill).

The pool: ``$INFERBENCH_GPUS`` ("0,1"), else the CUDA_VISIBLE_DEVICES the job was started with (a
SLURM job's allocation), else the GPUs ``nvidia-smi`` lists. With ``--resources gpu=N`` and N GPUs,
every running GPU job gets a device of its own; with more jobs than devices, a job waits for one.
With two GPUs or more and cores enough, each GPU measures on cores of its own and its timed loop
overlaps the other GPUs' set-up (inferbench.machine.host_partition); otherwise measuring stays exclusive
machine-wide (inferbench.machine.lock) and GPU jobs overlap only in what they do before and after
measuring.
Only the standard library is imported here.
"""

from __future__ import annotations

import fcntl
import logging
import os
import subprocess
import time
from pathlib import Path

from inferbench.core.env_vars import GPU_CLAIMED, GPUS
from inferbench.machine.lock import lock_path, open_lock_file

POOL_ENV = GPUS.name
#: set for the processes a GPU job starts itself (measure.repeats), which use their parent's device
CLAIMED_ENV = GPU_CLAIMED.name


def gpu_pool() -> list[str]:
    """The devices GPU jobs on this machine share, as CUDA_VISIBLE_DEVICES entries."""
    given = GPUS.read()
    if given:
        return list(given)
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")  # CUDA's own: taken as it is
    if visible is not None and visible.strip():
        return [d.strip() for d in visible.split(",") if d.strip()]
    # no driver: no GPU to hand out (cuda cells record why they cannot run)
    return [index for index, *_ in query_gpus("index")]


def query_gpus(*fields: str) -> list[list[str]]:
    """``nvidia-smi --query-gpu`` of ``fields``, a row per GPU; empty where the driver does not answer."""
    try:
        listed = subprocess.run(
            ["nvidia-smi", f"--query-gpu={','.join(fields)}", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=20,
            check=True,
        )
    except (OSError, subprocess.SubprocessError):
        return []
    return [[part.strip() for part in line.split(",")] for line in listed.stdout.splitlines() if line.strip()]


class GpuSlot:
    """A claimed device; keep the object alive as long as the device is used."""

    def __init__(self, device: str, fd: int) -> None:
        self.device, self._fd = device, fd

    def release(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)  # closing the file drops the lock
            self._fd = -1


def claim_gpu(pool: list[str], lock_dir: Path | None = None, poll_s: float = 0.05) -> GpuSlot:
    """Lock the first free device of ``pool``, waiting while all are taken."""
    if not pool:
        raise ValueError(f"no GPUs to claim: set {POOL_ENV} or CUDA_VISIBLE_DEVICES, or install the NVIDIA driver")
    # beside the machine lock: this user's own directory, or where $INFERBENCH_LOCK_FILE puts it
    lock_dir = Path(lock_dir or lock_path().parent)
    lock_dir.mkdir(parents=True, exist_ok=True)
    while True:
        for device in pool:
            fd = open_lock_file(lock_dir / f"inferbench-gpu-{device}.lock")  # never through a symlink
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(fd)
                continue
            return GpuSlot(device, fd)
        time.sleep(poll_s)


def claim_for_this_process() -> GpuSlot | None:
    """Claim a device for a GPU job and make it the only one this process (and its children) sees.
    Does nothing in a process whose parent job already claimed one, or where there is no GPU."""
    if GPU_CLAIMED.read():
        return None
    pool = gpu_pool()
    if not pool:
        return None
    slot = claim_gpu(pool)
    os.environ["CUDA_VISIBLE_DEVICES"] = slot.device
    os.environ[CLAIMED_ENV] = slot.device
    logging.getLogger(__name__).info("GPU job on device %s (pool %s)", slot.device, ",".join(pool))
    return slot
