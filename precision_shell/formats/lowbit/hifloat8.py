"""HiFloat8 (Ascend's tapered 8-bit float), decoded from its definition.

Source: Luo et al., "Ascend HiFloat8 Format for Deep Learning", arXiv 2409.16626, §2: a code is
``S | Dot | E | M``. The Dot field is a prefix code that says how many exponent bits D follow:

    Dot  11 -> D=4, 1 mantissa bit      Dot 001  -> D=1, 3 mantissa bits
    Dot  10 -> D=3, 2 mantissa bits     Dot 0001 -> D=0, 3 mantissa bits
    Dot  01 -> D=2, 3 mantissa bits     Dot 0000 -> denormal, 3 mantissa bits

The D exponent bits are sign-magnitude with an implicit leading 1 on the magnitude: the first is
the exponent's sign (1: negative), the magnitude is ``1`` followed by the other D-1 bits (so D=4
covers |e| in 8..15, D=3 4..7, D=2 2..3, D=1 1, D=0 e=0). A normal value is
``(-1)^S * 2^e * 1.M``; a denormal (Dot 0000) is ``(-1)^S * 2^(M - 23)`` for M = 1..7.
Specials: 0x00 is the only zero, 0x80 NaN, 0x6F/0xEF are +-inf (the code that would be
1.5 * 2^15), so the largest finite value is 2^15 (0x6E) and the smallest 2^-22 (0x01).
The same table comes out of MindSpore ``core/base/hifloat8.h`` and en_dtypes ``hifloat.h``.
"""

from __future__ import annotations

import math

import numpy as np

# (Dot prefix, its length in bits, D exponent bits, mantissa bits), longest prefixes last
_DOT_CLASSES = ((0b11, 2, 4, 1), (0b10, 2, 3, 2), (0b01, 2, 2, 3), (0b001, 3, 1, 3), (0b0001, 4, 0, 3))
NAN_CODES = (0x80,)
INF_CODES = (0x6F, 0xEF)
MAX = 2.0 ** 15
MIN_DENORMAL = 2.0 ** -22


def hifloat8_value(code: int) -> float:
    """The value of one HiFloat8 code (Python float, exact)."""
    if code == 0x80:
        return math.nan
    if code & 0x7F == 0x6F:
        return -math.inf if code & 0x80 else math.inf
    sign = -1.0 if code & 0x80 else 1.0
    body = code & 0x7F            # the 7 bits after the sign
    for dot, dot_len, d, m_bits in _DOT_CLASSES:
        if body >> (7 - dot_len) == dot:
            rest = body & ((1 << (7 - dot_len)) - 1)
            exp_bits, mant = rest >> m_bits, rest & ((1 << m_bits) - 1)
            if d == 0:
                e = 0
            else:
                magnitude = (1 << (d - 1)) | (exp_bits & ((1 << (d - 1)) - 1))
                e = -magnitude if exp_bits >> (d - 1) else magnitude
            return sign * math.ldexp(1.0 + mant / (1 << m_bits), e)
    mant = body & 0b111             # Dot 0000: denormal (or the zero)
    return 0.0 if mant == 0 else sign * math.ldexp(1.0, mant - 23)


def hifloat8_table() -> np.ndarray:
    """The 256 codes' values as float32 (every one is exact in float32)."""
    return np.array([hifloat8_value(c) for c in range(256)], dtype=np.float32)
