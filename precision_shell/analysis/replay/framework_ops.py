"""Kernels for framework APIs with no single GE op of their own: Embedding (a row lookup),
ScaledDotProductAttention, CrossEntropy (log-softmax and the mean negative log-likelihood of
the targets), ReduceVar (two-pass variance with a correction) and GeluTanh (the tanh
approximation torch's ``gelu(approximate='tanh')`` and MindSpore's ``gelu`` use). Same
signature as every kernel (see :mod:`.kernels`); numpy only."""

from __future__ import annotations

import math

import numpy as np


def embedding(ar, xs, attrs, out_shapes):
    ids, weight = np.asarray(xs[0]).astype(np.int64), xs[1]
    return [weight[ids]]


def gelu_tanh(ar, xs, attrs, out_shapes):
    x = xs[0]
    with np.errstate(all="ignore"):
        inner = ar.r(math.sqrt(2.0 / math.pi) * ar.r(x + ar.r(0.044715 * ar.r(ar.r(x * x) * x))))
        return [ar.r(ar.r(0.5 * x) * ar.r(1.0 + ar.r(np.tanh(inner))))]


def _softmax(ar, s, axis=-1):
    with np.errstate(all="ignore"):
        e = ar.r(np.exp(ar.r(s - np.max(s, axis=axis, keepdims=True))))
        return ar.r(e / ar.sum(e, axis, keepdims=True))


def attention(ar, xs, attrs, out_shapes):
    """softmax(q k^T * scale + mask) v; ``is_causal`` masks the upper triangle, a boolean mask
    keeps where true, a float mask is added."""
    q, k, v = xs[0], xs[1], xs[2]
    scale = attrs.get("scale")
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else float(scale)
    with np.errstate(all="ignore"):
        s = ar.r(ar.dot(q, np.swapaxes(k, -1, -2)) * scale)
        if attrs.get("is_causal"):
            lq, lk = s.shape[-2], s.shape[-1]
            s = np.where(np.tril(np.ones((lq, lk), dtype=bool), lk - lq), s, -np.inf)
        if len(xs) > 3:
            mask = xs[3]
            s = np.where(mask.astype(bool), s, -np.inf) if attrs.get("bool_mask") else ar.r(s + mask)
        return [ar.dot(_softmax(ar, s), v)]


def cross_entropy(ar, xs, attrs, out_shapes):
    """Logits (N, C) or (N, C, d...), integer targets; ``ignore_index`` (default -100),
    ``reduction`` mean | sum | none, ``label_smoothing``. The log-probabilities are rounded to the
    output dtype before the loss, as the framework's log_softmax + nll_loss pair does."""
    logits, target = xs[0], np.asarray(xs[1]).astype(np.int64)
    if logits.ndim == 1:
        logits, target = logits[None, :], target.reshape(1)
    logits = np.moveaxis(logits, 1, -1)              # class axis last
    ignore = int(attrs.get("ignore_index", -100))
    smoothing = float(attrs.get("label_smoothing", 0.0) or 0.0)
    with np.errstate(all="ignore"):
        shifted = ar.r(logits - np.max(logits, axis=-1, keepdims=True))
        logp = ar.r(shifted - ar.r(np.log(ar.sum(ar.r(np.exp(shifted)), -1, keepdims=True))))
        # torch and MindSpore compose it: log_softmax stores its result in the logits' dtype first
        logp = ar.out(logp, ar.out_fmt)
        keep = target != ignore
        picked = np.take_along_axis(logp, np.where(keep, target, 0)[..., None], axis=-1)[..., 0]
        loss = -picked
        if smoothing:
            loss = ar.r((1 - smoothing) * loss - smoothing * ar.sum(logp, -1) / logp.shape[-1])
        loss = np.where(keep, loss, 0.0)
        reduction = attrs.get("reduction", "mean")
        if reduction == "none":
            return [loss]
        total = ar.sum(loss.reshape(-1), 0)
        return [total if reduction == "sum" else ar.r(total / max(int(keep.sum()), 1))]


def variance(ar, xs, attrs, out_shapes):
    """Two-pass variance over ``axes`` (all when empty) with ``correction`` (default 1)."""
    x = xs[0]
    axes = attrs.get("axes")
    axes = tuple(range(x.ndim)) if axes in (None, [], ()) else tuple(
        sorted({int(a) % x.ndim for a in (axes if isinstance(axes, (list, tuple)) else [axes])}))
    keep = bool(attrs.get("keep_dims", False))
    count = int(np.prod([x.shape[a] for a in axes]))
    correction = float(attrs.get("correction", 1))
    with np.errstate(all="ignore"):
        mean = ar.r(ar.sum(x, axes, keepdims=True) / count)
        d = ar.r(x - mean)
        total = ar.sum(ar.r(d * d), axes, keepdims=keep)
        return [ar.r(total / max(count - correction, 0.0))]


def split_sizes(ar, xs, attrs, out_shapes):
    """torch's split: pieces of ``sizes`` (or of ``size`` each, the last shorter) along ``axis``."""
    x, axis = xs[0], int(attrs.get("axis", 0)) % xs[0].ndim
    sizes = attrs.get("sizes") or [int(attrs["size"])] * -(-x.shape[axis] // int(attrs["size"]))
    cuts = np.cumsum([int(s) for s in sizes])[:-1]
    return list(np.split(x, cuts, axis=axis))
