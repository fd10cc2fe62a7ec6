"""Verbs of the results: the summary from the records, the plots, the roofline table, the Markdown report,
a comparison of two runs, and the removal of records so that their cells are measured again."""

from __future__ import annotations

import argparse
import importlib
import json
import os
from pathlib import Path

from inferbench.cli.args import arguments, required_paths
from inferbench.core.cells import STATUSES
from inferbench.core.errors import UserError


def _aggregate_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("records", nargs="+", type=Path)
    required_paths(p, "--out-csv", "--out-parquet")
    p.add_argument("--out-loads", type=Path, help="every load of every LLM serving cell, one row each (loads.csv)")


@arguments(_aggregate_arguments)
def aggregate(args: argparse.Namespace) -> None:
    from inferbench.analysis.summary import load_records, records_frame, write_summary
    from inferbench.analysis.summary_checks import checked_summary
    from inferbench.catalog.scenarios import LOADS_TABLE

    records = load_records(args.records)  # read once: the summary and the loads are both made from them
    # a record edited by hand (a negative or missing p50, a batch of 1.5) is named before any summary is written
    cells = Path(os.path.commonpath([str(p.parent) for p in args.records]))
    fix = "delete the cell's record and run the same command to measure the cell again"
    frame = records_frame(records)
    checked_summary(frame, cells, use="aggregate", fix=fix, need_measured=False)
    write_summary(args.records, args.out_csv, args.out_parquet, frame)
    print(f"{len(frame)} cells: {frame['status'].value_counts().to_dict()}")
    if args.out_loads is not None:
        loads = importlib.import_module(LOADS_TABLE).write_loads(records, args.out_loads)
        print(f"{len(loads)} loads of {loads['cell_id'].nunique()} LLM serving cells")


def _plot_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("records", nargs="+", type=Path)
    p.add_argument("--workload", required=True)
    kinds = ["batch", "seq", "declared", "summary"]
    p.add_argument("--kind", choices=kinds, default="batch", help="which sweep (or scenario's plot) to plot")
    p.add_argument(
        "--name",
        help="with --kind declared or summary: the file name of a plot a scenario declares, drawn from its records "
        "(declared) or from their summary (summary)",
    )
    p.add_argument("--engines", nargs="*", default=[], help="the config's engine variants, in order: their colours")
    p.add_argument("--out-dir", type=Path, required=True)


@arguments(_plot_arguments)
def plot(args: argparse.Namespace) -> None:
    from inferbench.analysis.summary import load_records, summary_frame
    from inferbench.catalog.scenarios import scenario_plots, summary_plot_drawer
    from inferbench.catalog.targets import load_target
    from inferbench.report.plots import plot_declared, plot_workload

    declared = scenario_plots()
    if args.kind in ("declared", "summary") and args.name not in declared:
        known = ", ".join(sorted(declared))
        raise UserError(f"plot --kind {args.kind} needs --name, the file name of a plot a scenario declares: {known}")
    if args.kind == "declared":  # drawn from the records (every LoadGen run of a search is there)
        plot_declared(load_records(args.records), args.workload, args.out_dir / args.name, args.engines)
        return
    if args.kind == "summary":
        drawer = summary_plot_drawer(args.name)
        if drawer is None:
            raise UserError(f"{args.name} is drawn from its cells' records: plot --kind declared --name {args.name}")
        load_target(drawer)(summary_frame(args.records), args.workload, args.out_dir / args.name, args.engines)
        return
    plot_workload(summary_frame(args.records), args.workload, args.out_dir, args.kind, args.engines)


def _roofline_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--summary", type=Path, required=True)
    p.add_argument("--costs", nargs="+", type=Path, required=True)
    p.add_argument("--peaks", nargs="+", type=Path, required=True)
    p.add_argument("--out", type=Path, required=True)


@arguments(_roofline_arguments)
def roofline(args: argparse.Namespace) -> None:
    from inferbench.analysis.roofline import roofline_table
    from inferbench.analysis.summary import read_summary_csv
    from inferbench.core.fsutil import atomic_path, read_json

    table = roofline_table(
        read_summary_csv(args.summary), [read_json(p) for p in args.costs], [read_json(p) for p in args.peaks]
    )
    with atomic_path(args.out) as tmp:
        table.to_csv(tmp, index=False)


def _report_arguments(p: argparse.ArgumentParser) -> None:
    required_paths(p, "--summary", "--out")
    p.add_argument("--plots", nargs="*", type=Path, default=[])
    p.add_argument("--model-meta", nargs="*", type=Path, default=[])
    p.add_argument("--dataset-stats", nargs="*", type=Path, default=[])
    p.add_argument("--profiles", nargs="*", type=Path, default=[], help="top_ops.json of profiled cells")
    p.add_argument("--roofline", nargs="*", type=Path, default=[], help="roofline.csv of the roofline studies")
    p.add_argument(
        "--studies", default="{}", help="JSON: study name -> its config (devices resolved, its cells); one section each"
    )
    p.add_argument("--lease-spread", type=Path, help="the spread between leases (inferbench compare --out-leases)")


@arguments(_report_arguments)
def report(args: argparse.Namespace) -> None:
    from inferbench.report.markdown import write_report

    write_report(
        args.summary,
        args.out,
        plots=args.plots,
        model_meta=args.model_meta,
        dataset_stats=args.dataset_stats,
        profiles=args.profiles,
        studies=json.loads(args.studies),
        roofline=args.roofline,
        lease_spread=args.lease_spread,
    )


def _compare_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("run_a", type=Path, help="a results directory (summary.csv, cells/) or a summary CSV")
    p.add_argument("run_b", type=Path, help="the same, for the run compared with RUN_A")
    p.add_argument("--out-md", type=Path, help="write the Markdown here too")
    p.add_argument("--out-csv", type=Path, help="the per-cell table as CSV")
    p.add_argument(
        "--out-leases",
        type=Path,
        help="the spread between the two runs per class, JSON: runs of two leases give what config "
        "`report.lease_spread` adds to a report's intervals",
    )


@arguments(_compare_arguments)
def compare(args: argparse.Namespace) -> None:
    from inferbench.analysis.leases import MIN_CELLS
    from inferbench.core.fsutil import atomic_path, refuse_non_regular
    from inferbench.report.compare import compare_runs

    # every output checked before the work: none replaces a link, a device, a run compared or another output
    outputs = {flag: path for flag, path in (("--out-md", args.out_md), ("--out-csv", args.out_csv),
                                             ("--out-leases", args.out_leases)) if path is not None}  # fmt: skip
    runs = (("RUN_A", args.run_a), ("RUN_B", args.run_b))
    seen = {path.resolve(): f"{name} {path}" for name, run in runs for path in (run, run / "summary.csv")}
    for flag, path in outputs.items():
        try:
            refuse_non_regular(path)
        except UserError as error:
            raise UserError(f"{flag} {error}") from None
        if (other := seen.get(path.resolve())) is not None:
            raise UserError(f"{flag} {path} is also {other}: it would be overwritten; give {flag} another path")
        seen[path.resolve()] = flag

    cells, _, text, leases = compare_runs(args.run_a, args.run_b)
    if args.out_csv:
        with atomic_path(args.out_csv) as tmp:
            cells.to_csv(tmp, index=False)
    if args.out_md:
        with atomic_path(args.out_md) as tmp:
            tmp.write_text(text + "\n")
    print(text)
    if args.out_leases:
        if leases is None:
            raise UserError(
                f"no class of cells (device-bound GPU, host-bound GPU, CPU) has {MIN_CELLS} cells ok in both "
                "runs: no spread between them to write; compare runs of the same study"
            )
        leases.save(args.out_leases)


def _export_arguments(p: argparse.ArgumentParser) -> None:
    import importlib

    from inferbench.catalog.exporters import EXPORTERS

    exporters = p.add_subparsers(dest="exporter", required=True, metavar="EXPORTER")
    for name, info in EXPORTERS.items():
        q = exporters.add_parser(name, help=info.description, description=info.description)
        q.add_argument("--summary", type=Path, default=Path("results/summary.csv"))
        q.add_argument("--cells-dir", type=Path, default=Path("results/cells"), help="the records")
        q.add_argument("--plots-dir", type=Path, default=Path("results/plots"), help="each workload's plots")
        q.add_argument("--out-dir", type=Path, default=Path("results") / name, help="where its own files go")
        q.add_argument("--out", type=Path, help="write what was exported where (JSON) here too")
        try:
            module = importlib.import_module(info.module)  # only when the export verb runs
        except Exception as error:  # one broken exporter leaves the others working; asked for, it is named
            q.set_defaults(exporter_options=(), exporter_broken=f"{info.path}: {type(error).__name__}: {error}")
            continue
        own = argparse.ArgumentParser(add_help=False)  # the exporter's options, known by what it declares
        if hasattr(module, "add_arguments"):
            module.add_arguments(q)
            module.add_arguments(own)
        q.set_defaults(exporter_options=tuple(vars(own.parse_args([]))), exporter_broken=None)


@arguments(_export_arguments)
def export(args: argparse.Namespace) -> None:
    from inferbench.catalog.exporters import exporter_info
    from inferbench.catalog.targets import load_target
    from inferbench.core.errors import UserError
    from inferbench.core.fsutil import write_json

    if args.exporter_broken:
        raise UserError(f"exporter {args.exporter!r} cannot be imported ({args.exporter_broken[:500]}): fix its module")
    options = {key: getattr(args, key) for key in args.exporter_options}
    run_export = load_target(exporter_info(args.exporter).target)
    done = run_export(args.summary, args.cells_dir, args.plots_dir, args.out_dir, **options)
    if args.out:
        write_json(args.out, done)
    print(done.get("message") or json.dumps(done))


def _clean_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--cells-dir", type=Path, default=Path("results/cells"))
    p.add_argument(
        "--summary",
        type=Path,
        nargs="+",
        default=[
            Path("results/summary.csv"),
            Path("results/summary.parquet"),
            Path("results/loads.csv"),
            Path("results/report.md"),
            Path("results/report_details.md"),
        ],
        help="what the records make, removed with any record: no page publishes a removed cell, and the next run "
        "re-makes them",
    )
    p.add_argument(
        "--status",
        nargs="+",
        default=["failed", "unreadable"],
        choices=[*STATUSES, "unreadable"],
        help="unreadable: records that cannot be read (damaged, another schema); default: failed unreadable",
    )


@arguments(_clean_arguments)
def clean(args: argparse.Namespace) -> None:
    from inferbench.analysis.summary import remove_records

    newer: list[Path] = []
    removed = remove_records(args.cells_dir, set(args.status), newer)
    if newer:
        shown = ", ".join(str(path) for path in newer[:3]) + (f" and {len(newer) - 3} more" if len(newer) > 3 else "")
        print(f"kept {len(newer)} record(s) a newer inferbench wrote ({shown}): update the checkout to read them")
    if removed:
        # Snakemake re-makes a missing record only when something that needs it must run: with the
        # summary gone, the plain command re-measures the removed cells and re-makes what follows them
        for path in args.summary:
            path.unlink(missing_ok=True)
    print(f"removed {len(removed)} records with status {', '.join(args.status)}; the next run re-measures them")
