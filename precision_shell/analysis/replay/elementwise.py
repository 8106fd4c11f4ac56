"""Binary elementwise ops with numpy broadcasting: Add/AddV2/Sub/Mul/RealDiv/Maximum/Minimum,
BiasAdd (bias along the channel axis of ``data_format``)."""

from __future__ import annotations

import numpy as np

_BINARY = {"Add": np.add, "AddV2": np.add, "Sub": np.subtract, "Mul": np.multiply,
           "RealDiv": np.divide, "Div": np.divide, "Maximum": np.maximum, "Minimum": np.minimum}


def binary(ar, xs, attrs, out_shapes, op_type="Add"):
    with np.errstate(all="ignore"):
        return [ar.r(_BINARY[op_type](xs[0], xs[1]))]


def bias_add(ar, xs, attrs, out_shapes):
    x, bias = xs[0], xs[1]
    fmt = str(attrs.get("data_format") or "NHWC").upper()
    if fmt.startswith("NC") and x.ndim > 2:
        bias = bias.reshape((-1,) + (1,) * (x.ndim - 2))
    with np.errstate(all="ignore"):
        return [ar.r(x + bias)]
