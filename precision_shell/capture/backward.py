"""Per-call backward records (msprobe's ``{name}.backward``: ``input`` = gradients of the call's
outputs, ``output`` = gradients of its inputs).

- Output side: a tensor hook on each output that needs a gradient. It fires with that output's
  whole gradient just before the output's producer runs backward, and never wraps the output, so
  a later in-place op on it (``nn.ReLU(inplace=True)``) works; a hook registered before an
  in-place change sees the gradient of the value the call returned.
- Input side: the call's tensor inputs go through :class:`_Tap`, an identity autograd function
  whose backward sees the gradients of exactly this call's inputs (a tensor hook would see the sum
  over every consumer). The tapped views are given only to the call itself, so calls that write
  their inputs (``add_``, ``inplace=True``, modules with ``inplace`` set) are not tapped, and an
  input the call returns as it is gets its original back.

The entry is written when the input gradients arrive, or, when no input needed one, once every
output's gradient has.
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


def untap_outputs(output, pairs):
    """``output`` with any tapped input it returns as it is replaced by the original tensor."""
    if not pairs:
        return output
    originals = {id(tapped): original for original, tapped in pairs}
    flat, spec = tree_flatten(output)
    if not any(id(v) in originals for v in flat):
        return output
    return tree_unflatten([originals.get(id(v), v) for v in flat], spec)


class BackwardEntry:
    """Collects one call's backward: gradients of its outputs, then of its inputs."""

    def __init__(self, recorder, name: str, parent: str | None) -> None:
        self.recorder = recorder
        self.name = name                  # "Functional.linear.0.backward"
        self.parent = parent
        self.expects_inputs = False
        self.grad_outputs: list = []
        self._missing = 0

    def hook_outputs(self, output, guard) -> None:
        targets = [t for t in tree_flatten(output)[0] if needs_grad(t) and t.grad_fn is not None]
        self.grad_outputs = [None] * len(targets)
        self._missing = len(targets)
        for i, t in enumerate(targets):
            t.register_hook(guard(lambda grad, i=i: self._output_grad(i, grad)))

    def _output_grad(self, i: int, grad) -> None:
        if self.grad_outputs[i] is None:
            self._missing -= 1
        self.grad_outputs[i] = grad
        if self.expects_inputs:
            self.recorder.waiting[self.name] = self
        elif self._missing == 0:
            self.recorder.write_backward(self, ())

    def inputs_done(self, grads) -> None:
        self.recorder.write_backward(self, grads)
