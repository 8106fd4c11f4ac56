"""The registry: GE op type -> reference kernel.

A kernel is ``fn(ar, xs, attrs, out_shapes) -> [float64 array per output]``: ``ar`` is the
:class:`~.profiles.Arith` of the profile being replayed, ``xs`` the inputs (float64, already
through ``ar.inp``), ``attrs`` the op's attributes as plain values, ``out_shapes`` the logical
shapes of the NPU outputs. Kernels import numpy only, so the reproducer script can carry the
one module its op needs.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Callable

from . import activation, cast_layout, conv, elementwise, framework_ops, math as math_ops, matmul, norm, reduce, softmax


@dataclass(frozen=True)
class Kernel:
    module: object        # the family module (its source goes into the reproducer)
    function: str         # the function's name in it
    op_type: str | None   # passed as op_type= when the function serves several types
    elementwise: bool     # each output element depends on the same element of each input only

    def __call__(self, ar, xs, attrs, out_shapes):
        fn: Callable = getattr(self.module, self.function)
        if self.op_type is not None:
            fn = functools.partial(fn, op_type=self.op_type)
        return fn(ar, xs, attrs, out_shapes)


def _table() -> dict[str, Kernel]:
    table: dict[str, Kernel] = {}

    def add(types, module, function, pass_type: bool, elementwise: bool = False):
        for t in types:
            table[t] = Kernel(module, function, t if pass_type else None, elementwise)

    add(("MatMul", "MatMulV2", "BatchMatMul", "BatchMatMulV2"), matmul, "matmul", False)
    add(("Conv2D",), conv, "conv2d", False)
    add(("Add", "AddV2", "Sub", "Mul", "RealDiv", "Div", "Maximum", "Minimum"), elementwise, "binary", True, True)
    add(("BiasAdd",), elementwise, "bias_add", False)
    add(("Relu", "LeakyRelu", "Gelu", "FastGelu", "Sigmoid", "Tanh", "Softplus", "Swish", "SiLU"),
        activation, "activation", True, True)
    add(("Exp", "Log", "Sqrt", "Rsqrt", "Square", "Pow"), math_ops, "unary_math", True, True)
    add(("Softmax", "SoftmaxV2", "LogSoftmax", "LogSoftmaxV2"), softmax, "softmax", True)
    add(("LayerNorm",), norm, "layer_norm", False)
    add(("RmsNorm", "AddRmsNorm"), norm, "rms_norm", True)
    add(("ReduceSum", "ReduceSumD", "ReduceMean", "ReduceMeanD", "ReduceMax", "ReduceMaxD"),
        reduce, "reduce", True)
    add(("Cast",), cast_layout, "cast", False, True)
    add(("TransData", "Reshape", "Squeeze", "ExpandDims", "Flatten"), cast_layout, "reshape_like", True)
    add(("Transpose", "TransposeD"), cast_layout, "transpose", False)
    add(("ConcatV2", "ConcatV2D", "ConcatD"), cast_layout, "concat", False)
    add(("Split", "SplitD"), cast_layout, "split", False)
    # framework APIs without one GE op of their own (api_calls maps API names onto these keys)
    add(("Embedding",), framework_ops, "embedding", False)
    add(("GeluTanh",), framework_ops, "gelu_tanh", False, True)
    add(("ScaledDotProductAttention",), framework_ops, "attention", False)
    add(("CrossEntropy",), framework_ops, "cross_entropy", False)
    add(("ReduceVar",), framework_ops, "variance", False)
    add(("SplitSizes",), framework_ops, "split_sizes", False)
    return table


KERNELS: dict[str, Kernel] = _table()


def kernel_for(op_type: str) -> Kernel | None:
    return KERNELS.get(op_type)
