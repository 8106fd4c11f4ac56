"""Writes pow10_table.h, the constants of shortest_digits.h, with Python's exact integers.

    python precision_shell/formats/msprobe/make_pow10_table.py          # rewrite the header
    python precision_shell/formats/msprobe/make_pow10_table.py --check  # exit 1 if it differs

Both also check, for every double, the one fact about these constants that shortest_digits.h
relies on (check_rounding_bound: no scaled value lands too near an integer), ~3 s.

What it makes (Schubfach's scaling, R. Giulietti, "The Schubfach way to render doubles"):
- for every exponent e that a double's digits need (10^e scales the double's rounding interval
  so that it holds one or two candidate integers), g(e) = ceil(10^e / 2^r) where
  r = floor(log2 10^e) - 125, i.e. 10^e rounded UP to 126 bits, as two 64-bit halves;
- integer multiply-shift forms of floor(q log10 2), floor(q log10 2 + log10 3/4) and
  floor(e log2 10) over the exponents used, each checked here against the exact value.

Nothing is taken from any other implementation: every number below comes from 10**e and 2**q.
"""

from __future__ import annotations

import sys
from fractions import Fraction
from pathlib import Path

HEADER = Path(__file__).with_name("pow10_table.h")

Q_MIN, Q_MAX = -1074, 2046 - 1075          # double = c * 2^q: subnormals' q .. the largest finite's
G_BITS = 126                               # g in [2^125, 2^126]: fits two 64-bit words


def floor_log10_pow2(q: int) -> int:
    """Largest k with 10^k <= 2^q."""
    k = (q * 30103) // 100000 - 2          # an under-estimate, then stepped up exactly
    assert _le_pow10_pow2(k, 1, 1, q)
    while _le_pow10_pow2(k + 1, 1, 1, q):
        k += 1
    return k


def floor_log10_three_quarters_pow2(q: int) -> int:
    """Largest k with 10^k <= 3/4 * 2^q (the width of an irregular interval: below a power of 2)."""
    k = (q * 30103) // 100000 - 3
    assert _le_pow10_pow2(k, 3, 4, q)
    while _le_pow10_pow2(k + 1, 3, 4, q):
        k += 1
    return k


def _le_pow10_pow2(k: int, num: int, den: int, q: int) -> bool:
    """10^k <= num/den * 2^q, exactly (integers on both sides)."""
    left, right = den, num
    left = left * 10 ** k if k >= 0 else left
    right = right * 10 ** -k if k < 0 else right
    left = left << -q if q < 0 else left
    right = right << q if q >= 0 else right
    return left <= right


def floor_log2_pow10(e: int) -> int:
    """Largest n with 2^n <= 10^e."""
    if e >= 0:
        return (10 ** e).bit_length() - 1
    d = 10 ** -e                           # 2^n <= 1/d  <=>  2^-n >= d
    n = -(d.bit_length() - 1)              # 2^-n = 2^(bitlen-1) <= d: equal only for d = 1
    return n if (1 << -n) == d else n - 1


def g_of(e: int) -> int:
    """10^e rounded up to G_BITS bits: ceil(10^e / 2^r), r = floor(log2 10^e) - (G_BITS - 1); exact
    when 10^e / 2^r is an integer (0 <= e <= 54)."""
    r = floor_log2_pow10(e) - (G_BITS - 1)
    num, den = 10 ** max(e, 0) << max(-r, 0), 10 ** max(-e, 0) << max(r, 0)
    g = -(-num // den)
    assert 1 << (G_BITS - 1) <= g < 1 << G_BITS
    return g


def multiply_shift(exact: dict[int, int], slope: float, offset: float, name: str) -> tuple[int, int, int]:
    """(mult, add, shift) with (x * mult + add) >> shift == exact[x] for every x given: mult and
    add are slope and offset in fixed point (shift bits), nudged until every x agrees exactly."""
    for shift in range(16, 48):
        mult, add = round(slope * (1 << shift)), round(offset * (1 << shift))
        for nudge in range(-8, 9):
            if all((x * mult + add + nudge) >> shift == k for x, k in exact.items()):
                return mult, add + nudge, shift
    raise SystemExit(f"no multiply-shift form found for {name}")


def first_in_range(a: int, m: int, lo: int, hi: int) -> int | None:
    """The smallest x >= 0 with lo <= (a x) mod m <= hi (0 <= lo <= hi < m), or None.

    For y = 0, 1, ... the x of [lo + m y, hi + m y] / a are increasing, so the answer is the
    first multiple of a in the first such window holding one; a window holds one when the step
    from lo + m y up to the next multiple, (-lo - m y) mod a, is at most hi - lo: the same
    question one modulus down (a < m), as in Euclid's algorithm."""
    a %= m
    if lo == 0:
        return 0
    if a == 0:
        return None
    if 2 * a > m:                          # (m - a) x = -(a x): residues mirrored, modulus shrinks faster
        return first_in_range(m - a, m, m - hi, m - lo)
    x = -(-lo // a)
    if a * x <= hi:
        return x
    y = first_with_offset((-m) % a, (-lo) % a, a, 0, hi - lo)
    return None if y is None else -(-(lo + m * y) // a)


def first_with_offset(a: int, b: int, m: int, lo: int, hi: int) -> int | None:
    """The smallest x >= 0 with lo <= (a x + b) mod m <= hi (0 <= lo <= hi < m), or None."""
    start = (lo - b) % m
    if start + hi - lo >= m:               # the window wraps past 0, and x = 0 gives residue b
        return 0
    return first_in_range(a, m, start, start + hi - lo)


def check_rounding_bound() -> int:
    """What shortest_digits.h's sd_scale_round_odd relies on, checked for every double.

    Each scaled value X = C 2^q 10^-k it computes (C = 4c - 2 or 4c - 1, 4c, 4c + 2: the bounds and
    v in units of 2^q / 4) comes out as X + eps, 0 <= eps < 2^-65 (g is 10^-k rounded up to 126
    bits, C << shift < 2^63), its floor taken and its lowest bit set when the first 64 bits of the
    fraction are not all zero. That is X rounded to odd -- what the comparisons with 4d (a bound
    against a candidate d) and 4s + 2 (v against the midpoint of s and s + 1) need -- unless
      - frac(X) > 1 - 2^-65: the floor is one too high (any X: fails the check), or
      - 0 < frac(X) < 2^-64: the odd bit is missed, which changes a comparison only when
        floor(X) = 0 mod 4 for a bound (equal to 4d instead of above) and 2 mod 4 for v.
    With X = C N / D (N / D = 2^q 10^-k in lowest terms), X mod 4 = (C N mod 4D) / D: nothing to
    check when D <= 2^64 (fractions are multiples of 1 / D, and never 0 < ... < 1 / D); else the
    residues C N mod 4D over every c of an exponent must avoid those windows, which
    first_with_offset decides without walking the c. Returns how many (exponent, C) families
    needed that search; raises AssertionError naming the double when one fails."""
    # the Euclid-style search recurses ~2 log2(m) deep (m up to ~2^1100); the limit is put back
    # after, since it is the process's (json and the readers rely on the default to refuse
    # hostile nesting)
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(max(limit, 20000))
    try:
        return _check_rounding_bound()
    finally:
        sys.setrecursionlimit(limit)


def _check_rounding_bound() -> int:
    searched = 0
    for q in range(Q_MIN, Q_MAX + 1):
        # c's of this q: subnormals and the first binade share q = Q_MIN; c = 2^52 above Q_MIN is
        # irregular (below), and is kept in the regular range too (a stricter check)
        c_lo = 1 if q == Q_MIN else 1 << 52
        c_hi = (1 << 53) - 1
        families = [(floor_log10_pow2(q), offset, c_lo, c_hi) for offset in (-2, 0, 2)]
        if q > Q_MIN:
            families += [(floor_log10_three_quarters_pow2(q), offset, 1 << 52, 1 << 52) for offset in (-1, 0, 2)]
        for k, offset, first_c, last_c in families:
            shift = q + floor_log2_pow10(-k) + 3
            assert 0 <= shift and (4 * last_c + 2) << shift < 1 << 63, (q, k, shift)
            ratio = Fraction(2) ** q / Fraction(10) ** k
            n, d = ratio.numerator, ratio.denominator
            if d <= 1 << 64:
                continue
            tiny_at = 2 if offset == 0 else 0                   # which floor(X) mod 4 a missed odd bit hurts
            windows = [(j * d - (d >> 65), j * d - 1) for j in (1, 2, 3, 4)]   # just below an integer
            windows.append((tiny_at * d + 1, tiny_at * d - (-d >> 64) - 1))    # just above floor = tiny_at
            a, b = (4 * n) % (4 * d), ((4 * first_c + offset) * n) % (4 * d)
            for lo, hi in windows:
                x = first_with_offset(a, b, 4 * d, lo, hi)
                assert x is None or x > last_c - first_c, \
                    f"q={q} C=4*{first_c + x}{offset:+d}: its scaled value is too near an integer"
            searched += 1
    return searched


def render() -> str:
    qs = range(Q_MIN, Q_MAX + 1)
    k_regular = {q: floor_log10_pow2(q) for q in qs}
    k_irregular = {q: floor_log10_three_quarters_pow2(q) for q in qs}
    ks = list(k_regular.values()) + list(k_irregular.values())
    e_min, e_max = -max(ks), -min(ks)                       # e = -k: the scale 10^e
    log10_2, log2_10 = 0.30102999566398120, 3.3219280948873623
    l10 = multiply_shift(k_regular, log10_2, 0.0, "floor(q log10 2)")
    l34 = multiply_shift(k_irregular, log10_2, -0.12493873660829995, "floor(q log10 2 + log10 3/4)")
    l2 = multiply_shift({e: floor_log2_pow10(e) for e in range(e_min, e_max + 1)}, log2_10, 0.0,
                        "floor(e log2 10)")
    lines = [
        "/* GENERATED by make_pow10_table.py (same folder) with Python's exact integers -- do not edit;",
        " * rerun the script instead. The constants of shortest_digits.h:",
        " *   POW10_G[e - POW10_E_MIN] = {high, low} 64-bit halves of g(e) = ceil(10^e / 2^r),",
        " *     r = floor(log2 10^e) - 125 (10^e rounded up to 126 bits), for e in [POW10_E_MIN, POW10_E_MAX];",
        " *   (x * MULT + ADD) >> SHIFT: floor(q log10 2), floor(q log10 2 + log10 3/4) for q in",
        f" *     [{Q_MIN}, {Q_MAX}], floor(e log2 10) for e in [POW10_E_MIN, POW10_E_MAX], each checked exactly",
        " *     by the script over its whole range. */",
        "#ifndef PSHELL_POW10_TABLE_H",
        "#define PSHELL_POW10_TABLE_H",
        "",
        "#include <stdint.h>",
        "",
        f"#define POW10_E_MIN ({e_min})",
        f"#define POW10_E_MAX {e_max}",
        f"#define LOG10_POW2_MULT {l10[0]}",
        f"#define LOG10_POW2_ADD ({l10[1]})",
        f"#define LOG10_POW2_SHIFT {l10[2]}",
        f"#define LOG10_3Q_POW2_MULT {l34[0]}",
        f"#define LOG10_3Q_POW2_ADD ({l34[1]})",
        f"#define LOG10_3Q_POW2_SHIFT {l34[2]}",
        f"#define LOG2_POW10_MULT {l2[0]}",
        f"#define LOG2_POW10_ADD ({l2[1]})",
        f"#define LOG2_POW10_SHIFT {l2[2]}",
        "",
        "static const uint64_t POW10_G[][2] = {",
    ]
    mask = (1 << 64) - 1
    for e in range(e_min, e_max + 1):
        g = g_of(e)
        lines.append(f"    {{0x{g >> 64:016x}u, 0x{g & mask:016x}u}},  /* 10^{e} */")
    lines += ["};", "", "#endif", ""]
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    text = render()
    families = check_rounding_bound()
    print(f"rounding bound holds for every double ({families} exponent/C families searched)")
    if "--check" in argv:
        same = HEADER.exists() and HEADER.read_text() == text
        print(f"{HEADER.name}: {'up to date' if same else 'differs from what the script makes'}")
        return 0 if same else 1
    HEADER.write_text(text)
    print(f"wrote {HEADER}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
