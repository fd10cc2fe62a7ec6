import os
import sys

from inferbench.catalog.verbs import VERBS
from inferbench.launch.warm import run_via_server
from inferbench.machine.lifetime import die_with_parent

# A job ends with the shell Snakemake started it from: cancelling a job (SIGTERM) ends that shell, and
# a measuring process left running would write its record after the job was reported failed. (Not the
# warm-start server: Snakemake may start it from a thread, whose end would count as its parent's death.)
if sys.argv[1:2] != ["warm-server"]:
    die_with_parent(os.getppid())
# A job of a local run whose verb imports torch & co. is forked from the warm-start server when there is
# one (inferbench.launch.warm)
verb = VERBS.get(sys.argv[1]) if len(sys.argv) > 1 else None
code = run_via_server(sys.argv[1:]) if verb is not None and verb.warm else None
if code is None:
    from inferbench.cli.main import main

    code = main()
# Exit without the interpreter's teardown (torch, ONNX Runtime and their caches take seconds of CPU to
# tear down on a small machine): main() has written every file and released its lock, and a teardown
# after that would compete with the next cell's timed loop.
sys.stdout.flush()
sys.stderr.flush()
os._exit(code)
