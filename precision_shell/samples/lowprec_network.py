"""The ``lowprec`` sample (issue 27): block-scaled matmuls whose NPU outputs the recipes explain,
and quantized dumps in the low-precision dtypes, with the truth from this module's own encoders.

The network (graph, goldens, dumps; ``replay`` truth in the manifest):

* ``mx8/MatMul`` (fp32 in/out): the NPU multiplied MXFP8-E4M3 block-quantized operands (blocks of
  32 along K, E8M0 scales), fp32 result: ``emulated`` under the profile ``mxfp8-e4m3``.
* ``mx4/MatMul``: the same with MXFP4 (E2M1) operands: ``emulated`` under ``mxfp4``.
* ``q8/Cast``: fp32 to float8_e5m2 in FRACTAL_NZ (C0 32), compared with its fp32 golden.

Quantized dumps beside it (standalone dump files, ``write_quantized_dumps``; truth from
``quantized_truth``): ``quant/fp8_mm`` (FP8 E4M3 x1 in ND, x2 in FRACTAL_NZ, a fp32 dequant
scale), ``quant/mx_mm`` (MXFP8 x1 with E8M0 scales [M, K/32], FP4 E2M1 weights packed two per
byte in FRACTAL_NZ with E8M0 scales [K/32, N]), ``quant/hif8_cast`` (HiFloat8, FRACTAL_NZ) and
``quant/hif8_nd`` (ND). The element encoders are ml_dtypes casts from float32 (exact inputs:
x / 2^k of a float32), not pshell's encoders; HiFloat8 codes are drawn and valued by the paper's
field rule.
"""

from __future__ import annotations

from pathlib import Path

import ml_dtypes
import numpy as np

from precision_shell.formats.dump_file import DumpTensor, write_dump

from . import kernels as K
from .naming import dump_file_name
from .network import NetBuilder, NetworkRun

MX_SHAPE = (16, 128, 24)        # M, K, N
Q8_SHAPE = (20, 40)
BLOCK = 32
TRUTH = {"mx8/MatMul": ("emulated", "mxfp8-e4m3"), "mx4/MatMul": ("emulated", "mxfp4")}
_E4M3, _E2M1 = ml_dtypes.float8_e4m3fn, ml_dtypes.float4_e2m1fn
_EMAX = {"e4m3": (8, 448.0, _E4M3), "e2m1": (2, 6.0, _E2M1)}


def mx_encode(x: np.ndarray, elem: str, axis: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """OCP MX v1.0 along ``axis`` (length a multiple of 32): (element codes uint8, E8M0 scale codes,
    dequantized float64 values)."""
    emax, top, mltype = _EMAX[elem]
    moved = np.moveaxis(np.asarray(x, np.float32), axis, -1)
    blocks = moved.reshape(moved.shape[:-1] + (-1, BLOCK)).astype(np.float64)
    amax = np.abs(blocks).max(axis=-1, keepdims=True)
    exp = np.where(amax > 0, np.floor(np.log2(np.where(amax > 0, amax, 1.0))) - emax, -127).astype(np.int64)
    scaled = np.clip(blocks / np.exp2(exp), -top, top).astype(np.float32)   # exact: x / 2^k
    q = scaled.astype(mltype)
    deq = q.astype(np.float64) * np.exp2(exp)
    codes = q.view(np.uint8).reshape(moved.shape)
    scale_codes = (exp[..., 0] + 127).astype(np.uint8)
    return (np.moveaxis(codes, -1, axis), np.moveaxis(scale_codes, -1, axis),
            np.moveaxis(deq.reshape(moved.shape), -1, axis))


def run_lowprec_sample(seed: int = 0, *, net_output: bool = True) -> NetworkRun:
    rng = np.random.default_rng(seed)
    b = NetBuilder()
    m, k, n = MX_SHAPE
    # rows and columns of different magnitudes: the block scales differ
    a = (rng.standard_normal((m, k)) * np.exp2(rng.integers(-4, 5, (m, 1)))).astype(K.F32)
    w = (0.1 * rng.standard_normal((k, n))).astype(K.F32)
    for op, elem in (("mx8", "e4m3"), ("mx4", "e2m1")):
        b.fw(f"{op}/a", "Placeholder", [], a)
        b.fw(f"{op}/w", "Const", [], w)
        b.fw(f"{op}/MatMul", "MatMul", [f"{op}/a:0", f"{op}/w:0"], K.f32(K.matmul(a, w)))
    for i, (op, elem) in enumerate((("mx8", "e4m3"), ("mx4", "e2m1"))):
        b.data(f"{op}/a", a, "ND", i)
        b.const(f"{op}/w", w, "ND")
        deq_a = mx_encode(a, elem, 1)[2]
        deq_w = mx_encode(w, elem, 0)[2]
        out = K.f32(np.matmul(deq_a, deq_w))
        b.npu(f"{op}/MatMul", "MatMulV2", [f"{op}/a:0", f"{op}/w:0"],
              [b.tensor(out, "ND", "ND", f"{op}/MatMul:0")], original_ops=[f"{op}/MatMul"],
              attrs={"transpose_x1": False, "transpose_x2": False})
    # a float8 output in FRACTAL_NZ (C0 32): pt, ni, vc and vcs read it (issue 22's TypeError)
    x8 = (rng.standard_normal(Q8_SHAPE) * 4).astype(K.F32)
    b.fw("q8/x", "Placeholder", [], x8)
    b.fw("q8/Cast", "Cast", ["q8/x:0"], x8)
    b.data("q8/x", x8, "ND", 2)
    b.npu("q8/Cast", "Cast", ["q8/x:0"], [b.tensor(x8.astype(ml_dtypes.float8_e5m2), "FRACTAL_NZ", "ND", "q8/Cast:0")],
          original_ops=["q8/Cast"], attrs={"dst_type": 34})
    outputs = ["mx8/MatMul:0", "mx4/MatMul:0", "q8/Cast:0"]
    if net_output:
        b.npu("Node_Output", "NetOutput", outputs, [], executed=False, engine="DNN_VM_GE_LOCAL_OP_STORE")
    truth = {op: {"verdict": v, "profile": p} for op, (v, p) in TRUTH.items()}
    return NetworkRun(seed, b.framework, b.finish(), outputs, None, None, replay_truth=truth)


# ------------------------------------------------------------------------------------------------
# quantized dumps

def _hif8_value(code: int) -> float:
    """HiFloat8 by the paper's fields (arXiv 2409.16626 §2), written apart from pshell's decoder."""
    if code == 0x80:
        return float("nan")
    sign = -1.0 if code & 0x80 else 1.0
    if code & 0x7F == 0x6F:
        return sign * float("inf")
    bits = format(code & 0x7F, "07b")
    for dot, d in (("11", 4), ("10", 3), ("01", 2), ("001", 1), ("0001", 0)):
        if bits.startswith(dot):
            rest = bits[len(dot):]
            e_bits, m_bits = rest[:d], rest[d:]
            e = 0 if d == 0 else (-1 if e_bits[0] == "1" else 1) * int("1" + e_bits[1:], 2)
            return sign * 2.0 ** e * (1 + int(m_bits, 2) / 2 ** len(m_bits))
    m = int(bits[4:], 2)
    return 0.0 if m == 0 else sign * 2.0 ** (m - 23)


def nz(logical: np.ndarray, c0: int) -> np.ndarray:
    rows, cols = logical.shape
    n1, c1 = -(-rows // 16), -(-cols // c0)
    padded = np.zeros((n1 * 16, c1 * c0), logical.dtype)
    padded[:rows, :cols] = logical
    return padded.reshape(n1 * 16, c1, c0).transpose(1, 0, 2).reshape(c1, n1, 16, c0).copy()


def quantized_truth(seed: int = 0) -> dict:
    """Per quantized dump op: its inputs and outputs as (codes or array, dtype code, format,
    logical shape, decoded float64 truth)."""
    rng = np.random.default_rng(seed + 27)
    x1 = (rng.standard_normal((16, 64)) * 3).astype(np.float32)
    x2 = (rng.standard_normal((64, 32)) * 0.05).astype(np.float32)
    s1, s2 = float(np.abs(x1).max() / 448), float(np.abs(x2).max() / 448)
    q1 = np.clip(x1 / np.float32(s1), -448, 448).astype(_E4M3)
    q2 = np.clip(x2 / np.float32(s2), -448, 448).astype(_E4M3)
    fp8_out = K.f32(np.matmul(q1.astype(np.float64), q2.astype(np.float64)) * (s1 * s2))
    c1, e1, d1 = mx_encode(x1, "e4m3", 1)
    c2, e2, d2 = mx_encode(x2, "e2m1", 0)
    mx_out = K.f32(np.matmul(d1, d2))
    codes = rng.choice(np.array([c for c in range(256) if c not in (0x80, 0x6F, 0xEF)]), (8, 40)).astype(np.uint8)
    codes[0, :3] = [0x80, 0x6F, 0xEF]
    hif8 = np.array([[_hif8_value(int(c)) for c in row] for row in codes])
    return {
        "quant/fp8_mm": {"type": "QuantBatchMatmulV3", "golden": {"x1": x1, "x2": x2}, "inputs": [
            (q1.view(np.uint8), 35, "ND", (16, 64), q1.astype(np.float64)),
            (q2.view(np.uint8), 35, "FRACTAL_NZ", (64, 32), q2.astype(np.float64)),
            (np.array([s1 * s2], np.float32), 1, "ND", (1,), np.array([np.float32(s1 * s2)], np.float64))],
            "outputs": [(fp8_out, 1, "ND", (16, 32), fp8_out.astype(np.float64))]},
        "quant/mx_mm": {"type": "QuantBatchMatmulV4", "golden": {"x1": x1, "x2": x2}, "inputs": [
            (c1, 35, "ND", (16, 64), c1.view(_E4M3).astype(np.float64)),
            (c2, 39, "FRACTAL_NZ", (64, 32), c2.view(_E2M1).astype(np.float64)),
            (e1, 36, "ND", e1.shape, np.exp2(e1.astype(np.float64) - 127)),
            (e2, 36, "ND", e2.shape, np.exp2(e2.astype(np.float64) - 127))],
            "outputs": [(mx_out, 1, "ND", (16, 32), mx_out.astype(np.float64))]},
        "quant/hif8_cast": {"type": "Cast", "golden": {}, "inputs": [],
                            "outputs": [(codes, 33, "FRACTAL_NZ", (8, 40), hif8)]},
        "quant/hif8_nd": {"type": "Cast", "golden": {}, "inputs": [], "outputs": [(codes, 33, "ND", (8, 40), hif8)]},
    }


_FORMAT_CODES = {"ND": 2, "FRACTAL_NZ": 29}


def _device(data: np.ndarray, dtype_code: int, fmt: str) -> np.ndarray:
    if fmt == "ND":
        return data
    c0 = 64 if dtype_code in (39, 40) else 32     # formats.md B: C0 of 4-bit and 8-bit types
    return nz(data, c0)


def write_quantized_dumps(folder: Path, seed: int, timestamp: int) -> dict:
    """The quantized dumps into ``folder``/dump, their fp32 sources as .npy into ``folder``/golden;
    returns the manifest section (op -> file, tensors, golden files, relative to ``folder``)."""
    dump_dir, golden_dir = folder / "dump", folder / "golden"
    dump_dir.mkdir(parents=True, exist_ok=True)
    golden_dir.mkdir(parents=True, exist_ok=True)
    section = {}
    for i, (op, spec) in enumerate(quantized_truth(seed).items()):
        name = dump_file_name(spec["type"], op, 900 + i, 0, timestamp + i, 5)

        def tensor(t):
            data, code, fmt, shape, _ = t
            return DumpTensor(_device(np.asarray(data), code, fmt), code, _FORMAT_CODES[fmt], original_shape=shape)

        write_dump(dump_dir / name, op, [tensor(t) for t in spec["inputs"]], [tensor(t) for t in spec["outputs"]],
                   dump_time=timestamp + i)
        goldens = {}
        for key, value in spec["golden"].items():
            path = golden_dir / f"{op.replace('/', '_')}_{key}.npy"
            np.save(path, value)
            goldens[key] = f"golden/{path.name}"
        section[op] = {"file": f"dump/{name}", "type": spec["type"], "golden_files": goldens,
                       "inputs": [{"dtype_code": t[1], "format": t[2], "shape": list(t[3])} for t in spec["inputs"]],
                       "outputs": [{"dtype_code": t[1], "format": t[2], "shape": list(t[3])} for t in spec["outputs"]]}
    return section
