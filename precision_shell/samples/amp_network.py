"""The ``bf16-amp`` sample: a small network trained with bf16 mixed precision (AMP) on the NPU.

What it is for: the ops whose outputs the vendor engine maps *through* to a producer's golden
(formats.md A.8.5): GE-inserted TransData (no original op names) and AMP casts, both the
framework's named ``...-CastToBf16-AutoMixedPrecision`` casts and GE's unnamed ones, in both
directions. Framework (TF) graph, fp32, NCHW; the golden run is this graph in fp32::

    input/Data -> conv1/{Conv2D,BiasAdd,Relu} -> flatten/Reshape (16, 64) -> scale/Mul
      -> fc1/{MatMul,BiasAdd} -> probs/Softmax -> out/Mul

NPU (GE built graph), bf16 except the fp32 Softmax::

    input/Data (fp32 NCHW) -> trans_TransData_0 (NCHW -> NC1HWC0, at the graph input)
      -> input/Data-0-CastToBf16-AutoMixedPrecision (Cast fp32 -> bf16, named)
      -> conv1/Conv2D (Conv2D+BiasAdd+Relu fused) -> trans_TransData_1 (NC1HWC0 -> NCHW)
      -> flatten/Reshape -> scale/Mul -> trans_TransData_2 (ND -> FRACTAL_NZ: meets scale/Mul's
      golden) -> fc1/MatMul (MatMulV2+bias) -> trans_TransData_3 (FRACTAL_NZ -> ND)
      -> fc1/BiasAdd-0-CastToFp32-AutoMixedPrecision (Cast bf16 -> fp32, named)
      -> probs/Softmax (fp32) -> trans_Cast_4 (fp32 -> bf16) -> out/Mul -> trans_Cast_5
      (bf16 -> fp32, Cast of a NetOutput-bound tensor)

No finding is planted: every bf16 rounding shows as a small error (cosine > 0.999).
"""

from __future__ import annotations

import numpy as np

from . import kernels as K
from .network import NetBuilder, NetworkRun

BATCH, IN_C, HW, CONV_C, FC1_N = 2, 4, 8, 8, 24
AMP_TO_BF16 = "input/Data-0-CastToBf16-AutoMixedPrecision"
AMP_TO_FP32 = "fc1/BiasAdd-0-CastToFp32-AutoMixedPrecision"
PASS_CONV_BIAS = "AABiasaddConvFusion"
PASS_MATMUL_BIAS = "MatMulBiasAddFusionPass"


def run_bf16_amp(seed: int = 0, *, net_output: bool = True) -> NetworkRun:
    """Compute the bf16 AMP network (golden fp32 and NPU bf16) for ``seed``; deterministic."""
    rng = np.random.default_rng(seed)
    n = lambda *shape: rng.standard_normal(shape)  # noqa: E731
    rows, feats = BATCH * CONV_C, HW * HW
    x = n(BATCH, IN_C, HW, HW).astype(K.F32)
    w1, b1 = (0.3 * n(CONV_C, IN_C, 3, 3)).astype(K.F32), (0.1 * n(CONV_C)).astype(K.F32)
    gamma = (1 + 0.2 * n(feats)).astype(K.F32)
    wf1, bf1 = (0.1 * n(feats, FC1_N)).astype(K.F32), (0.1 * n(FC1_N)).astype(K.F32)
    out_scale = np.array([0.75], K.F32)

    b = NetBuilder()
    _golden(b, x, w1, b1, gamma, wf1, bf1, out_scale, rows, feats)
    outputs = _npu(b, rows, feats, net_output)
    return NetworkRun(seed, b.framework, b.finish(), outputs, None, None)


def _golden(b: NetBuilder, x, w1, b1, gamma, wf1, bf1, out_scale, rows, feats) -> None:
    b.fw("input/Data", "Placeholder", [], x)
    for name, value in (("conv1/kernel", w1), ("conv1/bias", b1), ("scale/gamma", gamma),
                        ("fc1/kernel", wf1), ("fc1/bias", bf1)):
        b.fw(name, "VariableV2", [], value)
    conv = b.fw("conv1/Conv2D", "Conv2D", ["input/Data:0", "conv1/kernel:0"], K.f32(K.conv2d_nchw(x, w1, 1)))
    bias = b.fw("conv1/BiasAdd", "BiasAdd", ["conv1/Conv2D:0", "conv1/bias:0"], K.g_add(conv, b1[:, None, None]))
    relu = b.fw("conv1/Relu", "Relu", ["conv1/BiasAdd:0"], K.g_relu(bias))
    b.fw("flatten/Reshape/shape", "Const", [], np.array([rows, feats], np.int32))
    flat = b.fw("flatten/Reshape", "Reshape", ["conv1/Relu:0", "flatten/Reshape/shape:0"], relu.reshape(rows, feats))
    scaled = b.fw("scale/Mul", "Mul", ["flatten/Reshape:0", "scale/gamma:0"], K.g_mul(flat, gamma))
    mm = b.fw("fc1/MatMul", "MatMul", ["scale/Mul:0", "fc1/kernel:0"], K.f32(K.matmul(scaled, wf1)))
    h = b.fw("fc1/BiasAdd", "BiasAdd", ["fc1/MatMul:0", "fc1/bias:0"], K.g_add(mm, bf1))
    probs = b.fw("probs/Softmax", "Softmax", ["fc1/BiasAdd:0"], K.f32(K.softmax(h)))
    b.fw("out/scale", "Const", [], out_scale)
    b.fw("out/Mul", "Mul", ["probs/Softmax:0", "out/scale:0"], K.g_mul(probs, out_scale))


def _npu(b: NetBuilder, rows: int, feats: int, net_output: bool) -> list[str]:
    """The built GE graph computed the AMP way; returns the graph's outputs."""
    g = b.golden
    bf = lambda ref: g(ref).astype(K.BF16)  # noqa: E731  weights as the AMP graph stores them
    b.data("input/Data", g("input/Data:0"), "NCHW")
    b.const("conv1/kernel", bf("conv1/kernel:0"), "FRACTAL_Z", "NCHW")
    b.const("conv1/bias", bf("conv1/bias:0"), "ND")
    b.const("flatten/Reshape/shape", g("flatten/Reshape/shape:0"), "ND")
    b.const("scale/gamma", bf("scale/gamma:0"), "ND")
    b.const("fc1/kernel", bf("fc1/kernel:0"), "FRACTAL_NZ")
    b.const("fc1/bias", bf("fc1/bias:0"), "ND")
    b.const("out/scale", bf("out/scale:0"), "ND")
    val = lambda ref: b.input(ref).tensor.npu  # noqa: E731

    x5 = b.trans("Cast", b.trans("TransData", "input/Data:0", fmt="NC1HWC0"), dtype=K.BF16, amp_name=AMP_TO_BF16)
    conv = K.npu_conv_bias_relu(val(x5), val("conv1/kernel:0"), val("conv1/bias:0"), 1, out=K.bf16)
    b.npu("conv1/Conv2D", "Conv2D", [x5, "conv1/kernel:0", "conv1/bias:0"],
          [b.tensor(conv, "NC1HWC0", "NCHW", "conv1/Relu:0")],
          original_ops=["conv1/Conv2D", "conv1/BiasAdd", "conv1/Relu"], passes=[PASS_CONV_BIAS],
          attrs={"strides": [1, 1, 1, 1], "pads": [1, 1, 1, 1], "dilations": [1, 1, 1, 1],
                 "groups": 1, "data_format": "NCHW"})
    nchw = b.trans("TransData", "conv1/Conv2D:0", fmt="NCHW")
    b.npu("flatten/Reshape", "Reshape", [nchw, "flatten/Reshape/shape:0"],
          [b.tensor(val(nchw).reshape(rows, feats), "ND", "ND", "flatten/Reshape:0")],
          original_ops=["flatten/Reshape"])
    scaled = K.npu_binary("mul", val("flatten/Reshape:0"), val("scale/gamma:0"))
    b.npu("scale/Mul", "Mul", ["flatten/Reshape:0", "scale/gamma:0"],
          [b.tensor(scaled, "ND", "ND", "scale/Mul:0")], original_ops=["scale/Mul"])
    nz = b.trans("TransData", "scale/Mul:0", fmt="FRACTAL_NZ")
    h = K.npu_matmul_bias(val(nz), val("fc1/kernel:0"), val("fc1/bias:0"), out=K.bf16)
    b.npu("fc1/MatMul", "MatMulV2", [nz, "fc1/kernel:0", "fc1/bias:0"],
          [b.tensor(h, "FRACTAL_NZ", "ND", "fc1/BiasAdd:0")],
          original_ops=["fc1/MatMul", "fc1/BiasAdd"], passes=[PASS_MATMUL_BIAS],
          attrs={"transpose_x1": False, "transpose_x2": False})
    h32 = b.trans("Cast", b.trans("TransData", "fc1/MatMul:0", fmt="ND"), dtype=K.F32, amp_name=AMP_TO_FP32)
    b.npu("probs/Softmax", "SoftmaxV2", [h32], [b.tensor(K.npu_softmax_fp32(val(h32)), "ND", "ND", "probs/Softmax:0")],
          original_ops=["probs/Softmax"], attrs={"axes": [-1]})
    pb = b.trans("Cast", "probs/Softmax:0", dtype=K.BF16)
    b.npu("out/Mul", "Mul", [pb, "out/scale:0"],
          [b.tensor(K.npu_binary("mul", val(pb), val("out/scale:0")), "ND", "ND", "out/Mul:0")],
          original_ops=["out/Mul"])
    outputs = [b.trans("Cast", "out/Mul:0", dtype=K.F32)]
    if net_output:
        b.npu("Node_Output", "NetOutput", outputs, [], executed=False, engine="DNN_VM_GE_LOCAL_OP_STORE")
    return outputs
