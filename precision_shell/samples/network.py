"""The sample network, run twice: fp32 golden (the "GPU" run) and the NPU's fp16 way.

Framework (TF) graph, NCHW::

    input/Data -> conv1/{Conv2D,BiasAdd,Relu} -> pool1/MaxPool -> flatten/Reshape (16, 64)
      -> fc1/{MatMul,BiasAdd} -> ln1/... (TF LayerNorm, 9 ops) -> act1/LeakyRelu
      -> fc2/{MatMul,BiasAdd} -> probs/Softmax
    flatten/Reshape -> aux/Sum -> loss_scale/Mul -> loss_scale/RealDiv -> aux/Mean, aux/Sub

NPU (GE built graph): Conv2D+BiasAdd+Relu fused (AABiasaddConvFusion + TbeCommonRules0FusionPass),
MatMul+BiasAdd fused twice (MatMulBiasAddFusionPass), the LayerNorm subgraph fused into one
``LayerNorm`` (LayerNormFusionPass), fp16 everywhere except a bf16 LeakyRelu and an fp32 Softmax,
with GE-inserted Cast/TransData ops between layouts.

Planted findings:
* root cause: the LayerNorm kernel computes var = E[x^2] - E[x]^2 in fp16; fc1 adds a bias of
  ~24 so every row has a large mean and a small spread -> cancellation; its inputs still match
  golden (cosine ~1) while its output does not; LeakyRelu/fc2/Softmax downstream inherit it.
* overflow: the side branch multiplies row sums (~70..180) by a loss scale of 512 in fp16, so
  the rows above 127.9 become +inf in numpy's own fp16 multiply; RealDiv/Mean/Sub propagate
  inf and nan. The branch runs last and on its own stream so the main chain stays clean.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from . import kernels as K
from .records import FrameworkOp, NpuInput, NpuOp, NpuTensor

BATCH, IN_C, HW, CONV_C, FC1_N, FC2_N = 2, 3, 16, 8, 24, 10
LN_EPS = 1e-3
LEAKY_ALPHA = 0.2
LOSS_SCALE = 512.0
FC1_BIAS_MEAN = 24.0       # large row mean: what makes E[x^2] - E[x]^2 cancel in fp16
OVERFLOW_STATUS = 0x20     # AI Core status bit: floating-point computation overflow

PASS_CONV_BIAS = "AABiasaddConvFusion"
PASS_UB_COMMON = "TbeCommonRules0FusionPass"
PASS_MATMUL_BIAS = "MatMulBiasAddFusionPass"
PASS_LAYERNORM = "LayerNormFusionPass"
GRAPH_OUTPUTS = ("probs/Softmax:0", "aux/Sub:0")
LAYERNORM_PARTS = ["ln1/moments/mean", "ln1/moments/SquaredDifference", "ln1/sub",
                   "ln1/moments/variance", "ln1/add", "ln1/Rsqrt", "ln1/mul", "ln1/mul_1",
                   "ln1/add_1"]


@dataclass
class NetworkRun:
    """Both runs of the network: the framework goldens and the NPU ops with their arrays."""
    seed: int
    framework: dict[str, FrameworkOp]   # in framework execution order
    ops: list[NpuOp]                    # GE graph order: Data/Const, executed ops, NetOutput
    outputs: list[str]                  # the graph's outputs ("op:index")
    lossy_op: str | None                # planted findings; None when a variant has none
    overflow_op: str | None
    overflow_status: int = OVERFLOW_STATUS
    replay_truth: dict | None = None    # the replay sample: op -> {verdict, profile}

    def op(self, name: str) -> NpuOp:
        for op in self.ops:
            if op.name == name:
                return op
        raise KeyError(name)

    @property
    def executed(self) -> list[NpuOp]:
        return [op for op in self.ops if op.executed]

    def golden(self, ref: str) -> np.ndarray:
        name, index = ref.rsplit(":", 1)
        return self.framework[name].outputs[int(index)]


class NetBuilder:
    """Records framework ops and NPU ops while the network is computed."""

    def __init__(self) -> None:
        self.framework: dict[str, FrameworkOp] = {}
        self.ops: list[NpuOp] = []
        self.by_name: dict[str, NpuOp] = {}
        self.trans_count = 0

    # -- framework side --
    def fw(self, name: str, type_: str, inputs: list[str], value: np.ndarray) -> np.ndarray:
        self.framework[name] = FrameworkOp(name, type_, inputs, [value])
        return value

    def golden(self, ref: str | None) -> np.ndarray | None:
        if ref is None:
            return None
        name, index = ref.rsplit(":", 1)
        return self.framework[name].outputs[int(index)]

    # -- NPU side --
    def tensor(self, value: np.ndarray, fmt: str, origin_format: str, golden_ref: str | None) -> NpuTensor:
        return NpuTensor(value, fmt, origin_format, golden_ref, self.golden(golden_ref))

    def npu(self, name: str, type_: str, inputs: list[str], outputs: list[NpuTensor], **kw) -> NpuOp:
        op = NpuOp(name, type_, [self.input(src) for src in inputs], outputs, **kw)
        self.ops.append(op)
        self.by_name[name] = op
        return op

    def input(self, source: str) -> NpuInput:
        name, index = source.rsplit(":", 1)
        producer = self.by_name[name]
        # an input meets the golden its producer's output is compared with: through a
        # Cast/TransData, that of the op behind it (formats.md A.8.5)
        ref, golden = producer.compared_golden(int(index))
        return NpuInput(source, producer.outputs[int(index)], ref, golden)

    def data(self, name: str, value: np.ndarray, fmt: str, index: int = 0) -> NpuOp:
        out = self.tensor(value, fmt, fmt, f"{name}:0")
        return self.npu(name, "Data", [], [out], executed=False, engine="DNN_VM_GE_LOCAL_OP_STORE",
                        attrs={"index": index})

    def const(self, name: str, value: np.ndarray, fmt: str, origin_format: str = "ND") -> NpuOp:
        out = self.tensor(value, fmt, origin_format, f"{name}:0")
        return self.npu(name, "Const", [], [out], executed=False, engine="DNN_VM_GE_LOCAL_OP_STORE")

    def trans(self, type_: str, source: str, *, dtype=None, fmt: str | None = None,
              amp_name: str | None = None, **kw) -> str:
        """A GE-inserted Cast (dtype change) or TransData (layout change); returns "name:0".

        ``amp_name``: a Cast the framework's mixed-precision pass inserted, not GE: it keeps that
        name as its original op name and output origin, yet has no golden (the fp32 run has no
        casts), and the compare maps it through to its producer like any Cast (A.8.5)."""
        src = self.input(source).tensor
        value = src.npu.astype(dtype) if dtype is not None else src.npu
        if amp_name is None:
            name, original, origin = f"trans_{type_}_{self.trans_count}", [], None
            self.trans_count += 1
        else:
            name, original, origin = amp_name, [amp_name], f"{amp_name}:0"
        if type_ == "Cast":
            attrs = {"dst_type": int(NpuTensor(value, "ND", "ND").dtype_code)}
        else:
            attrs = {"src_format": src.format, "dst_format": fmt}
        out = NpuTensor(value, fmt or src.format, src.origin_format, origin)
        self.npu(name, type_, [source], [out], original_ops=original, attrs=attrs, **kw)
        return f"{name}:0"

    def finish(self) -> list[NpuOp]:
        """GE graph order (Data/Const, then executed ops, then NetOutput) with ids and orders."""
        static = [op for op in self.ops if not op.executed and op.type != "NetOutput"]
        executed = [op for op in self.ops if op.executed]
        tail = [op for op in self.ops if op.type == "NetOutput"]
        for order, op in enumerate(executed):
            op.order = order
        ordered = static + executed + tail
        for graph_id, op in enumerate(ordered):
            op.graph_id = graph_id
        return ordered


def run_network(seed: int = 0, *, net_output: bool = True, loss_scale: float = LOSS_SCALE) -> NetworkRun:
    """Compute the sample network (golden and NPU) for ``seed``; deterministic. A ``loss_scale``
    below 512 keeps the side branch finite (no planted overflow: ``overflow_op`` is None)."""
    rng = np.random.default_rng(seed)
    n = lambda *shape: rng.standard_normal(shape)  # noqa: E731
    x = n(BATCH, IN_C, HW, HW).astype(K.F32)
    w1, b1 = (0.35 * n(CONV_C, IN_C, 3, 3)).astype(K.F32), (0.1 * n(CONV_C)).astype(K.F32)
    rows, feats = BATCH * CONV_C, (HW // 2) ** 2
    wf1 = (0.06 * n(feats, FC1_N)).astype(K.F32)
    bf1 = (FC1_BIAS_MEAN + 0.2 * n(FC1_N)).astype(K.F32)
    gamma, beta = (1 + 0.1 * n(FC1_N)).astype(K.F32), (0.05 * n(FC1_N)).astype(K.F32)
    wf2, bf2 = (0.4 * n(FC1_N, FC2_N)).astype(K.F32), (0.1 * n(FC2_N)).astype(K.F32)

    b = NetBuilder()
    _golden(b, x, w1, b1, wf1, bf1, gamma, beta, wf2, bf2, rows, feats, loss_scale)
    _npu(b, rows, feats, net_output)
    overflowed = bool(np.isinf(b.by_name["loss_scale/Mul"].outputs[0].npu).any())
    if not overflowed and loss_scale == LOSS_SCALE:
        raise RuntimeError(f"seed {seed}: the loss-scale Mul did not overflow fp16; pick another seed")
    return NetworkRun(seed, b.framework, b.finish(), list(GRAPH_OUTPUTS), "ln1/add_1/LayerNorm",
                      "loss_scale/Mul" if overflowed else None)


def _golden(b: NetBuilder, x, w1, b1, wf1, bf1, gamma, beta, wf2, bf2, rows, feats, loss_scale) -> None:
    """The framework graph in fp32: one golden array per framework op output."""
    b.fw("input/Data", "Placeholder", [], x)
    for name, value in (("conv1/kernel", w1), ("conv1/bias", b1), ("fc1/kernel", wf1),
                        ("fc1/bias", bf1), ("ln1/gamma", gamma), ("ln1/beta", beta),
                        ("fc2/kernel", wf2), ("fc2/bias", bf2)):
        b.fw(name, "VariableV2", [], value)
    conv = b.fw("conv1/Conv2D", "Conv2D", ["input/Data:0", "conv1/kernel:0"], K.f32(K.conv2d_nchw(x, w1, 1)))
    bias = b.fw("conv1/BiasAdd", "BiasAdd", ["conv1/Conv2D:0", "conv1/bias:0"], K.g_add(conv, b1[:, None, None]))
    relu = b.fw("conv1/Relu", "Relu", ["conv1/BiasAdd:0"], K.g_relu(bias))
    pool = b.fw("pool1/MaxPool", "MaxPool", ["conv1/Relu:0"], K.maxpool2x2(relu))
    b.fw("flatten/Reshape/shape", "Const", [], np.array([rows, feats], np.int32))
    flat = b.fw("flatten/Reshape", "Reshape", ["pool1/MaxPool:0", "flatten/Reshape/shape:0"], pool.reshape(rows, feats))
    mm = b.fw("fc1/MatMul", "MatMul", ["flatten/Reshape:0", "fc1/kernel:0"], K.f32(K.matmul(flat, wf1)))
    h = b.fw("fc1/BiasAdd", "BiasAdd", ["fc1/MatMul:0", "fc1/bias:0"], K.g_add(mm, bf1))
    mean = b.fw("ln1/moments/mean", "Mean", ["fc1/BiasAdd:0"], K.g_mean(h, -1))
    sq = b.fw("ln1/moments/SquaredDifference", "SquaredDifference", ["fc1/BiasAdd:0", "ln1/moments/mean:0"],
              K.g_squared_difference(h, mean))
    sub = b.fw("ln1/sub", "Sub", ["fc1/BiasAdd:0", "ln1/moments/mean:0"], K.g_sub(h, mean))
    var = b.fw("ln1/moments/variance", "Mean", ["ln1/moments/SquaredDifference:0"], K.g_mean(sq, -1))
    eps = b.fw("ln1/add/y", "Const", [], np.array(LN_EPS, K.F32))
    add = b.fw("ln1/add", "Add", ["ln1/moments/variance:0", "ln1/add/y:0"], K.g_add(var, eps))
    rs = b.fw("ln1/Rsqrt", "Rsqrt", ["ln1/add:0"], K.g_rsqrt(add))
    mul = b.fw("ln1/mul", "Mul", ["ln1/Rsqrt:0", "ln1/gamma:0"], K.g_mul(rs, gamma))
    mul1 = b.fw("ln1/mul_1", "Mul", ["ln1/mul:0", "ln1/sub:0"], K.g_mul(mul, sub))
    ln = b.fw("ln1/add_1", "Add", ["ln1/mul_1:0", "ln1/beta:0"], K.g_add(mul1, beta))
    act = b.fw("act1/LeakyRelu", "LeakyRelu", ["ln1/add_1:0"], K.g_leaky_relu(ln, LEAKY_ALPHA))
    mm2 = b.fw("fc2/MatMul", "MatMul", ["act1/LeakyRelu:0", "fc2/kernel:0"], K.f32(K.matmul(act, wf2)))
    logits = b.fw("fc2/BiasAdd", "BiasAdd", ["fc2/MatMul:0", "fc2/bias:0"], K.g_add(mm2, bf2))
    b.fw("probs/Softmax", "Softmax", ["fc2/BiasAdd:0"], K.f32(K.softmax(logits)))
    # side branch: a loss-scaled auxiliary term
    b.fw("aux/Sum/reduction_indices", "Const", [], np.array([1], np.int32))
    s = b.fw("aux/Sum", "Sum", ["flatten/Reshape:0", "aux/Sum/reduction_indices:0"], K.g_sum(flat, 1))
    scale = b.fw("loss_scale/scale", "Const", [], np.array([loss_scale], K.F32))
    scaled = b.fw("loss_scale/Mul", "Mul", ["aux/Sum:0", "loss_scale/scale:0"], K.g_mul(s, scale))
    back = b.fw("loss_scale/RealDiv", "RealDiv", ["loss_scale/Mul:0", "loss_scale/scale:0"], K.g_div(scaled, scale))
    b.fw("aux/Mean/reduction_indices", "Const", [], np.array([0], np.int32))
    m = b.fw("aux/Mean", "Mean", ["loss_scale/RealDiv:0", "aux/Mean/reduction_indices:0"], K.g_mean(back, 0))
    b.fw("aux/Sub", "Sub", ["loss_scale/RealDiv:0", "aux/Mean:0"], K.g_sub(back, m))


def _npu(b: NetBuilder, rows: int, feats: int, net_output: bool) -> None:
    """The built GE graph, computed with the NPU's kernels on fp16 (bf16/fp32) data."""
    g = b.golden
    f16 = lambda ref: g(ref).astype(K.F16)  # noqa: E731  weights as GE stores them
    b.data("input/Data", g("input/Data:0"), "NCHW")
    b.const("conv1/kernel", f16("conv1/kernel:0"), "FRACTAL_Z", "NCHW")
    b.const("conv1/bias", f16("conv1/bias:0"), "ND")
    b.const("flatten/Reshape/shape", g("flatten/Reshape/shape:0"), "ND")
    b.const("fc1/kernel", f16("fc1/kernel:0"), "FRACTAL_NZ")
    b.const("fc1/bias", f16("fc1/bias:0"), "ND")
    b.const("ln1/gamma", f16("ln1/gamma:0"), "ND")
    b.const("ln1/beta", f16("ln1/beta:0"), "ND")
    b.const("fc2/kernel", f16("fc2/kernel:0"), "FRACTAL_NZ")
    b.const("fc2/bias", f16("fc2/bias:0"), "ND")
    b.const("loss_scale/scale", f16("loss_scale/scale:0"), "ND")
    val = lambda ref: b.input(ref).tensor.npu  # noqa: E731

    x = b.trans("TransData", b.trans("Cast", "input/Data:0", dtype=K.F16), fmt="NC1HWC0")
    conv = K.npu_conv_bias_relu(val(x), val("conv1/kernel:0"), val("conv1/bias:0"), 1)
    b.npu("conv1/Conv2D", "Conv2D", [x, "conv1/kernel:0", "conv1/bias:0"],
          [b.tensor(conv, "NC1HWC0", "NCHW", "conv1/Relu:0")],
          original_ops=["conv1/Conv2D", "conv1/BiasAdd", "conv1/Relu"],
          passes=[PASS_CONV_BIAS, PASS_UB_COMMON],
          attrs={"strides": [1, 1, 1, 1], "pads": [1, 1, 1, 1], "dilations": [1, 1, 1, 1],
                 "groups": 1, "data_format": "NCHW"})
    pool = K.maxpool2x2(conv)
    b.npu("pool1/MaxPool", "MaxPool", ["conv1/Conv2D:0"], [b.tensor(pool, "NC1HWC0", "NCHW", "pool1/MaxPool:0")],
          original_ops=["pool1/MaxPool"],
          attrs={"ksize": [1, 1, 2, 2], "strides": [1, 1, 2, 2], "padding": "VALID", "data_format": "NCHW"})
    nchw = b.trans("TransData", "pool1/MaxPool:0", fmt="NCHW")
    b.npu("flatten/Reshape", "Reshape", [nchw, "flatten/Reshape/shape:0"],
          [b.tensor(val(nchw).reshape(rows, feats), "ND", "ND", "flatten/Reshape:0")],
          original_ops=["flatten/Reshape"])
    nz = b.trans("TransData", "flatten/Reshape:0", fmt="FRACTAL_NZ")
    h = K.npu_matmul_bias(val(nz), val("fc1/kernel:0"), val("fc1/bias:0"))
    b.npu("fc1/MatMul", "MatMulV2", [nz, "fc1/kernel:0", "fc1/bias:0"],
          [b.tensor(h, "FRACTAL_NZ", "ND", "fc1/BiasAdd:0")],
          original_ops=["fc1/MatMul", "fc1/BiasAdd"], passes=[PASS_MATMUL_BIAS],
          attrs={"transpose_x1": False, "transpose_x2": False})
    hnd = b.trans("TransData", "fc1/MatMul:0", fmt="ND")
    y, mean, var = K.npu_layernorm_fp16_lossy(val(hnd), val("ln1/gamma:0"), val("ln1/beta:0"), LN_EPS)
    b.npu("ln1/add_1/LayerNorm", "LayerNorm", [hnd, "ln1/gamma:0", "ln1/beta:0"],
          [b.tensor(y, "ND", "ND", "ln1/add_1:0"), b.tensor(mean, "ND", "ND", "ln1/moments/mean:0"),
           b.tensor(var, "ND", "ND", "ln1/moments/variance:0")],
          original_ops=list(LAYERNORM_PARTS), passes=[PASS_LAYERNORM],
          attrs={"begin_norm_axis": 1, "begin_params_axis": -1, "epsilon": LN_EPS})
    xb = b.trans("Cast", "ln1/add_1/LayerNorm:0", dtype=K.BF16)
    act = K.npu_leaky_relu_bf16(val(xb), LEAKY_ALPHA)
    b.npu("act1/LeakyRelu", "LeakyRelu", [xb], [b.tensor(act, "ND", "ND", "act1/LeakyRelu:0")],
          original_ops=["act1/LeakyRelu"], attrs={"negative_slope": LEAKY_ALPHA})
    nz2 = b.trans("TransData", b.trans("Cast", "act1/LeakyRelu:0", dtype=K.F16), fmt="FRACTAL_NZ")
    logits = K.npu_matmul_bias(val(nz2), val("fc2/kernel:0"), val("fc2/bias:0"))
    b.npu("fc2/MatMul", "MatMulV2", [nz2, "fc2/kernel:0", "fc2/bias:0"],
          [b.tensor(logits, "FRACTAL_NZ", "ND", "fc2/BiasAdd:0")],
          original_ops=["fc2/MatMul", "fc2/BiasAdd"], passes=[PASS_MATMUL_BIAS],
          attrs={"transpose_x1": False, "transpose_x2": False})
    l32 = b.trans("Cast", b.trans("TransData", "fc2/MatMul:0", fmt="ND"), dtype=K.F32)
    b.npu("probs/Softmax", "SoftmaxV2", [l32], [b.tensor(K.npu_softmax_fp32(val(l32)), "ND", "ND", "probs/Softmax:0")],
          original_ops=["probs/Softmax"], attrs={"axes": [-1]})

    # side branch, last on its own stream: the overflow must not hide the LayerNorm root cause
    aux = {"stream_id": 1}
    s = K.npu_reduce_sum(val("flatten/Reshape:0"), 1)
    b.npu("aux/Sum", "ReduceSumD", ["flatten/Reshape:0"], [b.tensor(s, "ND", "ND", "aux/Sum:0")],
          original_ops=["aux/Sum"], attrs={"axes": [1], "keep_dims": False}, **aux)
    scaled = K.npu_binary("mul", s, val("loss_scale/scale:0"))
    b.npu("loss_scale/Mul", "Mul", ["aux/Sum:0", "loss_scale/scale:0"],
          [b.tensor(scaled, "ND", "ND", "loss_scale/Mul:0")], original_ops=["loss_scale/Mul"], **aux)
    back = K.npu_binary("div", scaled, val("loss_scale/scale:0"))
    b.npu("loss_scale/RealDiv", "RealDiv", ["loss_scale/Mul:0", "loss_scale/scale:0"],
          [b.tensor(back, "ND", "ND", "loss_scale/RealDiv:0")], original_ops=["loss_scale/RealDiv"], **aux)
    m = K.npu_reduce_mean(back, 0, True)
    b.npu("aux/Mean", "ReduceMeanD", ["loss_scale/RealDiv:0"], [b.tensor(m, "ND", "ND", "aux/Mean:0")],
          original_ops=["aux/Mean"], attrs={"axes": [0], "keep_dims": True}, **aux)
    b.npu("aux/Sub", "Sub", ["loss_scale/RealDiv:0", "aux/Mean:0"],
          [b.tensor(K.npu_binary("sub", back, m), "ND", "ND", "aux/Sub:0")], original_ops=["aux/Sub"], **aux)
    if net_output:
        b.npu("Node_Output", "NetOutput", list(GRAPH_OUTPUTS), [], executed=False,
              engine="DNN_VM_GE_LOCAL_OP_STORE")
