"""The ``replay`` sample: one op for each verdict of ``replay`` (issue 13), computed for real.

Every op reads its own Data/Const inputs (fp32 golden run vs the NPU's dtypes), so each verdict
is about that op alone; the NPU arithmetic is written here independently of pshell's replay
(numpy's own float16 adds, float32 bit masks):

* ``mm/MatMul`` (fp16 in/out, fp32 accumulation, one rounding): ``inherent``.
* ``rsum/ReduceSum`` (fp16, 2048 values per row accumulated in fp16): ``emulated`` fp16-acc.
* ``chain/MatMul`` -> ``chain/Mul`` (fp32 computed with a 20-bit mantissa, every product and
  sum truncated toward zero, as the MLU370 does): ``emulated`` trunc-mantissa-20, both.
* ``ftz/Mul`` (fp32, a quarter of its inputs subnormal, flushed to zero with the products):
  ``emulated`` ftz.
* ``ln/LayerNorm`` (fp16 E[x^2] - E[x]^2 on rows with a large mean): ``kernel``.
* ``act/Relu`` after it: ``upstream`` (its input already fails).

The truth is ``NetworkRun.replay_truth``: op -> {verdict, profile}, written to the manifest.
"""

from __future__ import annotations

import numpy as np

from . import kernels as K
from .network import NetBuilder, NetworkRun
from .records import FrameworkOp

MM_SHAPE, RSUM_SHAPE, CHAIN_SHAPE, FTZ_SHAPE, LN_SHAPE = (16, 256, 32), (8, 2048), (16, 64, 24), (8, 64), (16, 24)
LN_EPS = 1e-3
CHAIN_SCALE = 0.7
TRUNC_BITS = 20
TRUTH = {
    "mm/MatMul": ("inherent", None),
    "rsum/ReduceSum": ("emulated", "fp16-acc"),
    "chain/MatMul": ("emulated", "trunc-mantissa-20"),
    "chain/Mul": ("emulated", "trunc-mantissa-20"),
    "ftz/Mul": ("emulated", "ftz"),
    "ln/LayerNorm": ("kernel", None),
    "act/Relu": ("upstream", None),
}


def _trunc20(x) -> np.ndarray:
    """float32 values truncated toward zero to TRUNC_BITS mantissa bits."""
    mask = np.uint32((0xFFFFFFFF << (23 - TRUNC_BITS)) & 0xFFFFFFFF)
    return (np.asarray(x, dtype=np.float32).view(np.uint32) & mask).view(np.float32)


def _trunc_f32(x64) -> np.ndarray:
    # float64 -> float32 toward zero: nearest, then one step back where it rounded away
    y = np.asarray(x64, dtype=np.float64).astype(np.float32)
    away = np.abs(y.astype(np.float64)) > np.abs(x64)
    y[away] = np.nextafter(y[away], np.float32(0))
    return y


def _trunc_op(x64) -> np.ndarray:
    return _trunc20(_trunc_f32(x64))


def npu_matmul_trunc20(a32, w32) -> np.ndarray:
    """Sequential over k, every product and every sum truncated to a 20-bit mantissa."""
    acc = np.zeros((a32.shape[0], w32.shape[1]), np.float32)
    for k in range(a32.shape[1]):
        prod = _trunc_op(np.outer(a32[:, k].astype(np.float64), w32[k].astype(np.float64)))
        acc = _trunc_op(acc.astype(np.float64) + prod)
    return acc


def npu_reduce_sum_fp16_acc(x16) -> np.ndarray:
    acc = x16[:, 0].copy()
    for k in range(1, x16.shape[1]):
        acc = acc + x16[:, k]          # numpy float16 add: one fp16 rounding per step
    return acc


def _flush32(x) -> np.ndarray:
    tiny = np.finfo(np.float32).tiny
    return np.where(np.abs(x) < tiny, np.float32(0) * np.sign(x), x).astype(np.float32)


def run_replay_sample(seed: int = 0, *, net_output: bool = True) -> NetworkRun:
    rng = np.random.default_rng(seed)
    b = NetBuilder()
    m, k, n = MM_SHAPE
    mm_a, mm_w = rng.standard_normal((m, k)).astype(K.F32), (0.1 * rng.standard_normal((k, n))).astype(K.F32)
    rsum_x = rng.uniform(0.5, 1.5, RSUM_SHAPE).astype(K.F32)
    cm, ck, cn = CHAIN_SHAPE
    ch_x, ch_w = rng.standard_normal((cm, ck)).astype(K.F32), (0.3 * rng.standard_normal((ck, cn))).astype(K.F32)
    ftz_x = rng.standard_normal(FTZ_SHAPE).astype(K.F32)
    sub = rng.random(FTZ_SHAPE) < 0.25
    ftz_x[sub] = (rng.uniform(0.1, 0.9, sub.sum()) * np.finfo(np.float32).tiny).astype(K.F32)
    ftz_y = rng.uniform(0.5, 4.0, FTZ_SHAPE).astype(K.F32)
    ln_x = (24.0 + 0.05 * rng.standard_normal(LN_SHAPE)).astype(K.F32)
    gamma = (1 + 0.1 * rng.standard_normal(LN_SHAPE[1])).astype(K.F32)
    beta = (0.05 * rng.standard_normal(LN_SHAPE[1])).astype(K.F32)
    scale = np.array([CHAIN_SCALE], K.F32)

    # the golden (fp32) run
    for name, value in (("mm/a", mm_a), ("rsum/x", rsum_x), ("chain/x", ch_x), ("ftz/x", ftz_x),
                        ("ftz/y", ftz_y), ("ln/x", ln_x)):
        b.fw(name, "Placeholder", [], value)
    for name, value in (("mm/w", mm_w), ("chain/w", ch_w), ("chain/scale", scale), ("ln/gamma", gamma),
                        ("ln/beta", beta)):
        b.fw(name, "Const", [], value)
    b.fw("mm/MatMul", "MatMul", ["mm/a:0", "mm/w:0"], K.f32(K.matmul(mm_a, mm_w)))
    b.fw("rsum/ReduceSum", "Sum", ["rsum/x:0"], K.g_sum(rsum_x, 1))
    ch = b.fw("chain/MatMul", "MatMul", ["chain/x:0", "chain/w:0"], K.f32(K.matmul(ch_x, ch_w)))
    b.fw("chain/Mul", "Mul", ["chain/MatMul:0", "chain/scale:0"], K.g_mul(ch, scale))
    b.fw("ftz/Mul", "Mul", ["ftz/x:0", "ftz/y:0"], K.g_mul(ftz_x, ftz_y))
    xd = ln_x.astype(np.float64)
    mean = xd.mean(-1, keepdims=True)
    var = ((xd - mean) ** 2).mean(-1, keepdims=True)
    y = (xd - mean) / np.sqrt(var + LN_EPS) * gamma + beta
    b.framework["ln/LayerNorm"] = FrameworkOp("ln/LayerNorm", "LayerNorm", ["ln/x:0", "ln/gamma:0", "ln/beta:0"],
                                              [K.f32(y), K.f32(mean), K.f32(var)])
    b.fw("act/Relu", "Relu", ["ln/LayerNorm:0"], K.g_relu(K.f32(y)))

    # the NPU run
    b.data("mm/a", mm_a.astype(K.F16), "ND", 0)
    b.data("rsum/x", rsum_x.astype(K.F16), "ND", 1)
    b.data("chain/x", ch_x, "ND", 2)
    b.data("ftz/x", ftz_x, "ND", 3)
    b.data("ftz/y", ftz_y, "ND", 4)
    b.data("ln/x", ln_x.astype(K.F16), "ND", 5)
    b.const("mm/w", mm_w.astype(K.F16), "ND")
    b.const("chain/w", ch_w, "ND")
    b.const("chain/scale", scale, "ND")
    b.const("ln/gamma", gamma.astype(K.F16), "ND")
    b.const("ln/beta", beta.astype(K.F16), "ND")
    val = lambda ref: b.input(ref).tensor.npu  # noqa: E731
    out = lambda value, ref: b.tensor(value, "ND", "ND", ref)  # noqa: E731
    mm = K.f16(K.matmul(val("mm/a:0"), val("mm/w:0")).astype(K.F32))
    b.npu("mm/MatMul", "MatMulV2", ["mm/a:0", "mm/w:0"], [out(mm, "mm/MatMul:0")], original_ops=["mm/MatMul"],
          attrs={"transpose_x1": False, "transpose_x2": False})
    b.npu("rsum/ReduceSum", "ReduceSumD", ["rsum/x:0"],
          [out(npu_reduce_sum_fp16_acc(val("rsum/x:0")), "rsum/ReduceSum:0")],
          original_ops=["rsum/ReduceSum"], attrs={"axes": [1], "keep_dims": False})
    ch_npu = npu_matmul_trunc20(val("chain/x:0"), val("chain/w:0"))
    b.npu("chain/MatMul", "MatMulV2", ["chain/x:0", "chain/w:0"], [out(ch_npu, "chain/MatMul:0")],
          original_ops=["chain/MatMul"], attrs={"transpose_x1": False, "transpose_x2": False})
    scaled = _trunc_op(ch_npu.astype(np.float64) * np.float64(scale[0]))
    b.npu("chain/Mul", "Mul", ["chain/MatMul:0", "chain/scale:0"], [out(scaled, "chain/Mul:0")],
          original_ops=["chain/Mul"])
    ftz = _flush32(_flush32(val("ftz/x:0")) * _flush32(val("ftz/y:0")))
    b.npu("ftz/Mul", "Mul", ["ftz/x:0", "ftz/y:0"], [out(ftz, "ftz/Mul:0")], original_ops=["ftz/Mul"])
    ln = K.npu_layernorm_fp16_lossy(val("ln/x:0"), val("ln/gamma:0"), val("ln/beta:0"), LN_EPS)
    b.npu("ln/LayerNorm", "LayerNorm", ["ln/x:0", "ln/gamma:0", "ln/beta:0"],
          [out(ln[0], "ln/LayerNorm:0"), out(ln[1], "ln/LayerNorm:1"), out(ln[2], "ln/LayerNorm:2")],
          original_ops=["ln/LayerNorm"],
          attrs={"begin_norm_axis": -1, "begin_params_axis": -1, "epsilon": LN_EPS})
    b.npu("act/Relu", "Relu", ["ln/LayerNorm:0"], [out(np.maximum(val("ln/LayerNorm:0"), K.F16(0)), "act/Relu:0")],
          original_ops=["act/Relu"])
    outputs = ["mm/MatMul:0", "rsum/ReduceSum:0", "chain/Mul:0", "ftz/Mul:0", "act/Relu:0"]
    if net_output:
        b.npu("Node_Output", "NetOutput", outputs, [], executed=False, engine="DNN_VM_GE_LOCAL_OP_STORE")
    truth = {op: {"verdict": v, "profile": p} for op, (v, p) in TRUTH.items()}
    return NetworkRun(seed, b.framework, b.finish(), outputs, None, None, replay_truth=truth)
