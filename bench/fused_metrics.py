"""ns/element of the metrics kernels: the numpy path vs the C kernel on 1 and 2 threads.

    python bench/fused_metrics.py [--melements 16] [--repeat 5] [--dtypes float16,bfloat16,float32]
    python bench/fused_metrics.py --check WS [WS ...]

Timing: pairs of ``--melements`` Mi elements (NPU = golden x (1 + 1e-3 noise), every 13th golden
0), both passes as ``compute_metrics`` runs them (metrics_kernels.first_pass + second_pass for
numpy, fused_metrics.passes for C), median wall time of ``--repeat`` runs, one BLAS thread.
"same" tells whether the C path's FirstPass / SecondPass equal the numpy path's bit for bit.

``--check``: ``vc -j 1`` on each workspace with the numpy path and again with the C kernel put
in its place (metrics_kernels' passes replaced in this process: the kernel is not wired into
metrics.py yet); prints whether the two result CSV files are byte-identical.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import statistics
import sys
import time

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import ml_dtypes  # noqa: E402
import numpy as np  # noqa: E402

from precision_shell.analysis.compare import fused_metrics as fm  # noqa: E402
from precision_shell.analysis.compare import metrics_kernels as k  # noqa: E402
from precision_shell.analysis.compare.metrics import DEFAULT_CHUNK  # noqa: E402

DTYPES = {"float16": np.float16, "bfloat16": ml_dtypes.bfloat16, "float32": np.float32}


def numpy_passes(x: np.ndarray, y: np.ndarray, chunk: int):
    with np.errstate(all="ignore"):
        xs, ys = k.Float32Chunks(x, chunk, "npu"), k.Float32Chunks(y, chunk, "golden")
        first = k.first_pass(xs, ys, x.size, chunk)
        return first, k.second_pass(xs, ys, x.size, chunk, first,
                                    want_kl=fm.kl_computable(first))


def median_seconds(run, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        run()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def time_kernels(args) -> None:
    if not fm.built():
        sys.exit("the C kernel is not built: python -m pip install -e .")
    n = args.melements << 20
    rng = np.random.default_rng(0)
    golden = rng.standard_normal(n, dtype=np.float32)
    golden[::13] = 0
    npu = golden * (1 + np.float32(1e-3) * rng.standard_normal(n, dtype=np.float32))
    print(f"{args.melements} Mi-element pairs, chunk {args.chunk}, median of {args.repeat} "
          f"(ns/element, both passes)")
    print(f"{'dtype':9} {'numpy':>7} {'C 1 thread':>11} {'C 2 threads':>12} {'speed-up':>9}  same")
    for name in args.dtypes.split(","):
        x, y = npu.astype(DTYPES[name]), golden.astype(DTYPES[name])
        slow = median_seconds(lambda: numpy_passes(x, y, args.chunk), args.repeat)
        one = median_seconds(lambda: fm.passes(x, y, args.chunk), args.repeat)
        two = median_seconds(lambda: fm.passes(x, y, args.chunk, threads=2), args.repeat)
        same = fm.passes(x, y, args.chunk) == numpy_passes(x, y, args.chunk)
        print(f"{name:9} {slow / n * 1e9:7.2f} {one / n * 1e9:11.2f} {two / n * 1e9:12.2f} "
              f"{slow / one:8.1f}x  {'yes' if same else 'NO'}", flush=True)


@contextlib.contextmanager
def c_kernel_in_metrics(taken: list[bool]):
    """metrics_kernels.first_pass / second_pass answered by the C kernel where it takes the pair;
    ``taken`` gets one flag per pair (True: the C kernel computed it)."""
    first_pass, second_pass = k.first_pass, k.second_pass
    seconds: dict[int, k.SecondPass] = {}

    def fused_first(xs, ys, n, chunk):
        # Float32Chunks keeps the flat source array in _flat (bench-only peek)
        fused = fm.passes(xs._flat, ys._flat, chunk)
        taken.append(fused is not None)
        if fused is None:
            return first_pass(xs, ys, n, chunk)
        seconds[id(fused[0])] = fused[1]
        return fused[0]

    def fused_second(xs, ys, n, chunk, first, *, want_kl):
        second = seconds.pop(id(first), None)
        return second if second is not None else second_pass(xs, ys, n, chunk, first,
                                                             want_kl=want_kl)

    k.first_pass, k.second_pass = fused_first, fused_second
    try:
        yield
    finally:
        k.first_pass, k.second_pass = first_pass, second_pass


def vc_csv(workspace: str, output: str) -> bytes:
    """The result CSV that ``vc -j 1`` writes (in-process, so the patched kernels are used)."""
    from precision_shell.cli import main

    with contextlib.redirect_stdout(io.StringIO()):
        main([workspace, "-o", output, "--format", "csv", "--no-pager", "-c", "vc -j 1"])
    folder = os.path.join(output, "compare")
    (name,) = [name for name in os.listdir(folder) if name.endswith(".csv")]
    with open(os.path.join(folder, name), "rb") as f:
        return f.read()


def check(workspaces: list[str]) -> None:
    import tempfile

    for workspace in workspaces:
        with tempfile.TemporaryDirectory() as tmp:
            reference = vc_csv(workspace, os.path.join(tmp, "numpy"))
            taken: list[bool] = []
            with c_kernel_in_metrics(taken):
                ours = vc_csv(workspace, os.path.join(tmp, "c"))
        verdict = "byte-identical" if ours == reference else "DIFFERENT"
        lines = reference.count(b"\n")
        print(f"{workspace}: vc result CSV ({lines} lines; the C kernel took {sum(taken)} of "
              f"{len(taken)} float pairs): C kernel vs numpy path {verdict}", flush=True)
        for a, b in zip(reference.splitlines(), ours.splitlines()):
            if a != b:
                print(f"  numpy: {a.decode()}\n  C:     {b.decode()}")
                break


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--melements", type=int, default=16, help="Mi elements per tensor")
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--chunk", type=int, default=DEFAULT_CHUNK)
    parser.add_argument("--dtypes", default=",".join(DTYPES))
    parser.add_argument("--check", nargs="+", metavar="WS", help="compare vc CSV output instead")
    args = parser.parse_args()
    if args.check:
        check(args.check)
    else:
        time_kernels(args)


if __name__ == "__main__":
    main()
