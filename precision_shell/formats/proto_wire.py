"""Protobuf wire-format primitives and per-field encoding info, shared by the graph readers.

The text reader (:mod:`.text_wire`) and the JSON reader (:mod:`.graph.atc_json`) both translate their
input straight into protobuf *wire format* and let upb's C decoder build the message
(``FromString``), so Python never touches a message object per field. What they need to know
about a field (its tag bytes, how its values are encoded, the integer range it accepts) depends
only on its descriptor: :func:`wire_field` computes it once; each reader caches a table of them
per message type, keyed the way its input names fields.
"""

from __future__ import annotations

from dataclasses import dataclass

from google.protobuf import descriptor as _desc

__all__ = ["BOOL", "BYTES", "DUP_NONDEFAULT", "DUP_NONE", "DUP_PRESENCE", "ENUM", "FLOAT", "I32",
           "I64", "INT", "MASK64", "MSG", "PACKED", "SINT", "STRING", "U32", "U64", "VARINT",
           "WireField", "varint", "wire_field"]

MASK64 = (1 << 64) - 1


def varint(value: int) -> bytes:
    value &= MASK64  # negative int32/int64/enum values are sign-extended to 10 bytes
    out = bytearray()
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


# lengths, small ints: no Python loop (one byte below 128, else two; built without varint():
# 16k calls were ~5 ms of every start)
VARINT = [bytes((i,)) for i in range(128)] + [bytes(((i & 0x7F) | 0x80, i >> 7)) for i in range(128, 1 << 14)]

# How a field's values are encoded.
MSG, STRING, BYTES, INT, SINT, BOOL, ENUM, FLOAT, PACKED = range(9)
_FD = _desc.FieldDescriptor
I32, I64, U32, U64 = (-(1 << 31), (1 << 31) - 1), (-(1 << 63), (1 << 63) - 1), (0, (1 << 32) - 1), (0, MASK64)
# descriptor type -> (kind, wire type, integer range or struct format)
_TYPES = {_FD.TYPE_MESSAGE: (MSG, 2, None), _FD.TYPE_STRING: (STRING, 2, None),
          _FD.TYPE_BYTES: (BYTES, 2, None), _FD.TYPE_BOOL: (BOOL, 0, None),
          _FD.TYPE_ENUM: (ENUM, 0, I32), _FD.TYPE_FLOAT: (FLOAT, 5, "<f"),
          _FD.TYPE_DOUBLE: (FLOAT, 1, "<d"), _FD.TYPE_INT32: (INT, 0, I32),
          _FD.TYPE_INT64: (INT, 0, I64), _FD.TYPE_UINT32: (INT, 0, U32),
          _FD.TYPE_UINT64: (INT, 0, U64), _FD.TYPE_SINT32: (SINT, 0, I32),
          _FD.TYPE_SINT64: (SINT, 0, I64), _FD.TYPE_FIXED32: (PACKED, 5, ("<I", U32)),
          _FD.TYPE_SFIXED32: (PACKED, 5, ("<i", I32)), _FD.TYPE_FIXED64: (PACKED, 1, ("<Q", U64)),
          _FD.TYPE_SFIXED64: (PACKED, 1, ("<q", I64))}
_NO_TYPE = (None, 0, None)  # groups (proto2 only): no kind; the readers skip or reject them
# text_format.Parse refuses a field with presence (message, oneof member) given twice, and a
# plain proto3 scalar given again once it holds a non-default value.
DUP_NONE, DUP_PRESENCE, DUP_NONDEFAULT = range(3)


@dataclass(frozen=True)
class WireField:
    """How to encode one field; computed once per field descriptor by :func:`wire_field`."""
    kind: int | None
    tag: bytes
    number: int
    dup: int
    oneof: int | None  # key in a block's "seen" dict (negative, so never a field number)
    desc: _desc.FieldDescriptor
    enum_names: dict[bytes, int] | None
    form: object  # integer range, or struct format (+ range) for fixed-size fields
    repeated: bool
    is_map: bool
    bounds: tuple[int, int] | None  # integer range of a varint integer or enum field
    message: _desc.Descriptor | None  # for message fields


def wire_field(fd: _desc.FieldDescriptor) -> WireField:
    """Everything needed to encode values of ``fd`` (cache the result per message type)."""
    kind, wire, form = _TYPES.get(fd.type, _NO_TYPE)
    return WireField(
        kind, varint(fd.number << 3 | wire), fd.number,
        DUP_NONE if fd.is_repeated else DUP_PRESENCE if fd.has_presence else DUP_NONDEFAULT,
        -1 - fd.containing_oneof.index if fd.containing_oneof is not None else None, fd,
        {v.name.encode(): v.number for v in fd.enum_type.values} if fd.enum_type else None, form,
        fd.is_repeated, fd.message_type is not None and fd.message_type.GetOptions().map_entry,
        form if kind in (INT, SINT, ENUM) else None, fd.message_type)
