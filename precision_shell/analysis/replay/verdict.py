"""The verdict of a replay: ``upstream``, ``inherent``, ``emulated`` or ``kernel`` (issue 13).

The rule, in this order:

1. ``upstream``: an input's cosine vs golden is at or below the threshold, or an input is
   non-finite where its golden is finite: the error was inherited (the input is named).
2. ``inherent``: the exact replay, rounded to the output dtype, is within ``INHERENT_ULPS`` of
   the NPU output (max over elements, ulps of the output dtype): the kernel is right and the
   dtype is not enough.
3. ``emulated``: a profile is within ``EMULATED_SHARE`` of the exact replay's distance to the NPU
   output and its error vs golden is ``GOLDEN_RATIO`` times the NPU's; the closest such profile
   (ties: the first tried) is named: that device arithmetic explains the output.
4. ``kernel``: nothing explains it: a kernel bug or an unstable algorithm.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from precision_shell.model.tensor_ref import golden_name_of, name_of

INHERENT_ULPS = 4.0
EMULATED_SHARE = 0.25
GOLDEN_RATIO = (0.5, 2.0)
VERDICTS = ("upstream", "inherent", "emulated", "kernel")


@dataclass(frozen=True)
class Candidate:
    """One replay of the judged output: ``error_vs_npu`` in max ulps of the output dtype,
    ``error_vs_golden`` as relative RMS error, ``cosine`` vs golden (None without golden)."""
    profile: str
    error_vs_npu: float
    error_vs_golden: float | None
    cosine: float | None


@dataclass(frozen=True)
class InputCheck:
    index: int
    tensor: str                 # "OP:input:J"
    golden: str | None          # the golden it meets ("name:idx"), None when it has none
    cosine: float | None
    nonfinite: bool = False     # non-finite NPU values where the golden is finite
    producer: str | None = None  # the op whose output this input is (None: not known)


@dataclass
class Verdict:
    op: str
    type: str
    verdict: str
    profile: str | None
    candidates: list[Candidate]
    advice: str
    output: int                             # the output index the verdict is about
    dtype: str                              # that output's dtype (ulps are in it)
    npu_error_vs_golden: float | None
    npu_cosine: float | None
    inputs: list[InputCheck] = field(default_factory=list)
    upstream_input: str | None = None
    reason: str = ""


def _golden_ok(c: Candidate, npu_error: float | None) -> bool:
    if npu_error is None or c.error_vs_golden is None:
        return True   # no golden: only the distance to the NPU output can be judged
    if npu_error == 0:
        return c.error_vs_golden == 0
    ratio = c.error_vs_golden / npu_error
    return GOLDEN_RATIO[0] <= ratio <= GOLDEN_RATIO[1]


def judge(op: str, op_type: str, dtype: str, output: int, candidates: list[Candidate],
          npu_error_vs_golden: float | None, npu_cosine: float | None, inputs: list[InputCheck],
          threshold: float, *, fused_passes: list[str] | None = None) -> Verdict:
    """``candidates[0]`` is the exact replay; the rest are the profiles in the order tried."""
    def verdict(kind: str, profile: str | None, advice: str, reason: str, upstream: str | None = None):
        return Verdict(op, op_type, kind, profile, candidates, advice, output, dtype,
                       npu_error_vs_golden, npu_cosine, inputs, upstream, reason)

    for check in inputs:
        bad_cos = check.cosine is not None and check.cosine <= threshold
        if bad_cos or check.nonfinite:
            golden = golden_name_of(check.golden)
            why = (f"cosine {check.cosine:.6f} <= {threshold:g} vs {golden}" if bad_cos
                   else f"non-finite where {golden} is finite")
            producer = f": `replay {check.producer}`" if check.producer else ""
            return verdict("upstream", None,
                           f"the error is inherited from {name_of(check.tensor)}; replay its producer{producer}",
                           f"{name_of(check.tensor)}: {why}", check.tensor)
    exact = candidates[0]
    if exact.error_vs_npu <= INHERENT_ULPS:
        return verdict("inherent", None,
                       f"the kernel is right; {dtype} is not enough here: keep {op} in fp32 "
                       "(export suspects --format keep-fp32) or rescale its inputs",
                       f"exact replay within {exact.error_vs_npu:g} ulps of the NPU output "
                       f"(<= {INHERENT_ULPS:g})")
    fitting = [c for c in candidates[1:]
               if c.error_vs_npu <= EMULATED_SHARE * exact.error_vs_npu and _golden_ok(c, npu_error_vs_golden)]
    if fitting:
        best = min(fitting, key=lambda c: c.error_vs_npu)   # min keeps the first of equals
        return verdict("emulated", best.profile,
                       f"device arithmetic {best.profile} explains the output: keep {op} in fp32 "
                       "(export suspects --format keep-fp32) or make the kernel accumulate wider",
                       f"{best.profile} is {best.error_vs_npu:g} ulps from the NPU output, exact "
                       f"{exact.error_vs_npu:g}")
    switch = (f"; or switch off fusion {', '.join(fused_passes)} (export suspects --format fusion-switch)"
              if fused_passes else "")
    return verdict("kernel", None,
                   f"no arithmetic explains the output: likely a kernel bug or an unstable algorithm; "
                   f"send the reproducer (replay {op} --export DIR) to the kernel team{switch}",
                   f"exact replay {exact.error_vs_npu:g} ulps from the NPU output; no profile within "
                   f"{EMULATED_SHARE:g}x of that with an error vs golden like the NPU's")
