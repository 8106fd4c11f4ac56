"""Reference kernels in exact mode vs straightforward numpy, and profile semantics on tiny
hand-checked cases."""

from __future__ import annotations

import math

import ml_dtypes
import numpy as np
import pytest

from precision_shell.analysis.replay.kernels import KERNELS, kernel_for
from precision_shell.analysis.replay.profiles import EXACT, Arith, parse_profile
from precision_shell.analysis.replay.rounding import quantize

RNG = np.random.default_rng(7)


def _exact(op_type, xs, attrs=None, out_shapes=None):
    ar = Arith(EXACT, "float64")
    return kernel_for(op_type)(ar, [np.asarray(x, np.float64) for x in xs], attrs or {}, out_shapes or [])


def _n(*shape):
    return RNG.standard_normal(shape)


def _sigmoid(x):
    return 1 / (1 + np.exp(-x))


def _loop_matmul(a, b):
    out = np.zeros((a.shape[0], b.shape[1]))
    for i in range(a.shape[0]):
        for j in range(b.shape[1]):
            out[i, j] = math.fsum(a[i, k] * b[k, j] for k in range(a.shape[1]))
    return out


def _loop_conv_nchw(x, w, pad):
    n, c, h, wd = x.shape
    o, _, kh, kw = w.shape
    xp = np.pad(x, ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    out = np.zeros((n, o, h + 2 * pad - kh + 1, wd + 2 * pad - kw + 1))
    for i in range(out.shape[2]):
        for j in range(out.shape[3]):
            out[:, :, i, j] = np.tensordot(xp[:, :, i:i + kh, j:j + kw], w, axes=([1, 2, 3], [1, 2, 3]))
    return out


CASES = {
    "MatMul": lambda: (([a := _n(5, 7), b := _n(7, 3)], {}), [_loop_matmul(a, b)]),
    "MatMulV2": lambda: (([a := _n(7, 5), b := _n(3, 7), c := _n(3)],
                          {"transpose_x1": True, "transpose_x2": True}), [_loop_matmul(a.T, b.T) + c]),
    "BatchMatMul": lambda: (([a := _n(2, 4, 6), b := _n(2, 6, 3)], {}),
                            [np.stack([_loop_matmul(a[i], b[i]) for i in range(2)])]),
    "BatchMatMulV2": lambda: (([a := _n(2, 6, 4), b := _n(2, 6, 3)], {"adj_x1": True}),
                              [np.stack([_loop_matmul(a[i].T, b[i]) for i in range(2)])]),
    "Conv2D": lambda: (([x := _n(2, 3, 6, 6), w := _n(4, 3, 3, 3), bias := _n(4)],
                        {"pads": [1, 1, 1, 1], "strides": [1, 1, 1, 1], "data_format": "NCHW", "fused_relu": True}),
                       [np.maximum(_loop_conv_nchw(x, w, 1) + bias[None, :, None, None], 0)]),
    "Add": lambda: (([a := _n(3, 4), b := _n(4)], {}), [a + b]),
    "AddV2": lambda: (([a := _n(3, 4), b := _n(3, 4)], {}), [a + b]),
    "Sub": lambda: (([a := _n(3, 4), b := _n(3, 1)], {}), [a - b]),
    "Mul": lambda: (([a := _n(3, 4), b := _n(3, 4)], {}), [a * b]),
    "RealDiv": lambda: (([a := _n(3, 4), b := _n(3, 4) + 5], {}), [a / b]),
    "Maximum": lambda: (([a := _n(3, 4), b := _n(3, 4)], {}), [np.where(a > b, a, b)]),
    "Minimum": lambda: (([a := _n(3, 4), b := _n(3, 4)], {}), [np.where(a < b, a, b)]),
    "BiasAdd": lambda: (([a := _n(2, 3, 4, 4), b := _n(3)], {"data_format": "NCHW"}),
                        [a + b.reshape(1, 3, 1, 1)]),
    "Relu": lambda: (([a := _n(10)], {}), [a * (a > 0)]),
    "LeakyRelu": lambda: (([a := _n(10)], {"negative_slope": 0.1}), [np.where(a > 0, a, 0.1 * a)]),
    "Gelu": lambda: (([a := _n(10)], {}), [np.array([v * 0.5 * (1 + math.erf(v / math.sqrt(2))) for v in a])]),
    "FastGelu": lambda: (([a := _n(10)], {}), [a * _sigmoid(1.702 * a)]),
    "Sigmoid": lambda: (([a := _n(10)], {}), [_sigmoid(a)]),
    "Tanh": lambda: (([a := _n(10)], {}), [(np.exp(a) - np.exp(-a)) / (np.exp(a) + np.exp(-a))]),
    "Softplus": lambda: (([a := _n(10)], {}), [np.log(1 + np.exp(a))]),
    "Swish": lambda: (([a := _n(10)], {}), [a * _sigmoid(a)]),
    "SiLU": lambda: (([a := _n(10)], {}), [a * _sigmoid(a)]),
    "Exp": lambda: (([a := _n(10)], {}), [np.e ** a]),
    "Log": lambda: (([a := np.abs(_n(10)) + 0.1], {}), [np.array([math.log(v) for v in a])]),
    "Sqrt": lambda: (([a := np.abs(_n(10))], {}), [a ** 0.5]),
    "Rsqrt": lambda: (([a := np.abs(_n(10)) + 0.1], {}), [a ** -0.5]),
    "Square": lambda: (([a := _n(10)], {}), [a ** 2]),
    "Pow": lambda: (([a := np.abs(_n(10)) + 0.1, b := _n(10)], {}), [np.exp(b * np.log(a))]),
    "Softmax": lambda: (([a := _n(3, 5)], {}), [np.exp(a) / np.exp(a).sum(-1, keepdims=True)]),
    "SoftmaxV2": lambda: (([a := _n(3, 5)], {"axes": [0]}), [np.exp(a) / np.exp(a).sum(0, keepdims=True)]),
    "LogSoftmax": lambda: (([a := _n(3, 5)], {}), [a - np.log(np.exp(a).sum(-1, keepdims=True))]),
    "LogSoftmaxV2": lambda: (([a := _n(3, 5)], {}), [a - np.log(np.exp(a).sum(-1, keepdims=True))]),
    "LayerNorm": lambda: (([x := _n(4, 6) + 3, g := _n(6), b := _n(6)], {"begin_norm_axis": 1, "epsilon": 1e-5}),
                          [(x - x.mean(1, keepdims=True)) / np.sqrt(x.var(1, keepdims=True) + 1e-5) * g + b,
                           x.mean(1, keepdims=True), x.var(1, keepdims=True)]),
    "RmsNorm": lambda: (([x := _n(4, 6), g := _n(6)], {"epsilon": 1e-6}),
                        [x / np.sqrt((x ** 2).mean(1, keepdims=True) + 1e-6) * g,
                         1 / np.sqrt((x ** 2).mean(1, keepdims=True) + 1e-6)]),
    "AddRmsNorm": lambda: (([x1 := _n(4, 6), x2 := _n(4, 6), g := _n(6)], {"epsilon": 1e-6}),
                           [(x1 + x2) / np.sqrt(((x1 + x2) ** 2).mean(1, keepdims=True) + 1e-6) * g,
                            1 / np.sqrt(((x1 + x2) ** 2).mean(1, keepdims=True) + 1e-6), x1 + x2]),
    "ReduceSum": lambda: (([a := _n(3, 4, 5), np.array([0, 2])], {}), [np.einsum("ijk->j", a)]),
    "ReduceSumD": lambda: (([a := _n(3, 4)], {"axes": [1], "keep_dims": True}), [a @ np.ones((4, 1))]),
    "ReduceMean": lambda: (([a := _n(3, 4), np.array([1])], {}), [a.sum(1) / 4]),
    "ReduceMeanD": lambda: (([a := _n(3, 4)], {"axes": [0]}), [a.sum(0) / 3]),
    "ReduceMax": lambda: (([a := _n(3, 4), np.array([1])], {}), [np.sort(a, 1)[:, -1]]),
    "ReduceMaxD": lambda: (([a := _n(3, 4)], {"axes": [0, 1]}), [np.array(np.sort(a.ravel())[-1])]),
    "Cast": lambda: (([a := _n(5)], {}), [a]),
    "TransData": lambda: (([a := _n(2, 3)], {}), [a]),
    "Reshape": lambda: (([a := _n(2, 6), np.array([3, 4])], {}), [a.ravel().reshape(3, 4)]),
    "Squeeze": lambda: (([a := _n(2, 1, 3)], {}), [a[:, 0, :]]),
    "ExpandDims": lambda: (([a := _n(2, 3), np.array([0])], {}), [a[None]]),
    "Flatten": lambda: (([a := _n(2, 3, 2)], {}), [a.reshape(2, 6)]),
    "Transpose": lambda: (([a := _n(2, 3, 4), np.array([2, 0, 1])], {}), [np.einsum("ijk->kij", a)]),
    "TransposeD": lambda: (([a := _n(2, 3)], {"perm": [1, 0]}), [a.T]),
    "ConcatV2": lambda: (([a := _n(2, 3), b := _n(2, 2), np.array([1])], {}), [np.hstack([a, b])]),
    "ConcatV2D": lambda: (([a := _n(2, 3), b := _n(1, 3)], {"concat_dim": 0}), [np.vstack([a, b])]),
    "ConcatD": lambda: (([a := _n(2, 3), b := _n(1, 3)], {"concat_dim": 0}), [np.vstack([a, b])]),
    "Split": lambda: (([np.array([1]), a := _n(2, 4)], {"num_split": 2}), [a[:, :2], a[:, 2:]]),
    "SplitD": lambda: (([a := _n(4, 2)], {"split_dim": 0, "num_split": 2}), [a[:2], a[2:]]),
}
CASES["Div"] = CASES["RealDiv"]


def _loop_attention(q, k, v, causal):
    out = np.zeros(q.shape[:-1] + (v.shape[-1],))
    for b in np.ndindex(q.shape[:-2]):
        for i in range(q.shape[-2]):
            s = [math.fsum(q[b][i] * k[b][j]) / math.sqrt(q.shape[-1]) for j in range(k.shape[-2])]
            s = [x if (not causal or j <= i) else -math.inf for j, x in enumerate(s)]
            e = [math.exp(x - max(s)) for x in s]
            out[b][i] = sum(w / math.fsum(e) * v[b][j] for j, w in enumerate(e))
    return out


def _loop_cross_entropy(logits, target, ignore):
    losses = [math.log(math.fsum(math.exp(z) for z in row)) - row[t]
              for row, t in zip(logits, target) if t != ignore]
    return np.array(math.fsum(losses) / len(losses))


# framework APIs without one GE op of their own (analysis/replay/framework_ops)
CASES.update({
    "Embedding": lambda: (([ids := np.array([[2, 0], [1, 2]]), w := _n(3, 4)], {}),
                          [np.array([[w[i] for i in row] for row in ids])]),
    "GeluTanh": lambda: (([a := _n(6)], {}),
                         [np.array([0.5 * x * (1 + math.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3)))
                                    for x in a])]),
    "ScaledDotProductAttention": lambda: (([q := _n(2, 3, 4), k := _n(2, 3, 4), v := _n(2, 3, 2)],
                                           {"is_causal": True}), [_loop_attention(q, k, v, True)]),
    "CrossEntropy": lambda: (([z := _n(4, 5), t := np.array([1, -100, 4, 0])], {"ignore_index": -100}),
                             [_loop_cross_entropy(z, t, -100)]),
    "ReduceVar": lambda: (([a := _n(3, 4)], {"axes": [1], "correction": 1}),
                          [np.array([math.fsum((x - r.mean()) ** 2 for x in r) / 3 for r in a])]),
    "SplitSizes": lambda: (([a := _n(2, 5)], {"axis": -1, "size": 2}), [a[:, :2], a[:, 2:4], a[:, 4:]]),
})


def test_every_registered_type_has_a_case():
    assert set(KERNELS) == set(CASES)


@pytest.mark.parametrize("op_type", sorted(CASES))
def test_exact_kernel_matches_straightforward_numpy(op_type):
    (xs, attrs), want = CASES[op_type]()
    shapes = [w.shape for w in want]
    got = _exact(op_type, xs, attrs, shapes)
    assert len(got) >= len(want)
    for g, w in zip(got, want):
        assert np.asarray(g).shape == w.shape
        np.testing.assert_allclose(g, w, rtol=1e-10, atol=1e-12)


def test_fp16_accumulation_of_2048_ones_and_one_stalls_at_2048():
    ar = Arith(parse_profile("fp16-acc"), "float16")
    assert ar.sum(np.ones(2049), 0) == 2048.0
    assert Arith(parse_profile("fp32-acc"), "float16").sum(np.ones(2049), 0) == 2049.0
    assert Arith(EXACT, "float16").sum(np.ones(2049), 0) == 2049.0


def test_accumulation_is_sequential_in_row_major_order():
    # 1 + 2^-11 + 2^-11 in fp16: each small add is a tie that rounds to even (back to 1)
    x = np.array([1.0, 2.0 ** -11, 2.0 ** -11])
    assert Arith(parse_profile("fp16-acc"), "float16").sum(x, 0) == 1.0
    # the other order would have kept both small terms: 2^-10 + 1 is exact in fp16
    assert Arith(parse_profile("fp16-acc"), "float16").sum(x[::-1], 0) == 1.0 + 2.0 ** -10


def test_dot_rounds_products_and_sums():
    a, b = np.array([[1.0, 2.0 ** -12]]), np.array([[1.0], [1.0]])
    assert Arith(parse_profile("fp16-acc"), "float16").dot(a, b)[0, 0] == 1.0
    assert Arith(EXACT, "float16").dot(a, b)[0, 0] == 1.0 + 2.0 ** -12


def test_trunc_mantissa_truncates_toward_zero():
    x = np.array([1.0 + 2.0 ** -21 + 2.0 ** -22, -(1.0 + 2.0 ** -21 + 2.0 ** -22)])
    got = Arith(parse_profile("trunc-mantissa-20"), "float32").r(x)
    assert list(got) == [1.0, -1.0]
    assert list(Arith(parse_profile("trunc-mantissa-21"), "float32").r(x)) == [1.0 + 2.0 ** -21, -1.0 - 2.0 ** -21]


def test_ftz_flushes_subnormals_to_signed_zero():
    tiny = float(np.finfo(np.float32).tiny)
    ar = Arith(parse_profile("ftz"), "float32")
    got = ar.inp(np.array([tiny / 4, -tiny / 4, tiny, 1.0]))
    assert list(got) == [0.0, 0.0, tiny, 1.0] and math.copysign(1, got[1]) == -1


def test_rounding_modes_and_storage_formats():
    assert quantize(np.array([1.0 + 2.0 ** -11]), "float16")[0] == 1.0          # tie to even
    assert quantize(np.array([1.0 + 3 * 2.0 ** -11]), "float16")[0] == 1.0 + 2.0 ** -9   # tie to even, up
    assert quantize(np.array([1.0 + 3 * 2.0 ** -11]), "float16", toward_zero=True)[0] == 1.0 + 2.0 ** -10
    assert quantize(np.array([70000.0]), "float16")[0] == np.inf
    assert quantize(np.array([70000.0]), "float16", toward_zero=True)[0] == 65504.0
    x = RNG.standard_normal(10000) * 10.0 ** RNG.uniform(-6, 6, 10000)
    x[:3] = [np.inf, -np.inf, np.nan]
    for fmt, dtype in (("float32", np.float32), ("float16", np.float16), ("float8_e5m2", ml_dtypes.float8_e5m2),
                       ("float8_e4m3fn", ml_dtypes.float8_e4m3fn)):
        with np.errstate(over="ignore", invalid="ignore"):
            np.testing.assert_array_equal(quantize(x, fmt), x.astype(dtype).astype(np.float64))
        # large arrays take numpy's cast where there is one: same values
        with np.errstate(over="ignore", invalid="ignore"):
            big = np.tile(x, 8)
            np.testing.assert_array_equal(quantize(big, fmt), big.astype(dtype).astype(np.float64))
    storage = Arith(parse_profile("bf16"), "float32")
    assert storage.inp(np.array([1.0 + 2.0 ** -9]))[0] == 1.0


@pytest.mark.parametrize("profile", ["exact", "fp16-acc", "trunc-mantissa-20,ftz", "bf16", "ftz"])
def test_a_reduction_over_every_axis_gives_a_scalar(profile):
    x = RNG.uniform(0.5, 1.5, (3, 4))
    ar = Arith(parse_profile(profile), "float16")
    (mean,) = kernel_for("ReduceMeanD")(ar, [ar.inp(x)], {"axes": [0, 1]}, [()])
    assert np.asarray(mean).shape == () and float(ar.out(mean, "float16")) == pytest.approx(x.mean(), rel=2e-2)


def test_excess_ratio_edge_cases():
    from precision_shell.analysis.replay.engine import excess_ratio

    inf = float("inf")
    assert excess_ratio(0.3, 0.1) == pytest.approx(3.0)
    assert excess_ratio(inf, inf) == 1.0          # the ideal kernel overflows the dtype too
    assert excess_ratio(0.1, inf) == 0.0
    assert excess_ratio(inf, 0.1) == inf
    assert excess_ratio(0.0, 0.0) == 1.0 and excess_ratio(0.1, 0.0) == inf
    assert excess_ratio(float("nan"), 0.1) is None


def test_profiles_combine_and_reject_unknown_words():
    p = parse_profile("trunc-mantissa-20,ftz")
    assert (p.trunc, p.ftz, p.acc) == (20, True, None)
    named = parse_profile("mlu370", {"mlu370": "trunc-mantissa-20,ftz"})
    assert (named.name, named.trunc, named.ftz) == ("mlu370", 20, True)
    with pytest.raises(ValueError, match="unknown profile"):
        parse_profile("fp12-acc")
    with pytest.raises(ValueError, match="1 <= N <= 23"):
        parse_profile("trunc-mantissa-30")
