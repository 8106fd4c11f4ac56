"""LayerNorm (outputs y, mean, variance), RmsNorm (y, rstd), AddRmsNorm (y, rstd, x1 + x2).

Mean and variance are the two-pass formulas (variance of the centred values), each sum through
the profile's accumulator: the stable algorithm an ideal kernel uses."""

from __future__ import annotations

import numpy as np


def _norm_axes(x, attrs, key: str = "begin_norm_axis") -> tuple:
    begin = int(attrs.get(key, -1)) % x.ndim
    return tuple(range(begin, x.ndim))


def _mean(ar, x, axes):
    count = int(np.prod([x.shape[a] for a in axes]))
    return ar.r(ar.sum(x, axes, keepdims=True) / count)


def layer_norm(ar, xs, attrs, out_shapes):
    x, gamma, beta = xs[0], xs[1], xs[2]
    eps = float(attrs.get("epsilon", 1e-5))
    axes = _norm_axes(x, attrs)
    with np.errstate(all="ignore"):
        mean = _mean(ar, x, axes)
        d = ar.r(x - mean)
        var = _mean(ar, ar.r(d * d), axes)
        rstd = ar.r(1.0 / ar.r(np.sqrt(ar.r(var + eps))))
        y = ar.r(ar.r(ar.r(d * rstd) * gamma) + beta)
    return [y, mean, var]


def rms_norm(ar, xs, attrs, out_shapes, op_type="RmsNorm"):
    if op_type == "AddRmsNorm":
        x = ar.r(xs[0] + xs[1])
        gamma = xs[2]
    else:
        x, gamma = xs[0], xs[1]
    eps = float(attrs.get("epsilon", 1e-6))
    axes = tuple(range(x.ndim - gamma.ndim, x.ndim))
    with np.errstate(all="ignore"):
        ms = _mean(ar, ar.r(x * x), axes)
        rstd = ar.r(1.0 / ar.r(np.sqrt(ar.r(ms + eps))))
        y = ar.r(ar.r(x * rstd) * gamma)
    return [y, rstd, x] if op_type == "AddRmsNorm" else [y, rstd]
