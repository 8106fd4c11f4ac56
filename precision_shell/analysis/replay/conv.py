"""Conv2D (+ fused BiasAdd as the third input, fused Relu when ``fused_relu`` is set: the
command sets it from the op's original ops): NCHW or NHWC from ``data_format``,
``strides``, ``pads`` [top, bottom, left, right], ``dilations``, ``groups``; the dot product of
every output element runs over (Cin, kh, kw) in row-major order through the profile."""

from __future__ import annotations

import numpy as np


def _hw(values, fmt: str, default: int) -> tuple[int, int]:
    if not values:
        return default, default
    values = list(values)
    if len(values) == 4:
        return (values[2], values[3]) if fmt == "NCHW" else (values[1], values[2])
    return values[0], values[-1]


def conv2d(ar, xs, attrs, out_shapes):
    fmt = str(attrs.get("data_format") or "NCHW").upper()
    x, w = xs[0], xs[1]
    if fmt == "NHWC":
        x = np.transpose(x, (0, 3, 1, 2))
    if w.ndim == 4 and fmt == "NHWC" and str(attrs.get("filter_format", "HWCN")).upper() == "HWCN":
        w = np.transpose(w, (3, 2, 0, 1))
    sh, sw = _hw(attrs.get("strides"), fmt, 1)
    dh, dw = _hw(attrs.get("dilations"), fmt, 1)
    pads = list(attrs.get("pads") or [0, 0, 0, 0])
    groups = int(attrs.get("groups") or 1)
    n, cin, h, wd = x.shape
    cout, cin_g, kh, kw = w.shape
    xp = np.pad(x, ((0, 0), (0, 0), (pads[0], pads[1]), (pads[2], pads[3])))
    oh = (h + pads[0] + pads[1] - dh * (kh - 1) - 1) // sh + 1
    ow = (wd + pads[2] + pads[3] - dw * (kw - 1) - 1) // sw + 1
    outs = []
    for g in range(groups):
        xg = xp[:, g * cin_g:(g + 1) * cin_g]
        wg = w[g * (cout // groups):(g + 1) * (cout // groups)]
        # patches (N, OH, OW, Cin*kh*kw) in row-major (c, i, j) order
        cols = np.stack([xg[:, :, i * dh:i * dh + sh * (oh - 1) + 1:sh, j * dw:j * dw + sw * (ow - 1) + 1:sw]
                         for i in range(kh) for j in range(kw)], axis=2)        # N, C, kh*kw, OH, OW
        cols = cols.reshape(n, cin_g * kh * kw, oh * ow).transpose(0, 2, 1)
        outs.append(ar.dot(cols, wg.reshape(wg.shape[0], -1).T))            # N, OH*OW, Cout_g
    y = np.concatenate(outs, axis=-1).transpose(0, 2, 1).reshape(n, cout, oh, ow)
    if len(xs) > 2 and xs[2].size:
        y = ar.r(y + xs[2].reshape(1, -1, 1, 1))
    if attrs.get("fused_relu"):
        y = np.maximum(y, 0.0)
    if fmt == "NHWC":
        y = np.transpose(y, (0, 2, 3, 1))
    return [y]
