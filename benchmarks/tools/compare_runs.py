"""The spread between a run's fresh processes, per cell (not a test), from its summary.csv.

    python benchmarks/tools/compare_runs.py SUMMARY.csv [--min-ms 1.0] [--tolerance 0.05]

One row per cell measured in several processes: the lowest and highest process p50 and their spread
((max - min) / median); then how many cells longer than ``--min-ms`` agree within ``--tolerance``.
Two runs are compared with `inferbench compare RUN_A RUN_B` (README, "Comparing cells").
"""

from __future__ import annotations

import argparse

import pandas as pd

KEY = ["workload", "engine", "precision", "device", "batch_size", "seq_len", "threads"]


def repeats_table(summary: pd.DataFrame, min_ms: float, tolerance: float) -> str:
    ok = summary[(summary["status"] == "ok") & (summary["repeats"] > 1)].copy()
    columns = [*KEY[:6], "repeats", "repeat_p50_min_ms", "repeat_p50_max_ms", "repeat_p50_spread_pct"]
    columns += [c for c in ("bound",) if c in ok]
    table = ok[columns].to_string(index=False, float_format=lambda v: f"{v:.4g}")
    long = ok[ok["latency_p50_ms"] > min_ms]
    agree = int((long["repeat_p50_spread_pct"] <= 100 * tolerance).sum())
    return f"{table}\n\ncells over {min_ms} ms: {len(long)}; repeats' p50 within {tolerance:.0%}: {agree}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("summary")
    parser.add_argument("--min-ms", type=float, default=1.0)
    parser.add_argument("--tolerance", type=float, default=0.05)
    args = parser.parse_args()
    print(repeats_table(pd.read_csv(args.summary), args.min_ms, args.tolerance))


if __name__ == "__main__":
    main()
