"""Two 4-bit codes per byte (FP4 E2M1/E1M2): element 2i in the low nibble, 2i+1 in the high one,
in device order (for FRACTAL_NZ after the rearrangement), as CANN ops-tensor ``gen_data_mx.py``
packs them; the dump header's shape counts elements, its ``size`` bytes."""

from __future__ import annotations

import numpy as np


def unpack_nibbles(packed: np.ndarray, count: int) -> np.ndarray:
    """``count`` 4-bit codes (uint8, one per element) from the bytes ``packed``."""
    raw = np.asarray(packed, dtype=np.uint8).reshape(-1)
    codes = np.empty(raw.size * 2, dtype=np.uint8)
    np.bitwise_and(raw, 0x0F, out=codes[0::2])
    np.right_shift(raw, 4, out=codes[1::2])
    return codes[:count]


def pack_nibbles(codes: np.ndarray) -> np.ndarray:
    """Bytes holding ``codes`` (4-bit values, flat device order) two per byte; an odd count gets
    a zero high nibble in its last byte."""
    flat = np.asarray(codes, dtype=np.uint8).reshape(-1) & 0x0F
    if flat.size % 2:
        flat = np.concatenate([flat, np.zeros(1, np.uint8)])
    return (flat[0::2] | (flat[1::2] << 4)).astype(np.uint8)
