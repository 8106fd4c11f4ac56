"""A v1 dump file (formats.md §1.2): the whole file is one ``DumpData`` with the tensor bytes
inline in ``data``; tried only when the file is not a valid v2 file. The offsets of the inline
bytes are found by walking the protobuf wire format."""

from __future__ import annotations

from ..errors import FormatError
from .dump_types import DumpHeader, _dump_data_class, _entry

# protobuf refuses messages over 2 GiB, so a v1 (inline) file cannot be larger.
_V1_MAX_BYTES = 2**31 - 1


def try_v1(source, path: str, file_size: int, v2_error: FormatError) -> DumpHeader:
    """The whole file as one inline-data DumpData; re-raise the v2 error when it is not one."""
    if file_size > _V1_MAX_BYTES:
        raise v2_error
    blob = source.whole(file_size)
    try:
        msg = _dump_data_class().FromString(blob)
    except Exception:
        raise v2_error from None
    tensors = list(msg.input) + list(msg.output) + list(msg.buffer) + list(msg.space)
    if not any(t.data for t in tensors):
        raise v2_error
    try:
        spans = _inline_data_spans(blob)
    except ValueError:
        raise v2_error from None
    groups = []
    for kind, items in (("input", msg.input), ("output", msg.output), ("buffer", msg.buffer), ("space", msg.space)):
        groups.append([_entry(kind, i, t, *spans.get((kind, i), (0, 0))) for i, t in enumerate(items)])
    return DumpHeader(path, msg.op_name, msg.version, msg.dump_time, "v1", file_size, file_size,
                      *groups, [(a.name, a.value) for a in msg.attr])


# DumpData field number -> (kind, field number of ``data`` inside that message)
_INLINE_FIELDS = {3: ("output", 5), 4: ("input", 4), 5: ("buffer", 2), 8: ("space", 2)}


def _varint(buf: bytes, pos: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        if pos >= len(buf) or shift > 63:
            raise ValueError("bad varint")
        b = buf[pos]
        pos += 1
        value |= (b & 0x7F) << shift
        if not b & 0x80:
            return value, pos
        shift += 7


def _fields(buf: bytes, start: int, end: int):
    """(field number, wire type, value start, value end) of each field in buf[start:end]."""
    pos = start
    while pos < end:
        key, pos = _varint(buf, pos)
        number, wire = key >> 3, key & 7
        if wire == 2:
            length, pos = _varint(buf, pos)
            nxt = pos + length
        elif wire in (0, 1, 5):
            nxt = _varint(buf, pos)[1] if wire == 0 else pos + (8 if wire == 1 else 4)
        else:
            raise ValueError(f"unsupported wire type {wire}")
        if nxt > end:
            raise ValueError("field overruns its message")
        yield number, wire, pos, nxt
        pos = nxt


def _inline_data_spans(blob: bytes) -> dict[tuple[str, int], tuple[int, int]]:
    """Absolute (offset, length) of each tensor's inline ``data`` in a v1 file."""
    spans: dict[tuple[str, int], tuple[int, int]] = {}
    counts = {kind: 0 for kind, _ in _INLINE_FIELDS.values()}
    for number, wire, start, end in _fields(blob, 0, len(blob)):
        if number not in _INLINE_FIELDS or wire != 2:
            continue
        kind, data_field = _INLINE_FIELDS[number]
        index = counts[kind]
        counts[kind] += 1
        for sub_number, sub_wire, s, e in _fields(blob, start, end):
            if sub_number == data_field and sub_wire == 2:
                spans[(kind, index)] = (s, e - s)  # the last occurrence wins, as in protobuf
    return spans
