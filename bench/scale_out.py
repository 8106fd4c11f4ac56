"""Scale-out benchmark (issue 15): ``vc`` over 8 ranks on the local pool and on a 2-worker Dask
LocalCluster (loopback), against the single-rank ``vc``; the client's peak RSS for 1 vs 8 ranks.

    python bench/scale_out.py [--scale MB_PER_RANK] [--ranks N] [--dir DIR]

Each measurement runs pshell in a fresh child process (the client: its own peak RSS, not the
workers'); throughput = NPU dump bytes compared / wall time of the command.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

_CHILD = """
import json, resource, sys, time
from precision_shell.cli import main
start = time.perf_counter()
rc = main(sys.argv[1:])
print(json.dumps({"rc": rc, "seconds": time.perf_counter() - start,
                  "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}), file=sys.stderr)
"""


def run(ws: Path, *argv: str) -> dict:
    proc = subprocess.run([sys.executable, "-c", _CHILD, str(ws), "--format", "json", *argv],
                          capture_output=True, text=True, check=False)
    return json.loads(proc.stderr.strip().splitlines()[-1])


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--scale", type=float, default=16, help="MB of NPU dumps per rank (default 16)")
    p.add_argument("--ranks", type=int, default=8)
    p.add_argument("--dir", default=None)
    args = p.parse_args()
    out = Path(args.dir or tempfile.mkdtemp(prefix="pshell_scale_out_"))
    ws = out / "ws"
    if not (ws / "precision_data").exists():
        subprocess.run([sys.executable, "-m", "precision_shell.samples", str(ws), "--ranks", str(args.ranks),
                        "--steps", "1", "--scale", str(args.scale)], check=True)
    manifest = json.loads((ws / "pshell_sample_manifest.json").read_text())
    total_mb = manifest["totals"]["npu_dump_bytes"] / 1e6
    per_rank_mb = total_mb / args.ranks
    from distributed import LocalCluster

    results = {}
    results["vc, 1 rank, local pool"] = (run(ws, "-c", "vc"), per_rank_mb)
    results["vc --ranks all, local pool"] = (run(ws, "-c", "vc --ranks all"), total_mb)
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, host="127.0.0.1",
                      dashboard_address=None) as cluster:
        address = cluster.scheduler_address
        run(ws, "--scheduler", address, "-c", "vc")   # warm the workers' imports
        results["vc, 1 rank, 2-worker LocalCluster"] = (run(ws, "--scheduler", address, "-c", "vc"), per_rank_mb)
        results["vc --ranks all, 2-worker LocalCluster"] = (
            run(ws, "--scheduler", address, "-c", "vc --ranks all"), total_mb)
    print(f"workspace {ws}: {args.ranks} ranks x {per_rank_mb:.1f} MB NPU dumps")
    print(f"{'run':42} {'s':>7} {'MB/s':>7} {'client peak RSS MB':>19}")
    for name, (r, mb) in results.items():
        print(f"{name:42} {r['seconds']:7.2f} {mb / r['seconds']:7.1f} {r['peak_rss_mb']:19.0f}  rc {r['rc']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
