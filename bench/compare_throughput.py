"""Whole-network compare throughput: ``pshell WS -c "vc -j N"`` against a naive baseline.

Generates (or reuses) a large sample workspace (``python -m precision_shell.samples DIR --scale MB``),
warms the page cache, then runs, each in a fresh process and ``--repeat`` times:

* ``vc -j N`` for each N in ``--jobs`` (the real CLI, batch mode, JSON summary), and
* the naive baseline over exactly the same tensor pairs (``bench/baseline.py compare``):
  ``np.fromfile`` / ``np.load`` of the whole tensors, the layout restored, both cast to float32,
  and each vendor metric computed with its own whole-array numpy expression (formats.md A.8.3) --
  what a straightforward implementation does (the vendor engine itself is slower still: A.9).

Prints medians of wall time, MB/s of dump data (NPU dump files + golden .npy files on disk),
peak RSS (``os.wait4``: the largest process of the run, pool workers included) and the speed-up
over the baseline. ``bench/run.py`` runs this and every other measurement in one go.

    python bench/compare_throughput.py --scale 1000 --jobs 1 2 --repeat 3
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import ROOT, bench_env, ensure_workspace, run_child, warm_page_cache, workspace_files  # noqa: E402

BASELINE = str(ROOT / "bench" / "baseline.py")


def measure(cmd: list[str]) -> dict:
    """Run ``cmd`` in a fresh process: its wall time and its own peak RSS (``os.wait4``)."""
    run = run_child(cmd, env=bench_env())
    if not run.ok:
        sys.stderr.write(run.stderr)
        raise SystemExit(run.returncode)
    return {"wall": run.wall, "rss_mb": run.rss_mb, "stdout": run.stdout}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--scale", type=float, default=1000, help="MB of NPU dumps to generate (default 1000)")
    p.add_argument("--jobs", type=int, nargs="+", default=[1, os.cpu_count() or 1], help="vc -j values")
    p.add_argument("--repeat", type=int, default=3, help="runs per configuration (median reported)")
    p.add_argument("--workdir", default=os.path.join(tempfile.gettempdir(), "pshell_bench"))
    p.add_argument("--no-baseline", action="store_true", help="skip the naive baseline")
    args = p.parse_args()

    bench_ws = ensure_workspace(Path(args.workdir), scale_mb=args.scale)
    ws, manifest, data_bytes = bench_ws.path, bench_ws.manifest, bench_ws.data_bytes
    warm_page_cache(workspace_files(ws))
    print(f"workspace {ws}: {manifest['totals']['npu_dump_files']} NPU dumps "
          f"({manifest['totals']['npu_dump_bytes'] / 1e6:.0f} MB) + {manifest['totals']['golden_files']} "
          f"golden files ({manifest['totals']['golden_bytes'] / 1e6:.0f} MB) = {data_bytes / 1e6:.0f} MB; "
          f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.2f}")
    out_dir = Path(args.workdir) / "out"
    results: dict[str, dict] = {}
    configs = [(f"vc -j {j}", [sys.executable, "-m", "precision_shell", str(ws), "-o", str(out_dir),
                               "-c", f"vc -j {j}", "--format", "json"]) for j in args.jobs]
    if not args.no_baseline:
        configs.append(("naive baseline (1 process)", [sys.executable, BASELINE, "compare", str(ws)]))
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
