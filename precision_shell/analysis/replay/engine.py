"""Run a reference kernel under exact and every profile, measure each replay against the NPU
output and the golden, and judge (pure: arrays in, a :class:`~.verdict.Verdict` out)."""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from .kernels import Kernel
from .metrics import (CHUNK, GoldenChunk, GoldenDistance, cosine, golden_distance, max_ulps, rel_rmse, ulps_chunk,
                      ulps_format)
from .profiles import EXACT, Profile, apply, format_of
from .rounding import quantize
from .verdict import Candidate, InputCheck, Verdict, judge


# elements per kernel call in a streamed replay (a divisor of CHUNK): its temporaries fit in cache
STEP = 1 << 16


class ReplayError(ValueError):
    """The kernel cannot run on these inputs (shapes disagree, wrong input count)."""


@dataclass
class OpCase:
    """Everything a replay of one op needs, as plain values."""
    op: str
    type: str
    attrs: dict
    inputs: list[np.ndarray]                # NPU input dumps (logical layout)
    outputs: list[np.ndarray]               # NPU output dumps
    output_dtypes: list[str]                # numpy dtype names of the outputs
    goldens: list[np.ndarray | None]        # golden per output (None: none)
    input_checks: list[InputCheck]
    fused_passes: list[str]
    values: list[bool] | None = None        # per input: floating (rounded by profiles); None: all
    input_goldens: list[np.ndarray | None] | None = None   # golden per input, shaped as the input
    input_dtypes: list[str] | None = None   # numpy dtype names of the NPU inputs


def run_kernel(kernel: Kernel, case: OpCase, profile: Profile) -> list[np.ndarray]:
    """The op's outputs replayed under ``profile``, rounded to the NPU output dtypes."""
    fmts = [format_of(d) for d in case.output_dtypes]
    try:
        return apply(kernel, profile, case.inputs, case.attrs, [o.shape for o in case.outputs], fmts,
                     case.values)
    except (ValueError, IndexError, TypeError) as exc:
        raise ReplayError(f"the {case.type} kernel cannot run on these inputs: {exc}") from None


def _replay_streamed(kernel: Kernel, case: OpCase, profiles: list[Profile],
                    golden: np.ndarray | None) -> tuple[list[Candidate], GoldenDistance | None]:
    """An elementwise op without broadcasting, one output: every profile replayed a CHUNK at a
    time and measured on the spot, so no full-size array is made (memory: the op's own tensors
    plus a few chunks) and each slice of the inputs, NPU output and golden is converted to
    float64 once for all profiles. The chunks are those the whole-array metrics use: the same
    numbers."""
    flat_in = [np.asarray(x).reshape(-1) for x in case.inputs]
    flat_npu = np.asarray(case.outputs[0]).reshape(-1)
    flat_golden = None if golden is None else np.asarray(golden).reshape(-1)
    fmt = format_of(case.output_dtypes[0])
    mant, emin = ulps_format(fmt)
    in_fmts = [format_of(x.dtype.name) for x in flat_in]   # storage rounding that holds them is skipped
    ulps: list[list[float]] = [[] for _ in profiles]
    distances = [GoldenDistance() for _ in profiles]
    npu_distance = GoldenDistance()
    # float64 buffers of one chunk, reused: fresh multi-megabyte arrays cost page faults
    width = min(CHUNK, flat_npu.size)
    xs_buf = [np.empty(width) for _ in flat_in]
    npu_buf, golden_buf, y_buf, scratch = (np.empty(width) for _ in range(4))
    for start in range(0, flat_npu.size, CHUNK):
        n = min(CHUNK, flat_npu.size - start)
        xs = [np.copyto(b[:n], x[start:start + n]) or b[:n] for b, x in zip(xs_buf, flat_in)]
        npu = np.copyto(npu_buf[:n], flat_npu[start:start + n]) or npu_buf[:n]
        golden_chunk = None
        if flat_golden is not None:
            np.copyto(golden_buf[:n], flat_golden[start:start + n])
            golden_chunk = GoldenChunk(golden_buf[:n])
            npu_distance.add(npu, golden_chunk, scratch)
        for i, profile in enumerate(profiles):
            for lo in range(0, n, STEP):   # the kernel's temporaries stay small (in cache)
                hi = min(lo + STEP, n)
                try:
                    y = apply(kernel, profile, [x[lo:hi] for x in xs], case.attrs, [(hi - lo,)], [fmt],
                              case.values, in_fmts)[0]
                except (ValueError, IndexError, TypeError) as exc:
                    raise ReplayError(f"the {case.type} kernel cannot run on these inputs: {exc}") from None
                ulps[i].append(ulps_chunk(y, npu[lo:hi], mant, emin))
                y_buf[lo:hi] = y
            if golden_chunk is not None:
                distances[i].add(y_buf[:n], golden_chunk, scratch)
    candidates = [Candidate(p.name, max(u, default=0.0),
                            None if golden is None else d.rel_rmse(), None if golden is None else d.cosine())
                  for p, u, d in zip(profiles, ulps, distances)]
    return candidates, None if golden is None else npu_distance


def _judged_output(case: OpCase) -> int:
    """The output the verdict is about: the one furthest from its golden (cosine), else 0."""
    if len(case.outputs) == 1:
        return 0
    scored = [(cosine(o, g), i) for i, (o, g) in enumerate(zip(case.outputs, case.goldens))
              if g is not None and g.size == o.size]
    scored = [(c if np.isfinite(c) else -2.0, i) for c, i in scored]
    return min(scored)[1] if scored else 0


def replay(kernel: Kernel, case: OpCase, profiles: list[Profile], threshold: float) -> Verdict:
    if case.values is None:
        case.values = [np.asarray(x).dtype.kind == "f" or np.asarray(x).dtype.name == "bfloat16" for x in case.inputs]
    k = _judged_output(case)
    golden = case.goldens[k] if k < len(case.goldens) else None
    if golden is not None and golden.size != case.outputs[k].size:
        golden = None
    tried = [EXACT] + [p for p in profiles if p != EXACT]
    if (kernel.elementwise and len(case.outputs) == 1
            and all(np.shape(x) == case.outputs[0].shape for x in case.inputs)):
        candidates, npu_distance = _replay_streamed(kernel, case, tried, golden)
    else:
        inputs = [np.asarray(x, dtype=np.float64) for x in case.inputs]   # once, not per profile
        npu = np.asarray(case.outputs[k], dtype=np.float64)
        fmt = format_of(case.output_dtypes[k])
        candidates = []
        for profile in tried:
            y = run_kernel(kernel, replace(case, inputs=inputs), profile)[k]
            distance = None if golden is None else golden_distance(y, golden)
            candidates.append(Candidate(profile.name, max_ulps(y, npu, fmt),
                                        None if distance is None else distance.rel_rmse(),
                                        None if distance is None else distance.cosine()))
        npu_distance = None if golden is None else golden_distance(npu, golden)
    npu_err = None if npu_distance is None else npu_distance.rel_rmse()
    npu_cos = None if npu_distance is None else npu_distance.cosine()
    return judge(case.op, case.type, case.output_dtypes[k], k, candidates, npu_err, npu_cos,
                 case.input_checks, threshold, fused_passes=case.fused_passes)


def ideal_error(kernel: Kernel, case: OpCase) -> tuple[float, float] | None:
    """(observed, expected) error vs golden (relative RMS) of the judged output: the NPU's, and
    that of an ideal kernel in the NPU's dtypes (exact kernel on the golden inputs rounded to
    the NPU input dtypes, output rounded to the NPU output dtype). None when a golden is missing
    or the kernel cannot run on the golden inputs."""
    k = _judged_output(case)
    golden = case.goldens[k] if k < len(case.goldens) else None
    goldens_in = case.input_goldens or []
    if golden is None or golden.size != case.outputs[k].size or len(goldens_in) != len(case.inputs) \
            or any(g is None for g in goldens_in):
        return None
    dtypes = case.input_dtypes or ["float64"] * len(case.inputs)
    ideal_inputs = [quantize(np.asarray(g, dtype=np.float64), format_of(d)) for g, d in zip(goldens_in, dtypes)]
    try:
        y = run_kernel(kernel, replace(case, inputs=ideal_inputs), EXACT)[k]
    except ReplayError:
        return None
    golden = np.asarray(golden, dtype=np.float64).reshape(y.shape)
    return rel_rmse(case.outputs[k], golden), rel_rmse(y, golden)


def own_input_error(kernel: Kernel, case: OpCase) -> tuple[float, float] | None:
    """(observed, expected) error (relative RMS) of the judged output against the exact kernel on
    the op's OWN dumped inputs: the NPU's output, and that exact result rounded to the NPU output
    dtype (what any kernel in that dtype must err). For an op downstream of a divergence, whose
    error vs golden is its producers' (``ideal_error`` would call a correct kernel infinitely
    worse than ideal). None when the kernel cannot run or the exact result has no finite value."""
    k = _judged_output(case)
    values = case.values if case.values is not None else [
        np.asarray(x).dtype.kind == "f" or np.asarray(x).dtype.name == "bfloat16" for x in case.inputs]
    inputs = [np.asarray(x, dtype=np.float64) for x in case.inputs]
    try:
        exact = apply(kernel, EXACT, inputs, case.attrs, [o.shape for o in case.outputs],
                      ["float64"] * len(case.outputs), values)[k]
    except (ValueError, IndexError, TypeError):
        return None
    exact = np.asarray(exact, dtype=np.float64).reshape(case.outputs[k].shape)
    ideal = quantize(exact, format_of(case.output_dtypes[k]))
    observed, expected = rel_rmse(case.outputs[k], exact), rel_rmse(ideal, exact)
    return None if observed != observed else (observed, expected)


def excess_ratio(observed: float, expected: float) -> float | None:
    """observed / expected error; an ideal kernel that overflows too (both infinite) gives 1,
    zero expected error gives inf unless the NPU has none either; None when undefined (NaN)."""
    if observed != observed or expected != expected:
        return None
    if np.isinf(expected):
        return 1.0 if np.isinf(observed) else 0.0
    if expected == 0:
        return 1.0 if observed == 0 else float("inf")
    return observed / expected
