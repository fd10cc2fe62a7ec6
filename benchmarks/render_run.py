"""Re-make the summary, plots and report of a run with this checkout's report code, no re-measurement.

    python benchmarks/render_run.py RUN_DIR [--configfile config/studies/full.yaml] [--gpu]
    python benchmarks/render_run.py --summary docs/results/h100/full/2026-11-25/summary.csv [--configfile ...] [--gpu]

RUN_DIR holds a run brought back from another machine (e.g. the GPU machine's `cells.tgz`, unpacked):
`results/cells/**.json` (and, where the run kept them, `results/profiles/`, `results/models/*.json`,
`data/processed/*.stats.json`); writes RUN_DIR/results/{summary.csv,summary.parquet,plots/,report.md}.

`--summary` re-renders a committed summary in its own folder (report.md, plots/ beside it, linked
relatively so that the report renders on a code host). Summaries written before the computation
columns existed (graph, precision_mode, channels_last, compile_mode, cuda_graph, io_binding, tf32)
get them from the config's engine variants, asked of the engine classes as the cells would be, and
the summary is written back with them.

The studies come from config/config.yaml merged with the given config file, as Snakemake merges
them; `--gpu` resolves `auto` devices to cuda (the run was made where a GPU was visible).
"""

from __future__ import annotations

import argparse
from pathlib import Path

import pandas as pd
import yaml
from snakemake.utils import update_config

from inferbench.analysis.summary import load_records, summary_frame
from inferbench.core.fsutil import atomic_path
from inferbench.core.workloads import ordered, workload_info
from inferbench.engines.registry import load_engine_class
from inferbench.engines.spec import COMPUTATION_KEYS
from inferbench.exporters.tables import write_summary
from inferbench.plan.config import validate_config
from inferbench.plan.grid import resolved_studies
from inferbench.report.layouts import SERVING_PLOT
from inferbench.report.markdown import write_report
from inferbench.report.plots import plot_every_workload, plot_serving

REPO = Path(__file__).resolve().parents[1]


def backfill_computation(summary: pd.DataFrame, variants: dict[str, dict]) -> pd.DataFrame:
    """The computation columns of rows that lack them, from each row's engine variant in ``variants``."""
    rows = []
    for _, row in summary.iterrows():
        known = "graph" in row and isinstance(row.get("graph"), str)
        variant = variants.get(row["engine"])
        if known or variant is None:
            rows.append(row.to_dict())
            continue
        engine = load_engine_class(variant["engine"])(row["device"], row["precision"], int(row["threads"]), variant)
        rows.append(row.to_dict() | engine.computation(workload_info(row["workload"]).kind))
    frame = pd.DataFrame(rows)
    order = [c for c in summary.columns if c not in COMPUTATION_KEYS]
    at = order.index("mode") + 1 if "mode" in order else len(order)
    return frame[[*order[:at], *COMPUTATION_KEYS, *order[at:]]]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run_dir", type=Path, nargs="?")
    parser.add_argument("--summary", type=Path, help="re-render this summary CSV in its folder")
    parser.add_argument("--configfile", type=Path, default=None)
    parser.add_argument("--gpu", action="store_true", help="the run saw a GPU: `auto` devices were cuda")
    args = parser.parse_args()
    if (args.run_dir is None) == (args.summary is None):
        parser.error("give a RUN_DIR or --summary")

    config = yaml.safe_load((REPO / "config" / "config.yaml").read_text())
    if args.configfile:  # merged key by key, as Snakemake merges --configfile into the config
        update_config(config, yaml.safe_load(args.configfile.read_text()))
    validate_config(config)  # fills in the schema's defaults, as the workflow does
    studies = resolved_studies(config, has_cuda=args.gpu)

    if args.summary:
        folder = args.summary.parent
        summary = backfill_computation(pd.read_csv(args.summary), config["engines"])
        with atomic_path(args.summary) as tmp:
            summary.to_csv(tmp, index=False)
        plots = plot_every_workload(summary, folder / "plots", list(config["engines"]))
        write_report(args.summary, folder / "report.md", plots=plots, studies=studies)
        print(f"{len(summary)} cells -> {folder / 'report.md'}")
        return

    results = args.run_dir / "results"
    records = sorted((results / "cells").glob("*/*/*/*.json"))
    write_summary(records, results / "summary.csv", results / "summary.parquet")
    summary = summary_frame(records)
    plots = plot_every_workload(summary, results / "plots", list(config["engines"]))
    loaded = load_records(records)  # the serving plots need every LoadGen run, kept in the records
    for workload in ordered(r.key.workload for r in loaded if r.key.scenario == "server"):
        plots.append(
            plot_serving(loaded, workload, results / "plots" / workload / SERVING_PLOT, list(config["engines"]))
        )
    write_report(
        results / "summary.csv",
        results / "report.md",
        plots=plots,
        model_meta=sorted((results / "models").glob("*.json")),
        dataset_stats=sorted((args.run_dir / "data" / "processed").glob("*.stats.json")),
        profiles=sorted((results / "profiles").rglob("top_ops.json")),
        studies=studies,
    )
    print(f"{len(records)} records -> {results / 'report.md'}")


if __name__ == "__main__":
    main()
