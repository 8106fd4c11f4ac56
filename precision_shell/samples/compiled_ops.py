"""The parts of the sample's NPU graph that the compiler knobs change (``compiler_knobs``).

Each block builds its ops the way GE would under the builder's knobs: with its fusion pass on,
the fused op (the default sample, byte for byte); with it off, the original framework ops one by
one. An op whose original ops are kept in fp32 takes its inputs through GE-inserted Casts to
fp32, computes in fp32 and dumps fp32; its consumers cast back to the dtype they run in.
"""

from __future__ import annotations

import numpy as np

from . import kernels as K

PASS_CONV_BIAS = "AABiasaddConvFusion"
PASS_UB_COMMON = "TbeCommonRules0FusionPass"
PASS_MATMUL_BIAS = "MatMulBiasAddFusionPass"
PASS_LAYERNORM = "LayerNormFusionPass"
LN_EPS = 1e-3
LAYERNORM_PARTS = ["ln1/moments/mean", "ln1/moments/SquaredDifference", "ln1/sub",
                   "ln1/moments/variance", "ln1/add", "ln1/Rsqrt", "ln1/mul", "ln1/mul_1",
                   "ln1/add_1"]

CONV_PARTS = ["conv1/Conv2D", "conv1/BiasAdd", "conv1/Relu"]
CONV_ATTRS = {"strides": [1, 1, 1, 1], "pads": [1, 1, 1, 1], "dilations": [1, 1, 1, 1],
              "groups": 1, "data_format": "NCHW"}


def cast_to(b, source: str, dtype, **kw) -> str:
    """``source`` in ``dtype``: itself, or a GE-inserted Cast (inf where fp32 exceeds fp16)."""
    if b.input(source).tensor.npu.dtype == np.dtype(dtype):
        return source
    with np.errstate(over="ignore"):
        return b.trans("Cast", source, dtype=dtype, **kw)


def val(b, source: str) -> np.ndarray:
    return b.input(source).tensor.npu


def conv_block(b, data: str) -> str:
    """Conv2D+BiasAdd+Relu: fused by AABiasaddConvFusion (bias) and TbeCommonRules0FusionPass
    (the UB fusion that takes the elementwise tail too); returns the block's output source."""
    k = b.knobs
    bias_fused, ub = k.fused(PASS_CONV_BIAS), k.fused(PASS_UB_COMMON)
    if bias_fused and ub:
        groups = [(CONV_PARTS, [PASS_CONV_BIAS, PASS_UB_COMMON])]
    elif bias_fused:
        groups = [(CONV_PARTS[:2], [PASS_CONV_BIAS]), (CONV_PARTS[2:], [])]
    elif ub:
        groups = [(CONV_PARTS, [PASS_UB_COMMON])]
    else:
        groups = [([p], []) for p in CONV_PARTS]
    parts, passes = groups[0]
    dt = k.dtype_for(parts, K.F16)
    out = K.rounding(dt)
    x = b.trans("TransData", cast_to(b, data, dt), fmt="NC1HWC0")
    inputs = [x, cast_to(b, "conv1/kernel:0", dt)]
    if "conv1/BiasAdd" in parts:
        inputs.append(cast_to(b, "conv1/bias:0", dt))
    if len(parts) == 3:
        value = K.npu_conv_bias_relu(*(val(b, s) for s in inputs), 1, out=out)
    else:
        acc = K.conv2d_nchw(val(b, inputs[0]), val(b, inputs[1]), 1).astype(K.F32)
        if len(inputs) == 3:
            acc = acc + val(b, inputs[2]).astype(K.F32)[None, :, None, None]
        value = out(acc)
    b.npu("conv1/Conv2D", "Conv2D", inputs, [b.tensor(value, "NC1HWC0", "NCHW", f"{parts[-1]}:0")],
          original_ops=list(parts), passes=list(passes), attrs=dict(CONV_ATTRS))
    src = "conv1/Conv2D:0"
    for parts, _ in groups[1:]:
        (name,) = parts
        dt = k.dtype_for(parts, K.F16)
        if name == "conv1/BiasAdd":
            inputs = [cast_to(b, src, dt), cast_to(b, "conv1/bias:0", dt)]
            value = K.npu_binary("add", val(b, inputs[0]), val(b, inputs[1])[:, None, None])
            b.npu(name, "BiasAdd", inputs, [b.tensor(value, "NC1HWC0", "NCHW", f"{name}:0")],
                  original_ops=[name], attrs={"data_format": "NCHW"})
        else:
            inputs = [cast_to(b, src, dt)]
            value = np.maximum(val(b, inputs[0]), np.zeros((), dt))
            b.npu(name, "Relu", inputs, [b.tensor(value, "NC1HWC0", "NCHW", f"{name}:0")], original_ops=[name])
        src = f"{name}:0"
    return src


def matmul_block(b, x: str, layer: str) -> str:
    """``layer``/MatMul + ``layer``/BiasAdd on the cube (FRACTAL_NZ): one MatMulV2 with a bias
    input when MatMulBiasAddFusionPass is on, else MatMulV2 then BiasAdd."""
    k = b.knobs
    mm, bias = f"{layer}/MatMul", f"{layer}/BiasAdd"
    attrs = {"transpose_x1": False, "transpose_x2": False}
    if k.fused(PASS_MATMUL_BIAS):
        dt = k.dtype_for([mm, bias], K.F16)
        nz = b.trans("TransData", cast_to(b, x, dt), fmt="FRACTAL_NZ")
        inputs = [nz, cast_to(b, f"{layer}/kernel:0", dt), cast_to(b, f"{layer}/bias:0", dt)]
        value = K.npu_matmul_bias(*(val(b, s) for s in inputs), out=K.rounding(dt))
        b.npu(mm, "MatMulV2", inputs, [b.tensor(value, "FRACTAL_NZ", "ND", f"{bias}:0")],
              original_ops=[mm, bias], passes=[PASS_MATMUL_BIAS], attrs=attrs)
        return f"{mm}:0"
    dt = k.dtype_for([mm], K.F16)
    nz = b.trans("TransData", cast_to(b, x, dt), fmt="FRACTAL_NZ")
    inputs = [nz, cast_to(b, f"{layer}/kernel:0", dt)]
    value = K.rounding(dt)(K.matmul(*(val(b, s) for s in inputs)).astype(K.F32))
    b.npu(mm, "MatMulV2", inputs, [b.tensor(value, "FRACTAL_NZ", "ND", f"{mm}:0")], original_ops=[mm], attrs=attrs)
    dt = k.dtype_for([bias], K.F16)
    inputs = [cast_to(b, f"{mm}:0", dt), cast_to(b, f"{layer}/bias:0", dt)]
    value = K.npu_binary("add", *(val(b, s) for s in inputs))
    b.npu(bias, "BiasAdd", inputs, [b.tensor(value, "FRACTAL_NZ", "ND", f"{bias}:0")], original_ops=[bias])
    return f"{bias}:0"


def layernorm_block(b, x: str) -> str:
    """The TF LayerNorm subgraph: LayerNormFusionPass makes it one (lossy) LayerNorm kernel;
    switched off, its nine ops run one by one (each rounding once: no cancellation)."""
    k = b.knobs
    if k.fused(PASS_LAYERNORM):
        dt = k.dtype_for(LAYERNORM_PARTS, K.F16)
        inputs = [cast_to(b, s, dt) for s in (x, "ln1/gamma:0", "ln1/beta:0")]
        y, mean, var = K.npu_layernorm_fp16_lossy(*(val(b, s) for s in inputs), LN_EPS, dtype=dt.type)
        b.npu("ln1/add_1/LayerNorm", "LayerNorm", inputs,
              [b.tensor(y, "ND", "ND", "ln1/add_1:0"), b.tensor(mean, "ND", "ND", "ln1/moments/mean:0"),
               b.tensor(var, "ND", "ND", "ln1/moments/variance:0")],
              original_ops=list(LAYERNORM_PARTS), passes=[PASS_LAYERNORM],
              attrs={"begin_norm_axis": 1, "begin_params_axis": -1, "epsilon": LN_EPS})
        return "ln1/add_1/LayerNorm:0"
    b.const("ln1/add/y", b.golden("ln1/add/y:0").astype(K.F16), "ND")

    def op(name: str, type_: str, sources: list[str], compute, **attrs) -> None:
        dt = k.dtype_for([name], K.F16)
        inputs = [cast_to(b, s, dt) for s in sources]
        with np.errstate(all="ignore"):
            value = np.asarray(compute(*(val(b, s) for s in inputs)), dtype=dt)
        b.npu(name, type_, inputs, [b.tensor(value, "ND", "ND", f"{name}:0")], original_ops=[name], attrs=attrs)

    mean_of = lambda a: K.rounding(a.dtype)(K._d(a).mean(axis=-1, keepdims=True))  # noqa: E731
    op("ln1/moments/mean", "ReduceMeanD", [x], mean_of, axes=[-1], keep_dims=True)
    op("ln1/moments/SquaredDifference", "SquaredDifference", [x, "ln1/moments/mean:0"], lambda a, m: (a - m) * (a - m))
    op("ln1/sub", "Sub", [x, "ln1/moments/mean:0"], lambda a, m: a - m)
    op("ln1/moments/variance", "ReduceMeanD", ["ln1/moments/SquaredDifference:0"], mean_of, axes=[-1], keep_dims=True)
    op("ln1/add", "Add", ["ln1/moments/variance:0", "ln1/add/y:0"], lambda a, e: a + e)
    op("ln1/Rsqrt", "Rsqrt", ["ln1/add:0"], lambda a: K.rounding(a.dtype)(1.0 / np.sqrt(K._d(a))))
    op("ln1/mul", "Mul", ["ln1/Rsqrt:0", "ln1/gamma:0"], lambda a, g: a * g)
    op("ln1/mul_1", "Mul", ["ln1/mul:0", "ln1/sub:0"], lambda a, s: a * s)
    op("ln1/add_1", "Add", ["ln1/mul_1:0", "ln1/beta:0"], lambda a, be: a + be)
    return "ln1/add_1:0"


def elementwise(b, name: str, type_: str, sources: list[str], default, compute, *, attrs=None, **kw) -> str:
    """A single-framework-op NPU op (ND) in ``default`` dtype, or fp32 when kept; ``compute``
    gets the input arrays and the rounding function of the op's dtype."""
    dt = b.knobs.dtype_for([name], default)
    inputs = [cast_to(b, s, dt, **kw) for s in sources]
    value = compute(*(val(b, s) for s in inputs), K.rounding(dt))
    b.npu(name, type_, inputs, [b.tensor(value, "ND", "ND", f"{name}:0")], original_ops=[name],
          attrs=attrs or {}, **kw)
    return f"{name}:0"
