"""Framework API calls onto the one kernel table (:mod:`.kernels`): an msprobe/capture entry's
API (``Functional.linear``, ``Tensor.__add__``, ``Mint.softmax``, ``Primitive.MatMul``) and the
arguments ``dump.json`` recorded become a kernel key, the inputs in the kernel's order (tensors
by name, Python numbers as constants) and the attributes the kernel reads (``dim`` -> ``axes``,
``eps`` -> ``epsilon``, ``approximate='tanh'`` -> GeluTanh, linear's weight transposed...).

PyTorch and MindSpore spell some arguments differently (``dim``/``axis``, ``keepdim``/
``keep_dims``); both are read. ``Primitive.X`` entries (MindSpore primitives) are GE-style op
types and go to the kernel of that type with their tensors in order. Pure: no data read here."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

PREFIXES = ("Functional", "Torch", "Tensor", "Mint", "MintFunctional", "NPU", "Aten", "Jit",
            "Primitive", "Distributed")


class NoKernel(ValueError):
    """No reference kernel for this call (the message says why, in a few words)."""


@dataclass(frozen=True)
class TensorArg:
    """A tensor argument: the run's tensor name (``ENTRY:input:2``)."""
    name: str


@dataclass
class Binding:
    op_type: str                       # key of the kernel table
    inputs: list                       # TensorArg or a float64 array constant, in kernel order
    attrs: dict = field(default_factory=dict)


_MISSING = object()


def _get(args: list, kwargs: dict, pos: int | None, *names: str, default: Any = _MISSING) -> Any:
    for n in names:
        if n in kwargs:
            return kwargs[n]
    if pos is not None and pos < len(args):
        return args[pos]
    if default is _MISSING:
        raise NoKernel(f"argument {names[0] if names else pos} not recorded")
    return default


def _operand(value: Any):
    """A tensor stays a TensorArg; a recorded number becomes a float64 constant."""
    if isinstance(value, TensorArg):
        return value
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise NoKernel(f"operand {value!r:.40} is neither a tensor nor a number")
    return np.asarray(float(value))


def _ints(value: Any) -> list[int]:
    if isinstance(value, (list, tuple)):
        return [int(v) for v in value]
    return [int(value)]


# --- binders: (args, kwargs, output count) -> Binding --------------------------------------------

def _binary(op_type: str, swap: bool = False) -> Callable:
    def bind(args, kwargs, n_out):
        a = _operand(_get(args, kwargs, 0, "input", "x"))
        b = _operand(_get(args, kwargs, 1, "other", "y", "exponent"))
        alpha = kwargs.get("alpha", 1)
        if alpha not in (1, 1.0, None):
            raise NoKernel(f"alpha={alpha!r:.20} not replayed")
        return Binding(op_type, [b, a] if swap else [a, b])
    return bind


def _unary(op_type: str) -> Callable:
    return lambda args, kwargs, n_out: Binding(op_type, [_get(args, kwargs, 0, "input", "x")])


def _linear(args, kwargs, n_out):
    x, w = _get(args, kwargs, 0, "input", "x"), _get(args, kwargs, 1, "weight")
    bias = _get(args, kwargs, 2, "bias", default=None)
    return Binding("MatMul", [x, w] + ([bias] if isinstance(bias, TensorArg) else []), {"transpose_x2": True})


def _matmul(args, kwargs, n_out):
    return Binding("BatchMatMul", [_get(args, kwargs, 0, "input", "x"), _get(args, kwargs, 1, "other", "mat2", "y")])


def _softmax(op_type: str) -> Callable:
    def bind(args, kwargs, n_out):
        dim = _get(args, kwargs, 1, "dim", "axis", default=-1)
        return Binding(op_type, [_get(args, kwargs, 0, "input", "x")], {"axes": -1 if dim is None else int(dim)})
    return bind


def _layer_norm(args, kwargs, n_out):
    x = _get(args, kwargs, 0, "input", "x")
    shape = _ints(_get(args, kwargs, 1, "normalized_shape"))
    w = _get(args, kwargs, 2, "weight", default=None)
    b = _get(args, kwargs, 3, "bias", default=None)
    eps = _get(args, kwargs, 4, "eps", "epsilon", default=1e-5)
    gamma = w if isinstance(w, TensorArg) else np.ones(shape)
    beta = b if isinstance(b, TensorArg) else np.zeros(shape)
    return Binding("LayerNorm", [x, gamma, beta], {"begin_norm_axis": -len(shape), "epsilon": float(eps)})


def _rms_norm(args, kwargs, n_out):
    x = _get(args, kwargs, 0, "input", "x")
    shape = _ints(_get(args, kwargs, 1, "normalized_shape"))
    w = _get(args, kwargs, 2, "weight", default=None)
    eps = _get(args, kwargs, 3, "eps", default=None)
    return Binding("RmsNorm", [x, w if isinstance(w, TensorArg) else np.ones(shape)],
                   {} if eps is None else {"epsilon": float(eps)})


def _npu_rms_norm(args, kwargs, n_out):
    return Binding("RmsNorm", [_get(args, kwargs, 0, "x", "input"), _get(args, kwargs, 1, "gamma")],
                   {"epsilon": float(_get(args, kwargs, 2, "epsilon", default=1e-6))})


def _gelu(args, kwargs, n_out):
    approximate = _get(args, kwargs, 1, "approximate", default="none")
    return Binding("GeluTanh" if approximate == "tanh" else "Gelu", [_get(args, kwargs, 0, "input", "x")])


def _pow(args, kwargs, n_out):
    return Binding("Pow", [_get(args, kwargs, 0, "input", "x", "self"),
                           _operand(_get(args, kwargs, 1, "exponent", "other", "y"))])


def _reduce(op_type: str) -> Callable:
    def bind(args, kwargs, n_out):
        dim = _get(args, kwargs, 1, "dim", "axis", default=None)
        keep = _get(args, kwargs, 2, "keepdim", "keep_dims", default=False)
        attrs = {"axes": [] if dim is None else _ints(dim), "keep_dims": bool(keep)}
        return Binding(op_type, [_get(args, kwargs, 0, "input", "x")], attrs)
    return bind


def _var(args, kwargs, n_out):
    dim = _get(args, kwargs, 1, "dim", "axis", default=None)
    if isinstance(dim, bool):                  # var(x, unbiased)
        correction, dim = (1 if dim else 0), None
    else:
        unbiased = kwargs.get("unbiased", True)
        correction = kwargs.get("correction", 1 if unbiased else 0)
    keep = _get(args, kwargs, None, "keepdim", "keep_dims", default=False)
    return Binding("ReduceVar", [_get(args, kwargs, 0, "input", "x")],
                   {"axes": [] if dim is None else _ints(dim), "keep_dims": bool(keep),
                    "correction": 1 if correction is None else float(correction)})


def _cast(args, kwargs, n_out):
    return Binding("Cast", [_get(args, kwargs, 0, "input", "x", "self")])


def _reshape(args, kwargs, n_out):
    return Binding("Reshape", [_get(args, kwargs, 0, "input", "x", "self")])


def _transpose(args, kwargs, n_out):
    x = _get(args, kwargs, 0, "input", "x")
    d0, d1 = int(_get(args, kwargs, 1, "dim0")), int(_get(args, kwargs, 2, "dim1"))
    return Binding("Transpose", [x], {"swap": (d0, d1)})


def _permute(args, kwargs, n_out):
    dims = _get(args, kwargs, 1, "dims", "input_perm", default=None)
    if dims is None:
        dims = [a for a in args[1:] if isinstance(a, int)]
    return Binding("Transpose", [_get(args, kwargs, 0, "input", "x")], {"perm": _ints(dims)})


def _split(args, kwargs, n_out):
    size = _get(args, kwargs, 1, "split_size_or_sections", "split_size", "split_size_or_indices")
    dim = int(_get(args, kwargs, 2, "dim", "axis", default=0))
    sizes = _ints(size) if isinstance(size, (list, tuple)) else None
    return Binding("SplitSizes", [_get(args, kwargs, 0, "input", "x", "tensor")],
                   {"axis": dim, "sizes": sizes, "size": None if sizes else int(size)})


def _conv2d(args, kwargs, n_out):
    x, w = _get(args, kwargs, 0, "input", "x"), _get(args, kwargs, 1, "weight")
    b = _get(args, kwargs, 2, "bias", default=None)

    def pair(v):
        v = _ints(v)
        return v * 2 if len(v) == 1 else v
    stride = pair(_get(args, kwargs, 3, "stride", default=1))
    padding = _get(args, kwargs, 4, "padding", "pad", default=0)
    dilation = pair(_get(args, kwargs, 5, "dilation", default=1))
    groups = int(_get(args, kwargs, 6, "groups", default=1))
    if padding == "valid":
        padding = 0
    if isinstance(padding, str):
        raise NoKernel(f"padding={padding!r:.20} not replayed")
    ph, pw = pair(padding)
    return Binding("Conv2D", [x, w] + ([b] if isinstance(b, TensorArg) else []),
                   {"data_format": "NCHW", "strides": stride, "dilations": dilation,
                    "pads": [ph, ph, pw, pw], "groups": groups})


def _sdpa(args, kwargs, n_out):
    q, k, v = (_get(args, kwargs, i, n) for i, n in enumerate(("query", "key", "value")))
    mask = _get(args, kwargs, 3, "attn_mask", default=None)
    dropout = _get(args, kwargs, 4, "dropout_p", default=0.0)
    if dropout:
        raise NoKernel(f"dropout_p={dropout} is random")
    attrs = {"is_causal": bool(_get(args, kwargs, 5, "is_causal", default=False)),
             "scale": _get(args, kwargs, 6, "scale", default=None)}
    inputs = [q, k, v]
    if isinstance(mask, TensorArg):
        inputs.append(mask)
    return Binding("ScaledDotProductAttention", inputs, attrs)


def _embedding(args, kwargs, n_out):
    if _get(args, kwargs, 3, "max_norm", default=None) is not None:
        raise NoKernel("max_norm renormalises the weight in place")
    return Binding("Embedding", [_get(args, kwargs, 0, "input", "x"), _get(args, kwargs, 1, "weight")])


def _cross_entropy(args, kwargs, n_out):
    if _get(args, kwargs, 2, "weight", default=None) is not None:
        raise NoKernel("class weights not replayed")
    logits, target = _get(args, kwargs, 0, "input", "logits"), _get(args, kwargs, 1, "target", "labels")
    return Binding("CrossEntropy", [logits, target],
                   {"ignore_index": int(_get(args, kwargs, 4, "ignore_index", default=-100)),
                    "reduction": _get(args, kwargs, 6, "reduction", default="mean"),
                    "label_smoothing": float(_get(args, kwargs, 7, "label_smoothing", default=0.0) or 0.0)})


_CASTS = ("to", "float", "half", "bfloat16", "double", "type", "type_as", "_to_copy", "cast")
_VIEWS = ("reshape", "view", "flatten", "squeeze", "unsqueeze", "contiguous", "clone", "view_as",
          "reshape_as", "expand_dims", "detach")


def _api_table() -> dict[str, Callable]:
    t: dict[str, Callable] = {
        "linear": _linear, "dense": _linear, "matmul": _matmul, "bmm": _matmul, "mm": _matmul,
        "softmax": _softmax("Softmax"), "log_softmax": _softmax("LogSoftmax"),
        "layer_norm": _layer_norm, "rms_norm": _rms_norm, "npu_rms_norm": _npu_rms_norm,
        "gelu": _gelu, "pow": _pow, "var": _var, "transpose": _transpose, "swapaxes": _transpose,
        "permute": _permute, "split": _split, "conv2d": _conv2d,
        "scaled_dot_product_attention": _sdpa, "embedding": _embedding, "cross_entropy": _cross_entropy,
        "mean": _reduce("ReduceMean"), "sum": _reduce("ReduceSum"),
    }
    for name, op_type in (("relu", "Relu"), ("silu", "SiLU"), ("sigmoid", "Sigmoid"), ("tanh", "Tanh"),
                          ("exp", "Exp"), ("log", "Log"), ("sqrt", "Sqrt"), ("rsqrt", "Rsqrt"),
                          ("square", "Square")):
        t[name] = _unary(op_type)
    for name, op_type in (("add", "Add"), ("sub", "Sub"), ("subtract", "Sub"), ("mul", "Mul"),
                          ("multiply", "Mul"), ("div", "RealDiv"), ("divide", "RealDiv"), ("true_divide", "RealDiv"),
                          ("maximum", "Maximum"), ("minimum", "Minimum")):
        t[name] = _binary(op_type)
    for dunder, op_type in (("add", "Add"), ("sub", "Sub"), ("mul", "Mul"), ("truediv", "RealDiv"),
                            ("div", "RealDiv")):
        t[f"__{dunder}__"] = t[f"__i{dunder}__"] = _binary(op_type)
        t[f"__r{dunder}__"] = _binary(op_type, swap=True)
    t["__matmul__"] = t["__rmatmul__"] = _matmul
    t["__pow__"] = _pow
    for name in _CASTS:
        t[name] = _cast
    for name in _VIEWS:
        t[name] = _reshape
    return t


API = _api_table()


# MindSpore primitives and graph-mode kernels take their attributes as trailing constant inputs
# (MatMul(x, w, transpose_a, transpose_b), Softmax(x, axis), ReduceMean(x, axis, keep_dims)):
# the constants, in order, under the names the kernels read
_PRIMITIVE_ATTRS = {
    "MatMul": ("transpose_a", "transpose_b"), "BatchMatMul": ("transpose_a", "transpose_b"),
    "Softmax": ("axes",), "LogSoftmax": ("axes",), "ReduceSum": ("axes", "keep_dims"),
    "ReduceMean": ("axes", "keep_dims"), "ReduceMax": ("axes", "keep_dims"),
    "LayerNorm": ("begin_norm_axis", "begin_params_axis", "epsilon"), "RmsNorm": ("epsilon",),
    "BiasAdd": ("data_format",), "Transpose": ("perm",), "LeakyRelu": ("alpha",),
}
_OPERAND_TYPES = ("Add", "AddV2", "Sub", "Mul", "RealDiv", "Div", "Maximum", "Minimum", "Pow")
_DATA_FORMATS = {0: "NCHW", 1: "NHWC"}      # MindSpore's Format enum as a kernel input


def _primitive(op_type: str, args: list) -> Binding:
    if op_type in _OPERAND_TYPES:
        return Binding(op_type, [_operand(a) for a in args if a is not None])
    inputs = [a for a in args if isinstance(a, TensorArg)]
    values = [a for a in args if not isinstance(a, TensorArg)]
    attrs = dict(zip(_PRIMITIVE_ATTRS.get(op_type, ()), values))
    if isinstance(attrs.get("data_format"), int):
        attrs["data_format"] = _DATA_FORMATS.get(attrs["data_format"], "NCHW")
    return Binding(op_type, inputs, attrs)


def split_key(key: str) -> tuple[str, str]:
    """``Functional.linear`` -> (Functional, linear); ``Mint.nn.functional.softmax`` -> (Mint, softmax)."""
    prefix, _, rest = key.partition(".")
    return prefix, rest.rsplit(".", 1)[-1]


def bind_call(key: str, args: list, kwargs: dict, n_out: int, ge_types: Callable[[str], bool]) -> Binding:
    """The kernel binding of one API call; :class:`NoKernel` when there is none.
    ``ge_types(name)`` says whether the kernel table has a GE op type of that name (for
    MindSpore ``Primitive.X``)."""
    prefix, name = split_key(key)
    if prefix in ("Primitive", "Kernel") and ge_types(name):
        return _primitive(name, args)
    binder = API.get(name) or API.get(name.lower())
    if binder is None:
        raise NoKernel(f"no reference kernel for {key}")
    try:
        return binder(args, kwargs, n_out)
    except (TypeError, ValueError) as exc:
        if isinstance(exc, NoKernel):
            raise NoKernel(f"{key}: {exc}") from None
        raise NoKernel(f"{key}: arguments not understood ({exc})") from None
