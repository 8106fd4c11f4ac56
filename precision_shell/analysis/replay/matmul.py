"""MatMul, MatMulV2, BatchMatMul, BatchMatMulV2: transposes from the graph's attributes, the
bias of a fused MatMul+BiasAdd as the optional third input."""

from __future__ import annotations

import numpy as np

# the attribute names GE and TF use for the two transposes
_TRANSPOSE_A = ("transpose_x1", "transpose_a", "adj_x1", "adj_x")
_TRANSPOSE_B = ("transpose_x2", "transpose_b", "adj_x2", "adj_y")


def _flag(attrs: dict, names: tuple) -> bool:
    return any(bool(attrs.get(n)) for n in names)


def matmul(ar, xs, attrs, out_shapes):
    a, b = xs[0], xs[1]
    if _flag(attrs, _TRANSPOSE_A):
        a = np.swapaxes(a, -1, -2)
    if _flag(attrs, _TRANSPOSE_B):
        b = np.swapaxes(b, -1, -2)
    y = ar.dot(a, b)
    if len(xs) > 2 and xs[2].size:
        y = ar.r(y + xs[2])
    return [y]
