"""compute_metrics against an independent, straightforward numpy reading of formats.md A.8.3.

The reference below is deliberately naive (whole float32 arrays, plain np.sum/np.mean, one
expression per metric) so that it shares no code and no tricks with the chunked kernels.
"""

from __future__ import annotations

import math

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from precision_shell.analysis.compare.metrics import (
    DEFAULT_CHUNK, JSON_KEYS, METRIC_COLUMNS, RATIO_COLUMNS, Metrics, compute_metrics,
)
from precision_shell.analysis.compare.metrics_kernels import Float32Chunks
from precision_shell.errors import CommandError

EPS = np.finfo(np.float64).eps
EPS32 = np.finfo(np.float32).eps
SCALAR_KEYS = ("cosine", "max_abs_error", "accumulated_relative_error",
               "relative_euclidean_distance", "kl_divergence", "mean_npu", "std_npu",
               "mean_golden", "std_golden", "mean_abs_error", "rmse", "max_relative_error",
               "mean_relative_error", "one_thousandth_err_ratio", "five_thousandths_err_ratio")


def reference(npu: np.ndarray, golden: np.ndarray) -> dict:
    """formats.md A.8.3 + msprobe's ratios, written out plainly in float32."""
    x = np.asarray(npu).reshape(-1).astype(np.float32)
    y = np.asarray(golden).reshape(-1).astype(np.float32)
    out = {}
    with np.errstate(all="ignore"):
        nx, ny = np.sqrt(np.sum(x * x)), np.sqrt(np.sum(y * y))
        if all(d == 1 for d in np.shape(npu)):
            out["cosine"] = 1.0
        elif nx <= EPS and ny < EPS:
            out["cosine"] = 1.0
        elif math.sqrt(nx) <= EPS or math.sqrt(ny) <= EPS:
            out["cosine"] = math.nan
        else:
            out["cosine"] = min(float(np.sum((x / nx) * (y / ny))), 1.0)
        out["max_abs_error"] = float(np.max(np.abs(x - y)))
        r = np.where(np.abs(y) > EPS, np.abs(x / y - 1), 0).astype(np.float32)
        out["accumulated_relative_error"] = float(np.sum(r))
        out["max_relative_error"] = float(np.max(r))
        out["mean_relative_error"] = float(np.mean(r))
        y_sq = float(np.sum(y * y))
        out["relative_euclidean_distance"] = (
            0.0 if math.sqrt(y_sq) <= EPS else math.sqrt(float(np.sum((x - y) ** 2)) / y_sq))

        def min_max_scaled(v):
            span = np.max(v) - np.min(v)
            scaled = (v - np.min(v)) / span if span != 0 else v
            return np.maximum(scaled, EPS32)

        p, q = min_max_scaled(x), min_max_scaled(y)
        p, q = p / np.sum(p), q / np.sum(q)
        kl = float(np.sum(p * np.log(p / q)))
        out["kl_divergence"] = 0.0 if abs(kl) < EPS else kl
        for side, v in (("npu", x), ("golden", y)):
            out[f"mean_{side}"] = float(np.mean(v, dtype=np.float64))
            out[f"std_{side}"] = float(np.std(v, dtype=np.float64))
        out["mean_abs_error"] = float(np.mean(np.abs(x - y)))
        out["rmse"] = float(np.sqrt(np.mean((x - y) ** 2)))
        xn, yn = x.copy(), y.copy()
        zero = y == 0
        xn[zero] += EPS32
        yn[zero] += EPS32
        err = np.abs((xn - yn) / yn)
        for key, threshold in (("one_thousandth_err_ratio", 0.001), ("five_thousandths_err_ratio", 0.005)):
            out[key] = float(np.sum(err < threshold) / err.size) if x.size > 1 else math.nan
    return out


def assert_matches_reference(npu, golden, **kwargs):
    ours = compute_metrics(npu, golden, **kwargs)
    ref = reference(npu, golden)
    for key, expected in ref.items():
        got = getattr(ours, key)
        if math.isnan(expected):
            assert math.isnan(got), (key, got)
        else:
            assert got == pytest.approx(expected, rel=1e-6, abs=1e-6), key
    return ours


def random_pair(rng, n, kind):
    golden = rng.standard_normal(n).astype(np.float32) * np.float32(rng.choice([1e-3, 1.0, 30.0]))
    if kind == "relu":
        golden = np.maximum(golden, 0)
    elif kind == "zeros":
        golden[rng.random(n) < 0.1] = 0  # dense enough for the whole-chunk zero path
    elif kind == "sparse":
        golden[::97] = 0  # few zeros: the gather path
    elif kind == "negative":
        golden = -np.abs(golden) - 1
    elif kind == "offset":
        golden = golden + 100  # large mean, small spread: catches E[x^2]-E[x]^2 style shortcuts
    npu = golden.astype(np.float16)
    return npu, golden


@pytest.mark.parametrize("n", [1, 2, 3, 7, 100, 4097, 65536 + 11, 300_001])
@pytest.mark.parametrize("kind", ["plain", "relu", "zeros", "sparse", "negative", "offset"])
def test_fp16_vs_fp32_matches_reference(n, kind):
    rng = np.random.default_rng(n * 31 + len(kind))
    npu, golden = random_pair(rng, n, kind)
    assert_matches_reference(npu, golden)


def test_noisy_fp32_pairs_match_reference():
    rng = np.random.default_rng(5)
    for n in (10, 999, 30_000):
        golden = rng.standard_normal(n).astype(np.float32)
        npu = golden + rng.standard_normal(n).astype(np.float32) * 0.01
        assert_matches_reference(npu, golden)
        assert_matches_reference(golden, npu)  # swapped roles
        assert_matches_reference(npu * 1000, golden)  # very different scales


_values = st.one_of(
    st.sampled_from([0.0, -0.0, math.nan, math.inf, -math.inf, 1.0]),
    st.floats(2.0**-20, 1e4, width=32), st.floats(-1e4, -(2.0**-20), width=32))


@st.composite
def _pairs(draw):
    n = draw(st.integers(1, 40))
    vectors = st.lists(_values, min_size=n, max_size=n)
    return np.array(draw(vectors), np.float32), np.array(draw(vectors), np.float32)


@settings(max_examples=200, deadline=None, derandomize=True)
@given(_pairs(), st.sampled_from([1, 3, DEFAULT_CHUNK]))
def test_arbitrary_small_pairs_agree_with_reference(pair, chunk):
    """Specials anywhere: the NaN pattern must match exactly, values to float32 accuracy."""
    npu, golden = pair
    ours, ref = compute_metrics(npu, golden, chunk=chunk), reference(npu, golden)
    for key, expected in ref.items():
        got = getattr(ours, key)
        assert math.isnan(got) == math.isnan(expected), key
        if not math.isnan(expected):
            # KL mixes signs: the float32 reference is only good to ~1e-6 of its terms
            tolerance = 1e-4 if key == "kl_divergence" else 1e-6
            assert got == pytest.approx(expected, rel=1e-5, abs=tolerance), key


@pytest.mark.parametrize("value", [0.0, 1.0, -2.5, 7.0])
def test_constant_arrays(value):
    npu = np.full(50, value, np.float32)
    golden = np.full(50, value + 0.5, np.float32)
    m = assert_matches_reference(npu, golden)
    assert m.std_npu == 0.0 and m.vendor_cells()[4] == "0.000000"  # p == q: KL is 0


def test_other_dtypes_are_cast_to_float32_like_astype():
    rng = np.random.default_rng(3)
    golden64 = rng.standard_normal(3000)  # float64 golden is rounded to float32
    assert_matches_reference(golden64.astype(ml_dtypes.bfloat16), golden64)
    assert_matches_reference(rng.integers(-5, 5, 300), rng.integers(1, 9, 300).astype(np.int64))
    assert_matches_reference(rng.random(300) > 0.5, rng.standard_normal(300).astype(np.float32))


def cells(npu, golden):
    return compute_metrics(np.asarray(npu), np.asarray(golden)).vendor_cells()


def test_edge_table_zeros_and_ones():
    zeros, ones = np.zeros(8, np.float32), np.ones(8, np.float32)
    assert cells(zeros, zeros) == ["1.0", "0.000000", "0.000000", "0.000000", "0.000000",
                                   "(0.000;0.000),(0.000;0.000)", "0.000000", "0.000000",
                                   "0.000000", "0.000000"]
    assert cells(zeros, ones) == ["NaN", "1.000000", "8.000000", "1.000000", "0.000000",
                                  "(0.000;0.000),(1.000;0.000)", "1.000000", "1.000000",
                                  "1.000000", "1.000000"]
    assert cells(ones, zeros) == ["NaN", "1.000000", "0.000000", "0.000000", "0.000000",
                                  "(1.000;0.000),(0.000;0.000)", "1.000000", "1.000000",
                                  "0.000000", "0.000000"]
    assert compute_metrics(ones, zeros).not_computed == {"cosine"}


def test_edge_table_nan_and_inf_in_npu():
    golden = np.arange(1, 9, dtype=np.float32)
    with_nan = golden.copy()
    with_nan[3] = np.nan
    row = cells(with_nan, golden)
    assert row[:5] + row[6:] == ["nan"] * 9
    assert row[5].startswith("(nan;nan),")
    with_inf = golden.copy()
    with_inf[3] = np.inf
    std_cell = "(inf;nan),(%.3f;%.3f)" % (np.mean(golden), np.std(golden))
    assert cells(with_inf, golden) == ["nan", "inf", "inf", "inf", "nan", std_cell,
                                       "inf", "inf", "inf", "inf"]


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_nan_or_inf_in_golden_matches_reference(bad):
    npu, golden = random_pair(np.random.default_rng(4), 300, "zeros")
    golden[[5, 200]] = bad  # the vendor's r_i ignores them (not |y| > eps, or x/inf - 1)
    assert_matches_reference(npu, golden)
    assert_matches_reference(golden, npu)


def test_huge_values_keep_cosine_and_std_finite():
    # float32 squares overflow beyond ~1.8e19; the vendor's std is float64 (stays right)
    golden = np.random.default_rng(6).standard_normal(1000).astype(np.float32) * np.float32(1e25)
    npu = golden * np.float32(1.001) + np.float32(1e23)
    m = compute_metrics(npu, golden)
    x, y = npu.astype(np.float64), golden.astype(np.float64)
    assert m.cosine == pytest.approx(x @ y / np.linalg.norm(x) / np.linalg.norm(y), abs=1e-9)
    assert m.std_npu == pytest.approx(np.std(x), rel=1e-9)
    assert m.std_golden == pytest.approx(np.std(y), rel=1e-9)
    assert m.mean_abs_error == pytest.approx(np.mean(np.abs(npu - golden)), rel=1e-6)


def test_edge_table_golden_with_a_zero():
    npu, golden = np.array([1, 2, 3, 4], np.float32), np.array([1, 0, 3, 4], np.float32)
    ref = reference(npu, golden)
    row = cells(npu, golden)
    assert row[0] == "%.6f" % ref["cosine"] == "0.930949"
    assert row[4] == "%.6f" % ref["kl_divergence"]
    assert ref["kl_divergence"] == pytest.approx(2.4347, abs=5e-5)
    assert row[1:4] + row[6:] == ["2.000000", "0.000000", "%.6f" % ref["relative_euclidean_distance"],
                                  "0.500000", "1.000000", "0.000000", "0.000000"]


def test_edge_table_empty_and_unit_shapes():
    empty = np.zeros(0, np.float32)
    assert cells(empty, empty) == ["1.0", "NaN", "0.000000", "0.000000", "NaN",
                                   "(nan;nan),(nan;nan)", "nan", "nan", "NaN", "nan"]
    unit = cells(np.full((1, 1), 2.0, np.float32), np.full((1, 1), 3.0, np.float32))
    assert unit == ["1.000000", "1.000000", "0.333333", "0.333333", "0.000000",
                    "(2.000;0.000),(3.000;0.000)", "1.000000", "1.000000", "0.333333", "0.333333"]
    # the vendor's rule is "sum of dims == number of dims": any values, and even (2, 0)
    assert cells(np.ones((1, 1, 1)), np.full((1, 1, 1), -5.0))[0] == "1.000000"
    assert cells(np.zeros((2, 0)), np.zeros((2, 0)))[0] == "1.000000"
    assert cells(np.float32(3.0), np.float32(-1.0))[0] == "1.000000"  # 0-d


def test_bool_pairs_only_cosine_and_red():
    rng = np.random.default_rng(11)
    x, y = rng.random(1000) > 0.5, rng.random(1000) > 0.3
    m = compute_metrics(x, y)
    expected_cos = np.sum(x & y) / math.sqrt(np.sum(x) * np.sum(y))
    assert m.cosine == pytest.approx(expected_cos, rel=1e-12)
    row = m.vendor_cells()
    assert row[0] == "%.6f" % expected_cos
    assert row[1:] == ["NaN"] * 9  # x - y on bools raises in the vendor's RED
    assert m.one_thousandth_err_ratio == pytest.approx(np.mean(x == y))
    all_false = np.zeros(1000, bool)
    assert compute_metrics(x, all_false).vendor_cells()[:4] == ["NaN", "NaN", "NaN", "0.000000"]
    assert compute_metrics(all_false, all_false).vendor_cells()[0] == "1.0"


def test_size_mismatch_raises_command_error():
    with pytest.raises(CommandError, match="6.*5"):
        compute_metrics(np.zeros(6), np.zeros(5))
    # equal sizes, different shapes: compared flattened, as the vendor does in directory mode
    assert compute_metrics(np.zeros((2, 3)), np.zeros((3, 2))).count == 6


def test_thousandth_ratios_follow_msprobe():
    golden = np.array([1.0, 1.0, 1.0, 0.0, 0.0, 0.0, 2.0, -4.0], np.float32)
    npu = np.array([1.0005, 1.003, 1.01, 0.0, 1e-12, 1e-3, 2.0, -4.001], np.float32)
    m = compute_metrics(npu, golden)
    assert m.one_thousandth_err_ratio == 5 / 8  # 1.0005, 0, 1e-12, 2.0 and -4.001 (err .00025)
    assert m.five_thousandths_err_ratio == 6 / 8  # plus 1.003
    assert math.isnan(compute_metrics(np.ones(1), np.ones(1)).one_thousandth_err_ratio)
    dense = np.zeros(100, np.float32)  # the whole-chunk path for zero goldens
    npu = dense.copy()
    npu[:10] = 1e-12
    npu[10:30] = 1.0
    assert compute_metrics(npu, dense).one_thousandth_err_ratio == 0.8


def metric_values(m: Metrics) -> list[float]:
    return [getattr(m, key) for key in SCALAR_KEYS]


@pytest.mark.parametrize("n", [1, 6, 7, 8, 15, 1000, 20_000])
@pytest.mark.parametrize("kind", ["plain", "relu", "offset"])
def test_chunk_size_does_not_change_results(n, kind):
    npu, golden = random_pair(np.random.default_rng(n), n, kind)
    if n > 10:
        golden[n // 2] = 0.0
        npu[3] = np.float16(1e-6)
    reference_values = metric_values(compute_metrics(npu, golden))
    for chunk in (7, 64, 4096):
        chunked = metric_values(compute_metrics(npu, golden, chunk=chunk))
        for ours, ref in zip(chunked, reference_values):
            assert (math.isnan(ours) and math.isnan(ref)) or math.isclose(
                ours, ref, rel_tol=1e-9, abs_tol=1e-12)


def test_chunk_size_with_nan_and_inf():
    npu, golden = random_pair(np.random.default_rng(2), 1000, "plain")
    npu[500] = np.inf
    a, b = compute_metrics(npu, golden), compute_metrics(npu, golden, chunk=7)
    assert a.vendor_cells() == b.vendor_cells()
    assert a.vendor_cells()[1] == "inf"


def test_memmap_input_gives_the_same_result(tmp_path):
    npu, golden = random_pair(np.random.default_rng(9), 50_000, "zeros")
    path = tmp_path / "golden.bin"
    golden.tofile(path)
    mapped = np.memmap(path, dtype=np.float32, mode="r", shape=golden.shape)
    assert golden.dtype == np.float32  # the zero-copy path
    assert compute_metrics(npu, mapped) == compute_metrics(npu, golden)


def test_fp16_fast_cast_is_exact_for_every_bit_pattern():
    every = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16).view(np.float16)
    expected = every.astype(np.float32).view(np.uint32)
    for chunk in (1 << 16, 4096, 1000):
        chunks = Float32Chunks(every, chunk, "test")
        got = np.concatenate([chunks.read(s, min(s + chunk, every.size)).copy()
                              for s in range(0, every.size, chunk)])
        np.testing.assert_array_equal(got.view(np.uint32), expected)


def test_bfloat16_fast_cast_is_exact_for_every_bit_pattern():
    every = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16).view(ml_dtypes.bfloat16)
    got = Float32Chunks(every, 1 << 16, "test").read(0, every.size)
    np.testing.assert_array_equal(got.view(np.uint32), every.astype(np.float32).view(np.uint32))


def test_non_numeric_dtype_is_a_command_error():
    with pytest.raises(CommandError, match="dtype"):
        compute_metrics(np.array(["a", "b"]), np.zeros(2))


def make_metrics(**overrides) -> Metrics:
    values = dict.fromkeys(SCALAR_KEYS, 0.25)
    values.update(overrides)
    return Metrics(**values, count=4)


def test_vendor_cell_formats():
    m = make_metrics(cosine=0.99999951, max_abs_error=math.inf, kl_divergence=math.nan,
                     mean_npu=-0.0004, std_npu=0.0009996, mean_golden=1.2346, std_golden=-12.5)
    row = m.vendor_cells()
    assert row[0] == "1.000000" and row[1] == "inf" and row[4] == "nan"
    # |v| < 0.001 prints as 0.000 (plain %.3f would give -0.000 and 0.001)
    assert row[5] == "(0.000;0.000),(1.235;-12.500)"
    assert len(row) == len(METRIC_COLUMNS)
    not_computed = Metrics(**{**dict.fromkeys(SCALAR_KEYS, 0.5)}, count=4,
                           not_computed=frozenset({"kl_divergence", "standard_deviation"}))
    assert not_computed.vendor_cells()[4:6] == ["NaN", "NaN"]
    assert Metrics.unavailable("no golden").vendor_cells() == ["NaN"] * 10


def test_as_json_keys_and_null_for_nan():
    doc = make_metrics(cosine=math.nan, std_golden=math.nan).as_json()
    assert set(doc) == set(JSON_KEYS.values()) | {"count"}
    assert doc["cosine"] is None and doc["max_abs_error"] == 0.25
    assert doc["standard_deviation"] == {"mean_npu": 0.25, "std_npu": 0.25,
                                         "mean_golden": 0.25, "std_golden": None}
    assert all(column in JSON_KEYS for column in METRIC_COLUMNS + RATIO_COLUMNS)
