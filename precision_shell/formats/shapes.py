"""Shape checks every reader makes before allocating anything.

A non-empty shape is bounded by the data it describes (element count x item size must fit in
the bytes there are; each reader checks that). An empty shape is not: ``(30000000, 0)`` holds no
element yet costs 30 million empty rows to build, print or convert to a list, and
``(2**40, 2**40, 0)`` is refused by numpy with an internal error. So an empty shape may claim at
most ``MAX_EMPTY_ROWS`` rows (the product of its non-zero dims): far more than any real empty
tensor (an empty batch, a zero-length sequence) has.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from ..errors import FormatError
from .quoting import shown

MAX_EMPTY_ROWS = 1 << 20


def check_dims(shape: Sequence[int], path, what: str) -> int:
    """The element count of ``shape``; FormatError (``<path>: <what> [..] ...``) for a negative
    dim or an empty shape of more than ``MAX_EMPTY_ROWS`` rows."""
    if any(d < 0 for d in shape):
        raise FormatError(path, f"{what} {shown(list(shape))} has a negative dim")
    count = math.prod(shape)
    if count == 0 and shape:
        rows = math.prod(d for d in shape if d)
        if rows > MAX_EMPTY_ROWS:
            raise FormatError(path, f"{what} {shown(list(shape))} holds no element but claims {shown(rows)} "
                                    f"empty rows (at most {MAX_EMPTY_ROWS:,})")
    return count
