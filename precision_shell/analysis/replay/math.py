"""Unary and power math: Exp, Log, Sqrt, Rsqrt, Square, Pow (exponent as second input)."""

from __future__ import annotations

import numpy as np


def unary_math(ar, xs, attrs, out_shapes, op_type="Exp"):
    x = xs[0]
    with np.errstate(all="ignore"):
        if op_type == "Exp":
            y = np.exp(x)
        elif op_type == "Log":
            y = np.log(x)
        elif op_type == "Sqrt":
            y = np.sqrt(x)
        elif op_type == "Rsqrt":
            y = 1.0 / ar.r(np.sqrt(x))
        elif op_type == "Square":
            y = x * x
        else:  # Pow
            y = np.power(x, xs[1])
        return [ar.r(y)]
