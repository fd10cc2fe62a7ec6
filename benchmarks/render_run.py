"""Re-make the summary, plots and report of a run brought back from another machine (e.g. the GPU
machine's `cells.tgz`, unpacked), with this checkout's report code and no re-measurement.

    python benchmarks/render_run.py RUN_DIR [--configfile config/studies/full.yaml] [--gpu]

RUN_DIR holds `results/cells/**.json` (and, where the run kept them, `results/profiles/`,
`results/models/*.json`, `data/processed/*.stats.json`). The studies come from config/config.yaml
merged with the given config file, as Snakemake merges them; `--gpu` resolves `auto` devices to cuda
(the run was made where a GPU was visible). Writes RUN_DIR/results/{summary.csv,summary.parquet,
plots/,report.md}.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import yaml
from snakemake.utils import update_config

from inferbench.analysis.summary import summary_frame, write_summary
from inferbench.config import validate_config
from inferbench.grid import resolved_studies
from inferbench.report.markdown import write_report
from inferbench.report.plots import plot_every_workload

REPO = Path(__file__).resolve().parents[1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run_dir", type=Path)
    parser.add_argument("--configfile", type=Path, default=None)
    parser.add_argument("--gpu", action="store_true", help="the run saw a GPU: `auto` devices were cuda")
    args = parser.parse_args()

    config = yaml.safe_load((REPO / "config" / "config.yaml").read_text())
    if args.configfile:  # merged key by key, as Snakemake merges --configfile into the config
        update_config(config, yaml.safe_load(args.configfile.read_text()))
    validate_config(config)  # fills in the schema's defaults, as the workflow does

    results = args.run_dir / "results"
    records = sorted((results / "cells").glob("*/*/*/*.json"))
    write_summary(records, results / "summary.csv", results / "summary.parquet")
    summary = summary_frame(records)
    plots = plot_every_workload(summary, results / "plots")
    write_report(
        results / "summary.csv",
        results / "report.md",
        plots=plots,
        model_meta=sorted((results / "models").glob("*.json")),
        dataset_stats=sorted((args.run_dir / "data" / "processed").glob("*.stats.json")),
        profiles=sorted((results / "profiles").rglob("top_ops.json")),
        studies=resolved_studies(config, has_cuda=args.gpu),
    )
    print(f"{len(records)} records -> {results / 'report.md'}")


if __name__ == "__main__":
    main()
