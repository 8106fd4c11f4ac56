"""The low-precision dump dtypes: each format's values, specials and storage.

Every format here has at most 256 codes, so decoding is a lookup in a float32 table of all of
them, built once: from ``ml_dtypes`` for the OCP types it implements (float8_e5m2,
float8_e4m3fn, float8_e8m0fnu, float6_e3m2fn, float6_e2m3fn, float4_e2m1fn: OCP 8-bit FP
spec and OCP MX v1.0), from the definitions in ``hifloat8`` and below for the ones it does not
(HiFloat8; FP4 E1M2, which CANN opbase ``float4_e1m2.h`` defines and OCP does not).
Dtype codes are ``dump_data.proto``'s (formats.md Appendix B).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from ...errors import FormatError
from .hifloat8 import hifloat8_table
from .packing import unpack_nibbles


@dataclass(frozen=True)
class LowbitFormat:
    name: str            # the name pshell shows and recipes use
    dtype_code: int      # dump_data.proto's DataType number
    bits: int            # bits per element (FP6: stored one per byte in the low 6 bits)
    packed: bool         # two elements per byte (FP4)
    source: str          # where the value table comes from
    ties: str            # "even" (OCP, IEEE) or "away" (HiFloat8) for the encoders

    @property
    def values(self) -> np.ndarray:
        """float32 value of each of the 2**bits codes (read-only)."""
        return _values(self.name)

    @property
    def max_finite(self) -> float:
        v = self.values
        return float(np.max(np.abs(v[np.isfinite(v)])))

    @property
    def nan_codes(self) -> tuple[int, ...]:
        return tuple(int(c) for c in np.flatnonzero(np.isnan(self.values)))

    @property
    def inf_codes(self) -> tuple[int, ...]:
        return tuple(int(c) for c in np.flatnonzero(np.isinf(self.values)))

    def storage_bytes(self, count: int) -> int:
        return (count + 1) // 2 if self.packed else count


def _e1m2_table() -> np.ndarray:
    """FP4 E1M2: S|E|MM, exponent bias 1, no inf or NaN: E=0 is 0.MM, E=1 is 1.MM (max 1.75)."""
    out = np.empty(16, np.float32)
    for code in range(16):
        e, mm = (code >> 2) & 1, code & 3
        magnitude = (e + mm / 4.0)           # 2**(e - bias) with bias 1 is 1 for both E values
        out[code] = -magnitude if code & 8 else magnitude
    return out


def _from_ml_dtypes(type_name: str, bits: int) -> np.ndarray:
    import ml_dtypes   # here: a table is built on the first tensor of its type (~4 ms of import)

    codes = np.arange(1 << bits, dtype=np.uint8)
    return codes.view(getattr(ml_dtypes, type_name)).astype(np.float32)


_TABLES = {
    "hifloat8": hifloat8_table,
    "float8_e5m2": lambda: _from_ml_dtypes("float8_e5m2", 8),
    "float8_e4m3fn": lambda: _from_ml_dtypes("float8_e4m3fn", 8),
    "float8_e8m0": lambda: _from_ml_dtypes("float8_e8m0fnu", 8),
    "float6_e3m2": lambda: _from_ml_dtypes("float6_e3m2fn", 6),
    "float6_e2m3": lambda: _from_ml_dtypes("float6_e2m3fn", 6),
    "float4_e2m1": lambda: _from_ml_dtypes("float4_e2m1fn", 4),
    "float4_e1m2": _e1m2_table,
}

FORMATS: tuple[LowbitFormat, ...] = (
    LowbitFormat("hifloat8", 33, 8, False, "arXiv 2409.16626 (pshell's own table)", "away"),
    LowbitFormat("float8_e5m2", 34, 8, False, "ml_dtypes.float8_e5m2", "even"),
    LowbitFormat("float8_e4m3fn", 35, 8, False, "ml_dtypes.float8_e4m3fn", "even"),
    LowbitFormat("float8_e8m0", 36, 8, False, "ml_dtypes.float8_e8m0fnu", "even"),
    LowbitFormat("float6_e3m2", 37, 6, False, "ml_dtypes.float6_e3m2fn", "even"),
    LowbitFormat("float6_e2m3", 38, 6, False, "ml_dtypes.float6_e2m3fn", "even"),
    LowbitFormat("float4_e2m1", 39, 4, True, "ml_dtypes.float4_e2m1fn", "even"),
    LowbitFormat("float4_e1m2", 40, 4, True, "CANN opbase float4_e1m2.h (pshell's own table)", "even"),
)
_BY_CODE = {f.dtype_code: f for f in FORMATS}
_BY_NAME = {f.name: f for f in FORMATS}


@lru_cache(maxsize=None)
def _values(name: str) -> np.ndarray:
    table = _TABLES[name]()
    table.setflags(write=False)
    return table


def by_dtype_code(code: int) -> LowbitFormat | None:
    return _BY_CODE.get(code)


def by_name(name: str) -> LowbitFormat:
    return _BY_NAME[name]


def decode_codes(fmt: LowbitFormat, raw: np.ndarray, count: int, path: str | None = None,
                 label: str = "tensor") -> np.ndarray:
    """``count`` elements of ``fmt`` stored in the bytes ``raw`` (device order) as float32."""
    raw = np.asarray(raw, dtype=np.uint8).reshape(-1)
    if fmt.packed and count % 2:
        raise FormatError(path, f"{label}: {fmt.name} is stored two per byte, but its shape holds an odd "
                                f"number of elements ({count})")
    need = fmt.storage_bytes(count)
    if raw.size < need:
        raise FormatError(path, f"truncated: {label} needs {need} bytes of {fmt.name}, {raw.size} present")
    if fmt.packed:
        codes = unpack_nibbles(raw[:need], count)
    elif fmt.bits < 8:
        codes = raw[:count] & np.uint8((1 << fmt.bits) - 1)   # FP6: the low 6 bits of each byte
    else:
        codes = raw[:count]
    return fmt.values[codes]
