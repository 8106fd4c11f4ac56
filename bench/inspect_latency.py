"""Benchmark: latency of ``ni`` and ``pt`` on a large (``--scale``) workspace.

    python bench/inspect_latency.py [--scale 1000] [--workspace DIR] [--repeat 5]

Generates a ~MB-sized workspace with the sample generator (or reuses --workspace), then times
1. whole process: ``python -m precision_shell WS -c CMD`` (start-up, discovery, graph parse,
   the command, exit) -- what a user of batch mode waits for;
2. in-process: the command alone on an open session (what the REPL user waits for), each run
   on a fresh session so the header cache of the previous run does not help.
Commands: ``ni`` and ``pt`` of a tower block in the middle of the graph (NC1HWC0: the whole
tensor is read to restore the layout), ``pt`` of a slice of the plain-layout Cast input (memory
mapped, only the slice is read), and ``pt -s`` (stats over the whole tensor). Medians of
--repeat runs with a warm page cache.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

from common import pshell_cmd, run_child  # noqa: E402

from precision_shell.commands import REGISTRY  # noqa: E402
from precision_shell.commands.runner import execute, split_statements  # noqa: E402
from precision_shell.model.session import Session  # noqa: E402
from precision_shell.samples.__main__ import main as generate  # noqa: E402


def _median_ms(samples: list[float]) -> str:
    return f"{statistics.median(samples) * 1e3:8.1f} ms"


def whole_process(ws: Path, command: str, repeat: int) -> list[float]:
    times = []
    for _ in range(repeat):
        run = run_child(pshell_cmd(ws, command))
        times.append(run.wall)
        if not run.ok:
            raise SystemExit(f"`{command}` failed: {run.stderr.strip()}")
    return times


def in_process(ws: Path, command: str, repeat: int) -> tuple[list[float], list[float]]:
    """(session open times, command times)."""
    opens, runs = [], []
    statement = split_statements(command)[0]
    for _ in range(repeat):
        start = time.perf_counter()
        session = Session.open(ws)
        opens.append(time.perf_counter() - start)
        start = time.perf_counter()
        outcome = execute(session, statement, REGISTRY)
        runs.append(time.perf_counter() - start)
        if outcome.error is not None:
            raise SystemExit(f"`{command}` failed: {outcome.error}")
    return opens, runs


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--scale", type=float, default=1000, help="workspace size in MB of NPU dumps (default 1000)")
    p.add_argument("--workspace", type=Path, help="reuse this generated workspace (made if missing)")
    p.add_argument("--repeat", type=int, default=5)
    args = p.parse_args(argv)

    tmp = None
    ws = args.workspace
    if ws is None:
        tmp = tempfile.TemporaryDirectory(prefix="pshell_inspect_")
        ws = Path(tmp.name) / "ws"
    if not (ws / "pshell_sample_manifest.json").exists():
        start = time.perf_counter()
        generate([str(ws), "--scale", str(args.scale), "--force"])
        print(f"generated in {time.perf_counter() - start:.1f} s")
    manifest = json.loads((ws / "pshell_sample_manifest.json").read_text())
    totals = manifest["totals"]
    ops = manifest["ops"]
    tower = [op for op in ops if op["name"].startswith("bert/")]
    middle = tower[len(tower) // 2] if tower else ops[len(ops) // 2]
    # the big plain-layout tensor: the fp32 NCHW input of the tower's first Cast
    plain = next((op for op in ops if op.get("outputs") and op["inputs"]
                  and op["inputs"][0]["format"] in ("ND", "NCHW") and len(op["inputs"][0]["logical_shape"]) == 4
                  and op["inputs"][0]["source"].startswith("input/Data_1")), middle)
    size = Path(ws / middle["dump_file"]).stat().st_size
    plain_size = Path(ws / plain["dump_file"]).stat().st_size
    print(f"workspace {ws}: {totals['npu_dump_files']} NPU dumps, {totals['npu_dump_bytes'] / 1e6:.0f} MB; "
          f"{len(ops)} executed ops\n  probe ops: {middle['name']} ({size / 1e6:.1f} MB dump, NC1HWC0), "
          f"{plain['name']} ({plain_size / 1e6:.1f} MB dump, plain NCHW input)")

    commands = [f"ni {middle['name']}",
                f"pt {middle['name']}:output:0[0, :4]",
                f"pt {middle['name']}:output:0 -s",
                f"pt {plain['name']}:input:0[0, 0, :4]"]
    print(f"\nmedian of {args.repeat} (warm page cache)")
    print(f"{'command':60s} {'whole process':>14s} {'in-process':>12s} {'session open':>14s}")
    for command in commands:
        whole_process(ws, command, 1)        # warm the page cache
        wall = whole_process(ws, command, args.repeat)
        opens, runs = in_process(ws, command, args.repeat)
        print(f"{command[:60]:60s} {_median_ms(wall):>14s} {_median_ms(runs):>12s} {_median_ms(opens):>14s}")
    if tmp is not None:
        tmp.cleanup()
    return 0


if __name__ == "__main__":
    sys.exit(main())
