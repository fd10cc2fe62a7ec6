"""One-off probe for issue 68: would a verdict on each cell's *fast mode* be calibrated? Over a committed A/A
run's summary.csv (config/studies/repeatability.yaml), it judges the A/A and planted-1.3x pairs whose two cells
both had ``--processes`` processes by one candidate rule, and then runs the same rule on simulated cells whose
processes spread continuously (no modes), where it should call about 5% of unchanged pairs different.

The candidate: a cell's figure is the median of the p50s of its processes within ``--tolerance`` of its fastest
(its fast mode); its spread is theirs, moderated by the pooled spread of every such cell (d0 = their degrees
of freedom); how far identical cells move apart (from the A/A pairs, as the report's ``between_cells``) is
added whole; Welch's t on the difference of the two cells' mean log p50s.

    python experiments/process_modes/fast_mode_rule.py path/to/summary.csv [--processes 16] [--tolerance 0.1]
"""

from __future__ import annotations

import argparse

import numpy as np
import pandas as pd
from scipy import stats

KEY = ["workload", "batch_size", "seq_len"]
ENGINES = ("ort_cpu", "torch_eager", "openvino")


def process_p50s(text: object) -> np.ndarray:
    return np.array([float(v) for v in str(text).split(";") if v not in ("", "nan")])


def fast_logs(p50s: np.ndarray, tolerance: float) -> np.ndarray:
    logs = np.log(p50s)
    return logs[logs <= logs.min() + np.log1p(tolerance)]


def judge(cells: list[np.ndarray], aa: list[tuple[int, int]], others: list[tuple[int, int]]) -> tuple[list, list]:
    """(log ratio, half-width of its 95% interval) of each pair of ``aa`` and ``others`` (positions in ``cells``,
    each the fast-mode log p50s of one cell)."""
    dfs = sum(len(c) - 1 for c in cells)
    pooled = np.sqrt(sum(((c - c.mean()) ** 2).sum() for c in cells) / dfs)

    def estimate(i: int) -> tuple[float, float, float]:
        c = cells[i]
        own = len(c) - 1
        variance = (dfs * pooled**2 + own * (c.var(ddof=1) if own else 0.0)) / (dfs + own)
        return c.mean(), variance / len(c), dfs + own

    within = [estimate(i)[1] + estimate(j)[1] for i, j in aa]
    differences = [estimate(j)[0] - estimate(i)[0] for i, j in aa]
    shift = np.sqrt(max(0.0, np.mean(np.square(differences)) / 2 - np.mean(within) / 2))

    def interval(i: int, j: int) -> tuple[float, float]:
        (mean_a, var_a, df_a), (mean_b, var_b, df_b) = estimate(i), estimate(j)
        return mean_b - mean_a, stats.t.ppf(0.975, min(df_a, df_b)) * np.sqrt(var_a + var_b + 2 * shift**2)

    return [interval(i, j) for i, j in aa], [interval(i, j) for i, j in others]


def committed(path: str, processes: int, tolerance: float) -> None:
    summary = pd.read_csv(path)
    summary = summary[(summary["status"] == "ok") & (summary["repeats"] >= processes)].reset_index(drop=True)
    cells = [fast_logs(process_p50s(t)[:processes], tolerance) for t in summary["p50_by_process_ms"]]

    def pairs(suffix: str) -> list[tuple[int, int]]:
        found = []
        for engine in ENGINES:
            base = summary.loc[summary["engine"] == engine, KEY].reset_index()
            twin = summary.loc[summary["engine"] == engine + suffix, KEY].reset_index()
            found += list(base.merge(twin, on=KEY)[["index_x", "index_y"]].itertuples(index=False, name=None))
        return found

    aa, planted = judge(cells, pairs("_aa"), pairs("_planted"))
    print(f"{path}: cells with {processes} processes, fast mode within {tolerance:.0%}")
    print(f"  A/A called different: {sum(abs(d) > h for d, h in aa)} of {len(aa)}; ratios "
          f"{np.exp(min(d for d, _ in aa)):.3f}-{np.exp(max(d for d, _ in aa)):.3f}")  # fmt: skip
    if planted:
        print(f"  planted 1.3x found: {sum(d > h for d, h in planted)} of {len(planted)}; ratios "
              f"{np.exp(min(d for d, _ in planted)):.3f}-{np.exp(max(d for d, _ in planted)):.3f}")  # fmt: skip


def continuous(processes: int, tolerance: float, sd: float = 0.1, pairs: int = 400) -> None:
    """Unchanged pairs whose processes spread lognormally by ``sd`` (no modes), judged by the same rule."""
    rng = np.random.default_rng(3)
    cells = [fast_logs(rng.lognormal(0, sd, processes), tolerance) for _ in range(4 * pairs)]
    aa = [(i, i + 1) for i in range(0, 2 * pairs, 2)]  # the first half: the run's A/A controls
    judged = [(i, i + 1) for i in range(2 * pairs, 4 * pairs, 2)]  # the rest: unchanged cells compared
    for controls, label in ((aa, "with the A/A controls"), ([(0, 0)], "without A/A controls")):
        _, others = judge(cells, controls, judged)
        called = sum(abs(d) > h for d, h in others)
        print(f"continuous spread of {sd:.0%}, {processes} processes a cell, {label}: {called} of {len(others)} "
              f"unchanged pairs called different ({called / len(others):.0%}; 5% wanted)")  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("summaries", nargs="+")
    parser.add_argument("--processes", type=int, default=16)
    parser.add_argument("--tolerance", type=float, default=0.1)
    args = parser.parse_args()
    for path in args.summaries:
        committed(path, args.processes, args.tolerance)
    for processes in (2, 5, args.processes):
        continuous(processes, args.tolerance)


if __name__ == "__main__":
    main()
