"""Activations: Relu, LeakyRelu, Gelu (erf), FastGelu, Sigmoid, Tanh, Softplus, Swish/SiLU.
Transcendental parts are one elementary operation each (rounded once under a profile)."""

from __future__ import annotations

import math

import numpy as np

_erf = np.vectorize(math.erf, otypes=[np.float64])


def _sigmoid(ar, x):
    with np.errstate(over="ignore"):
        return ar.r(1.0 / ar.r(1.0 + ar.r(np.exp(-x))))


def activation(ar, xs, attrs, out_shapes, op_type="Relu"):
    x = xs[0]
    with np.errstate(all="ignore"):
        if op_type == "Relu":
            y = np.maximum(x, 0.0)
        elif op_type == "LeakyRelu":
            alpha = float(attrs.get("negative_slope", attrs.get("alpha", 0.2)))
            y = np.where(x > 0, x, ar.r(alpha * x))
        elif op_type == "Gelu":
            y = ar.r(0.5 * x) * ar.r(1.0 + ar.r(_erf(ar.r(x / math.sqrt(2.0)))))
        elif op_type == "FastGelu":
            # x / (1 + exp(-1.702 |x|)) * exp(0.851 (x - |x|)), the Ascend FastGelu formula
            ax = np.abs(x)
            y = ar.r(x / ar.r(1.0 + ar.r(np.exp(ar.r(-1.702 * ax))))) * ar.r(np.exp(ar.r(0.851 * (x - ax))))
        elif op_type == "Sigmoid":
            y = _sigmoid(ar, x)
        elif op_type == "Tanh":
            y = np.tanh(x)
        elif op_type == "Softplus":
            y = ar.r(np.log1p(ar.r(np.exp(-np.abs(x))))) + np.maximum(x, 0.0)
        else:  # Swish, SiLU
            scale = float(attrs.get("scale", 1.0))
            y = x * _sigmoid(ar, ar.r(scale * x))
        return [ar.r(y)]
