"""``qstat TENSOR --recipe R``: what a FP8 / MX / NVFP4 / HiFloat8 recipe does to a tensor
(analysis in :mod:`precision_shell.analysis.quant`; docs/low-precision.md)."""

from __future__ import annotations

import math
from typing import Any

from precision_shell.commands.registry import arg, command
from precision_shell.commands.results import Sections, Table
from precision_shell.errors import CommandError, UsageError
from precision_shell.model.session import Session

RECIPE_NAMES = ("fp8-e4m3", "fp8-e5m2", "mxfp8-e4m3", "mxfp8-e5m2", "mxfp4", "nvfp4", "hif8")


def _g(v: float) -> str:
    return "-" if isinstance(v, float) and math.isnan(v) else f"{v:.6g}"


@command("qstat",
         summary="Re-quantize a tensor under a recipe (fp8-e4m3 and fp8-e5m2 with per-tensor current "
                 "scaling; mxfp8-e4m3, mxfp8-e5m2 and mxfp4 with OCP MX blocks of 32 and E8M0 scales; nvfp4 "
                 "with blocks of 16, E4M3 scales and a fp32 global scale; hif8) and report underflow %, saturation %, "
                 "relative L2 error, MSE, the scale range and the blocks of widest dynamic range. With "
                 "--golden G, TENSOR is the NPU's quantized tensor of G: how much of its error the recipe "
                 "alone explains.",
         example="qstat golden:fc1_MatMul:0 --recipe mxfp4\n"
                 "qstat fc1/MatMul:in1 --recipe mxfp8-e4m3 --axis 0\n"
                 "qstat mx/x_quant:0 --recipe mxfp8-e4m3 --golden golden:mx_x:0\n"
                 "qstat result.npy --recipe nvfp4 --block 16",
         args=[arg("tensor", complete="tensor", help="tensor reference (OP:N, OP:inN, golden:OP:N, FILE.npy; "
                                                      "an eval result saved with -w), optional slice"),
               arg("--recipe", required=True, choices=RECIPE_NAMES, help="the quantization recipe"),
               arg("--block", type=int, metavar="N", help="elements per scale block (default: the recipe's: "
                                                           "32 for MX, 16 for nvfp4, the whole tensor otherwise)"),
               arg("--axis", type=int, default=-1, metavar="A", signed=True,
                   help="the axis the blocks run along (the reduced axis of the matmul; default -1)"),
               arg("--golden", metavar="TENSOR", complete="tensor",
                   help="the high-precision tensor TENSOR was quantized from: report the recipe on it and "
                        "the share of TENSOR's error the recipe explains"),
               arg("--scale", metavar="TENSOR", complete="tensor",
                   help="with --golden: the block scales of TENSOR (e.g. its E8M0 input), TENSOR's "
                        "elements are multiplied by them before the comparison"),
               arg("--scale-rule", type=int, default=0, choices=(0, 1), metavar="R",
                   help="MX scale rule: 0 (OCP MX: 2^(floor(log2 amax) - emax), default) or 1 (MX FP8 "
                        "only, aclnnDynamicMxQuant scale_alg=1: 2^ceil(log2(amax / max)), no saturation)"),
               arg("--top", type=int, default=5, metavar="N", help="worst blocks listed (default 5)")])
def qstat(session: Session, args: Any) -> Sections:
    from precision_shell.analysis.quant import quant_report
    from precision_shell.commands.tensor_print import _resolve, read_tensor

    if args.block is not None and args.block < 1:
        raise UsageError("--block must be a positive number of elements")
    if args.top < 0:
        raise UsageError("--top must be 0 or more")
    from precision_shell.analysis.quant.recipes import RECIPES, check_scale_rule

    try:
        check_scale_rule(RECIPES[args.recipe], args.scale_rule)
    except ValueError as exc:
        raise UsageError(f"--scale-rule {args.scale_rule}: {exc}") from None
    resolved = _resolve(session, args.tensor)
    tensor = read_tensor(session, resolved)
    label = resolved.label + resolved.ref.slice_text
    observed, golden_label = None, None
    x = tensor
    warnings: list[str] = []
    if args.scale and not args.golden:
        raise UsageError("--scale needs --golden (the scales dequantize TENSOR to compare it with the golden)")
    if args.golden:
        golden = _resolve(session, args.golden)
        x, observed = read_tensor(session, golden), tensor
        golden_label = golden.label + golden.ref.slice_text
    if args.scale:
        from precision_shell.analysis.quant.recipes import apply_scales

        scale_ref = _resolve(session, args.scale)
        block = args.block or RECIPES[args.recipe].block or observed.shape[args.axis]
        try:
            observed, nan_scales = apply_scales(observed, read_tensor(session, scale_ref), block, args.axis)
        except ValueError as exc:
            raise CommandError(f"{scale_ref.path}: {exc}") from None
        if nan_scales:
            warnings.append(f"{scale_ref.path}: {nan_scales} NaN scale code{'s' * (nan_scales != 1)}: "
                            "those blocks are left out")
    if x.dtype.kind not in "fiub" and x.dtype.isbuiltin != 2:
        raise CommandError(f"{label}: qstat needs real numbers, not {x.dtype}")
    if x.ndim and not -x.ndim <= args.axis < x.ndim:
        raise UsageError(f"--axis {args.axis} is outside the tensor's {x.ndim} axes")
    try:
        report = quant_report(x.astype("float64"), args.recipe, block=args.block, axis=args.axis,
                              observed=None if observed is None else observed.astype("float64"), top=args.top,
                              scale_rule=args.scale_rule)
    except ValueError as exc:
        raise CommandError(f"{label}: {exc}") from None
    r = report
    rows = [("tensor", label if golden_label is None else f"{golden_label} (golden of {label})"),
            ("recipe", f"{r.recipe.name}: {r.recipe.element}, "
                       + (f"blocks of {r.block} along axis {r.axis}" if r.block else "one scale per tensor")
                       + (f", scale rule {r.scale_rule}" if r.recipe.scaling == "mx" else "")
                       + f" ({r.recipe.source})"),
            ("elements", f"{r.count:,} finite, {r.nonzero:,} non-zero, {r.blocks:,} block{'s' * (r.blocks != 1)}"),
            ("underflow", f"{r.underflow_pct:.4g} % ({r.underflow:,} non-zeros became 0)"),
            ("saturation", f"{r.saturated_pct:.4g} % ({r.saturated:,} clamped to ±{_elem_max(r)})"),
            ("relative L2", _g(r.rel_l2)), ("MSE", _g(r.mse)),
            ("scale range", f"{_g(r.scale_min)} .. {_g(r.scale_max)}")]
    blocks: list = [("", rows)]
    if r.worst_blocks:
        blocks.append(("widest blocks (dynamic range in binades)", Table(
            ["block", "binades", "amax", "scale", "underflow"],
            [[",".join(map(str, b.index)), f"{b.binades:.3g}", _g(b.amax), _g(b.scale), b.underflow]
             for b in r.worst_blocks])))
    if r.explained is not None:
        e = r.explained
        blocks.append((f"{label} vs the recipe on {golden_label}", [
            ("observed rel. L2", _g(e.observed_rel_l2)), ("recipe rel. L2", _g(e.recipe_rel_l2)),
            ("explained", "-" if math.isnan(e.explained) else f"{e.explained:.4g} (recipe error / observed error)"),
            ("equal to the recipe", f"{100 * e.equal_fraction:.4g} % of the elements")]))
    data = {"tensor": label, "golden": golden_label, **r.to_json(), "warnings": warnings}
    if warnings:
        blocks.append(("warnings", warnings))
    return Sections(f"qstat {label}", blocks, data)


def _elem_max(r) -> str:
    from precision_shell.formats.lowbit import by_name

    return f"{by_name(r.recipe.element).max_finite:g}"
