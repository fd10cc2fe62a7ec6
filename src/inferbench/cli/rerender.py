"""Verb ``rerender``: the summary, plots and report of a run made again with this checkout's report code,
no re-measurement.

    python -m inferbench rerender RUN_DIR [--configfile config/studies/full.yaml] [--gpu]
    python -m inferbench rerender --summary path/to/summary.csv
        [--configfile ...] [--gpu] [--out DIR] [--no-plots]

RUN_DIR holds a run brought back from another machine (e.g. the GPU machine's `cells.tgz`, unpacked):
`results/cells/**.json` (and, where the run kept them, `results/profiles/`, `results/models/*.json`,
`data/processed/*.stats.json`); writes RUN_DIR/results/{summary.csv,summary.parquet,plots/,report.md}.

`--summary` re-renders a committed summary: report.md, report_details.md and plots/ in its own folder (or
`--out`), linked relatively so that the report renders on a code host. Where a report is already there,
the sections a summary cannot make (datasets, models, profiles, the roofline: made from the run's records)
and the method text (it describes the code that measured, not this checkout's) are kept from it in the
appendix, and the appendix says so. The summary itself is only read, never written:
its fields are read as written (a host named NA, a commit such as 12345e7 stay text). Summaries
written before the computation columns existed (graph, precision_mode, channels_last, compile_mode,
cuda_graph, io_binding, tf32, fusions) get them, for the report, from the config's engine variants,
asked of the engine classes as the cells would be.

The studies come from config/config.yaml (of the working directory) merged with the given config file,
as Snakemake merges them; `--gpu` resolves `auto` devices to cuda (the run was made where a GPU was visible).
"""

from __future__ import annotations

import argparse
import importlib
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from inferbench.cli.args import arguments
from inferbench.core.errors import UserError

if TYPE_CHECKING:
    import pandas as pd

#: sections of a report made from what a summary lacks (records, model and dataset metadata, profiles), and
#: the method text, which describes the code that measured: a re-rendered report keeps the original's
KEPT_SECTIONS = ("What was measured", "Datasets", "Models", "Profiles", "Distance to the limit (roofline)")
#: the first page's section made from the models' metadata (their held-out quality), kept likewise
KEPT_FIRST_PAGE = ("Quality",)


def remade_cell_p50s(summary: pd.DataFrame) -> pd.DataFrame:
    """The summary with each cell's p50 (both boundaries) made again from its processes' by today's rule
    (inferbench.core.stats.fast_mode_p50): a summary written before it holds their median, which the
    report's claims (made from the processes) would then contradict. A cell without processes keeps its own."""
    import numpy as np

    from inferbench.analysis.comparison import COLUMNS, process_p50_rows
    from inferbench.core.stats import fast_mode_p50s

    summary = summary.copy()
    for p50_col, by_process, _, _ in COLUMNS.values():
        if p50_col in summary and by_process in summary:
            remade = fast_mode_p50s(process_p50_rows(summary[by_process], summary[p50_col]))
            summary[p50_col] = np.where(np.isnan(remade), summary[p50_col], remade)
    return summary


def backfill_computation(summary: pd.DataFrame, variants: dict[str, dict]) -> pd.DataFrame:
    """The summary with every computation column (``COMPUTATION_KEYS``, after ``mode``): where a row lacks
    them (its summary predates them, or predates one of them), from its engine variant in ``variants``;
    a row whose engine is not in ``variants`` keeps them empty. Values the summary has are kept."""
    import pandas as pd

    from inferbench.catalog.engines import COMPUTATION_KEYS
    from inferbench.catalog.workloads import workload_info
    from inferbench.engines.registry import load_engine_class

    absent = [key for key in COMPUTATION_KEYS if key not in summary]
    rows = []
    for _, row in summary.iterrows():
        # a row without ``graph`` predates every computation column; else it lacks only the summary's absent ones
        wanted = COMPUTATION_KEYS if not isinstance(row.get("graph"), str) else absent
        variant = variants.get(row["engine"])
        if not wanted or variant is None:
            rows.append(row.to_dict())
            continue
        engine = load_engine_class(variant["engine"])(row["device"], row["precision"], int(row["threads"]), variant)
        computation = engine.computation(workload_info(row["workload"]).kind)
        rows.append(row.to_dict() | {key: computation.get(key) for key in wanted})
    # reindex: a summary where no row could be backfilled still gets every column, empty
    frame = pd.DataFrame(rows).reindex(columns=[*summary.columns, *absent])
    order = [c for c in summary.columns if c not in COMPUTATION_KEYS]
    at = order.index("mode") + 1 if "mode" in order else len(order)
    return frame[[*order[:at], *COMPUTATION_KEYS, *order[at:]]]


def split_sections(text: str) -> list[tuple[str, str]]:
    """A Markdown report as (level-2 heading, text of the section with its heading line) in order; the text
    before the first heading has the heading ''."""
    sections: list[tuple[str, list[str]]] = [("", [])]
    for line in text.splitlines(keepends=True):
        if line.startswith("## "):
            sections.append((line[3:].strip(), []))
        sections[-1][1].append(line)
    return [(heading, "".join(lines)) for heading, lines in sections]


def keep_sections(fresh: str, original: str, kept_sections: Sequence[str] = KEPT_SECTIONS) -> str:
    """``fresh`` with the sections of ``original`` named in KEPT_SECTIONS: in place of its own where it has
    one, else after the section they followed in ``original`` (at the end if that one is gone); a line
    after the preamble names them. ``fresh`` as it is where ``original`` has none."""
    old = split_sections(original)
    kept = {heading: text for heading, text in old if heading in kept_sections}
    if not kept:
        return fresh
    out = [(heading, kept.get(heading, text)) for heading, text in split_sections(fresh)]
    for at, (heading, text) in enumerate(old):
        if heading not in kept or heading in dict(out):
            continue
        before = [i for i, (h, _) in enumerate(out) if h == old[at - 1][0]]
        out.insert(before[0] + 1 if before else len(out), (heading, text))
    names = ", ".join(f"'{h}'" for h in kept_sections if h in kept)
    note = (
        f"Re-rendered from the summary with later report code (`inferbench rerender --summary`): the "
        f"verdicts are the one verdict rule's; {names} are the original report's, made from the run's records "
        f"and by the code that measured.\n\n"
    )
    out[0] = (out[0][0], out[0][1] + note)
    return "".join(text if text.endswith("\n") else text + "\n" for _, text in out)


def load_config(configfile: Path | None, gpu: bool) -> tuple[dict[str, Any], dict[str, dict[str, Any]]]:
    """The config (config/config.yaml with ``configfile`` merged in) and its studies, devices resolved."""
    import yaml
    from snakemake.utils import update_config

    from inferbench.plan.config import validate_config
    from inferbench.plan.grid import resolved_studies

    config = yaml.safe_load(Path("config/config.yaml").read_text())
    if configfile:  # merged key by key, as Snakemake merges --configfile into the config
        update_config(config, yaml.safe_load(configfile.read_text()))
    validate_config(config)  # fills in the schema's defaults, as the workflow does
    return config, resolved_studies(config, has_cuda=gpu)


def render_summary(
    summary_csv: Path,
    out_dir: Path,
    config: dict[str, Any],
    studies: dict[str, dict[str, Any]],
    plots: bool = True,
) -> Path:
    """Write ``out_dir``/report.md (and, with ``plots``, ``out_dir``/plots/) from a summary CSV, which is
    only read; return the report's path."""
    from inferbench.analysis.summary_checks import REMAKE_FROM_RECORDS, checked_summary, read_summary
    from inferbench.catalog.scenarios import record_plots
    from inferbench.core.fsutil import atomic_path, refuse_linked_folders
    from inferbench.report.markdown import DETAILS_NAME, build_details, build_report
    from inferbench.report.plots import plot_every_workload

    summary = read_summary(summary_csv, REMAKE_FROM_RECORDS)
    # an impossible figure, a repeated cell or a linked output folder is refused before anything is written
    checked_summary(summary, summary_csv, use="report", fix=REMAKE_FROM_RECORDS, need_measured=False)
    refuse_linked_folders(out_dir, out_dir / "plots")
    summary = remade_cell_p50s(backfill_computation(summary, config["engines"]))
    written = plot_every_workload(summary, out_dir / "plots", list(config["engines"])) if plots else []
    # a plot a scenario draws from its records (every LoadGen run of a search), which a summary lacks: the run's own
    written += sorted(path for plot in record_plots() for path in (out_dir / "plots").glob(f"*/{plot}"))
    report, details = out_dir / "report.md", out_dir / DETAILS_NAME
    # the report from the table read here, not from the file again: its fields as written
    text = build_report(summary, written, report_dir=out_dir, studies=studies)
    detail_text = build_details(summary, written, report_dir=out_dir)
    # what the summary cannot make again stays as the run's own report had it: in its appendix since the
    # report has one, in the report itself before
    original = details if details.exists() else report
    if original.exists():
        detail_text = keep_sections(detail_text, original.read_text())
    if details.exists() and report.exists():  # a first page already: its quality section, from the models
        text = keep_sections(text, report.read_text(), KEPT_FIRST_PAGE)
    for path, content in ((details, detail_text), (report, text)):
        with atomic_path(path) as tmp:
            tmp.write_text(content.rstrip("\n") + "\n")
    print(f"{len(summary)} cells -> {report}, {details}")
    return report


def render_run_dir(run_dir: Path, config: dict[str, Any], studies: dict[str, dict[str, Any]]) -> Path:
    """Summary, plots and report of a run's records, under ``run_dir``/results; return the report's path."""
    from inferbench.analysis.summary import load_records, records_frame, write_summary
    from inferbench.catalog.scenarios import LOADS_TABLE, drawers, record_plots
    from inferbench.catalog.workloads import ordered
    from inferbench.core.fsutil import refuse_linked_folders
    from inferbench.report.markdown import write_report
    from inferbench.report.plots import plot_declared, plot_every_workload

    results = run_dir / "results"
    refuse_linked_folders(run_dir, results / "plots")
    records = sorted((results / "cells").glob("*/*/*/*.json"))
    loaded = load_records(records)  # read once: the summary, the loads and the serving plots (its LoadGen runs)
    summary = write_summary(records, results / "summary.csv", results / "summary.parquet", records_frame(loaded))
    plots = plot_every_workload(summary, results / "plots", list(config["engines"]))
    table = importlib.import_module(LOADS_TABLE)
    table.write_loads(loaded, results / table.LOADS_CSV)
    for plot in record_plots():  # the plots scenarios draw from their records (the serving plot among them)
        drawn = drawers(plot)
        for workload in ordered(r.key.workload for r in loaded if r.key.scenario in drawn):
            plots.append(plot_declared(loaded, workload, results / "plots" / workload / plot, list(config["engines"])))
    write_report(
        results / "summary.csv",
        results / "report.md",
        plots=plots,
        model_meta=sorted((results / "models").glob("*.json")),
        dataset_stats=sorted((run_dir / "data" / "processed").glob("*.stats.json")),
        profiles=sorted((results / "profiles").rglob("top_ops.json")),
        studies=studies,
    )
    print(f"{len(records)} records -> {results / 'report.md'}")
    return results / "report.md"


def _rerender_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("run_dir", type=Path, nargs="?", help="a run's folder, its records in results/cells")
    parser.add_argument("--summary", type=Path, help="re-render this summary CSV (it is only read)")
    parser.add_argument("--out", type=Path, help="with --summary: where report.md and plots/ go (default: its folder)")
    parser.add_argument("--no-plots", action="store_true", help="with --summary: the report alone, no plots")
    parser.add_argument("--configfile", type=Path, default=None)
    parser.add_argument("--gpu", action="store_true", help="the run saw a GPU: `auto` devices were cuda")


@arguments(_rerender_arguments)
def rerender(args: argparse.Namespace) -> None:
    if (args.run_dir is None) == (args.summary is None):
        raise UserError("give a RUN_DIR or --summary")
    if args.summary is None and (args.out or args.no_plots):
        raise UserError("--out and --no-plots go with --summary")
    config, studies = load_config(args.configfile, args.gpu)
    if args.summary:
        render_summary(args.summary, args.out or args.summary.parent, config, studies, plots=not args.no_plots)
    else:
        render_run_dir(args.run_dir, config, studies)
