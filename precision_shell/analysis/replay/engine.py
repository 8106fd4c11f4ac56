"""Run a reference kernel under exact and every profile, measure each replay against the NPU
output and the golden, and judge (pure: arrays in, a :class:`~.verdict.Verdict` out)."""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from .kernels import Kernel
from .metrics import CHUNK, cosine, max_ulps, rel_rmse
from .profiles import EXACT, Profile, apply, format_of, quantize
from .verdict import Candidate, InputCheck, Verdict, judge


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


def _run_chunked(kernel: Kernel, case: OpCase, profile: Profile, out: np.ndarray) -> np.ndarray:
    """An elementwise op without broadcasting, replayed a slice at a time into ``out``: the
    temporaries of a 16M-element op stay small (no full-size allocations per profile)."""
    flat_out = out.reshape(-1)
    flat_in = [x.reshape(-1) for x in case.inputs]
    fmts = [format_of(case.output_dtypes[0])]
    for start in range(0, flat_out.size, CHUNK):
        end = min(start + CHUNK, flat_out.size)
        try:
            part = apply(kernel, profile, [x[start:end] for x in flat_in], case.attrs, [(end - start,)], fmts,
                         case.values)
        except (ValueError, IndexError, TypeError) as exc:
            raise ReplayError(f"the {case.type} kernel cannot run on these inputs: {exc}") from None
        flat_out[start:end] = part[0]
    return out


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
    case.inputs = [np.asarray(x, dtype=np.float64) for x in case.inputs]   # once, not per profile
    k = _judged_output(case)
    npu = np.asarray(case.outputs[k], dtype=np.float64)
    golden = case.goldens[k] if k < len(case.goldens) else None
    if golden is not None:
        golden = np.asarray(golden, dtype=np.float64).reshape(npu.shape) if golden.size == npu.size else None
    fmt = format_of(case.output_dtypes[k])
    chunked = (kernel.elementwise and len(case.outputs) == 1
               and all(x.shape == npu.shape for x in case.inputs))
    buffer = np.empty(npu.shape) if chunked else None
    candidates = []
    for profile in [EXACT] + [p for p in profiles if p != EXACT]:
        y = _run_chunked(kernel, case, profile, buffer) if chunked else run_kernel(kernel, case, profile)[k]
        candidates.append(Candidate(profile.name, max_ulps(y, npu, fmt),
                                    None if golden is None else rel_rmse(y, golden),
                                    None if golden is None else cosine(y, golden)))
    npu_err = None if golden is None else rel_rmse(npu, golden)
    npu_cos = None if golden is None else cosine(npu, golden)
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
