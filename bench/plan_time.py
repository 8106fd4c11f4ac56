"""CPU and wall of `vc`'s planning alone (NPU vs golden), as it runs on the main thread.

    python bench/plan_time.py WORKSPACE --output OUT [--runs 5] [--first]

Each run is a fresh process, after one uncounted run that fills the start-up cache of OUT
(``--first``: a new output folder per run, so nothing is cached): open the session, then iterate
``mapping.golden_plan_steps`` to the end with nothing comparing beside it, then store what the
session stores after a command (the op details cache). Prints per run the seconds of wall and
CPU and whether protobuf was imported, then the medians. Compare two checkouts by running this
file with ``PYTHONPATH=OTHER`` from OTHER (alternate the runs).
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

_CHILD = """
import sys, time
from precision_shell.model.session import Session
from precision_shell.analysis.compare.mapping import golden_plan_steps
session = Session.open(sys.argv[1], output=sys.argv[2])
wall, cpu = time.perf_counter(), time.process_time()
plan, steps = golden_plan_steps(session.graph, session.dumps, session.golden)
ops = sum(1 for _ in steps)
wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
print(ops, len(plan.table), wall, cpu, "google.protobuf" in sys.modules)
session.after_command()
"""


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("workspace")
    parser.add_argument("--output", help="output folder (its start-up cache); default: a temp folder")
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--first", action="store_true", help="a first start each run (new output folder)")
    args = parser.parse_args(argv)
    walls, cpus = [], []
    with tempfile.TemporaryDirectory(prefix="plan_time_") as tmp:
        shared = Path(args.output) if args.output else Path(tmp) / "o"
        if not args.first:   # a run that fills the cache, not counted
            subprocess.run([sys.executable, "-c", _CHILD, args.workspace, str(shared)], capture_output=True, check=True)
        for run in range(args.runs):
            out = Path(tmp) / f"o{run}" if args.first else shared
            done = subprocess.run([sys.executable, "-c", _CHILD, args.workspace, str(out)],
                                  capture_output=True, text=True, check=True)
            ops, rows, wall, cpu, protobuf = done.stdout.split()[-5:]
            walls.append(float(wall))
            cpus.append(float(cpu))
            print(f"run {run + 1}: {ops} ops, {rows} rows: {float(wall):.4f} s wall, {float(cpu):.4f} s CPU, "
                  f"protobuf imported: {protobuf}")
    print(f"median: {statistics.median(walls):.4f} s wall, {statistics.median(cpus):.4f} s CPU")
    return 0


if __name__ == "__main__":
    sys.exit(main())
