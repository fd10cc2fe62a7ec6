import os
import sys

from inferbench.warm import run_via_server

# A cell job of a local run is forked from the warm-start server when there is one (inferbench.warm)
code = run_via_server(sys.argv[1:])
if code is None:
    from inferbench.cli import main

    code = main()
# Exit without the interpreter's teardown (torch, ONNX Runtime and their caches take seconds of CPU to
# tear down on a small machine): main() has written every file and released its lock, and a teardown
# after that would compete with the next cell's timed loop.
sys.stdout.flush()
sys.stderr.flush()
os._exit(code)
