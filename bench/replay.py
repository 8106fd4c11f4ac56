"""Time ``replay`` of one large op under exact and every default profile (issue 13 target:
< 2 s on one core for a 16M-element op and for a 4096-long reduction).

    python bench/replay.py [--side 4096] [--profiles all|P,P] [--save F | --check F] [--build-only]
        [--case Add|ReduceSum] [--replay-only]

Cases, fp16 NPU tensors with fp32 goldens (what a dump holds): ``Add`` of two side x side
tensors (16M elements at 4096), ``ReduceSum`` over the last axis of a side x side tensor (4096
rows of a 4096-long reduction). Each case runs the whole engine (kernel under every profile,
distances to the NPU output and the golden, verdict) in this process, BLAS on one thread.
Prints wall and CPU time per case (and of each profile's kernel alone, whole arrays), and
peak RSS. On a shared machine the CPU time is the steadier number. ``--save F`` writes every
candidate's numbers (float.hex, bit-exact) as JSON; ``--check F`` compares against such a file
and exits 1 on any difference (speed work must not change results). ``--build-only`` makes the
arrays and stops: the RSS baseline the replay's own memory is measured against (with
``--case C --replay-only``: one case, no whole-array kernel timings, so peak RSS is the replay's).
"""

from __future__ import annotations

import os

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import argparse  # noqa: E402
import json  # noqa: E402
import resource  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402

import numpy as np  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from precision_shell.analysis.replay.engine import OpCase, replay, run_kernel  # noqa: E402
from precision_shell.analysis.replay.kernels import kernel_for  # noqa: E402
from precision_shell.analysis.replay.profiles import DEFAULT_PROFILES, EXACT, parse_profile  # noqa: E402


def _cases(side: int, only: str | None = None) -> dict[str, OpCase]:
    """The cases (only ``only`` when given; the data do not depend on it)."""
    rng = np.random.default_rng(0)
    cases = {}
    a = rng.standard_normal((side, side), dtype=np.float32)
    a16 = a.astype(np.float16)
    b = rng.standard_normal((side, side), dtype=np.float32)
    b16 = b.astype(np.float16)
    a += b   # the golden, in place: the bench holds no array the op does not have
    del b
    if only in (None, "Add"):
        cases["Add"] = OpCase("bench/Add", "Add", {}, [a16, b16], [a16 + b16], ["float16"], [a], [], [])
    del a, a16, b16
    if only in (None, "ReduceSum"):
        x = rng.uniform(0.5, 1.5, (side, side)).astype(np.float32)
        x16 = x.astype(np.float16)
        cases["ReduceSum"] = OpCase("bench/ReduceSum", "ReduceSumD", {"axes": [1]}, [x16],
                                    [x16.astype(np.float64).sum(1).astype(np.float16)], ["float16"],
                                    [x.astype(np.float64).sum(1).astype(np.float32)], [], [])
    return cases


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--side", type=int, default=4096)
    parser.add_argument("--profiles", default="all")
    parser.add_argument("--save")
    parser.add_argument("--check")
    parser.add_argument("--build-only", action="store_true")
    parser.add_argument("--case", choices=("Add", "ReduceSum"))
    parser.add_argument("--replay-only", action="store_true")
    args = parser.parse_args()
    texts = list(DEFAULT_PROFILES) if args.profiles == "all" else args.profiles.split(";")
    profiles = [parse_profile(t) for t in texts]
    cases = _cases(args.side, args.case)
    numbers = {}
    if args.build_only:
        cases = {}
    for name, case in cases.items():
        kernel = kernel_for(case.type)
        size = case.inputs[0].size
        start, cpu = time.perf_counter(), time.process_time()
        verdict = replay(kernel, case, profiles, 0.98)
        total, cpu = time.perf_counter() - start, time.process_time() - cpu
        print(f"{name}: {size:,} input elements, exact + {len(profiles)} profiles: wall {total:.2f} s, "
              f"cpu {cpu:.2f} s (verdict {verdict.verdict})")
        numbers[name] = [[c.profile] + [None if v is None else float(v).hex() for v in
                                        (c.error_vs_npu, c.error_vs_golden, c.cosine)]
                         for c in verdict.candidates] + [[verdict.verdict, verdict.profile]]
        for profile in [] if args.replay_only else [EXACT] + profiles:
            t, c = time.perf_counter(), time.process_time()
            run_kernel(kernel, case, profile)
            print(f"  {profile.name:24s} kernel alone: wall {time.perf_counter() - t:6.3f} s, "
                  f"cpu {time.process_time() - c:6.3f} s")
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"peak RSS {peak:.0f} MB")
    if args.save:
        with open(args.save, "w") as f:
            json.dump(numbers, f, indent=1)
    if args.check:
        with open(args.check) as f:
            expected = json.load(f)
        expected = {name: expected.get(name) for name in numbers}   # the cases this run made
        if numbers != expected:
            print(f"DIFFERENT from {args.check}:\n{json.dumps(numbers)}\n{json.dumps(expected)}")
            sys.exit(1)
        print(f"candidates bit-identical to {args.check}")


if __name__ == "__main__":
    main()
