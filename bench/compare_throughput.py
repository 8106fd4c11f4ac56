"""Whole-network compare throughput: ``pshell WS -c "vc -j N"`` against a naive baseline.

Generates (or reuses) a large sample workspace (``python -m precision_shell.samples DIR --scale MB``),
warms the page cache, then runs, each in a fresh process and ``--repeat`` times:

* ``vc -j N`` for each N in ``--jobs`` (the real CLI, batch mode, JSON summary), and
* a naive baseline over exactly the same tensor pairs: ``np.fromfile`` / ``np.load`` of the
  whole tensors, the layout restored, both cast to float32, and each vendor metric computed with
  its own whole-array numpy expression (formats.md A.8.3) -- what a straightforward
  implementation does (the vendor engine itself is slower still: A.9).

Prints medians of wall time, MB/s of dump data (NPU dump files + golden .npy files on disk),
peak RSS (``resource.getrusage(RUSAGE_CHILDREN)``: the largest process of the run, pool workers
included) and the speed-up over the baseline.

    python bench/compare_throughput.py --scale 1000 --jobs 1 2 --repeat 3
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


# ------------------------------------------------------------------------------------------------
# measuring one run in a fresh process

def measure(cmd: list[str]) -> dict:
    """Run ``cmd`` from a fresh measuring process: its wall time and the peak RSS of the run."""
    out = subprocess.run([sys.executable, __file__, "--measure", "--", *cmd], check=True,
                         capture_output=True, text=True, env=_env())
    return json.loads(out.stdout.splitlines()[-1])


def _measure_child(cmd: list[str]) -> None:
    start = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, env=_env())
    wall = time.perf_counter() - start
    if proc.returncode != 0:
        sys.stderr.write(proc.stderr)
        sys.exit(proc.returncode)
    rss_kb = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss   # KiB on Linux
    print(json.dumps({"wall": wall, "rss_mb": rss_kb / 1024, "stdout": proc.stdout}))


def _env() -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    # one BLAS/OpenMP thread per process: parallelism is what -j measures
    env.setdefault("OMP_NUM_THREADS", "1")
    env.setdefault("OPENBLAS_NUM_THREADS", "1")
    return env


# ------------------------------------------------------------------------------------------------
# the naive baseline (runs in its own process via --baseline)

def naive_metrics(x, y) -> list[float]:
    """The ten vendor metrics, one whole-array numpy expression each (formats.md A.8.3)."""
    import numpy as np

    x = x.reshape(-1).astype(np.float32)
    y = y.reshape(-1).astype(np.float32)
    eps = np.finfo(np.float64).eps
    with np.errstate(all="ignore"):
        nx, ny = np.linalg.norm(x), np.linalg.norm(y)
        cos = 1.0 if nx <= eps and ny < eps else float(np.sum((x / nx) * (y / ny)))
        diff = x - y
        mae_max = float(np.max(np.abs(diff)))
        nz = np.abs(y) > eps
        rel = np.where(nz, np.abs(x / np.where(nz, y, 1) - 1), 0)
        red = float(np.sqrt(np.sum(diff ** 2) / np.sum(y ** 2))) if ny > eps else 0.0

        def scale(v):
            lo, hi = v.min(), v.max()
            v = (v - lo) / (hi - lo) if hi > lo else v
            v = np.maximum(v, np.finfo(np.float32).eps)
            return v / v.sum()

        p, q = scale(x), scale(y)
        kl = float(np.sum(p * np.log(p / q)))
        std = (float(np.mean(x.astype(np.float64))), float(np.std(x.astype(np.float64))),
               float(np.mean(y.astype(np.float64))), float(np.std(y.astype(np.float64))))
        return [cos, mae_max, float(rel.sum()), red, kl, *std, float(np.mean(np.abs(diff))),
                float(np.sqrt(np.mean(diff ** 2))), float(rel.max()), float(rel.mean())]


def _baseline_child(ws: str) -> None:
    import numpy as np

    from precision_shell.analysis.compare_mapping import plan_golden_compare
    from precision_shell.formats.dump_file import read_dump_header, read_logical_array
    from precision_shell.model.session import Session

    session = Session.open(ws)
    plan = plan_golden_compare(session.graph, session.dumps, session.golden)
    pairs = 0
    for job in plan.jobs:
        if job.npu is None or job.golden is None:
            continue
        header = read_dump_header(job.npu.path)   # no header cache: one read per tensor
        entry = header.entry(job.npu.io, job.npu.index)
        npu = read_logical_array(header, entry, target_format=job.npu.target_format)
        golden = np.load(job.golden.path)
        if npu.size == golden.size:
            naive_metrics(npu, golden)
            pairs += 1
    print(json.dumps({"pairs": pairs}))


# ------------------------------------------------------------------------------------------------

def _workspace(args) -> Path:
    ws = Path(args.workdir) / f"scale_{int(args.scale)}"
    if not (ws / "pshell_sample_manifest.json").exists():
        print(f"generating a {args.scale:g} MB workspace in {ws} ...", flush=True)
        subprocess.run([sys.executable, "-m", "precision_shell.samples", str(ws), "--scale",
                        str(args.scale), "--force"], check=True, env=_env())
    return ws


def _warm(ws: Path) -> int:
    """Read every file once (warm page cache, as product.md §8 specifies); returns total bytes."""
    total = 0
    for path in (ws / "precision_data").rglob("*"):
        if path.is_file():
            with path.open("rb") as fh:
                while chunk := fh.read(16 << 20):
                    total += len(chunk)
    return total


def main() -> int:
    if len(sys.argv) > 2 and sys.argv[1] == "--measure":
        _measure_child(sys.argv[3:])
        return 0
    if len(sys.argv) > 2 and sys.argv[1] == "--baseline":
        _baseline_child(sys.argv[2])
        return 0
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--scale", type=float, default=1000, help="MB of NPU dumps to generate (default 1000)")
    p.add_argument("--jobs", type=int, nargs="+", default=[1, os.cpu_count() or 1], help="vc -j values")
    p.add_argument("--repeat", type=int, default=3, help="runs per configuration (median reported)")
    p.add_argument("--workdir", default=os.path.join(tempfile.gettempdir(), "pshell_bench"))
    p.add_argument("--no-baseline", action="store_true", help="skip the naive baseline")
    args = p.parse_args()

    ws = _workspace(args)
    manifest = json.loads((ws / "pshell_sample_manifest.json").read_text())
    data_bytes = manifest["totals"]["npu_dump_bytes"] + manifest["totals"]["golden_bytes"]
    _warm(ws)
    print(f"workspace {ws}: {manifest['totals']['npu_dump_files']} NPU dumps "
          f"({manifest['totals']['npu_dump_bytes'] / 1e6:.0f} MB) + {manifest['totals']['golden_files']} "
          f"golden files ({manifest['totals']['golden_bytes'] / 1e6:.0f} MB) = {data_bytes / 1e6:.0f} MB; "
          f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.2f}")
    out_dir = Path(args.workdir) / "out"
    results: dict[str, dict] = {}
    configs = [(f"vc -j {j}", [sys.executable, "-m", "precision_shell", str(ws), "-o", str(out_dir),
                               "-c", f"vc -j {j}", "--format", "json"]) for j in args.jobs]
    if not args.no_baseline:
        configs.append(("naive baseline (1 process)", [sys.executable, __file__, "--baseline", str(ws)]))
    for name, cmd in configs:
        runs = [measure(cmd) for _ in range(args.repeat)]
        wall = statistics.median(r["wall"] for r in runs)
        rss = statistics.median(r["rss_mb"] for r in runs)
        inner = None
        if name.startswith("vc"):
            inner = statistics.median(json.loads(r["stdout"])["seconds"] for r in runs)
        results[name] = {"wall": wall, "rss": rss, "inner": inner}
        print(f"  {name:28s} wall {wall:7.2f} s  {data_bytes / 1e6 / wall:7.0f} MB/s"
              + (f"  (compare alone {inner:.2f} s, {data_bytes / 1e6 / inner:.0f} MB/s)" if inner else "")
              + f"  peak RSS {rss:6.0f} MB   [runs: {', '.join('%.2f' % r['wall'] for r in runs)}]",
              flush=True)
    base = results.get("naive baseline (1 process)")
    if base:
        for name, r in results.items():
            if name.startswith("vc"):
                print(f"  {name}: {base['wall'] / r['wall']:.1f}x the naive baseline "
                      f"(peak RSS {r['rss']:.0f} MB vs {base['rss']:.0f} MB)")
    vendor_mb_s = 886 * 1.048576 / 35   # formats.md A.9: 886 MiB in ~35 s
    best = min(r["wall"] for n, r in results.items() if n.startswith("vc"))
    print(f"  best vc: {data_bytes / 1e6 / best:.0f} MB/s = {data_bytes / 1e6 / best / vendor_mb_s:.0f}x "
          f"the vendor engine's ~{vendor_mb_s:.0f} MB/s (A.9; not rerun here)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
