"""Per-call backward records: an identity autograd function around a call's inputs and outputs.

The same mechanism as msprobe's ``BackwardHook`` (and torch's full backward hooks): the call's
outputs go through :class:`_Tap` on the way out, so its backward sees the gradients of the
outputs (the entry's backward ``input``), and its tensor inputs go through another on the way
in, whose backward sees the gradients of the inputs (the backward ``output``). The entry is
written when the second arrives, or with the first when no input needed a gradient. One
mechanism serves APIs and modules, so tapped tensors keep their producer (see
:meth:`Recorder.alias`).

Tapped outputs are views made inside a custom function: an in-place op on one raises torch's
"view ... created inside a custom Function" error, as with msprobe or full backward hooks;
in-place calls themselves are never tapped.
"""

from __future__ import annotations

import torch
from torch.utils._pytree import tree_flatten, tree_unflatten


class _Tap(torch.autograd.Function):
    @staticmethod
    def forward(ctx, sink, *tensors):
        ctx.sink = sink
        return tuple(t.view_as(t) for t in tensors)

    @staticmethod
    def backward(ctx, *grads):
        ctx.sink(grads)
        return (None, *grads)


def needs_grad(t) -> bool:
    return isinstance(t, torch.Tensor) and t.requires_grad


def tap_tree(tree, sink):
    """``tree`` with every tensor that requires grad replaced by a tapped view; returns
    (new tree, [(original, tapped)]) or (tree, []) when nothing requires grad."""
    flat, spec = tree_flatten(tree)
    where = [i for i, v in enumerate(flat) if needs_grad(v)]
    if not where:
        return tree, []
    tapped = _Tap.apply(sink, *(flat[i] for i in where))
    pairs = []
    for i, new in zip(where, tapped):
        pairs.append((flat[i], new))
        flat[i] = new
    return tree_unflatten(flat, spec), pairs


class BackwardEntry:
    """Collects one call's backward: gradients of its outputs, then of its inputs."""

    def __init__(self, recorder, name: str, parent: str | None, expects_inputs: bool) -> None:
        self.recorder = recorder
        self.name = name                  # "Functional.linear.0.backward"
        self.parent = parent
        self.expects_inputs = expects_inputs
        self.grad_outputs: tuple | None = None

    def outputs_done(self, grads) -> None:
        self.grad_outputs = grads
        if self.expects_inputs:
            self.recorder.waiting[self.name] = self
        else:
            self.recorder.write_backward(self, ())

    def inputs_done(self, grads) -> None:
        self.recorder.write_backward(self, grads)
