"""repr() of floats in C (analysis/compare/msprobe/cells.py over formats/msprobe/float_repr.h and
our shortest digits, shortest_digits.h): the statistics CSV's diff, relative-error and summary
texts must be exactly Python's repr; and the digits' table and the bound they rely on."""

from __future__ import annotations

import math
import re
import sys
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

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


# --- shortest_digits.h (our Schubfach digits under float_repr.h) against repr(), case by case ---

needs_c = pytest.mark.skipif(not cells.compiled(), reason="the _stats_cells extension is not built")


def _mismatches(values) -> list[tuple[str, str]]:
    values = np.asarray(values, dtype=np.float64)
    got = cells.repr_texts(values)[0]
    return [(repr(v), text) for v, text in zip(values.tolist(), got) if repr(v) != text]


def _from_fields(c: int, q: int) -> float:
    """The double c * 2^q (c < 2^53), built from its bits so no decimal rounding is involved."""
    if q == -1074 and c < 2 ** 52:
        return float(np.uint64(c).view(np.float64))
    bits = ((q + 1075) << 52) | (c - 2 ** 52)
    return float(np.uint64(bits).view(np.float64))


def _floor_log10_pow2(q: int) -> int:
    """Largest k with 10^k <= 2^q, with Fractions (independent of the C and its generator)."""
    k = math.floor(q * math.log10(2)) - 1
    while Fraction(10) ** (k + 1) <= Fraction(2) ** q:
        k += 1
    return k


@needs_c
@settings(max_examples=3000, deadline=None)
@given(st.floats(allow_nan=False, allow_infinity=False))
def test_property_every_finite_double_prints_as_repr(value):
    assert cells.repr_texts(np.array([value]))[0] == [repr(value)]


@needs_c
def test_subnormals_integers_and_15_to_17_digit_values():
    rng = np.random.default_rng(7)
    tiny = np.uint64(1) << np.arange(52, dtype=np.uint64)        # one-bit subnormals
    subnormals = np.concatenate([np.arange(1, 5000, dtype=np.uint64), tiny, tiny - np.uint64(1),
                                 rng.integers(1, 2 ** 52, 100_000, dtype=np.uint64),
                                 np.uint64(2 ** 52) - np.arange(1, 5000, dtype=np.uint64)]).view(np.float64)
    assert np.all(subnormals[subnormals > 0] < sys.float_info.min)
    top = 2 ** 53
    ints = np.concatenate([np.arange(0, 100_000), rng.integers(0, top, 100_000), np.arange(top - 5000, top + 5000),
                           rng.integers(top, 2 ** 63, 50_000), 10 ** np.arange(0, 19)]).astype(np.float64)
    digits = []
    for n in (15, 16, 17):       # n significant digits, exponents across the range
        mantissas = rng.integers(10 ** (n - 1), 10 ** n, 30_000)
        exponents = rng.integers(-330, 300, 30_000)
        digits += [float(f"{m}e{e}") for m, e in zip(mantissas.tolist(), exponents.tolist())]
    values = np.concatenate([subnormals, -subnormals, ints, -ints, np.array(digits)])
    assert _mismatches(values) == []


@needs_c
def test_rounding_bounds_and_ties_that_are_exact_decimals():
    # The hard cases for scaled integer arithmetic: a bound of the rounding interval (v -/+ half
    # an ulp) exactly a multiple of 10^(k+1), where k is the largest with 10^k <= ulp (repr takes
    # that bound when the mantissa is even: it reads back as v), and v exactly halfway between two
    # multiples of 10^k (repr takes the even one). Built here with integers, checked with Fractions.
    rng = np.random.default_rng(11)
    values, on_bound, ties = [], 0, 0
    for q in range(1, 80):                          # v = c 2^q, bound (2c -/+ 1) 2^(q-1)
        k = _floor_log10_pow2(q)
        step = 10 ** (k + 1)
        if q - 1 < k + 1:
            continue
        modulus = 5 ** (k + 1)                      # 5^(k+1) divides 2c -/+ 1: c = +/- 1/2 mod 5^(k+1)
        if modulus > 2 ** 50:
            break
        for sign in (-1, 1):
            c0 = (-sign * pow(2, -1, modulus)) % modulus
            for j in rng.integers((2 ** 52 - c0) // modulus + 1, (2 ** 53 - c0) // modulus, 40).tolist():
                c = c0 + j * modulus
                bound = Fraction(2 * c + sign, 1) * Fraction(2) ** (q - 1)
                assert bound % step == 0
                value = _from_fields(c, q)
                values.append(value)
                on_bound += Fraction(repr(value)) == bound
    for q in range(-60, 0):                          # v = c 2^q halfway: v 10^-k = an odd number / 2
        k = _floor_log10_pow2(q)
        zeros = -1 - q + k                            # c = 2^zeros * odd makes c 5^-k 2^(q-k) = odd / 2
        if not 0 <= zeros <= 52:
            continue
        for odd in rng.integers(2 ** (52 - zeros) // 2, 2 ** (53 - zeros) // 2, 40).tolist():
            c = (2 * odd + 1) << zeros
            if not 2 ** 52 <= c < 2 ** 53:
                continue
            value = _from_fields(c, q)
            assert (Fraction(value) / Fraction(10) ** k).denominator == 2
            values.append(value)
            ties += 1
    assert on_bound > 100 and ties > 100             # the cases are really there
    assert _mismatches(values) == []


def test_pow10_table_is_what_its_script_makes_and_each_g_is_ten_to_e_rounded_up():
    from precision_shell.formats.msprobe import make_pow10_table

    text = make_pow10_table.HEADER.read_text()
    assert text == make_pow10_table.render()
    e_min = int(re.search(r"#define POW10_E_MIN \((-?\d+)\)", text).group(1))
    rows = re.findall(r"\{0x([0-9a-f]{16})u, 0x([0-9a-f]{16})u\},  /\* 10\^(-?\d+) \*/", text)
    assert len(rows) > 600
    for i, (high, low, e) in enumerate(rows):
        g, e = int(high + low, 16), int(e)
        assert e == e_min + i
        scaled = Fraction(10) ** e / Fraction(2) ** (math.floor(e * math.log2(10)) - 125)   # in [2^125, 2^126)
        if not 2 ** 125 <= scaled < 2 ** 126:           # log2 rounded the wrong way: one step off
            scaled = scaled * 2 if scaled < 2 ** 125 else scaled / 2
        assert g - 1 < scaled <= g and 2 ** 125 <= g < 2 ** 126


def test_window_search_against_walking_every_x():
    from precision_shell.formats.msprobe.make_pow10_table import first_with_offset

    rng = np.random.default_rng(3)
    for _ in range(3000):
        m = int(rng.integers(1, 400))
        a, b, lo = (int(x) for x in rng.integers(0, m, 3))
        hi = int(rng.integers(lo, m))
        walked = next((x for x in range(m + 1) if lo <= (a * x + b) % m <= hi), None)
        assert first_with_offset(a, b, m, lo, hi) == walked


def test_rounding_bound_holds_for_every_double_and_the_search_finds_near_integers():
    from precision_shell.formats.msprobe import make_pow10_table as table

    limit = sys.getrecursionlimit()
    assert table.check_rounding_bound() > 10_000      # exponents whose fractions needed the search
    assert sys.getrecursionlimit() == limit           # the process's limit is given back
    # the search sees real near-integers: the first c of q = 664 whose scaled v (C = 4c) has a
    # fraction below 2^-64 above 3 mod 4 (harmless there: only 2 mod 4 matters for v)
    q, k = 664, table.floor_log10_pow2(664)
    ratio = Fraction(2) ** q / Fraction(10) ** k
    n, d = ratio.numerator, ratio.denominator
    x = table.first_with_offset((4 * n) % (4 * d), (4 * 2 ** 52 * n) % (4 * d), 4 * d, 3 * d + 1, 3 * d - (-d >> 64) - 1)
    assert x is not None and x < 2 ** 52
    scaled = 4 * (2 ** 52 + x) * ratio
    assert math.floor(scaled) % 4 == 3 and 0 < scaled - math.floor(scaled) < Fraction(1, 2 ** 64)
