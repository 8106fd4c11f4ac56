"""The batch path of small pairs (analysis/compare/pair_batch.py + the kernel's batch_metrics)
gives what the one-pair path gives: the same passes bit for bit (the chunk rows and the second
pass's float32 parameters combined in C exactly as fused_metrics.passes does), the same element
order after a device layout restore (runs of an index made from layout.py's restore), and the
same result tuples from a worker's task."""

from __future__ import annotations

import math

import ml_dtypes
import numpy as np
import pytest

from precision_shell.analysis.compare import fused_metrics as fm
from precision_shell.analysis.compare import pair_batch
from precision_shell.analysis.compare.tasks import run_task
from precision_shell.analysis.compare.worker import _match_golden_layout
from precision_shell.formats.dtypes import (
    DT_BF16, DT_FLOAT, DT_FLOAT16, FORMAT_FRACTAL_NZ, FORMAT_FRACTAL_Z, FORMAT_NC1HWC0, FORMAT_ND,
)
from precision_shell.formats.dump_file import DumpTensor, read_dump_header, to_logical, write_dump

pytestmark = pytest.mark.skipif(not fm.built(), reason="the C kernel is not built")
RNG = np.random.default_rng(11)
CHUNK = 1000      # several chunks per pair: their rows are combined as passes() combines them


def _pair(n: int, dtype, kind: str) -> tuple[np.ndarray, np.ndarray]:
    y = (RNG.standard_normal(n) * 3).astype(np.float32)
    if kind == "zeros":
        y[: n // 2] = 0
    x = y + (RNG.standard_normal(n) * 0.01).astype(np.float32)
    if kind == "nan":
        x[n // 3] = np.nan
    elif kind == "inf":
        y[-1] = np.inf
    elif kind == "const":            # max == min on both sides: the other kl_scale branch
        x[:], y[:] = 2.0, 2.0
    elif kind == "const-npu":        # one side's span 0: a Python float meets a float32
        x[:] = 1.5
    elif kind == "huge":             # float32 products overflow: the float64 redo
        x, y = x * np.float32(1e30), y * np.float32(1e30)
    with np.errstate(over="ignore"):
        return x.astype(dtype), y


def _fields(p) -> list:
    return [("nan" if v != v else float(v)) for v in vars(p).values()]


@pytest.mark.parametrize("dtype", [np.float16, ml_dtypes.bfloat16, np.float32])
def test_batch_passes_equal_passes_bit_for_bit(dtype):
    items, expected = [], []
    for n in (1, 2, 7, 999, 1000, 2501):
        for kind in ("plain", "zeros", "nan", "inf", "const", "const-npu", "huge"):
            x, y = _pair(n, dtype, kind)
            order = RNG.permutation(n).astype(np.int32)   # an arbitrary logical order, runs of 1
            with np.errstate(all="ignore"):
                expected.append(fm.passes(x, y, CHUNK))
                expected.append(fm.passes(x[order], y, CHUNK))
            kx, ky = fm.kind_of(x.dtype), fm.kind_of(y.dtype)
            items.append((x.view(np.uint8), kx, None, n, 1, y.view(np.uint8), ky))
            items.append((x.view(np.uint8), kx, order, 1, 0, y.view(np.uint8), ky))
    got = fm.batch_passes(items, CHUNK)
    assert len(got) == len(expected)
    for (first, second), (want_first, want_second) in zip(got, expected):
        assert _fields(first) == _fields(want_first)
        assert _fields(second) == _fields(want_second)


def test_batch_refuses_an_index_outside_the_tensor():
    x, y = _pair(8, np.float16, "plain")
    starts = np.array([0, 7], np.int32)       # run 4, step 1: 7 + 3 is past the 8 elements
    with pytest.raises(ValueError, match="out of range"):
        fm.batch_passes([(x.view(np.uint8), fm.kind_of(x.dtype), starts, 4, 1, y.view(np.uint8),
                          fm.kind_of(y.dtype))], CHUNK)


# device layouts: (dump format, device shape, logical shape, target format, golden shape)
LAYOUTS = [
    (FORMAT_NC1HWC0, (2, 2, 5, 6, 16), (2, 20, 5, 6), None, (2, 20, 5, 6)),
    (FORMAT_NC1HWC0, (2, 2, 5, 6, 16), (2, 20, 5, 6), None, (2, 5, 6, 20)),     # NHWC golden
    (FORMAT_NC1HWC0, (1, 1, 3, 4, 16), (1, 3, 4, 16), "NHWC", (1, 3, 4, 16)),
    (FORMAT_FRACTAL_Z, (18, 2, 16, 16), (20, 18, 3, 3), None, (20, 18, 3, 3)),
    (FORMAT_FRACTAL_NZ, (3, 2, 2, 16, 16), (3, 30, 20), None, (3, 30, 20)),    # pieces of 16 and 4
    (FORMAT_FRACTAL_NZ, (2, 2, 2, 16, 16), (2, 26, 26), None, (2, 26, 26)),    # 16 and 10: runs of 2
    (FORMAT_FRACTAL_NZ, (2, 2, 1, 16, 16), (2, 16, 32), None, (2, 16, 32)),    # runs of 16
    (FORMAT_ND, (7, 9), (7, 9), None, (63,)),
]


def _logical_order(header, entry, target, golden_shape) -> np.ndarray:
    """What the one-pair path computes on: the restored tensor, matched to the golden, flat."""
    device = np.arange(math.prod(entry.shape), dtype=np.int64).reshape(entry.shape)
    logical = to_logical(header, entry, device, target_format=target)
    restored = entry.format_name not in ("ND", "NCHW", "NHWC")
    return _match_golden_layout(logical, golden_shape, restored).reshape(-1)


@pytest.mark.parametrize("fmt, device_shape, shape, target, golden_shape", LAYOUTS)
def test_layout_runs_give_the_restored_order(tmp_path, fmt, device_shape, shape, target, golden_shape):
    data = RNG.standard_normal(device_shape).astype(np.float16)
    path = tmp_path / "Conv2D.op.1.2.3"
    write_dump(path, "op", [], [DumpTensor(data, DT_FLOAT16, fmt, original_shape=shape)])
    header = read_dump_header(path)
    entry = header.outputs[0]
    golden = np.zeros(golden_shape, np.float32)
    spec = pair_batch.spec_for(header, entry, target, None, golden)
    assert spec is not None and spec.n == golden.size
    want = _logical_order(header, entry, target, golden_shape)
    if spec.index is None:
        got = np.arange(spec.n)
    elif spec.lengths is not None:   # contiguous pieces, far longer than even runs would be
        assert spec.run == 0 and spec.step == 1 and spec.lengths.dtype == np.int32
        assert spec.lengths.mean() >= 8
        got = np.concatenate([np.arange(a, a + n) for a, n in zip(spec.index.tolist(), spec.lengths.tolist())])
    else:
        got = (spec.index[:, None].astype(np.int64) + spec.step * np.arange(spec.run)).reshape(-1)
        assert spec.run >= 8          # a layout is runs along its innermost logical axis
    np.testing.assert_array_equal(got, want)


def _values(result: tuple) -> tuple:
    return tuple(tuple("nan" if v != v else v for v in part) if isinstance(part, tuple) else part
                 for part in result)


@pytest.mark.parametrize("npu_dtype, dt", [(np.float16, DT_FLOAT16), (ml_dtypes.bfloat16, DT_BF16),
                                           (np.float32, DT_FLOAT)])
def test_a_task_gives_the_same_rows_with_and_without_the_batch(tmp_path, monkeypatch, npu_dtype, dt):
    groups, row = [], 0
    for i, (fmt, device_shape, shape, target, golden_shape) in enumerate(LAYOUTS * 2):
        logical = RNG.standard_normal(golden_shape).astype(np.float32)
        golden = tmp_path / f"g{i}.0.npy"
        np.save(golden, logical)
        device = RNG.standard_normal(device_shape).astype(npu_dtype)
        if i == 3:
            device[0] = np.nan
        path = tmp_path / f"Conv2D.op{i}.1.2.{i}"
        write_dump(path, f"op{i}", [DumpTensor(device, dt, fmt, original_shape=shape)],
                   [DumpTensor(device, dt, fmt, original_shape=shape)])
        rows = [(row, 0, 0, target, None, str(golden), None),
                (row + 1, 1, 0, target, None, str(golden), None)]
        groups.append((f"op{i}", str(path), None, rows))
        row += 2
    task = (False, groups)
    batch_passes, in_batches = fm.batch_passes, []
    monkeypatch.setattr(fm, "batch_passes", lambda items, chunk: in_batches.append(len(items)) or
                        batch_passes(items, chunk))
    batched = run_task(task)
    assert [r[0] for r in batched] == list(range(row))          # row order kept
    computed = [r for r in batched if r[1] == -1]
    assert all(r[12] for r in computed) and sum(in_batches) == len(computed) >= len(LAYOUTS) * 2
    # an op's input and output hold the same bytes against one golden: taken from the first
    assert all(r[1] == r[0] - 1 for r in batched if r[1] != -1)
    calls = []
    monkeypatch.setattr(pair_batch, "enabled", lambda device_shape_mode: calls.append(1) and False)
    single = run_task(task)
    assert calls
    assert [_values(r) for r in batched] == [_values(r) for r in single]


def test_same_bytes_is_a_byte_comparison():
    a = RNG.integers(0, 256, 1001, dtype=np.uint8)
    b = a.copy()
    assert fm.same_bytes(a, b) and fm.same_bytes(a[:0], b[:0])
    b[-1] ^= 1
    assert not fm.same_bytes(a, b)
    assert not fm.same_bytes(a, a[:-1])
