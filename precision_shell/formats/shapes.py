"""Shape checks every reader makes before allocating anything.

A non-empty shape is bounded by the data it describes (element count x item size must fit in
the bytes there are; each reader checks that). An empty shape is not: ``(30000000, 0)`` holds no
element yet is 30 million empty rows to build, print or convert to a list, and
``(2**40, 2**40, 0)`` is refused by numpy with an internal error. So an empty shape may claim at
most ``MAX_EMPTY_ROWS`` rows before its first zero dim (far more than any real empty tensor, an
empty batch or a zero-length sequence, has), and its non-zero dims must multiply to a size
numpy can describe.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from ..errors import FormatError
from .quoting import shown

MAX_EMPTY_ROWS = 1 << 20
_MAX_EXTENT = 1 << 48  # numpy refuses shapes whose non-zero dims overflow its index type


def check_dims(shape: Sequence[int], path, what: str) -> int:
    """The element count of ``shape``; FormatError (``<path>: <what> [..] ...``) for a negative
    dim or an empty shape of more than ``MAX_EMPTY_ROWS`` rows or of impossible extent."""
    if any(d < 0 for d in shape):
        raise FormatError(path, f"{what} {shown(list(shape))} has a negative dim")
    count = math.prod(shape)
    if count == 0 and shape:
        rows = math.prod(shape[:list(shape).index(0)])
        if rows > MAX_EMPTY_ROWS:
            raise FormatError(path, f"{what} {shown(list(shape))} holds no element but claims {shown(rows)} "
                                    f"empty rows (at most {MAX_EMPTY_ROWS:,})")
        if math.prod(d for d in shape if d) > _MAX_EXTENT:
            raise FormatError(path, f"{what} {shown(list(shape))} holds no element but its other dims "
                                    f"multiply to more than 2**48")
    return count
