"""Time compute_metrics against a naive whole-array numpy version of the same formulas.

    python bench/metrics_kernel.py [--mib 64] [--repeat 5] [--chunk N]

Cases: NPU float16 (``--mib`` MiB of it) vs golden float32 of the same element count, and
float32 vs float32. Throughput counts the bytes of both inputs (what the compare has to read).
The naive version is what msaccucmp does: cast both to float32, one full-array numpy
expression per metric (with full-size temporaries). Single process; medians of ``--repeat``.
"""

from __future__ import annotations

import argparse
import os
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from baseline import naive_metrics  # noqa: E402  (formats.md A.8.3 the straightforward way)
from common import median_wall_cpu as median_seconds  # noqa: E402
from precision_shell.analysis.compare.metrics import DEFAULT_CHUNK, compute_metrics  # noqa: E402

def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mib", type=int, default=64, help="size of the float16 NPU tensor")
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--chunk", type=int, default=DEFAULT_CHUNK)
    parser.add_argument("--skip-naive", action="store_true")
    args = parser.parse_args()

    n = args.mib * (1 << 20) // 2
    rng = np.random.default_rng(0)
    golden = rng.standard_normal(n, dtype=np.float32)
    golden[:: 1000] = 0.0  # a few zero goldens
    relu = np.maximum(golden, np.float32(0))  # half zeros: the masked code paths everywhere
    cases = {
        "fp16 vs fp32": (golden.astype(np.float16), golden),
        "fp16 vs fp32, ReLU": (relu.astype(np.float16), relu),
        "fp32 vs fp32": ((golden * np.float32(1.0001)).astype(np.float32), golden),
    }
    print(f"{n} elements per tensor, chunk {args.chunk}, median of {args.repeat}")
    for name, (npu, gold) in cases.items():
        mib = (npu.nbytes + gold.nbytes) / (1 << 20)
        fast, fast_cpu = median_seconds(lambda: compute_metrics(npu, gold, chunk=args.chunk),
                                        args.repeat)
        line = (f"{name}: {mib:.0f} MiB  pshell {fast:.3f} s = {mib / fast:4.0f} MiB/s"
                f" (CPU {mib / fast_cpu:4.0f} MiB/s)")
        if not args.skip_naive:
            slow, slow_cpu = median_seconds(lambda: naive_metrics(npu, gold), args.repeat)
            line += (f"  naive {slow:.3f} s = {mib / slow:4.0f} MiB/s (CPU {mib / slow_cpu:4.0f})"
                     f"  speed-up x{slow / fast:.1f}")
            ours, ref = compute_metrics(npu, gold).as_json(), naive_metrics(npu, gold)
            # the naive float32 sums are themselves off by ~1e-8 relative at this size
            worst = max(abs(ours[key] - ref[key]) / max(1.0, abs(ref[key]))
                        for key in ref if key != "standard_deviation")
            line += f"  (max rel. diff vs naive {worst:.1e})"
        print(line, flush=True)


if __name__ == "__main__":
    main()
