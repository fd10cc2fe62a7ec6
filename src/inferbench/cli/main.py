"""``inferbench <verb> ...``: the parser built from the table of verbs (inferbench.catalog.verbs), the job's
logging, its GPU slot and machine lock, then the verb's function.

Only the module of the verb that runs is imported: its arguments are declared beside its function,
and the other verbs appear in ``--help`` by their one-line help."""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Callable, Sequence
from typing import Any

from inferbench.catalog.targets import load_target
from inferbench.catalog.verbs import VERBS, Verb
from inferbench.core.env_vars import problems
from inferbench.core.errors import UserError


def verb_function(verb: Verb) -> Callable[[argparse.Namespace], Any]:
    return load_target(verb.target)


def build_parser(verb: str | None = None) -> argparse.ArgumentParser:
    """The parser: every verb by name and help; the arguments of ``verb`` (the one that runs)."""
    parser = argparse.ArgumentParser(prog="inferbench", description="a reproducible inference benchmark's verbs")
    sub = parser.add_subparsers(dest="verb", required=True)
    for name, info in VERBS.items():
        p = sub.add_parser(name, help=info.help)
        if name == verb:
            verb_function(info).add_arguments(p)
    return parser


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


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args, unknown = build_parser(argv[0] if argv else None).parse_known_args(argv)
    if unknown:  # named with the verb and where its options are, not under the top-level usage
        command = " ".join(argv[: argv.index(unknown[0])]) if unknown[0] in argv else args.verb
        print(
            f"inferbench {args.verb}: error: unrecognized arguments: {' '.join(unknown)}; "
            f"its options: python -m inferbench {command} --help",
            file=sys.stderr,
        )
        return 2
    verb = VERBS[args.verb]
    if bad := problems():  # a bad environment variable, refused by name before the verb takes anything
        print("\n".join(f"inferbench {args.verb}: error: {line}" for line in bad), file=sys.stderr)
        return 2
    configure_logging()
    gpu = None
    # a cell measured in turn with others (run-cell --interleaved) only takes its record: it claims no GPU
    measures_on_gpu = getattr(args, "device", None) == "cuda" and getattr(args, "interleaved", None) is None
    if verb.gpu == "always" or (verb.gpu == "device" and measures_on_gpu):
        from inferbench.machine.gpu_slots import claim_for_this_process

        gpu = claim_for_this_process()  # before anything imports CUDA; released when this process ends
    args.lock = None
    joined = None
    if verb.lock:
        from inferbench.machine.lock import MachineLock
        from inferbench.machine.run_lock import join_run

        joined = join_run()  # a job of a run in this directory: a run started after a kill -9 leaves it alone
        args.lock = MachineLock()
        args.lock.shared()
        from inferbench.machine.host_partition import keep_to_shared_cores

        keep_to_shared_cores()  # several GPUs, each measuring on cores of its own: this job keeps off them
    try:
        verb_function(verb)(args)
    except (UserError, ValueError, FileNotFoundError) as error:
        print(f"inferbench {args.verb}: error: {error}", file=sys.stderr)
        return 2
    finally:
        if args.lock:
            args.lock.close()
        if gpu:
            gpu.release()
        if joined is not None:
            from inferbench.machine.run_lock import leave_run

            leave_run(joined)
    return 0
