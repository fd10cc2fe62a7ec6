"""Verbs that measure: one cell (its record), one cell's profile, the machine's peaks. Each holds the
machine lock exclusively while it measures (inferbench.machine.lock)."""

from __future__ import annotations

import argparse
import json
import logging
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from inferbench.catalog.scenarios import SCENARIOS
from inferbench.cli.args import arguments, json_value
from inferbench.cli.cell_args import add_cell_arguments, check_artifact, plain_request
from inferbench.core.errors import UserError

log = logging.getLogger("inferbench")


def _run_arguments(p: argparse.ArgumentParser) -> None:
    add_cell_arguments(p)
    p.add_argument("--reference", type=Path, help="reference inputs/outputs (npz) for the parity check")
    p.add_argument("--tolerance", type=json_value, default={}, help="parity tolerances of this precision, JSON")
    p.add_argument("--scenario", choices=SCENARIOS, default="single", help="how the cell is driven (its scenario)")
    p.add_argument(
        "--code", help="the code identity of this job (the workflow passes its own: inferbench.plan.code), recorded"
    )
    p.add_argument(
        "--invalidates",
        type=Path,
        nargs="*",
        default=[],
        help="files that publish the cells' numbers (the summary, the report): removed before measuring, so that "
        "a job that fails or is cancelled leaves none of the cell's earlier numbers standing",
    )
    p.add_argument(
        "--primed",
        type=Path,
        help="the record of the cell's priming job (prime-cell): its compile caches, beside it, are the cell's",
    )
    p.add_argument(
        "--interleaved",
        type=Path,
        help="the folder of a run-interleaved job that measured this cell in turn with others: the record is "
        "taken from there, nothing is measured",
    )
    p.add_argument("--out", type=Path, required=True)


def _cell_request(args: argparse.Namespace) -> Any:
    """The inferbench.scenarios.prepare.CellRequest that run-cell's arguments name."""
    from inferbench.core.cells import CellKey
    from inferbench.core.settings import MeasureSettings
    from inferbench.scenarios.prepare import CellInputs, CellRequest

    check_artifact(args)
    key = CellKey.of_fields(vars(args))
    inputs = CellInputs(args.model_meta, args.artifact, args.reference, args.data)
    settings = MeasureSettings.from_dict(args.measure)
    return CellRequest(key, args.engine_options, inputs, settings, args.tolerance)


def _remove_published(paths: list[Path]) -> None:
    for path in paths:
        if path.is_file():
            path.unlink()
            log.info("removed %s: it publishes this cell's earlier numbers; the run makes it again", path)


@arguments(_run_arguments)
def run_cell(args: argparse.Namespace) -> None:
    imports_started = time.perf_counter()  # the cell job's own imports load torch: they count too
    request = _cell_request(args)
    _remove_published(args.invalidates)
    if args.interleaved is not None:
        from inferbench.launch.cell_job import take_interleaved

        record = take_interleaved(args.interleaved, request.key, args.out)
        others = ", ".join((record.repeats or {}).get("interleaved_with", [])) or "no other cell"
        log.info(f"{request.key.cell_id}: {record.status}, measured in turn with {others}")
        return
    from inferbench.launch.cell_job import measure_cell

    record = measure_cell(request, args.out, args.lock, imports_started, args.code, args.primed)
    _log_measured(record)


def _log_measured(record: Any) -> None:
    key = record.key
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


def _interleaved_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--device", required=True, help="the cells' device (all the same): a GPU slot is claimed for cuda")
    p.add_argument(
        "--member",
        type=json_value,
        action="append",
        required=True,
        help="one cell's run-cell arguments, --out included, as a JSON list; two or more",
    )
    p.add_argument("--code", help="the code identity of this job (the workflow passes its own), recorded")
    p.add_argument("--invalidates", type=Path, nargs="*", default=[], help="as run-cell's")


@arguments(_interleaved_arguments)
def run_interleaved(args: argparse.Namespace) -> None:
    """Cells that differ only in their engine variant measured in one job, one process of each in turn."""
    imports_started = time.perf_counter()
    parser = argparse.ArgumentParser(prog="run-interleaved --member")
    _run_arguments(parser)
    members = [parser.parse_args([str(a) for a in member]) for member in args.member]
    requests = [_cell_request(member) for member in members]
    shapes = {replace(request.key, engine="") for request in requests}
    plain = all(r.key.scenario == "single" and r.key.device == args.device for r in requests)
    if len(members) < 2 or len(shapes) > 1 or not plain:
        raise UserError(
            "run-interleaved needs two or more cells timed call by call that differ only in their engine variant, "
            f"on --device {args.device}; got {', '.join(r.key.cell_id for r in requests)}"
        )
    _remove_published(args.invalidates)
    from inferbench.launch.cell_job import measure_in_turn

    cells = [(request, member.out, member.primed) for request, member in zip(requests, members, strict=True)]
    for record in measure_in_turn(cells, args.lock, imports_started, args.code):
        _log_measured(record)


def _prime_arguments(p: argparse.ArgumentParser) -> None:
    add_cell_arguments(p)
    p.add_argument("--code", help="the code identity of this job (as run-cell's), recorded")
    p.add_argument("--out", type=Path, required=True, help="the priming record; the compile caches go beside it")


@arguments(_prime_arguments)
def prime_cell(args: argparse.Namespace) -> None:
    check_artifact(args)
    from inferbench.launch.cell_job import prime_cell

    request = plain_request(args)
    key = request.key
    record = prime_cell(request, args.out, args.lock, args.code)
    compiled = record.cold_start_s.get("compile")
    log.info(
        f"{key.cell_id}: primed, {record.status}"
        + (f", compiled in {compiled:.1f} s" if compiled is not None else f" ({record.reason or 'no compile step'})")
    )


def _profile_arguments(p: argparse.ArgumentParser) -> None:
    add_cell_arguments(p)
    p.add_argument("--calls", type=int, default=10, help="profiled calls after the warm-up")
    p.add_argument("--top", type=int, default=12, help="operators kept in the table")
    p.add_argument("--out", type=Path, required=True, help="top_ops.json; the trace is written beside it")


@arguments(_profile_arguments)
def profile_cell(args: argparse.Namespace) -> None:
    check_artifact(args)
    from inferbench.scenarios.profile import profile_cell

    request = plain_request(args, repeats=1)
    key = request.key
    result = profile_cell(request, args.out, args.lock, args.calls, args.top)
    ops = ", ".join(f"{op['name']} {op['share']:.0%}" for op in result.get("top_ops", [])[:3] if op["share"])
    log.info(f"{key.cell_id}: profile {result['status']}" + (f"; top: {ops}" if ops else f" ({result.get('reason')})"))


def _peaks_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--device", choices=["cpu", "cuda"], required=True)
    p.add_argument("--out", type=Path, required=True)


@arguments(_peaks_arguments)
def machine_peaks(args: argparse.Namespace) -> None:
    from inferbench.core.fsutil import write_json
    from inferbench.trackers.roofline import machine_peaks

    with args.lock.exclusively():  # a measurement like a cell's: nothing else of the workflow runs meanwhile
        peaks = machine_peaks(args.device)
    write_json(args.out, peaks)
    log.info("peaks: %s", json.dumps(peaks))
