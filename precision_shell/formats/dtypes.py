"""Names and numpy dtypes of the dump's data-type and format codes (formats.md §1.3, §1.4).

Names come from the enums in ``protos/dump_data.proto`` so there is one list of codes in the
repo; the lookups are cached because they run for every tensor of every indexed dump file.
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np

from ..errors import FormatError
from .proto_enums import dump_data_enums

DT_UNDEFINED = 0
DT_FLOAT = 1
DT_FLOAT16 = 2
DT_INT8 = 3
DT_UINT8 = 4
DT_INT16 = 5
DT_UINT16 = 6
DT_INT32 = 7
DT_INT64 = 8
DT_UINT32 = 9
DT_UINT64 = 10
DT_BOOL = 11
DT_DOUBLE = 12
DT_COMPLEX64 = 16
DT_COMPLEX128 = 17
DT_RESOURCE = 23
DT_BF16 = 27
DT_FLOAT8_E5M2 = 34
DT_FLOAT8_E4M3FN = 35
DT_HIFLOAT8 = 33
DT_FLOAT8_E8M0 = 36
DT_FLOAT6_E3M2 = 37
DT_FLOAT6_E2M3 = 38
DT_FLOAT4_E2M1 = 39
DT_FLOAT4_E1M2 = 40
# Decoded by table (formats/lowbit) to float32 before any layout is restored: HiFloat8 and FP4
# E1M2 have no numpy type, FP4 is packed two per byte; E8M0 and FP6 go the same way so that every
# low-precision dtype reaches the commands as float32.
TABLE_DECODED = frozenset({DT_HIFLOAT8, DT_FLOAT8_E8M0, DT_FLOAT6_E3M2, DT_FLOAT6_E2M3,
                           DT_FLOAT4_E2M1, DT_FLOAT4_E1M2})

FORMAT_NCHW = 0
FORMAT_NHWC = 1
FORMAT_ND = 2
FORMAT_NC1HWC0 = 3
FORMAT_FRACTAL_Z = 4
FORMAT_NC1HWC0_C04 = 12
FORMAT_FRACTAL_Z_C04 = 13
FORMAT_HWCN = 16
FORMAT_FRACTAL_NZ = 29
FORMAT_NCDHW = 30
FORMAT_NDC1HWC0 = 32

# ACL's public aclFormat lists these after the proto enum ends (formats.md §1.3); naming them
# lets a dump that carries one say so instead of showing a bare number.
_EXTRA_FORMAT_NAMES = {
    50: "FRACTAL_NZ_C0_16", 51: "FRACTAL_NZ_C0_32", 52: "FRACTAL_NZ_C0_2",
    53: "FRACTAL_NZ_C0_4", 54: "FRACTAL_NZ_C0_8",
}

# Little-endian on purpose: every producer is a little-endian host (formats.md §1.2), and an
# explicit byte order keeps the result right on any machine that reads the file.
_NUMPY_DTYPES: dict[int, np.dtype] = {
    DT_UNDEFINED: np.dtype("i1"),   # raw bytes; the reader forces the shape to [size]
    DT_FLOAT: np.dtype("<f4"),
    DT_FLOAT16: np.dtype("<f2"),
    DT_INT8: np.dtype("i1"),
    DT_UINT8: np.dtype("u1"),
    DT_INT16: np.dtype("<i2"),
    DT_UINT16: np.dtype("<u2"),
    DT_INT32: np.dtype("<i4"),
    DT_INT64: np.dtype("<i8"),
    DT_UINT32: np.dtype("<u4"),
    DT_UINT64: np.dtype("<u8"),
    DT_BOOL: np.dtype("?"),
    DT_DOUBLE: np.dtype("<f8"),
    DT_COMPLEX64: np.dtype("<c8"),
    DT_COMPLEX128: np.dtype("<c16"),
    DT_RESOURCE: np.dtype("<i8"),   # a resource handle, shown as int64 like msaccucmp does
}
# ml_dtypes implements both IEEE-style fp8 formats exactly (msaccucmp's own e4m3fn decoder has
# no NaN case, formats.md A.5), so these need no software decoding. Its types join the table on
# the first tensor that has one: importing ml_dtypes costs ~4 ms, which a dump of float16/float32
# tensors never needs.
_ML_DTYPE_NAMES = {DT_BF16: "bfloat16", DT_FLOAT8_E5M2: "float8_e5m2", DT_FLOAT8_E4M3FN: "float8_e4m3fn"}


def _add_ml_dtypes() -> None:
    import ml_dtypes

    for code, name in _ML_DTYPE_NAMES.items():
        _NUMPY_DTYPES[code] = np.dtype(getattr(ml_dtypes, name))


@lru_cache(maxsize=None)
def _dtype_names() -> dict[int, str]:
    enum = dump_data_enums()["OutputDataType"]
    return {number: name for name, number in enum.items()}


@lru_cache(maxsize=None)
def _format_names() -> dict[int, str]:
    enum = dump_data_enums()["OutputFormat"]
    names = {number: name.removeprefix("FORMAT_") for name, number in enum.items()}
    names.update(_EXTRA_FORMAT_NAMES)
    return names


@lru_cache(maxsize=None)
def _format_codes() -> dict[str, int]:
    return {name: code for code, name in _format_names().items()}


def dtype_name(code: int) -> str:
    """``2 -> "DT_FLOAT16"``; an unknown code -> ``"DT_<code>"``."""
    return _dtype_names().get(code, f"DT_{code}")


def format_name(code: int) -> str:
    """``29 -> "FRACTAL_NZ"``; an unknown code -> ``"FORMAT_<code>"``."""
    return _format_names().get(code, f"FORMAT_{code}")


def format_code(name: str) -> int | None:
    """Inverse of :func:`format_name` (``"NC1HWC0"`` or ``"FORMAT_NC1HWC0"``, any case)."""
    key = name.strip().upper().removeprefix("FORMAT_")
    if key in _format_codes():
        return _format_codes()[key]
    if key.isdigit():
        return int(key)
    return None


def normalize_format(fmt: str | int) -> str:
    """Canonical format name for a code or a name in any spelling."""
    if isinstance(fmt, (int, np.integer)):
        return format_name(int(fmt))
    code = format_code(fmt)
    return format_name(code) if code is not None else fmt.strip().upper().removeprefix("FORMAT_")


def is_supported_dtype(code: int) -> bool:
    return code in _NUMPY_DTYPES or code in _ML_DTYPE_NAMES


def needs_decoding(code: int) -> bool:
    """Whether a tensor of ``code`` is not usable as its raw bytes viewed as a numpy dtype (bool
    bytes, raw bytes, table-decoded low-precision types): readers then take the general path."""
    return code in (DT_BOOL, DT_UNDEFINED) or code in TABLE_DECODED


def npy_ready(array: np.ndarray) -> tuple[np.ndarray, str | None]:
    """``array`` as .npy can hold it: ml_dtypes types (bfloat16, float8, ...) have no portable .npy
    dtype (they would be stored as raw void bytes) and are written as float32, which holds every
    one of their values exactly; the note says so."""
    if array.dtype.isbuiltin == 2:       # a user-defined (ml_dtypes) type
        return array.astype(np.float32), f"{array.dtype.name} written as float32 (exact)"
    return array, None


def numpy_dtype(code: int, path: str | None = None) -> np.dtype:
    """The numpy dtype the bytes of a tensor with data-type ``code`` decode to.

    Raises :class:`FormatError` for types that cannot be decoded exactly (strings, quantized,
    packed sub-byte types, HiFloat8, ...).
    """
    try:
        return _NUMPY_DTYPES[code]
    except KeyError:
        if code in _ML_DTYPE_NAMES:
            _add_ml_dtypes()
            return _NUMPY_DTYPES[code]
    except TypeError:
        pass
    raise FormatError(path, f"unsupported data type {dtype_name(code)} (code {code})")
