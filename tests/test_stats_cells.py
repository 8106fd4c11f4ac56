"""repr() of floats in C (analysis/compare/msprobe/cells.py over formats/msprobe/float_repr.h):
the statistics CSV's diff, relative-error and summary texts must be exactly Python's repr."""

from __future__ import annotations

import math
import sys

import numpy as np
import pytest

from precision_shell.analysis.compare.msprobe import cells

EDGES = [0.0, -0.0, 1.0, -1.0, 0.1, 0.2 + 0.1, 2 / 3, 1e16, 1e15, 9999999999999998.0, 1e17, 1.5e16,
         123456789012345678.0, 1e-4, 1e-5, 0.00012345, 5e-324, -5e-324, sys.float_info.min,
         sys.float_info.max, -sys.float_info.max, math.inf, -math.inf, math.nan, -math.nan, 1e23,
         9007199254740993.0, 2.0 ** 53, 2.0 ** 52 + 0.5, 100.0, 1e22, 1e21, 123.456, 4.35, 1e100, 1e-100,
         1e300, 1e-300, 1e-310, 65504.0, 3.4028234663852886e38, 1.1754943508222875e-38]


def _values() -> np.ndarray:
    rng = np.random.default_rng(31)
    bits = rng.integers(0, 2 ** 64, size=200_000, dtype=np.uint64).view(np.float64)
    tens = np.array([float(f"1e{k}") for k in range(-325, 309)])
    twos = np.ldexp(1.0, np.arange(-1074, 1024))
    near = np.concatenate([np.nextafter(tens, np.inf), np.nextafter(tens, -np.inf),
                           np.nextafter(twos, np.inf), np.nextafter(twos, -np.inf)])
    scaled = rng.random(50_000) * 10.0 ** rng.integers(-20, 25, 50_000)
    halves = rng.standard_normal(50_000).astype(np.float16).astype(np.float64)
    singles = rng.standard_normal(50_000).astype(np.float32).astype(np.float64)
    ints = np.arange(-2000, 2000, dtype=np.float64) * 1000
    return np.concatenate([np.array(EDGES), bits, tens, twos, near, scaled, halves, singles, ints])


@pytest.mark.skipif(not cells.compiled(), reason="the _stats_cells extension is not built")
def test_c_texts_are_python_repr_on_random_bit_patterns_and_edges():
    values = _values()
    got = cells.repr_texts(values)
    assert len(got) == 1 and len(got[0]) == len(values)
    wrong = [(repr(v), text) for v, text in zip(values.tolist(), got[0]) if repr(v) != text]
    assert wrong == []


def test_columns_and_suffix_both_paths(monkeypatch):
    values = _values()[:4000].reshape(1000, 4)
    expected = [[repr(v) + "%" for v in column] for column in values.T.tolist()]
    assert cells.repr_texts(values, "%") == expected
    assert cells.repr_texts(values[:, ::2].copy())[1] == [repr(v) for v in values[:, 2].tolist()]
    monkeypatch.setenv("PSHELL_NO_EXT", "1")
    assert not cells.compiled()
    assert cells.repr_texts(values, "%") == expected
    assert cells.repr_texts(np.zeros((0, 4))) == [[], [], [], []]


def _first_rows_expected(target: list[str], golden: list[str]) -> list[int]:
    first: dict[str, int] = {}
    for row, name in enumerate(golden):
        first.setdefault(name, row)
    return [first.get(name, -1) for name in target]


@pytest.mark.skipif(not cells.compiled(), reason="the _stats_cells extension is not built")
def test_pairing_by_name_hashes_finds_the_first_golden_row_of_each_name(monkeypatch):
    from precision_shell.analysis.compare.msprobe import column_pairing
    from precision_shell.formats.msprobe.name_column import NameColumn

    rng = np.random.default_rng(5)
    pool = [f"Torch.op.{i}.forward.output.{i % 3}" for i in range(300)] + ["", "é.input.0", "\u4e2d.x", "a,b"]
    golden = [pool[i] for i in rng.integers(0, len(pool), 2000)]       # repeated names: the first counts
    target = [pool[i] for i in rng.integers(0, len(pool), 1500)] + ["not in golden", "Torch.op.1.forward"]
    found = column_pairing._first_rows_by_name(NameColumn.of(target), NameColumn.of(golden))
    assert found is not None and found.tolist() == _first_rows_expected(target, golden)
    assert column_pairing._first_rows_by_name(NameColumn.of([]), NameColumn.of(golden)).tolist() == []
    assert column_pairing._first_rows_by_name(NameColumn.of(target), NameColumn.of([])).tolist() == [-1] * len(target)
    # two different names with one hash: not trusted, the caller's dict decides
    real = cells._ext

    class Colliding:
        def __getattr__(self, name):
            return getattr(real, name)

        @staticmethod
        def name_hashes(blob, off):
            return bytes(8 * (len(off) - 1))
    monkeypatch.setattr(cells, "_ext", Colliding())
    assert column_pairing._first_rows_by_name(NameColumn.of(target), NameColumn.of(golden)) is None
    assert column_pairing._first_rows_by_name(NameColumn.of(["a", "a"]), NameColumn.of(["a", "a"])).tolist() == [0, 0]
