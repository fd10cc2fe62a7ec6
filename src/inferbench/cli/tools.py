"""Verbs around the workflow: the warm-start server its jobs fork from, and what can run here."""

from __future__ import annotations

import argparse
from pathlib import Path

from inferbench.cli.args import arguments


def _warm_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--socket", type=Path, required=True, help="the Unix socket jobs find through $INFERBENCH_WARM_SOCKET"
    )
    p.add_argument("--watch-pid", type=int, help="exit once this process (the Snakemake run) is gone")


@arguments(_warm_arguments)
def warm_server(args: argparse.Namespace) -> None:
    from inferbench.cli.main import main
    from inferbench.launch.warm import PRELOAD, serve

    serve(args.socket, main, PRELOAD, watch_pid=args.watch_pid)


def _list_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("what", choices=["engines", "workloads", "scenarios", "exporters"])


@arguments(_list_arguments)
def list_(args: argparse.Namespace) -> None:
    if args.what == "engines":
        from inferbench.engines.ort.engine import ort_distributions
        from inferbench.engines.registry import ENGINES, SKIPPED_FAMILIES, load_engine_class

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
        for family, why in SKIPPED_FAMILIES.items():
            print(f"warning: engine family {family} skipped, its engines unknown: {why}")
            for key, option in info.options.items():
                choices = f" ({'|'.join(map(str, option.choices))})" if option.choices else ""
                print(f"{'':16s}{key}: {option.type.__name__}{choices} = {option.default!r}  {option.help}")
    elif args.what == "workloads":
        from inferbench.catalog.workloads import FAMILIES, WORKLOADS

        for name, info in WORKLOADS.items():
            print(f"{name:16s} {info.kind:8s} {info.description}")
        for family, (kind, description) in FAMILIES.items():
            print(f"{family + ':<name>':16s} {kind:8s} {description.format(name='any model')}")
    elif args.what == "scenarios":
        from inferbench.catalog.scenarios import SCENARIOS

        for name, scenario in SCENARIOS.items():
            layout = f" (studies of layout {scenario.layout})" if scenario.layout else ""
            print(f"{name:16s} {scenario.description}{layout}")
    else:
        from inferbench.catalog.exporters import EXPORTERS, SKIPPED

        for name, exporter in EXPORTERS.items():
            print(f"{name:16s} {exporter.description}")
        for name, why in SKIPPED.items():
            print(f"{name:16s} skipped: {why}")
