"""How long cleaning the LendingClub file takes, and how much memory, at the real file's size.

    python benchmarks/tools/lendingclub_cleaning.py [--rows 2260668] [--raw PATH]

Generates a file in the real format with ``--rows`` loans (or uses ``--raw``, e.g. the real download),
then cleans it in a fresh process and prints wall time and peak resident memory. Both steps run in
child processes of a small parent: Linux carries a parent's peak RSS over into a forked child's
``ru_maxrss``, so a big parent would inflate the child's figure.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from inferbench.data import lendingclub


def clean_in_child(raw: Path) -> dict:
    code = (
        "import json, resource, sys, time; from inferbench.data import lendingclub; t = time.perf_counter(); "
        "table, enc, stats = lendingclub.clean(sys.argv[1]); "
        "print(json.dumps({'clean_s': time.perf_counter() - t, "
        "'peak_rss_mib': resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, **stats}))"
    )
    out = subprocess.run([sys.executable, "-c", code, str(raw)], check=True, capture_output=True, text=True)
    return json.loads(out.stdout.splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", type=int, default=2_260_668)
    parser.add_argument("--raw", type=Path)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        raw = args.raw
        if raw is None:
            start = time.perf_counter()
            generate = (
                "import sys; from inferbench.data import lendingclub; "
                "lendingclub.generate(sys.argv[1], int(sys.argv[2]))"
            )
            subprocess.run([sys.executable, "-c", generate, tmp, str(args.rows)], check=True)
            raw = Path(tmp) / lendingclub.RAW_FILE
            print(
                f"generated {args.rows:,} rows ({raw.stat().st_size / 2**20:.0f} MiB gz) "
                f"in {time.perf_counter() - start:.0f} s"
            )
        result = clean_in_child(raw)
        result.pop("status_counts", None)
        print(json.dumps(result, indent=2))
    print(f"(this process's own peak: {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MiB)")


if __name__ == "__main__":
    main()
