"""The C metrics kernel (analysis/compare/fused_metrics.py + _fused_metrics.c) against the numpy kernels.

The numpy path (metrics_kernels.first_pass / second_pass / bool_counts) is the reference: the C
path must give the same FirstPass / SecondPass / BoolCounts, counts and extremes exactly, sums
to 1e-9 relative (it replays numpy's summation order, so on this machine they are equal).
"""

from __future__ import annotations

import dataclasses
import math
import shutil

import ml_dtypes
import numpy as np
import pytest

from precision_shell.analysis.compare import fused_metrics as fm
from precision_shell.analysis.compare import metrics_kernels as k

needs_ext = pytest.mark.skipif(not fm.built(), reason="the C kernel _fused_metrics is not built "
                               "(no C compiler when the package was installed)")
EXACT = {"x_min", "x_max", "y_min", "y_max", "max_abs_diff", "max_rel", "within_one_thousandth",
         "within_five_thousandths", "kl_scale"}
CHUNK = 1000  # small, so that modest sizes cross chunk and 128/8192-element block boundaries
DTYPES = {"float32": np.float32, "float16": np.float16, "bfloat16": ml_dtypes.bfloat16}


@pytest.fixture(autouse=True)
def _c_path_on(monkeypatch):
    monkeypatch.delenv(fm.DISABLE_VARIABLE, raising=False)


def numpy_passes(x: np.ndarray, y: np.ndarray, chunk: int):
    with np.errstate(all="ignore"):
        xs, ys = k.Float32Chunks(x, chunk, "npu"), k.Float32Chunks(y, chunk, "golden")
        first = k.first_pass(xs, ys, x.size, chunk)
        second = k.second_pass(xs, ys, x.size, chunk, first, want_kl=fm.kl_computable(first))
    return first, second


def same(name: str, ours, ref) -> bool:
    ours, ref = float(ours), float(ref)
    if math.isnan(ref) or math.isinf(ref) or name in EXACT:
        return ours == ref or (math.isnan(ours) and math.isnan(ref))
    return math.isclose(ours, ref, rel_tol=1e-9, abs_tol=1e-300)


def assert_agree(x: np.ndarray, y: np.ndarray, chunk: int = CHUNK, threads: int = 1) -> None:
    fused = fm.passes(x, y, chunk, threads=threads)
    assert fused is not None
    for ours, ref in zip(fused, numpy_passes(x, y, chunk)):
        for field in dataclasses.fields(ref):
            a, b = getattr(ours, field.name), getattr(ref, field.name)
            assert same(field.name, a, b), (field.name, a, b)


def noisy_pair(rng, n: int, dtype, golden_dtype=None):
    golden = rng.standard_normal(n).astype(np.float32)
    golden[::13] = 0  # zero goldens: msprobe's nudge
    npu = golden * (1 + np.float32(1e-3) * rng.standard_normal(n).astype(np.float32))
    return npu.astype(dtype), golden.astype(golden_dtype or dtype)


@needs_ext
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("n", [1, 7, 8, 129, 999, 1000, 1001, 2000, 8193, 20_000])
def test_random_pairs_agree(dtype, n):
    rng = np.random.default_rng(n)
    assert_agree(*noisy_pair(rng, n, DTYPES[dtype]))


@needs_ext
@pytest.mark.parametrize("dtype", DTYPES)
def test_a_million_elements_in_default_chunks_agree(dtype):
    rng = np.random.default_rng(1)
    # 1e6 is no multiple of a 131072-element chunk nor of numpy's 8192-element sum blocks
    assert_agree(*noisy_pair(rng, 1_000_000, DTYPES[dtype]), chunk=1 << 17)


@needs_ext
def test_mixed_dtypes_agree():
    rng = np.random.default_rng(2)
    assert_agree(*noisy_pair(rng, 5000, np.float16, np.float32))
    assert_agree(*noisy_pair(rng, 5000, ml_dtypes.bfloat16, np.float32))


def edge_cases():
    rng = np.random.default_rng(3)
    values = rng.standard_normal(3000).astype(np.float32)
    tiny = np.float32(1e-40) * rng.standard_normal(3000).astype(np.float32)  # float32 subnormals
    with_nan, with_inf, with_ninf = values.copy(), values.copy(), values.copy()
    with_nan[1234] = np.nan
    with_inf[5] = np.inf
    with_ninf[2999] = -np.inf
    relu = np.maximum(values, np.float32(0))
    huge = values * np.float32(1e20)  # float32 products overflow: the float64 redo
    return {
        "all zeros": (np.zeros(3000, np.float32), np.zeros(3000, np.float32)),
        "zeros vs values": (np.zeros(3000, np.float32), values),
        "nan in npu": (with_nan, values),
        "nan in golden": (values, with_nan),
        "+inf in npu": (with_inf, values),
        "-inf in golden": (values, with_ninf),
        "inf vs inf": (with_inf, with_inf),
        "float32 subnormals": (tiny, tiny[::-1].copy()),
        "single element": (values[:1], values[1:2]),
        "dense golden zeros (ReLU)": (relu + np.float32(1e-12), relu),
        "identical": (values, values),
        "constant": (np.full(3000, 2.5, np.float32), np.full(3000, 2.5, np.float32)),
        "constant vs values": (np.full(3000, -1, np.float32), values),
        "huge values": (huge, huge[::-1].copy()),
        "float16 subnormals and extremes": (
            np.array([6e-8, -6e-8, 1e-5, 65504, -65504, 0, -0.0] * 300, np.float16),
            np.array([1e-7, 0, -1e-5, 60000, 65504, -0.0, 0] * 300, np.float16)),
        "float16 nan and inf": (np.array([np.nan, 1, np.inf, -np.inf] * 100, np.float16),
                                np.array([1, 2, 3, 4] * 100, np.float16)),
        "bfloat16 nan": (np.array([np.nan, 1, 2] * 100, ml_dtypes.bfloat16),
                         np.array([1, 1, 0] * 100, ml_dtypes.bfloat16)),
    }


@needs_ext
@pytest.mark.parametrize("case", edge_cases())
def test_edge_cases_agree(case):
    assert_agree(*edge_cases()[case])


@needs_ext
def test_the_float64_redo_on_overflow_is_taken():
    huge = np.full(10, 3e19, np.float32)
    first, second = fm.passes(huge, huge, CHUNK)
    assert first.xy_sum == pytest.approx(10 * 3e19 ** 2)  # float32 products would be Inf
    assert second.x_dev_sq_sum == 0.0


@needs_ext
def test_every_float16_value_is_widened_exactly():
    """The kernel widens float16 with the CPU's conversion where it has one (F16C): each finite
    value against numpy's own float32 of it differs by nothing, subnormals and 65504 included."""
    bits = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16)
    halves = bits.view(np.float16)
    finite = halves[np.isfinite(halves)]
    first, second = fm.passes(finite, finite.astype(np.float32), CHUNK)
    assert first.max_abs_diff == 0.0 and first.abs_diff_sum == 0.0
    assert first.x_min == -65504.0 and first.x_max == 65504.0
    assert_agree(finite, finite.astype(np.float32))
    # NaNs of any payload (signalling ones too) and infinities: the same results as numpy's
    rng = np.random.default_rng(5)
    assert_agree(halves, rng.permutation(halves).astype(np.float32))
    assert_agree(rng.permutation(halves), rng.standard_normal(1 << 16).astype(np.float32))


@needs_ext
def test_two_threads_give_the_same_result_as_one():
    rng = np.random.default_rng(4)
    x, y = noisy_pair(rng, 10_500, np.float16)
    assert fm.passes(x, y, CHUNK, threads=2) == fm.passes(x, y, CHUNK, threads=1)


@needs_ext
def test_bool_counts_agree():
    rng = np.random.default_rng(5)
    # any non-zero byte is True, as numpy counts it
    raw = rng.integers(0, 3, size=(2, 10_001), dtype=np.uint8)
    x, y = raw[0].view(np.bool_), raw[1].view(np.bool_)
    assert fm.bool_counts(x, y) == k.bool_counts(x, y, CHUNK)


@needs_ext
def test_unsupported_inputs_are_left_to_numpy():
    values = np.arange(10, dtype=np.float32)
    assert fm.passes(values.astype(np.float64), values, CHUNK) is None
    assert fm.passes(values.astype(np.int32), values, CHUNK) is None
    assert fm.passes(values[::2], values[:5], CHUNK) is None  # not contiguous
    assert fm.passes(values.astype(">f4"), values, CHUNK) is None  # not native byte order
    assert fm.passes(values[:0], values[:0], CHUNK) is None  # empty: the caller's own rule
    assert fm.passes(values, values[:5], CHUNK) is None  # sizes differ: the caller reports it


@needs_ext
def test_c_path_is_active_when_built():
    assert fm.active_path() == "c-extension"


def test_no_ext_variable_selects_the_numpy_path(monkeypatch):
    monkeypatch.setenv(fm.DISABLE_VARIABLE, "1")
    values = np.arange(10, dtype=np.float32)
    assert fm.active_path() == "numpy"
    assert fm.passes(values, values, CHUNK) is None
    assert fm.bool_counts(values > 3, values > 4) is None


@pytest.mark.skipif(shutil.which("cc") is None, reason="no C compiler on this machine")
def test_extension_is_built_where_a_compiler_exists():
    # so that CI never tests only the fallback without saying so
    assert fm.built(), "a C compiler exists but precision_shell.analysis.compare._fused_metrics " \
                       "did not build: run 'python -m pip install -e .' and read its warning"


@needs_ext
def test_vc_writes_the_same_csv_through_the_kernel_and_numpy(sample_ws, tmp_path):
    """The whole command: `vc` on the sample gives byte-identical CSV rows with the C kernel and
    with PSHELL_NO_EXT=1, and `info` names the path each run used."""
    import json
    import os
    import subprocess
    import sys

    ws, _ = sample_ws
    outputs = {}
    for label, env_value in (("c-extension", None), ("numpy (PSHELL_NO_EXT=1)", "1")):
        env = {k_: v for k_, v in os.environ.items() if k_ != fm.DISABLE_VARIABLE}
        if env_value:
            env[fm.DISABLE_VARIABLE] = env_value
        out = tmp_path / label.split()[0]
        run = subprocess.run([sys.executable, "-m", "precision_shell", str(ws), "-o", str(out),
                              "-c", "info; vc", "--format", "json"],
                             capture_output=True, text=True, env=env, timeout=120)
        assert run.returncode == 0, run.stderr
        info = json.loads(run.stdout.splitlines()[0])
        assert info["metrics_kernel"] == label
        (csv_file,) = (out / "compare").glob("result_*.csv")
        outputs[label] = csv_file.read_text().splitlines()[1:]   # row text, every metric cell
    with_c, with_numpy = outputs.values()
    assert with_c == with_numpy and len(with_c) > 30


def _edge_values(dtype) -> np.ndarray:
    """Every class of value of ``dtype``'s bit patterns: zeros, subnormals, the largest finite
    (fp16: 65504, the saturation value), infinities, quiet/signalling/negative NaNs."""
    utype = np.uint32 if np.dtype(dtype).itemsize == 4 else np.uint16
    bits = {np.float32: [0x0, 0x80000000, 0x1, 0x807FFFFF, 0x3F800000, 0x7F7FFFFF, 0xFF7FFFFF,
                         0x7F800000, 0xFF800000, 0x7FC00000, 0x7F800001, 0xFFC00001],
            np.float16: [0x0, 0x8000, 0x1, 0x83FF, 0x3C00, 0x7BFE, 0x7BFF, 0xFBFF, 0x7C00, 0xFC00,
                         0x7E00, 0x7C01, 0xFE01],
            ml_dtypes.bfloat16: [0x0, 0x8000, 0x1, 0x807F, 0x3F80, 0x7F7F, 0xFF7F, 0x7F80, 0xFF80,
                                 0x7FC0, 0x7F81, 0xFFC1]}[dtype]
    rng = np.random.default_rng(7)
    picks = rng.choice(np.array(bits, utype), 5000)     # long enough for the vector loop and a tail
    return picks.view(dtype)


def _parts(values: np.ndarray) -> list[np.ndarray]:
    with np.errstate(invalid="ignore"):     # signalling NaNs
        finite = values[np.isfinite(values.astype(np.float32))]
        zeros = values == 0
    return [values, values[:1], values[:17], values[zeros], finite, finite[:0]]


def _expected(part: np.ndarray) -> tuple[int, int, int, int]:
    from precision_shell.analysis.compare.tensor import tensor_stats

    with np.errstate(invalid="ignore"):     # signalling NaNs
        stats = tensor_stats(part)
    return stats.nan, stats.pos_inf, stats.neg_inf, stats.fp16_saturated or 0


@needs_ext
@pytest.mark.parametrize("dtype", [np.float32, np.float16, ml_dtypes.bfloat16], ids=str)
def test_value_counts_agree_with_the_numpy_statistics(dtype):
    """ac's C check counts nan, ±inf and fp16 saturation exactly as ``tensor_stats`` does."""
    from precision_shell.analysis.overflow import values as value_scan

    for part in _parts(_edge_values(dtype)):
        want = _expected(part)
        assert fm.value_counts(part) == want
        assert value_scan.looks_clean(part) == (not any(want))


@pytest.mark.parametrize("dtype", [np.float32, np.float16, ml_dtypes.bfloat16], ids=str)
def test_value_check_without_the_kernel_decides_the_same(dtype, monkeypatch):
    """The numpy fallback of ac's check (PSHELL_NO_EXT=1) decides as the statistics do."""
    from precision_shell.analysis.overflow import values as value_scan

    monkeypatch.setenv(fm.DISABLE_VARIABLE, "1")
    values = _edge_values(dtype)
    assert fm.value_counts(values) is None
    for part in _parts(values):
        assert value_scan.looks_clean(part) == (not any(_expected(part)))
