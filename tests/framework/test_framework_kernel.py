"""Tensor-mode ``vc`` at speed: the C sums equal the numpy reference path, tensor bytes read in
place equal the ordinary readers, and the threaded compare gives the rows the serial one gives."""

from __future__ import annotations

import json
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

from framework_dumps import sample, write_dump
from precision_shell.analysis.compare.msprobe import engine as fc
from precision_shell.analysis.compare.msprobe import tensor_metrics as ftm
from precision_shell.analysis.compare.msprobe import kernel as fk
from precision_shell.analysis.compare.msprobe.pairing import pair_dumps
from precision_shell.errors import FormatError
from precision_shell.formats.msprobe.dump import Leaf, load_leaf, read_msprobe_dump
from precision_shell.formats.msprobe.tensor_io import ReadBuffer, locate, read_into

DATA = Path(__file__).parents[1] / "data" / "torch_pt"
needs_kernel = pytest.mark.skipif(fk._ext is None, reason="the C kernel is not built")


def _reference(x, y) -> tuple:
    s = ftm._chunked_sums(x, y, ftm._relative_kind(x.dtype, y.dtype), ftm.DEFAULT_CHUNK)
    return s.dot, s.xx, s.yy, s.sq_diff, s.max_abs, s.max_rel, s.within_1, s.within_5


def test_extension_is_built_where_a_compiler_exists():
    assert fk._ext is not None, "precision_shell.analysis.compare._framework_metrics did not build: " \
                                "run 'python setup.py build_ext --inplace' and read its warning"


@needs_kernel
@pytest.mark.parametrize("x_dtype, y_dtype", [(ml_dtypes.bfloat16, np.float32), (np.float16, np.float32),
                                              (np.float32, np.float32), (ml_dtypes.bfloat16, ml_dtypes.bfloat16),
                                              (np.float32, np.float16)])
def test_kernel_sums_equal_the_numpy_path(x_dtype, y_dtype):
    rng = np.random.default_rng(7)
    y = rng.standard_normal(50_003).astype(np.float32)
    y[::37] = 0                                       # the eps-nudged relative error
    x = y * (1 + rng.standard_normal(y.size).astype(np.float32) * 0.003)
    x[::41] = 0
    x[5::53] = y[5::53] * np.float32(1.001)           # ratios at the 1/1000 and 5/1000 edges
    x[7::59] = y[7::59] * np.float32(1.005)
    x, y = x.astype(x_dtype), y.astype(y_dtype)
    got, want = fk.kernel_sums(x, y), _reference(x, y)
    # max relative error and both ratio counts are float32 element operations: equal exactly;
    # the float64 sums are added in another order only
    assert got[4:] == want[4:]
    np.testing.assert_allclose(got[:4], want[:4], rtol=1e-12)


@needs_kernel
def test_kernel_declines_what_it_does_not_compute():
    y = np.ones(10, np.float32)
    nan = y.copy()
    nan[3] = np.nan
    assert fk.kernel_sums(nan, y) is None and fk.kernel_sums(y, np.inf * y) is None   # msprobe's NaN rules
    assert fk.kernel_sums(y.astype(np.float64), y) is None and fk.kernel_sums(y[::2], y[:5]) is None


def test_bytes_read_in_place_equal_the_readers(tmp_path):
    buffer = ReadBuffer()
    for name in ("fp32.pt", "bf16.pt", "fp16.pt"):
        leaf = Leaf("output.0", "torch.Tensor", file=str(DATA / name))
        where = locate(leaf)
        assert where is not None
        got = read_into(where, buffer).reshape(where.shape)
        np.testing.assert_array_equal(got, load_leaf(leaf), strict=True)
    # a strided view is not one run of bytes: the ordinary reader takes it
    assert locate(Leaf("output.0", "torch.Tensor", file=str(DATA / "view_t.pt"))) is None
    npy = tmp_path / "a.npy"
    np.save(npy, np.arange(12, dtype="<f2").reshape(3, 4))
    where = locate(Leaf("output.0", "t", shape=(3, 4), file=str(npy)))
    np.testing.assert_array_equal(read_into(where, buffer).reshape(where.shape), np.load(npy), strict=True)
    with pytest.raises(FormatError, match=r"shape \[3, 4\] differs from dump.json's \[12\]"):
        locate(Leaf("output.0", "t", shape=(12,), file=str(npy)))
    np.save(npy, np.asfortranarray(np.arange(12, dtype="<f4").reshape(3, 4)))
    assert locate(Leaf("output.0", "t", file=str(npy))) is None


def test_a_file_cut_after_locating_is_a_format_error(tmp_path):
    npy = tmp_path / "a.npy"
    np.save(npy, np.arange(1000, dtype="<f4"))
    where = locate(Leaf("output.0", "t", file=str(npy)))
    npy.write_bytes(npy.read_bytes()[:-100])
    with pytest.raises(FormatError, match="truncated: 100 of 4000 bytes missing"):
        read_into(where, ReadBuffer())


def test_threaded_compare_equals_the_serial_numpy_compare(monkeypatch):
    truth = json.loads((sample() / "truth.json").read_text())["runs"]
    target = read_msprobe_dump(sample() / truth["target_bf16"]["rank_dir"]).ranks[0]
    golden = read_msprobe_dump(sample() / truth["golden_fp32"]["rank_dir"]).ranks[0]
    pairing = pair_dumps(target, golden)
    fast = [r.metrics.cells() for r in fc.compare_pairs(pairing, "tensor")]
    monkeypatch.setenv("PSHELL_NO_EXT", "1")
    monkeypatch.setattr(fk, "WORKERS", 1)
    slow = [fc._tensor_row(p, [], lambda leaf, side: load_leaf(leaf)).cells() for p in pairing.pairs]
    assert len(fast) == len(slow) == len(pairing.pairs) > 200
    for a, b in zip(fast, slow):
        assert [type(v) for v in a] == [type(v) for v in b]
        np.testing.assert_allclose([v for v in a if isinstance(v, float)], [v for v in b if isinstance(v, float)],
                                   rtol=1e-12, atol=1e-15)


def test_unreadable_golden_file_is_reported_per_row(tmp_path):
    rank = tmp_path / "g" / "step0" / "rank0"
    x = np.linspace(-1, 1, 64, dtype=np.float32)
    for side in ("t", "g"):
        write_dump(tmp_path / side / "step0" / "rank0", {"Functional.relu.0.forward": {"input_args": [x],
                                                                                     "output": [x * 2]}})
    (rank / "dump_tensor_data" / "Functional.relu.0.forward.output.0.npy").write_bytes(b"\x93NUMPY garbage")
    t, g = (read_msprobe_dump(tmp_path / side).ranks[0] for side in ("t", "g"))
    rows = list(fc.compare_pairs(pair_dumps(t, g), "tensor"))
    assert [r.metrics.cosine for r in rows] == [1.0, ftm.UNSUPPORTED]
    assert len(rows[1].errors) == 1 and "Functional.relu.0.forward.output.0.npy" in rows[1].errors[0]
