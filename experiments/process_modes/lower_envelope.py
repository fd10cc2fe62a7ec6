"""One-off probe for issue 68: do identical cells agree better by the median of their processes' p50s (the
report's figure) or by their lowest? Reads an A/A run's summary.csv (config/studies/repeatability.yaml) and
prints, for its A/A pairs and its planted-1.3x pairs, how far each estimator's ratio lands from the truth.

    python experiments/process_modes/lower_envelope.py path/to/summary.csv
"""

from __future__ import annotations

import sys

import numpy as np
import pandas as pd

KEY = ["workload", "batch_size", "seq_len"]
ENGINES = ("ort_cpu", "torch_eager", "openvino")


def process_p50s(text: object) -> list[float]:
    return [float(v) for v in str(text).split(";") if v not in ("", "nan")]


def pairs(summary: pd.DataFrame, suffix: str) -> pd.DataFrame:
    """Each configuration's cell beside its ``suffix`` twin: both p50s, both lowest process p50s, both counts."""
    summary = summary.assign(lowest=summary["p50_by_process_ms"].map(lambda t: min(process_p50s(t))))
    columns = [*KEY, "latency_p50_ms", "lowest", "repeats"]
    joined = []
    for engine in ENGINES:
        base = summary.loc[summary["engine"] == engine, columns]
        other = summary.loc[summary["engine"] == engine + suffix, columns]
        joined.append(base.merge(other, on=KEY, suffixes=("_a", "_b")).assign(engine=engine))
    return pd.concat(joined, ignore_index=True)


def main(path: str) -> None:
    summary = pd.read_csv(path).copy()  # one block per column: the probe adds one
    for name, suffix, truth in (("A/A", "_aa", 1.0), ("planted 1.3x", "_planted", 1.3)):
        table = pairs(summary, suffix)
        if table.empty:
            continue
        for label, column in (("median of processes", "latency_p50_ms"), ("lowest process", "lowest")):
            ratio = table[f"{column}_b"] / table[f"{column}_a"]
            near = int((np.abs(np.log(ratio / truth)) < np.log(1.1)).sum())
            print(f"{name}, {label}: {near} of {len(ratio)} pairs within 10% of {truth:g}x; sd of log ratio "
                  f"{np.log(ratio).std():.3f}")  # fmt: skip
        many = table[(table["repeats_a"] >= 16) & (table["repeats_b"] >= 16)]
        if not many.empty:
            median = (many["latency_p50_ms_b"] / many["latency_p50_ms_a"]).round(2).tolist()
            lowest = (many["lowest_b"] / many["lowest_a"]).round(2).tolist()
            print(f"  pairs with 16 processes a cell ({len(many)}): medians {median}; lowest {lowest}")


if __name__ == "__main__":
    main(sys.argv[1])
