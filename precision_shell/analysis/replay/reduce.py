"""ReduceSum, ReduceMean, ReduceMax (and their D forms): axes from the ``axes`` attribute or
the second input, ``keep_dims``; sums through the profile's accumulator."""

from __future__ import annotations

import numpy as np


def reduce_axes(xs, attrs) -> tuple:
    x = xs[0]
    axes = attrs.get("axes")
    if axes is None and len(xs) > 1:
        axes = [int(v) for v in np.asarray(xs[1]).reshape(-1)]
    if axes is None or (isinstance(axes, (list, tuple)) and not axes):
        return tuple(range(x.ndim))
    if not isinstance(axes, (list, tuple)):
        axes = [axes]
    return tuple(sorted({int(a) % x.ndim for a in axes}))


def reduce(ar, xs, attrs, out_shapes, op_type="ReduceSum"):
    x = xs[0]
    axes = reduce_axes(xs, attrs)
    keep = bool(attrs.get("keep_dims", attrs.get("keepdims", False)))
    if op_type.startswith("ReduceMax"):
        return [np.max(x, axis=axes, keepdims=keep)]
    total = ar.sum(x, axes, keepdims=keep)
    if op_type.startswith("ReduceMean"):
        count = int(np.prod([x.shape[a] for a in axes]))
        return [ar.r(total / count)]
    return [total]
