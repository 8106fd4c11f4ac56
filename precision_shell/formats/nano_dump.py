"""The "nano" dump container: a TLV header instead of the protobuf one (formats.md §1.5).

Byte layout, as read from msaccucmp's ``dump_parse/nano_dump_data.py`` + ``cmp_utils/tlv_parse.py``
(all integers little-endian, fields packed with no alignment padding)::

    u64 header_len | header (header_len bytes) | input 0 data | input 1 data | ... | output 0 data | ...

    header   = u32 magic 0x5A5A5A5A, u32 version,
               [TLV tag 4 (input desc)], [TLV tag 5 (output desc)]
    TLV      = u32 tag, u32 length (bytes), value
    inputs   = u32 count, count x input record
    input    = i32 data_type, i32 format, i32 address_type, u64 address, u64 offset, u64 size,
               u32 tlv_list_len, [TLNV tag 0: u64 shape dims], [TLNV tag 1: u64 original dims]
    outputs  = u32 count, count x output record
    output   = i32 data_type, i32 format, i32 address_type, i32 original_index,
               i32 original_data_type, i32 original_format, u64 address, u64 offset, u64 size,
               u32 tlv_list_len, [TLNV 0 shape], [TLNV 1 original shape], [TLNV 2 origin name chars]
    TLNV     = u32 tag, u32 length (bytes), length/element-size elements

A bracketed block is optional: when the next u32 is not its tag the field is absent and nothing
is consumed (the vendor parser's rule, kept so we read what it reads). Tensor data follows the
header back to back in the order inputs, outputs; the ``offset``/``address`` fields describe
device memory, not the file.

Not confirmed (no sample file exists publicly): the meaning of ``tlv_list_len`` (ignored by the
vendor parser and here; the writer stores the byte length of the TLNV list), whether a TLV block
length may differ from the bytes its value occupies (the vendor parser ignores it; so do we),
and that format codes use the protobuf ``OutputFormat`` numbering (the vendor uses them as such).
The nano data-type codes differ from the protobuf ones and are translated by name.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

NANO_MAGIC = 0x5A5A5A5A
_TAG_INPUTS = 4
_TAG_OUTPUTS = 5
_TAG_SHAPE = 0
_TAG_ORIGINAL_SHAPE = 1
_TAG_ORIGIN_NAME = 2

# nano code -> protobuf OutputDataType code, matched by type name. (msaccucmp maps only the
# types it can decode and sends RESOURCE to INT64; mapping every name keeps "unsupported" errors
# precise and decoding identical, since our RESOURCE decodes as int64.)
NANO_TO_PROTO_DTYPE = {
    0: 1,    # DT_FLOAT
    1: 2,    # DT_FLOAT16
    2: 3,    # DT_INT8
    3: 7,    # DT_INT32
    4: 4,    # DT_UINT8
    6: 5,    # DT_INT16
    7: 6,    # DT_UINT16
    8: 9,    # DT_UINT32
    9: 8,    # DT_INT64
    10: 10,  # DT_UINT64
    11: 12,  # DT_DOUBLE
    12: 11,  # DT_BOOL
    **{code: code for code in range(13, 28)},  # DT_STRING .. DT_BF16 share their numbers
    28: 0,   # DT_UNDEFINED
    29: 28,  # DT_INT4
    30: 29,  # DT_UINT1
    31: 30,  # DT_INT2
    32: 31,  # DT_UINT2
}
PROTO_TO_NANO_DTYPE = {proto: nano for nano, proto in NANO_TO_PROTO_DTYPE.items()}

_INPUT_FIXED = struct.Struct("<iiiQQQI")
_OUTPUT_FIXED = struct.Struct("<iiiiiiQQQI")
_U32 = struct.Struct("<I")
_TL = struct.Struct("<II")


class NanoFormatError(ValueError):
    """The TLV header is malformed; the caller turns it into a FormatError naming the file."""


@dataclass(frozen=True, slots=True)
class NanoTensorDesc:
    dtype: int                             # protobuf OutputDataType code
    format: int
    size: int
    shape: tuple[int, ...]
    original_shape: tuple[int, ...] | None
    original_name: str | None = None       # outputs only
    original_index: int | None = None      # outputs only


@dataclass(frozen=True, slots=True)
class NanoHeader:
    version: int
    inputs: list[NanoTensorDesc]
    outputs: list[NanoTensorDesc]


def is_nano_header(header: bytes) -> bool:
    """True when the header bytes start with the nano magic (a protobuf header cannot)."""
    return len(header) >= 4 and _U32.unpack_from(header)[0] == NANO_MAGIC


class _Reader:
    def __init__(self, buf: bytes):
        self.buf = buf
        self.pos = 0

    def take(self, st: struct.Struct) -> tuple:
        if self.pos + st.size > len(self.buf):
            raise NanoFormatError(f"header truncated at byte {self.pos} (needs {st.size} more bytes)")
        values = st.unpack_from(self.buf, self.pos)
        self.pos += st.size
        return values

    def optional_block(self, tag: int) -> int | None:
        """Length of the block tagged ``tag`` at the cursor (cursor moved past tag+length), or None."""
        if self.pos + _TL.size > len(self.buf):
            return None
        got, length = _TL.unpack_from(self.buf, self.pos)
        if got != tag:
            return None
        self.pos += _TL.size
        return length

    def u64_list(self, tag: int) -> tuple[int, ...] | None:
        length = self.optional_block(tag)
        if length is None:
            return None
        if length % 8:
            raise NanoFormatError(f"dims block (tag {tag}) length {length} is not a multiple of 8")
        if self.pos + length > len(self.buf):
            raise NanoFormatError(f"dims block (tag {tag}) of {length} bytes overruns the header")
        dims = struct.unpack_from(f"<{length // 8}Q", self.buf, self.pos)
        self.pos += length
        return tuple(dims)

    def chars(self, tag: int) -> str | None:
        length = self.optional_block(tag)
        if length is None:
            return None
        if self.pos + length > len(self.buf):
            raise NanoFormatError(f"name block (tag {tag}) of {length} bytes overruns the header")
        raw = self.buf[self.pos:self.pos + length]
        self.pos += length
        return raw.rstrip(b"\0").decode("utf-8", errors="replace")


def _proto_dtype(nano_code: int) -> int:
    try:
        return NANO_TO_PROTO_DTYPE[nano_code]
    except KeyError:
        raise NanoFormatError(f"unknown nano data type code {nano_code}") from None


def _count(r: _Reader, what: str) -> int:
    (n,) = r.take(_U32)
    # Each record is at least its fixed part; a larger count can only come from corruption.
    if n * _INPUT_FIXED.size > len(r.buf) - r.pos:
        raise NanoFormatError(f"{what} count {n} does not fit in the header")
    return n


def parse_nano_header(header: bytes) -> NanoHeader:
    """Decode the TLV header (the bytes after the u64 length). Raises NanoFormatError."""
    r = _Reader(header)
    magic, version = r.take(_TL)
    if magic != NANO_MAGIC:
        raise NanoFormatError(f"bad magic 0x{magic:08x}")
    inputs: list[NanoTensorDesc] = []
    outputs: list[NanoTensorDesc] = []
    if r.optional_block(_TAG_INPUTS) is not None:
        for _ in range(_count(r, "input")):
            dtype, fmt, _addr_type, _addr, _offset, size, _tlv_len = r.take(_INPUT_FIXED)
            shape = r.u64_list(_TAG_SHAPE)
            original = r.u64_list(_TAG_ORIGINAL_SHAPE)
            inputs.append(NanoTensorDesc(_proto_dtype(dtype), fmt, size, shape or (), original or None))
    if r.optional_block(_TAG_OUTPUTS) is not None:
        for _ in range(_count(r, "output")):
            (dtype, fmt, _addr_type, orig_index, _orig_dtype, _orig_fmt,
             _addr, _offset, size, _tlv_len) = r.take(_OUTPUT_FIXED)
            shape = r.u64_list(_TAG_SHAPE)
            original = r.u64_list(_TAG_ORIGINAL_SHAPE)
            name = r.chars(_TAG_ORIGIN_NAME)
            outputs.append(NanoTensorDesc(_proto_dtype(dtype), fmt, size, shape or (), original or None,
                                          name or None, orig_index if orig_index >= 0 else None))
    return NanoHeader(version, inputs, outputs)


def _tlnv_u64(tag: int, dims: Sequence[int]) -> bytes:
    return _TL.pack(tag, 8 * len(dims)) + struct.pack(f"<{len(dims)}Q", *dims)


def _encode_tensor(t, is_output: bool) -> tuple[bytes, bytes]:
    data = np.ascontiguousarray(t.data)
    if data.dtype.byteorder == ">":
        data = data.astype(data.dtype.newbyteorder("<"))
    raw = data.tobytes()
    tlvs = _tlnv_u64(_TAG_SHAPE, data.shape)
    if t.original_shape is not None:
        tlvs += _tlnv_u64(_TAG_ORIGINAL_SHAPE, t.original_shape)
    if t.dtype not in PROTO_TO_NANO_DTYPE:
        raise ValueError(f"data type code {t.dtype} has no nano dump code")
    nano_dtype = PROTO_TO_NANO_DTYPE[t.dtype]
    if not is_output:
        return _INPUT_FIXED.pack(nano_dtype, t.format, 0, 0, 0, len(raw), len(tlvs)) + tlvs, raw
    name = (t.original_name or "").encode("utf-8")
    if name:
        tlvs += _TL.pack(_TAG_ORIGIN_NAME, len(name)) + name
    index = t.original_output_index if t.original_output_index is not None else -1
    fixed = _OUTPUT_FIXED.pack(nano_dtype, t.format, 0, index, nano_dtype, t.format, 0, 0, len(raw), len(tlvs))
    return fixed + tlvs, raw


def encode_nano_dump(inputs: Sequence, outputs: Sequence, *, version: int = 0) -> bytes:
    """Whole file bytes for ``DumpTensor``-like objects (data already in device layout)."""
    header = _TL.pack(NANO_MAGIC, version)
    payload = []
    for tag, tensors, is_output in ((_TAG_INPUTS, inputs, False), (_TAG_OUTPUTS, outputs, True)):
        records = []
        for t in tensors:
            record, raw = _encode_tensor(t, is_output)
            records.append(record)
            payload.append(raw)
        body = _U32.pack(len(tensors)) + b"".join(records)
        header += _TL.pack(tag, len(body)) + body
    return struct.pack("<Q", len(header)) + header + b"".join(payload)


def write_nano_dump(path, inputs: Sequence, outputs: Sequence, *, version: int = 0) -> int:
    """Write a nano dump (for tests and the sample generator); returns bytes written."""
    blob = encode_nano_dump(inputs, outputs, version=version)
    with open(path, "wb") as f:
        f.write(blob)
    return len(blob)
