"""compare_pair and tensor_stats against plain numpy on generated tensors."""

from __future__ import annotations

import math

import ml_dtypes
import numpy as np
import pytest

from precision_shell.analysis.compare.metrics import compute_metrics
from precision_shell.analysis.compare.tensor import compare_pair, tensor_stats
from precision_shell.errors import CommandError


def noisy_pair(seed: int, shape: tuple[int, ...]):
    rng = np.random.default_rng(seed)
    golden = rng.standard_normal(shape).astype(np.float32)
    npu = golden + rng.standard_normal(shape).astype(np.float32) * np.float32(1e-3)
    return npu, golden


def test_shapes_must_match_exactly():
    with pytest.raises(CommandError, match=r"^shape \(2, 3\) does not match \(3, 2\)$"):
        compare_pair(np.zeros((2, 3)), np.zeros((3, 2)))


@pytest.mark.parametrize("chunk", [5, 64, 1 << 16])
def test_counts_and_worst_elements(chunk):
    npu, golden = noisy_pair(1, (30, 40))
    npu[7, 9] = golden[7, 9] + 3  # clear outliers, the biggest first
    npu[0, 0] = golden[0, 0] - 2
    npu[29, 39] = golden[29, 39] + 1
    result = compare_pair(npu, golden, atol=1e-3, rtol=1e-3, top=4, chunk=chunk)

    x, y = npu.astype(np.float64), golden.astype(np.float64)
    outside = ~(np.abs(x - y) <= 1e-3 + 1e-3 * np.abs(y))
    assert result.mismatches == np.count_nonzero(outside) > 3
    assert result.error_ratio == pytest.approx(np.mean(outside))
    assert result.allclose is False
    assert result.shape == (30, 40)
    order = np.argsort(-np.abs(x - y).reshape(-1), kind="stable")[:4]
    assert [w.index for w in result.worst] == [np.unravel_index(i, npu.shape) for i in order]
    first = result.worst[0]
    assert first.index == (7, 9)
    assert (first.npu, first.golden) == (float(npu[7, 9]), float(golden[7, 9]))
    assert first.abs_err == pytest.approx(3, rel=1e-6)
    assert first.rel_err == pytest.approx(3 / abs(golden[7, 9]), rel=1e-6)
    assert result.metrics == compute_metrics(npu, golden)


def test_identical_tensors_are_close_and_have_no_worst():
    _, golden = noisy_pair(2, (100,))
    result = compare_pair(golden, golden.copy())
    assert result.allclose and result.mismatches == 0 and result.error_ratio == 0.0
    assert result.worst == []


def test_nan_is_never_close_equal_infinities_are():
    golden = np.array([1.0, np.inf, -np.inf, 2.0, 3.0, 0.0], np.float32)
    npu = np.array([1.0, np.inf, -np.inf, np.nan, np.inf, 0.0], np.float32)
    result = compare_pair(npu, golden, top=10)
    assert result.mismatches == 2  # NaN vs 2, Inf vs 3
    assert [w.index for w in result.worst] == [(3,), (4,)]  # NaN and Inf rank above numbers
    assert math.isnan(result.worst[0].abs_err) and result.worst[1].abs_err == math.inf
    assert compare_pair(np.full(3, np.inf), np.full(3, np.inf)).allclose


def test_zero_golden_relative_error_is_inf():
    result = compare_pair(np.array([[0.5, 0.0]]), np.array([[0.0, 0.0]]))
    assert result.worst[0].index == (0, 0) and result.worst[0].rel_err == math.inf
    assert len(result.worst) == 1


def test_zero_dim_and_empty_tensors():
    scalar = compare_pair(np.float32(2.0), np.float32(2.5), atol=0.1, rtol=0.0)
    assert scalar.worst[0].index == () and scalar.mismatches == 1
    empty = compare_pair(np.zeros((0, 3)), np.zeros((0, 3)))
    assert empty.allclose and math.isnan(empty.error_ratio) and empty.worst == []


def test_float64_golden_keeps_its_digits():
    golden = np.array([1.0 + 1e-12, 2.0])  # float32 would round the first to 1.0
    result = compare_pair(np.array([1.0, 2.0]), golden, atol=0, rtol=0)
    assert result.mismatches == 1 and result.worst[0].abs_err == pytest.approx(1e-12, rel=1e-3)


def finite_reference(values: np.ndarray) -> dict:
    v = values.astype(np.float64).reshape(-1)
    finite = v[np.isfinite(v)]
    return {"min": finite.min(), "max": finite.max(), "mean": finite.mean(), "std": finite.std(),
            "nan": np.isnan(v).sum(), "pos_inf": (v == np.inf).sum(),
            "neg_inf": (v == -np.inf).sum(), "zero": (v == 0).sum()}


@pytest.mark.parametrize("chunk", [3, 1000, 1 << 16])
def test_tensor_stats_matches_numpy(chunk):
    rng = np.random.default_rng(7)
    values = (rng.standard_normal((50, 60)) * 100 + 1000).astype(np.float32)
    values[rng.random(values.shape) < 0.05] = 0
    values[1, 2], values[3, 4], values[5, 6] = np.nan, np.inf, -np.inf
    stats = tensor_stats(values, chunk=chunk)
    ref = finite_reference(values)
    assert (stats.shape, stats.dtype, stats.count) == ((50, 60), "float32", 3000)
    for key in ("min", "max"):
        assert getattr(stats, key) == ref[key]
    assert stats.mean == pytest.approx(ref["mean"], rel=1e-12)
    assert stats.std == pytest.approx(ref["std"], rel=1e-9)
    assert (stats.nan, stats.pos_inf, stats.neg_inf, stats.zero) == (
        ref["nan"], ref["pos_inf"], ref["neg_inf"], ref["zero"])
    assert stats.fp16_saturated is None


def test_tensor_stats_fp16_saturation_and_memmap(tmp_path):
    rng = np.random.default_rng(8)
    values = rng.standard_normal(10_000).astype(np.float16)
    values[[10, 20, 30]] = [65504, -65504, np.inf]  # the inf is not "saturated"
    path = tmp_path / "t.bin"
    values.tofile(path)
    mapped = np.memmap(path, dtype=np.float16, mode="r", shape=values.shape)
    stats = tensor_stats(mapped, chunk=999)
    assert stats.fp16_saturated == 2 and stats.pos_inf == 1
    assert stats.max == 65504.0 and stats.min == -65504.0
    assert stats.std == pytest.approx(finite_reference(values)["std"], rel=1e-9)


def test_tensor_stats_other_dtypes_and_degenerate_inputs():
    assert tensor_stats(np.array([True, False, True])).mean == pytest.approx(2 / 3)
    big = np.array([2**40 + 1, 2**40 + 3], np.int64)  # float32 would lose these digits
    assert tensor_stats(big).mean == 2**40 + 2
    bf16 = np.array([1.5, -2.0], ml_dtypes.bfloat16)
    assert (tensor_stats(bf16).dtype, tensor_stats(bf16).min) == ("bfloat16", -2.0)
    for degenerate in (np.zeros(0, np.float32), np.full(4, np.nan, np.float32)):
        stats = tensor_stats(degenerate)
        assert all(math.isnan(v) for v in (stats.min, stats.max, stats.mean, stats.std))
    # complex: the real and imaginary parts, as floats (pt and ac show them; no refusal)
    parts = np.array([1 + 2j, -3 + 0j, complex(0, np.inf)], np.complex64)
    stats = tensor_stats(parts)
    values = np.array([1, 2, -3, 0, 0], np.float64)
    assert (stats.dtype, stats.shape, stats.count, stats.pos_inf, stats.zero) == ("complex64", (3,), 6, 1, 2)
    assert (stats.min, stats.max, stats.mean) == (values.min(), values.max(), pytest.approx(values.mean()))
