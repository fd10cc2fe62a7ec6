"""The verbs the Snakemake rules call: ``python -m inferbench <verb> ...`` (or ``inferbench <verb>``).

Each verb parses its arguments, calls the library and writes its outputs atomically. Verbs that
compute take the machine lock shared *before* importing heavy libraries, so that they never run
while a cell is measuring; ``run-cell`` takes it exclusively while it measures.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time
from pathlib import Path
from typing import Any

from inferbench.core.cells import SCENARIOS
from inferbench.core.errors import UserError
from inferbench.core.workloads import WORKLOADS
from inferbench.launch.lock import MachineLock

log = logging.getLogger("inferbench")


def _json(text: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError as error:
        raise argparse.ArgumentTypeError(f"not valid JSON: {error}") from None


def _engine_options(text: str) -> dict[str, Any]:
    """An engine variant as JSON, checked against its implementation's declared options."""
    from inferbench.engines.registry import ENGINES, option_problems

    variant = _json(text)
    if not isinstance(variant, dict) or variant.get("engine") not in ENGINES:
        raise argparse.ArgumentTypeError(f"needs a JSON object whose `engine` is one of {', '.join(ENGINES)}")
    problems = option_problems(variant["engine"], variant)
    if problems:
        raise argparse.ArgumentTypeError("; ".join(problems))
    return variant


def _write_model_meta(spec: Any, path: Path, extra: dict[str, Any]) -> None:
    from dataclasses import asdict

    from inferbench.core.fsutil import write_json

    write_json(
        path,
        {
            "name": spec.name,
            "arch": spec.arch,
            "n_params": spec.n_params,
            "inputs": [asdict(i) for i in spec.inputs],
            "output_name": spec.output_name,
            **extra,
        },
    )


def cmd_generate_data(args: argparse.Namespace) -> None:
    from inferbench.data import heart, lendingclub

    if args.dataset == "lendingclub":
        lendingclub.generate(args.out_dir, rows=args.rows, seed=args.seed)
    else:
        heart.generate(args.out_dir, seed=args.seed)


def cmd_download(args: argparse.Namespace) -> None:
    from inferbench.data import download

    if args.dataset == "lendingclub":
        download.download_lendingclub(args.out, dataset=args.kaggle_dataset)
    else:
        urls = args.url or download.UCI_URLS
        if plain := [u for u in urls if not u.startswith("https://")]:  # as the config schema demands
            raise UserError(f"only https:// URLs are downloaded, not {', '.join(plain)}")
        download.download_heart(args.out, urls=urls)
    log.info("downloaded and verified %s", args.out)


def cmd_prepare_data(args: argparse.Namespace) -> None:
    from inferbench.core.fsutil import atomic_path, write_json
    from inferbench.data import heart, lendingclub

    if args.dataset == "lendingclub":
        table, encoder, stats = lendingclub.clean(args.raw, sample_rows=args.sample_rows, seed=args.seed)
    else:
        table, encoder, stats = heart.clean(args.raw)
    stats["source"] = args.source
    stats["raw_file"] = str(args.raw)
    with atomic_path(args.out) as tmp:
        table.to_parquet(tmp, index=False)
    encoder.save(args.encoders)
    write_json(args.stats, stats)


def cmd_train_mlp(args: argparse.Namespace) -> None:
    import pandas as pd

    from inferbench.models.registry import save_checkpoint
    from inferbench.models.training import train_mlp

    options = dict(args.options)
    hidden = options.pop("arch", {}).get("hidden")
    train = options.pop("train", {})
    spec, metrics = train_mlp(args.workload, pd.read_parquet(args.data), hidden=hidden, **train)
    save_checkpoint(spec, args.out, seed=train.get("seed", 0), meta=metrics)
    _write_model_meta(spec, args.meta, {"training": metrics})
    log.info("trained: %s", json.dumps(metrics))


def cmd_build_model(args: argparse.Namespace) -> None:
    from inferbench.models.registry import create_model, save_checkpoint

    spec = create_model(args.workload, seed=args.seed, **args.arch)
    save_checkpoint(spec, args.out, seed=args.seed)
    _write_model_meta(spec, args.meta, {})


def cmd_export_onnx(args: argparse.Namespace) -> None:
    from inferbench.core.fsutil import write_json
    from inferbench.models.export import export_onnx
    from inferbench.models.registry import load_checkpoint

    spec, _ = load_checkpoint(args.checkpoint)
    report = export_onnx(spec, args.out, **args.options)
    write_json(args.report, report)
    log.info("exported: %s", json.dumps(report))


def cmd_fuse_onnx(args: argparse.Namespace) -> None:
    from inferbench.core.fsutil import write_json
    from inferbench.core.workloads import workload_info
    from inferbench.models.fusions import export_fused
    from inferbench.models.registry import load_checkpoint

    spec, _ = load_checkpoint(args.checkpoint)
    write_json(args.report, export_fused(spec, workload_info(spec.name).kind, args.out))


def cmd_model_cost(args: argparse.Namespace) -> None:
    from inferbench.core.fsutil import write_json
    from inferbench.models.registry import load_checkpoint
    from inferbench.trackers.roofline import model_cost

    spec, _ = load_checkpoint(args.checkpoint)
    write_json(args.out, model_cost(spec, args.seq))


def cmd_machine_peaks(args: argparse.Namespace, lock: MachineLock) -> None:
    from inferbench.core.fsutil import write_json
    from inferbench.trackers.roofline import machine_peaks

    with lock.exclusively():  # a measurement like a cell's: nothing else of the workflow runs meanwhile
        peaks = machine_peaks(args.device)
    write_json(args.out, peaks)
    log.info("peaks: %s", json.dumps(peaks))


def cmd_roofline(args: argparse.Namespace) -> None:
    import pandas as pd

    from inferbench.core.fsutil import atomic_path, read_json
    from inferbench.trackers.roofline import roofline_table

    table = roofline_table(
        pd.read_csv(args.summary), [read_json(p) for p in args.costs], [read_json(p) for p in args.peaks]
    )
    with atomic_path(args.out) as tmp:
        table.to_csv(tmp, index=False)


def cmd_convert_onnx(args: argparse.Namespace) -> None:
    from inferbench.core.fsutil import write_json
    from inferbench.models.export import convert_fp16, quantize_int8

    report = (quantize_int8 if args.to == "int8" else convert_fp16)(args.source, args.out)
    write_json(args.report, report)


def cmd_build_trt_engine(args: argparse.Namespace) -> None:
    from inferbench.core.fsutil import read_json, write_json
    from inferbench.engines.registry import effective_options
    from inferbench.engines.tensorrt import engine as tensorrt
    from inferbench.scenarios.run import input_specs

    inputs = input_specs(read_json(args.model_meta))
    options = effective_options("tensorrt", args.options)
    calibration = None
    if args.precision == "int8":
        features = None
        if args.data:  # tabular workloads calibrate on their real, encoded rows
            import pandas as pd

            features = pd.read_parquet(args.data).drop(columns=["target"]).to_numpy()
        n_batches = options["calibration_batches"]
        calibration = tensorrt.calibration_batches(inputs, args.batch, args.seq, n_batches, features)
    report = tensorrt.build_engine(
        args.onnx,
        inputs,
        args.precision,
        args.batch,
        args.seq,
        args.out,
        calibration,
        workspace_gib=float(options["workspace_gib"]),
    )
    write_json(tensorrt.build_report_path(args.out), report)
    log.info("built: %s", json.dumps(report))


def cmd_reference(args: argparse.Namespace) -> None:
    from inferbench.core.fsutil import read_json
    from inferbench.models.parity import make_reference
    from inferbench.scenarios.run import input_specs

    make_reference(args.checkpoint, input_specs(read_json(args.model_meta)), args.seq, args.rows, args.out)


def measure_settings(measure: dict[str, Any]) -> Any:
    from inferbench.scenarios.run import MeasureSettings

    affinity = measure.get("cpu_affinity")
    return MeasureSettings(**{**measure, "cpu_affinity": tuple(affinity) if affinity else None})


def cmd_run_cell(args: argparse.Namespace, lock: MachineLock) -> None:
    imports_started = time.perf_counter()  # the cell runner's own imports load torch: they count too
    from inferbench.core.cells import CellKey
    from inferbench.scenarios.run import CellInputs, measure_cell

    key = CellKey(
        args.workload, args.engine, args.precision, args.device, args.batch, args.seq, args.threads, args.scenario
    )
    inputs = CellInputs(args.model_meta, args.artifact, args.reference, args.data)
    settings = measure_settings(args.measure)
    serving = None
    if args.scenario != "single":
        from inferbench.scenarios.serving import ServingSettings

        if args.serving is None:
            raise UserError(f"--scenario {args.scenario} needs --serving (JSON: latency_bound_ms, ...)")
        serving = ServingSettings.from_dict(args.serving)
    record = measure_cell(
        key, args.engine_options, inputs, settings, args.out, lock, args.tolerance, imports_started, serving
    )
    p50 = (record.latency_ms or {}).get("p50")
    processes = (record.repeats or {}).get("n", 1)
    spread = (record.repeats or {}).get("p50_spread_pct")
    bound = (record.bound or {}).get("class")
    log.info(
        f"{key.cell_id}: {record.status}"
        + (f", p50 {p50:.3f} ms" if p50 is not None else f" ({record.reason})")
        + f", {processes} process{'es' if processes > 1 else ''}"
        + (f" (spread {spread:.1f}%)" if spread is not None else "")
        + (f", {bound}-bound" if bound else "")
    )


def cmd_profile_cell(args: argparse.Namespace, lock: MachineLock) -> None:
    from inferbench.core.cells import CellKey
    from inferbench.scenarios.run import CellInputs, profile_cell

    key = CellKey(args.workload, args.engine, args.precision, args.device, args.batch, args.seq, args.threads)
    inputs = CellInputs(args.model_meta, args.artifact, None, args.data)
    settings = measure_settings({**args.measure, "repeats": 1})
    result = profile_cell(key, args.engine_options, inputs, settings, args.out, lock, args.calls, args.top)
    ops = ", ".join(f"{op['name']} {op['share']:.0%}" for op in result.get("top_ops", [])[:3] if op["share"])
    log.info(f"{key.cell_id}: profile {result['status']}" + (f"; top: {ops}" if ops else f" ({result.get('reason')})"))


def cmd_aggregate(args: argparse.Namespace) -> None:
    from inferbench.analysis.summary import write_summary

    frame = write_summary(args.records, args.out_csv, args.out_parquet)
    print(f"{len(frame)} cells: {frame['status'].value_counts().to_dict()}")


def cmd_plot(args: argparse.Namespace) -> None:
    from inferbench.analysis.summary import load_records, summary_frame
    from inferbench.report.plots import SERVING_PLOT, plot_serving, plot_workload

    if args.kind == "serving":  # every LoadGen run of the search is in the records, not the summary
        plot_serving(load_records(args.records), args.workload, args.out_dir / SERVING_PLOT, args.engines)
        return

    plot_workload(summary_frame(args.records), args.workload, args.out_dir, args.kind, args.engines)


def cmd_report(args: argparse.Namespace) -> None:
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
    )


def cmd_compare(args: argparse.Namespace) -> None:
    from inferbench.analysis.compare_runs import compare_runs
    from inferbench.core.fsutil import atomic_path

    cells, _, text = compare_runs(args.run_a, args.run_b)
    if args.out_csv:
        with atomic_path(args.out_csv) as tmp:
            cells.to_csv(tmp, index=False)
    if args.out_md:
        with atomic_path(args.out_md) as tmp:
            tmp.write_text(text + "\n")
    print(text)


def cmd_warm_server(args: argparse.Namespace) -> None:
    from inferbench.launch.warm import PRELOAD, serve

    serve(args.socket, PRELOAD, watch_pid=args.watch_pid)


def cmd_list(args: argparse.Namespace) -> None:
    if args.what == "engines":
        from inferbench.engines.ort.engine import ort_distributions
        from inferbench.engines.registry import ENGINES, load_engine_class

        if len(installed := ort_distributions()) > 1:
            print(
                f"warning: {' and '.join(installed)} are both installed and overwrite each other's files:"
                " `pip uninstall -y onnxruntime onnxruntime-gpu`, then `pip install -e .`"
            )
        for name, info in ENGINES.items():
            try:
                cls = load_engine_class(name)
                reasons = {d: cls.unavailable_reason(d, "fp32") for d in info.devices}
            except ImportError as error:
                reasons = {d: f"cannot import: {error}" for d in info.devices}
            where = ", ".join(
                f"{d}: {'available' if r is None else 'unavailable (' + r + ')'}" for d, r in reasons.items()
            )
            print(f"{name:14s} precisions {'/'.join(info.precisions):14s} {where}\n{'':14s} {info.description}")
            for key, option in info.options.items():
                choices = f" ({'|'.join(map(str, option.choices))})" if option.choices else ""
                print(f"{'':16s}{key}: {option.type.__name__}{choices} = {option.default!r}  {option.help}")
    else:
        from inferbench.core.workloads import FAMILIES, WORKLOADS

        for name, info in WORKLOADS.items():
            print(f"{name:16s} {info.kind:8s} {info.description}")
        for family, (kind, description) in FAMILIES.items():
            print(f"{family + ':<name>':16s} {kind:8s} {description.format(name='any model')}")


def cmd_clean(args: argparse.Namespace) -> None:
    from inferbench.analysis.summary import remove_records

    removed = remove_records(args.cells_dir, set(args.status))
    print(f"removed {len(removed)} records with status {', '.join(args.status)}; the next run re-measures them")


def _add_cell_arguments(p: argparse.ArgumentParser) -> None:
    """What names a cell and what it is prepared from: shared by run-cell and profile-cell."""
    p.add_argument("--workload", required=True)
    p.add_argument("--engine", required=True, help="the engine variant's name (config key under `engines`)")
    p.add_argument("--engine-options", type=_engine_options, required=True, help="the variant's config, JSON (checked)")
    p.add_argument("--precision", required=True)
    p.add_argument("--device", required=True)
    p.add_argument("--batch", type=int, required=True)
    p.add_argument("--seq", type=int, default=0)
    p.add_argument("--threads", type=int, default=0)
    p.add_argument("--model-meta", type=Path)
    p.add_argument("--artifact", type=Path)
    p.add_argument("--measure", type=_json, default={})
    p.add_argument("--data", type=Path, help="the workload's processed dataset (engines that train on it)")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="inferbench", description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="verb", required=True)

    p = sub.add_parser("generate-data", help="write a synthetic raw dataset in the real format")
    p.add_argument("--dataset", choices=["lendingclub", "heart"], required=True)
    p.add_argument("--out-dir", type=Path, required=True)
    p.add_argument("--rows", type=int, default=20_000)
    p.add_argument("--seed", type=int, default=0)
    p.set_defaults(func=cmd_generate_data, lock=True)

    p = sub.add_parser("download", help="download a real dataset (Kaggle, UCI) and verify it")
    p.add_argument("--dataset", choices=["lendingclub", "heart"], required=True)
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--kaggle-dataset", default="wordsforthewise/lending-club")
    p.add_argument("--url", action="append", help="UCI URL to try (repeatable; default: the archive's two)")
    p.set_defaults(func=cmd_download, lock=True)

    p = sub.add_parser("prepare-data", help="clean and encode a raw dataset into a parquet table")
    p.add_argument("--dataset", choices=["lendingclub", "heart"], required=True)
    p.add_argument("--source", default="synthetic")
    p.add_argument("--sample-rows", type=int, default=None, help="keep a seeded sample of the cleaned rows")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--raw", type=Path, required=True)
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--encoders", type=Path, required=True)
    p.add_argument("--stats", type=Path, required=True)
    p.set_defaults(func=cmd_prepare_data, lock=True)

    p = sub.add_parser("train-mlp", help="train a tabular MLP; writes a checkpoint and its metrics")
    p.add_argument("--workload", choices=[w for w, info in WORKLOADS.items() if info.trained], required=True)
    p.add_argument("--data", type=Path, required=True)
    p.add_argument("--options", type=_json, default={})
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--meta", type=Path, required=True)
    p.set_defaults(func=cmd_train_mlp, lock=True)

    p = sub.add_parser("build-model", help="build a model with random weights and save a checkpoint")
    p.add_argument("--workload", required=True)
    p.add_argument("--arch", type=_json, default={})
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--meta", type=Path, required=True)
    p.set_defaults(func=cmd_build_model, lock=True)

    p = sub.add_parser("export-onnx", help="export a checkpoint to ONNX, simplify, check parity")
    p.add_argument("--checkpoint", type=Path, required=True)
    p.add_argument("--options", type=_json, default={})
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--report", type=Path, required=True)
    p.set_defaults(func=cmd_export_onnx, lock=True)

    p = sub.add_parser(
        "fuse-onnx", help="export a checkpoint for ONNX Runtime's transformer fusions, fuse, check parity"
    )
    p.add_argument("--checkpoint", type=Path, required=True)
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--report", type=Path, required=True)
    p.set_defaults(func=cmd_fuse_onnx, lock=True)

    p = sub.add_parser("convert-onnx", help="make the int8 (dynamic quantization) or fp16 variant of an export")
    p.add_argument("--to", choices=["int8", "fp16"], required=True)
    p.add_argument("--source", type=Path, required=True)
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--report", type=Path, required=True)
    p.set_defaults(func=cmd_convert_onnx, lock=True)

    p = sub.add_parser("build-trt-engine", help="build a native TensorRT engine (plan) from the fp32 ONNX export")
    p.add_argument("--onnx", type=Path, required=True)
    p.add_argument("--model-meta", type=Path, required=True)
    p.add_argument("--precision", choices=["fp32", "fp16", "int8"], required=True)
    p.add_argument("--batch", type=int, required=True)
    p.add_argument("--seq", type=int, default=0)
    p.add_argument(
        "--options", type=_engine_options, default={"engine": "tensorrt"}, help="the tensorrt engine variant, JSON"
    )
    p.add_argument("--data", type=Path, help="processed dataset whose rows calibrate int8 (tabular workloads)")
    p.add_argument("--out", type=Path, required=True)
    p.set_defaults(func=cmd_build_trt_engine, lock=True)

    p = sub.add_parser("reference", help="FP32 eager reference outputs for the parity check")
    p.add_argument("--checkpoint", type=Path, required=True)
    p.add_argument("--model-meta", type=Path, required=True)
    p.add_argument("--seq", type=int, default=0)
    p.add_argument("--rows", type=int, default=2)
    p.add_argument("--out", type=Path, required=True)
    p.set_defaults(func=cmd_reference, lock=True)

    p = sub.add_parser("run-cell", help="measure one cell and write its record")
    _add_cell_arguments(p)
    p.add_argument("--reference", type=Path, help="reference inputs/outputs (npz) for the parity check")
    p.add_argument("--tolerance", type=_json, default={}, help="parity tolerances of this precision, JSON")
    p.add_argument("--scenario", choices=SCENARIOS, default="single", help="single (timed calls) or a LoadGen scenario")
    p.add_argument("--serving", type=_json, help="LoadGen settings, JSON (ServingSettings)")
    p.add_argument("--out", type=Path, required=True)
    p.set_defaults(func=cmd_run_cell, lock=True)

    p = sub.add_parser("profile-cell", help="profile one cell (trace + top operators), outside any timed loop")
    _add_cell_arguments(p)
    p.add_argument("--calls", type=int, default=10, help="profiled calls after the warm-up")
    p.add_argument("--top", type=int, default=12, help="operators kept in the table")
    p.add_argument("--out", type=Path, required=True, help="top_ops.json; the trace is written beside it")
    p.set_defaults(func=cmd_profile_cell, lock=True)

    p = sub.add_parser("model-cost", help="FLOPs and bytes of one row of a workload at a sequence length")
    p.add_argument("--checkpoint", type=Path, required=True)
    p.add_argument("--seq", type=int, default=0)
    p.add_argument("--out", type=Path, required=True)
    p.set_defaults(func=cmd_model_cost, lock=True)

    p = sub.add_parser("machine-peaks", help="this machine's GEMM FLOP/s per precision and copy bandwidth")
    p.add_argument("--device", choices=["cpu", "cuda"], required=True)
    p.add_argument("--out", type=Path, required=True)
    p.set_defaults(func=cmd_machine_peaks, lock=True)

    p = sub.add_parser("roofline", help="place the summary's cells under the machine's peaks")
    p.add_argument("--summary", type=Path, required=True)
    p.add_argument("--costs", nargs="+", type=Path, required=True)
    p.add_argument("--peaks", nargs="+", type=Path, required=True)
    p.add_argument("--out", type=Path, required=True)
    p.set_defaults(func=cmd_roofline, lock=True)

    p = sub.add_parser("aggregate", help="collect cell records into summary.csv and summary.parquet")
    p.add_argument("records", nargs="+", type=Path)
    p.add_argument("--out-csv", type=Path, required=True)
    p.add_argument("--out-parquet", type=Path, required=True)
    p.set_defaults(func=cmd_aggregate, lock=True)  # work: never while a cell measures

    p = sub.add_parser("plot", help="plot one workload's cells")
    p.add_argument("records", nargs="+", type=Path)
    p.add_argument("--workload", required=True)
    p.add_argument("--kind", choices=["batch", "seq", "serving"], default="batch", help="which sweep to plot")
    p.add_argument("--engines", nargs="*", default=[], help="the config's engine variants, in order: their colours")
    p.add_argument("--out-dir", type=Path, required=True)
    p.set_defaults(func=cmd_plot, lock=True)  # work: never while a cell measures

    p = sub.add_parser("report", help="write the Markdown report")
    p.add_argument("--summary", type=Path, required=True)
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--plots", nargs="*", type=Path, default=[])
    p.add_argument("--model-meta", nargs="*", type=Path, default=[])
    p.add_argument("--dataset-stats", nargs="*", type=Path, default=[])
    p.add_argument("--profiles", nargs="*", type=Path, default=[], help="top_ops.json of profiled cells")
    p.add_argument("--roofline", nargs="*", type=Path, default=[], help="roofline.csv of the roofline studies")
    p.add_argument(
        "--studies", default="{}", help="JSON: study name -> its config (devices resolved); one section each"
    )
    p.set_defaults(func=cmd_report, lock=True)  # work: never while a cell measures

    p = sub.add_parser(
        "compare",
        help="two runs cell by cell (p50 ratio with a 95%% interval, changes beyond the noise) and their decisions",
    )
    p.add_argument("run_a", type=Path, help="a results directory (summary.csv, cells/) or a summary CSV")
    p.add_argument("run_b", type=Path, help="the same, for the run compared with RUN_A")
    p.add_argument("--out-md", type=Path, help="write the Markdown here too")
    p.add_argument("--out-csv", type=Path, help="the per-cell table as CSV")
    p.set_defaults(func=cmd_compare, lock=False)

    p = sub.add_parser(
        "warm-server",
        help="import torch, timm, transformers and ONNX Runtime once and fork cell jobs from here",
    )
    p.add_argument(
        "--socket", type=Path, required=True, help="the Unix socket jobs find through $INFERBENCH_WARM_SOCKET"
    )
    p.add_argument("--watch-pid", type=int, help="exit once this process (the Snakemake run) is gone")
    p.set_defaults(func=cmd_warm_server, lock=False)

    p = sub.add_parser("list", help="list engines (with availability here) or workloads")
    p.add_argument("what", choices=["engines", "workloads"])
    p.set_defaults(func=cmd_list, lock=False)

    p = sub.add_parser("clean", help="remove records (default: failed ones) so the next run retries them")
    p.add_argument("--cells-dir", type=Path, default=Path("results/cells"))
    p.add_argument(
        "--status",
        nargs="+",
        default=["failed", "unreadable"],
        choices=["failed", "unreadable", "oom", "unavailable", "invalid", "ok"],
        help="unreadable: records that cannot be read (damaged, another schema); default: failed unreadable",
    )
    p.set_defaults(func=cmd_clean, lock=False)
    return parser


def _runs_on_gpu(args: argparse.Namespace) -> bool:
    """GPU jobs (cells on cuda, TensorRT builds) claim a device of their own (inferbench.launch.gpu_slots)."""
    if args.verb == "build-trt-engine":
        return True
    return args.verb in ("run-cell", "profile-cell", "machine-peaks") and args.device == "cuda"


def configure_logging() -> None:
    """Every job's log: timestamped lines on stderr (the rules send it to logs/<rule>/...): this
    package's progress, and only warnings of the libraries it drives (the exporter is chatty)."""
    logging.basicConfig(
        level=logging.WARNING,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        datefmt="%Y-%m-%d %H:%M:%S",
        stream=sys.stderr,
        force=True,
    )
    logging.getLogger("inferbench").setLevel(logging.INFO)


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    configure_logging()
    gpu = None
    if _runs_on_gpu(args):
        from inferbench.launch.gpu_slots import claim_for_this_process

        gpu = claim_for_this_process()  # before anything imports CUDA; released when this process ends
    lock = None
    if args.lock:
        from inferbench.launch.run_lock import join_run

        join_run()  # a job of a run in this directory: a run started after a kill -9 leaves it alone
        lock = MachineLock()
        lock.shared()
    try:
        if args.func in (cmd_run_cell, cmd_profile_cell, cmd_machine_peaks):
            args.func(args, lock)
        else:
            args.func(args)
    except (UserError, ValueError, FileNotFoundError) as error:
        print(f"inferbench {args.verb}: error: {error}", file=sys.stderr)
        return 2
    finally:
        if lock:
            lock.close()
        if gpu:
            gpu.release()
    return 0
