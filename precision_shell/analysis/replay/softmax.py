"""Softmax, SoftmaxV2, LogSoftmax(V2) over ``axes`` (default the last axis): max-subtracted,
the sum through the profile's accumulator."""

from __future__ import annotations

import numpy as np


def _axis(attrs: dict) -> int:
    axes = attrs.get("axes", attrs.get("axis", -1))
    if isinstance(axes, (list, tuple)):
        axes = axes[0] if axes else -1
    return int(axes)


def softmax(ar, xs, attrs, out_shapes, op_type="Softmax"):
    x = xs[0]
    axis = _axis(attrs) % x.ndim
    with np.errstate(all="ignore"):
        shifted = ar.r(x - np.max(x, axis=axis, keepdims=True))
        e = ar.r(np.exp(shifted))
        total = ar.sum(e, axis, keepdims=True)
        if op_type.startswith("LogSoftmax"):
            return [ar.r(shifted - ar.r(np.log(total)))]
        return [ar.r(e / total)]
