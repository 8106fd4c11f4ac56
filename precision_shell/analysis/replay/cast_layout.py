"""Ops that move or convert values without arithmetic: Cast (the output rounding is the cast),
TransData/Reshape/Squeeze/ExpandDims (the logical values, shaped as the NPU output),
Transpose (``perm`` attribute or second input), ConcatV2 (axis as last input or ``concat_dim``),
Split/SplitD (``split_dim``, ``num_split``)."""

from __future__ import annotations

import numpy as np


def reshape_like(ar, xs, attrs, out_shapes, op_type="Reshape"):
    return [xs[0].reshape(out_shapes[0]) if out_shapes and out_shapes[0] is not None else xs[0]]


def cast(ar, xs, attrs, out_shapes):
    return [xs[0]]


def transpose(ar, xs, attrs, out_shapes):
    if "swap" in attrs:       # torch's transpose(dim0, dim1)
        return [np.swapaxes(xs[0], *attrs["swap"])]
    perm = attrs.get("perm")
    if perm is None and len(xs) > 1:
        perm = [int(v) for v in np.asarray(xs[1]).reshape(-1)]
    return [np.transpose(xs[0], perm or None)]


def concat(ar, xs, attrs, out_shapes):
    if "concat_dim" in attrs or "axis" in attrs:
        axis, parts = int(attrs.get("concat_dim", attrs.get("axis"))), xs
    else:
        axis, parts = int(np.asarray(xs[-1]).reshape(-1)[0]), xs[:-1]
    return [np.concatenate(parts, axis=axis)]


def split(ar, xs, attrs, out_shapes):
    if "split_dim" in attrs:
        axis, value = int(attrs["split_dim"]), xs[0]
    else:
        axis, value = int(np.asarray(xs[0]).reshape(-1)[0]), xs[1]
    count = int(attrs.get("num_split", len(out_shapes) or 1))
    return list(np.split(value, count, axis=axis))
