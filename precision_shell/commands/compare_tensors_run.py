"""What ``compare_tensors``/``cp`` does (registered in compare_cmd, imported on first use): two
tensors, all metrics, the allclose verdict, the error ratio and the worst elements."""

from __future__ import annotations

import math
from typing import Any

from precision_shell.analysis.compare.tensor import compare_pair
from precision_shell.commands.compare_run import metric_text
from precision_shell.commands.results import Sections, Table
from precision_shell.errors import CommandError, UsageError
from precision_shell.model.session import Session
from precision_shell.model.tensor_resolve import resolve_tensor


def _value(v: float) -> Any:
    return v if math.isfinite(v) else ("nan" if v != v else ("inf" if v > 0 else "-inf"))


def compare_tensors(session: Session, args) -> Sections:
    if args.top < 0:
        raise UsageError("-p must be 0 or more")
    if args.atol < 0 or args.rtol < 0:
        raise UsageError("tolerances must be 0 or more")
    a, b = resolve_tensor(session, args.a), resolve_tensor(session, args.b)
    x, y = a.read(), b.read()
    if x.shape != y.shape:
        raise CommandError(f"cannot compare {a.label}{a.ref.slice_text} shape {tuple(x.shape)} with "
                           f"{b.label}{b.ref.slice_text} shape {tuple(y.shape)}: shapes must agree "
                           f"(slice one side, e.g. [0, :8])")
    res = compare_pair(x, y, atol=args.atol, rtol=args.rtol, top=args.top)
    complex_data = x.dtype.kind == "c" or y.dtype.kind == "c"
    m = res.metrics
    info = [(a.label + a.ref.slice_text, f"{x.dtype} {tuple(x.shape)}"),
            (b.label + b.ref.slice_text, f"{y.dtype} {tuple(y.shape)}"),
            ("allclose", f"{'yes' if res.allclose else 'no'} (atol {args.atol:g}, rtol {args.rtol:g})"),
            ("error ratio", f"{res.error_ratio:.6f} ({res.mismatches} of {m.count} "
                            f"{'values' if complex_data else 'elements'})")]
    if complex_data:
        info.append(("complex", "compared as real and imaginary parts (2 values per element; "
                                "a worst index ends in 0 = real, 1 = imaginary)"))
    rows = [[name, cell] for name, cell in zip(
        ["CosineSimilarity", "MaxAbsoluteError", "AccumulatedRelativeError",
         "RelativeEuclideanDistance", "KullbackLeiblerDivergence", "StandardDeviation",
         "MeanAbsoluteError", "RootMeanSquareError", "MaxRelativeError", "MeanRelativeError"],
        m.vendor_cells())]
    rows += [["One Thousandth Err Ratio", metric_text(m.one_thousandth_err_ratio)],
             ["Five Thousandths Err Ratio", metric_text(m.five_thousandths_err_ratio)]]
    worst = Table(["index", "a", "b", "abs err", "rel err"],
                  [[str(list(w.index)), w.npu, w.golden, w.abs_err, w.rel_err] for w in res.worst])
    data = {"a": a.label + a.ref.slice_text, "b": b.label + b.ref.slice_text, "shape": list(res.shape),
            "allclose": res.allclose, "error_ratio": res.error_ratio, "mismatches": res.mismatches,
            "atol": args.atol, "rtol": args.rtol, **m.as_json(),
            "worst": [{"index": list(w.index), "a": _value(w.npu), "b": _value(w.golden),
                       "abs_error": _value(w.abs_err), "rel_error": _value(w.rel_err)} for w in res.worst]}
    blocks: list[tuple[str, Any]] = [("", info), ("metrics", Table(["metric", "value"], rows))]
    if args.top:
        blocks.append((f"worst {len(res.worst)} elements", worst))
    return Sections(title=f"{a.label} vs {b.label}", blocks=blocks, data=data)
