"""How well runs of the same cells agree (not a test): p50 ratio per cell, from summary.csv files.

    python benchmarks/compare_runs.py RUN1/summary.csv RUN2/summary.csv [--min-ms 1.0] [--tolerance 0.05]
    python benchmarks/compare_runs.py SUMMARY.csv      # a run with measure.repeats > 1

With two files: one row per cell that is ok in both runs, with the relative change of p50 (and of the
end-to-end p50 where both runs have it). With one file: each cell's fresh-process repeats, the
lowest and highest p50 and their spread ((max - min) / median). Either way it counts the cells
longer than ``--min-ms`` whose p50 agrees within ``--tolerance``.
"""

from __future__ import annotations

import argparse

import pandas as pd

KEY = ["workload", "engine", "precision", "device", "batch_size", "seq_len", "threads"]


def compare(first: pd.DataFrame, second: pd.DataFrame) -> pd.DataFrame:
    both = first.merge(second, on=KEY, suffixes=("_1", "_2"))
    both = both[(both["status_1"] == "ok") & (both["status_2"] == "ok")].copy()
    both["p50_change"] = both["latency_p50_ms_2"] / both["latency_p50_ms_1"] - 1
    if {"e2e_latency_p50_ms_1", "e2e_latency_p50_ms_2"} <= set(both.columns):
        both["e2e_p50_change"] = both["e2e_latency_p50_ms_2"] / both["e2e_latency_p50_ms_1"] - 1
    return both


def repeats_table(summary: pd.DataFrame, min_ms: float, tolerance: float) -> str:
    ok = summary[(summary["status"] == "ok") & (summary["repeats"] > 1)].copy()
    columns = [*KEY[:6], "repeats", "repeat_p50_min_ms", "repeat_p50_max_ms", "repeat_p50_spread_pct"]
    table = ok[columns].to_string(index=False, float_format=lambda v: f"{v:.4g}")
    long = ok[ok["latency_p50_ms"] > min_ms]
    agree = int((long["repeat_p50_spread_pct"] <= 100 * tolerance).sum())
    return f"{table}\n\ncells over {min_ms} ms: {len(long)}; repeats' p50 within {tolerance:.0%}: {agree}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("first")
    parser.add_argument("second", nargs="?", help="absent: compare the repeats within FIRST")
    parser.add_argument("--min-ms", type=float, default=1.0)
    parser.add_argument("--tolerance", type=float, default=0.05)
    args = parser.parse_args()
    if args.second is None:
        print(repeats_table(pd.read_csv(args.first), args.min_ms, args.tolerance))
        return
    both = compare(pd.read_csv(args.first), pd.read_csv(args.second))
    columns = [*KEY[:6], "latency_p50_ms_1", "latency_p50_ms_2", "p50_change"]
    columns += [c for c in ("latency_cv_1", "latency_cv_2", "e2e_p50_change") if c in both.columns]
    print(both[columns].to_string(index=False, float_format=lambda v: f"{v:.4g}"))
    long = both[both["latency_p50_ms_1"] > args.min_ms]
    agree = int((long["p50_change"].abs() <= args.tolerance).sum())
    print(f"\ncells over {args.min_ms} ms: {len(long)}; p50 within {args.tolerance:.0%}: {agree}")


if __name__ == "__main__":
    main()
