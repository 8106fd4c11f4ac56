"""``curve`` on a 1M-step pair of TensorBoard event files (issue 24: analysed in < 2 s).

The files are written here with pshell's own framing (formats/logs/events.frame) and protobuf
Events in torch's layout (one scalar per event, simple_value; wall time, step, tag), three tags
per step (loss, grad_norm, loss_scale): 3M records, ~150 MB per file pair. Timed: reading both
files and the analysis, in a child process (``pshell -c "curve T --golden G" --format json``),
and in-process per phase. Usage: python bench/curve.py [--steps N] [--keep DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np


def write_pair(folder: Path, steps: int) -> tuple[Path, Path]:
    from precision_shell.formats.logs.events import frame
    from precision_shell.formats.protoload import load_proto

    pb = load_proto("tb_event.proto")
    rng = np.random.default_rng(0)
    s = np.arange(steps)
    golden = 10.0 * np.exp(-s / (steps / 4)) + 2.0
    target = golden * (1 + 0.001 * rng.standard_normal(steps))
    target[s >= steps // 2] *= 1.05
    scale = np.where(s < 100, 65536.0, 32768.0)
    paths = []
    for name, loss in (("target", target), ("golden", golden)):
        path = folder / name / "events.out.tfevents.1700000000.bench"
        path.parent.mkdir(parents=True, exist_ok=True)
        version = pb.Event(wall_time=1.7e9, file_version="brain.Event:2").SerializeToString()
        with open(path, "wb") as fh:
            fh.write(frame(version))
            buf = []
            for k in range(steps):
                for tag, value in (("train/loss", loss[k]), ("train/grad_norm", 1.0), ("train/loss_scale", scale[k])):
                    e = pb.Event(wall_time=1.7e9 + k, step=k)
                    e.summary.value.add(tag=tag, simple_value=float(value))
                    buf.append(frame(e.SerializeToString()))
                if len(buf) > 30000:
                    fh.write(b"".join(buf))
                    buf = []
            fh.write(b"".join(buf))
        paths.append(path.parent)
    return paths[0], paths[1]


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=1_000_000)
    p.add_argument("--keep", metavar="DIR")
    p.add_argument("--repeat", type=int, default=3)
    args = p.parse_args()
    folder = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="pshell-curve-bench-"))
    target, golden = folder / "target", folder / "golden"
    if not (target.exists() and golden.exists()):
        t0 = time.perf_counter()
        target, golden = write_pair(folder, args.steps)
        print(f"wrote {args.steps} steps x 3 tags x 2 runs in {time.perf_counter() - t0:.1f} s")
    size = sum(f.stat().st_size for f in folder.rglob("*") if f.is_file())
    print(f"pair: {size / 1e6:.0f} MB")

    from precision_shell.analysis.curve.findings import CurveParams, analyse
    from precision_shell.formats.logs import events, read_log

    print("kernel:", "C (_tfrecord)" if events._kernel is not None else "python (not built)")
    for _ in range(args.repeat):
        c0, t0 = time.process_time(), time.perf_counter()
        t, g = read_log(target), read_log(golden)
        t1 = time.perf_counter()
        found = analyse(t, g, CurveParams())
        t2 = time.perf_counter()
        print(f"in-process: read {t1 - t0:.2f} s, analyse {t2 - t1:.2f} s, total {t2 - t0:.2f} s "
              f"(CPU {time.process_time() - c0:.2f} s); "
              f"verdict {found.verdict}, first divergent {found.first_divergent_step}")
    for _ in range(args.repeat):
        t0 = time.perf_counter()
        before = os.times()
        done = subprocess.run([sys.executable, "-m", "precision_shell", "-o", str(folder / "out"), "-c",
                               f"curve {target} --golden {golden}", "--format", "json"],
                              capture_output=True, text=True, cwd=folder)
        elapsed = time.perf_counter() - t0
        after = os.times()
        cpu = (after.children_user - before.children_user) + (after.children_system - before.children_system)
        doc = json.loads(done.stdout.splitlines()[0])
        print(f"pshell -c curve (process start included): {elapsed:.2f} s (CPU {cpu:.2f} s), exit {done.returncode}, "
              f"steps {doc['steps']}, verdict {doc['verdict']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
