"""ns a value of the batch metrics kernel on small pairs, and a digest of its results.

    python bench/batch_kernel.py [--repeat 30]

Timing: ``fused_metrics.batch_passes`` of four 16x13x26x26 float16 pairs against float32
goldens (two gathered from NC1HWC0 as vc's workers hand them over, two in logical order), one
thread, CPU time; the minimum and all of 5 rounds. Digest: SHA-256 of the FirstPass/SecondPass
of 90 pairs (float16, bfloat16, float32; plain, NC1HWC0 and same-dtype goldens; NaN of any
payload, infinities, subnormals, zeros, huge values), to check that a kernel change gives the
same results as another build (run against another checkout with PYTHONPATH).
"""

from __future__ import annotations

import argparse
import hashlib
import time

import ml_dtypes
import numpy as np

from precision_shell.analysis.compare import fused_metrics as fm
from precision_shell.analysis.compare.metrics import DEFAULT_CHUNK

N, C, H, W = 16, 13, 26, 26
COUNT = N * C * H * W


def pair(rng, dtype, case: int):
    y = rng.standard_normal(COUNT).astype(np.float32)
    y[::13] = 0
    with np.errstate(all="ignore"):
        x = (y * (1 + 1e-3 * rng.standard_normal(COUNT))).astype(dtype)
        if case == 1:
            x[5] = np.nan
        elif case == 2:
            x[7] = np.inf
        elif case == 3:
            y[9] = -np.inf
        elif case == 4:
            x[:] = (rng.standard_normal(COUNT) * 6e4).astype(dtype)
            y[:] = rng.standard_normal(COUNT).astype(np.float32) * np.float32(1e-40)
        elif case == 5:
            x[:], y[:] = 0, 0
        elif case == 6:
            x[:] = (rng.standard_normal(COUNT) * 1e-6).astype(dtype)
        elif case == 7:
            x[:], y[:] = 3, 3
        elif case == 8:
            y[:] = (rng.standard_normal(COUNT) * 1e30).astype(np.float32)
        elif case == 9:
            bits = x.view(np.uint16) if x.dtype.itemsize == 2 else x.view(np.uint32)
            bits[3::101] = 0x7C01 if x.dtype == np.float16 else (0x7F81 if x.dtype.itemsize == 2 else 0x7F800001)
            bits[4::103] = 0xFE00 if x.dtype.itemsize == 2 else 0xFFC00000
    return x, y


def nc1hwc0(x):
    """The device bytes of logical (N, C, H, W) ``x`` in NC1HWC0 (C0 = 16) and the run starts."""
    device = np.zeros((N, 1, H, W, 16), x.dtype)
    device[:, 0, :, :, :C] = x.reshape(N, C, H, W).transpose(0, 2, 3, 1)
    starts = np.array([n * H * W * 16 + c for n in range(N) for c in range(C)], np.int32)
    return device.reshape(-1), starts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=30)
    args = parser.parse_args()
    rng = np.random.default_rng(1)
    f32 = fm.kind_of(np.dtype(np.float32))
    items = []
    for dtype in (np.float16, np.float32, ml_dtypes.bfloat16):
        kind = fm.kind_of(np.dtype(dtype))
        for case in range(10):
            x, y = pair(rng, dtype, case)
            device, starts = nc1hwc0(x)
            with np.errstate(all="ignore"):
                y_same = y.astype(dtype)
            items += [(x.view(np.uint8), kind, None, 0, 1, y.view(np.uint8), f32),
                      (device.view(np.uint8), kind, starts, H * W, 16, y.view(np.uint8), f32),
                      (x.view(np.uint8), kind, None, 0, 1, y_same.view(np.uint8), kind)]
    results = fm.batch_passes(items, DEFAULT_CHUNK)
    print("digest", hashlib.sha256(repr([(vars(a), vars(b)) for a, b in results]).encode()).hexdigest())
    x, y = pair(rng, np.float16, 0)
    device, starts = nc1hwc0(x)
    f16 = fm.kind_of(np.dtype(np.float16))
    timed = [(device.view(np.uint8), f16, starts, H * W, 16, y.view(np.uint8), f32),
             (x.view(np.uint8), f16, None, 0, 1, y.view(np.uint8), f32)] * 2
    rounds = []
    for _ in range(5):
        start = time.thread_time()
        for _ in range(args.repeat):
            fm.batch_passes(timed, DEFAULT_CHUNK)
        rounds.append((time.thread_time() - start) / (args.repeat * len(timed) * COUNT) * 1e9)
    print(f"ns a value: min {min(rounds):.2f} (" + " ".join(f"{r:.2f}" for r in rounds) + ")")


if __name__ == "__main__":
    main()
