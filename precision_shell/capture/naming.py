"""msprobe's names for the torch calls a TorchFunctionMode sees (framework-dumps.md A6, B1).

``torch.overrides.resolve_name`` gives ``torch.nn.functional.linear`` / ``torch.matmul`` /
``torch.Tensor.transpose``; msprobe writes ``Functional.linear`` / ``Torch.matmul`` /
``Tensor.transpose``. Operators are the one gap: ``a * b`` reaches ``__torch_function__`` as
``Tensor.mul``, while msprobe (which wraps ``Tensor.__mul__`` itself) writes ``Tensor.__mul__``.
:class:`OperatorMarks` closes it by wrapping msprobe's list of Tensor dunders with a thin
function that only notes which operator is running, so the mode can name the call after it.
"""

from __future__ import annotations

import torch
from torch.overrides import resolve_name

# resolve_name prefix -> msprobe prefix; the first match wins, so "torch." comes last
_PREFIXES = (("torch.nn.functional.", "Functional"), ("torch.Tensor.", "Tensor"),
             ("torch.distributed.", "Distributed"), ("torch._VF.", "VF"), ("torch.", "Torch"))

# Tensor dunders msprobe wraps (support_wrap_ops.yaml of mindstudio-probe 26.2.0, "tensor")
OPERATOR_DUNDERS = (
    "__add__", "__and__", "__div__", "__eq__", "__floordiv__", "__ge__", "__gt__", "__iadd__",
    "__iand__", "__idiv__", "__ifloordiv__", "__ilshift__", "__imod__", "__imul__", "__ior__",
    "__ipow__", "__irshift__", "__isub__", "__ixor__", "__le__", "__lshift__", "__lt__",
    "__matmul__", "__mod__", "__mul__", "__ne__", "__or__", "__pow__", "__radd__", "__rdiv__",
    "__rmod__", "__rmul__", "__ror__", "__rpow__", "__rshift__", "__rsub__", "__rxor__",
    "__setitem__", "__sub__", "__truediv__", "__xor__")

# Calls that read metadata, convert to Python, or drive autograd: they produce no tensor of the
# computation, so recording them would only shift counters and add noise (B3 "skip getters").
_NOT_RECORDED = frozenset((
    "size", "dim", "numel", "nelement", "ndimension", "stride", "storage_offset", "is_contiguous",
    "data_ptr", "element_size", "item", "tolist", "numpy", "is_floating_point", "is_complex",
    "is_signed", "get_device", "untyped_storage", "storage", "_typed_storage", "_is_view",
    "is_set_to", "has_names", "dim_order", "is_shared", "is_pinned", "is_inference",
    "register_hook", "register_post_accumulate_grad_hook", "retain_grad", "requires_grad_",
    "backward", "detach", "detach_", "__len__", "__repr__", "__format__", "__str__", "__hash__",
    "__bool__", "__index__", "__int__", "__float__", "__complex__", "__array__", "__array_wrap__",
    "__contains__", "__iter__", "__reduce_ex__", "__deepcopy__", "__setstate__", "__dlpack__",
    "__dlpack_device__", "__reversed__", "__dir__", "__sizeof__",
    # uninitialised memory (nn.Linear's weights before init, out= buffers): its values are noise
    # that would compare as a failing root in every captured pair
    "empty", "empty_like", "empty_strided", "new_empty", "new_empty_strided"))
_NOT_RECORDED_PREFIXES = ("torch.autograd.", "torch.cuda.", "torch._C.", "torch.utils.", "torch.nn.init.")

IN_PLACE_DUNDERS = frozenset(d for d in OPERATOR_DUNDERS if d.startswith("__i")) | {"__setitem__"}


def is_in_place(api: str) -> bool:
    """``Tensor.add_`` / ``Tensor.__iadd__`` / ``Tensor.__setitem__``: the result is an input."""
    short = api.rpartition(".")[2]
    return short in IN_PLACE_DUNDERS or (short.endswith("_") and not short.endswith("__"))


class ApiNames:
    """func -> msprobe API name (``Functional.linear``), or None for a call that is not
    recorded. Cached per function object: resolve_name walks torch's namespaces."""

    def __init__(self) -> None:
        self._cache: dict = {}

    def name(self, func, operator: str | None) -> str | None:
        try:
            api = self._cache[func]
        except (KeyError, TypeError):
            api = self._resolve(func)
            try:
                self._cache[func] = api
            except TypeError:
                pass
        if api is not None and operator is not None and api.startswith("Tensor."):
            return "Tensor." + operator
        return api

    @staticmethod
    def _resolve(func) -> str | None:
        full = resolve_name(func) or f"torch.{getattr(func, '__name__', 'unknown')}"
        if full.endswith((".__get__", ".__set__", ".__delete__")):
            return None
        if full.startswith(_NOT_RECORDED_PREFIXES):
            return None
        short = full.rpartition(".")[2]
        if short in _NOT_RECORDED:
            return None
        if short.startswith("_") and not short.startswith("__"):
            return None     # private helpers (torch._set_grad_enabled from no_grad())
        for head, prefix in _PREFIXES:
            if full.startswith(head):
                # torch.linalg.norm -> Torch.linalg_norm: a dot would split the entry name
                return f"{prefix}.{full[len(head):].replace('.', '_')}"
        return None


class OperatorMarks:
    """While installed, ``torch.Tensor.__mul__`` etc. note their own name in :attr:`pending`
    for the duration of the call; the mode takes it (once) to name the call it sees."""

    def __init__(self) -> None:
        self.pending: str | None = None
        self._saved: dict[str, object] = {}

    def take(self) -> str | None:
        name, self.pending = self.pending, None
        return name

    def install(self) -> None:
        for dunder in OPERATOR_DUNDERS:
            original = getattr(torch.Tensor, dunder, None)
            if original is None:
                continue
            self._saved[dunder] = torch.Tensor.__dict__.get(dunder)
            setattr(torch.Tensor, dunder, self._marking(dunder, original))

    def remove(self) -> None:
        for dunder, own in self._saved.items():
            if own is None:
                delattr(torch.Tensor, dunder)   # it was inherited from TensorBase
            else:
                setattr(torch.Tensor, dunder, own)
        self._saved.clear()

    def _marking(self, dunder: str, original):
        marks = self

        def operator(self, *args, **kwargs):
            previous, marks.pending = marks.pending, dunder
            try:
                return original(self, *args, **kwargs)
            finally:
                marks.pending = previous
        operator.__name__ = dunder
        return operator
