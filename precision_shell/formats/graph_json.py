"""Read the JSON form of a GE graph, as ``atc --mode=5 --om=ge_proto_x.txt --json=x.json`` writes it.

atc's converter (GE ``Pb2Json``) walks the ``ge.proto.ModelDef`` by reflection and differs from
canonical proto3 JSON (formats.md A.8.5):

* keys are proto field names (``output_desc``), only set fields are written, empty messages are
  skipped (a repeated entry that is empty becomes ``null``);
* map fields (``attr``) are LISTS of ``{"key": ..., "value": {...}}`` objects;
* enums are names (``"DT_FLOAT16"``, ``"VT_LIST_STRING"``), or numbers without enum2str;
* a singular ``float`` is a string printed with ``%g`` ("0.5", "inf"); repeated floats are numbers
  (NaN/inf become ``null``, read back as NaN: UNCERTAIN, they cannot be told apart);
* a singular ``bytes`` (``AttrDef.s``) is C-escaped in newer GE (``\\344\\270\\255``), raw in older
  GE; repeated bytes (``list.s``) are raw UTF-8.

Being liberal, this reader also takes maps as JSON objects, int64 as strings, camelCase keys and
a bare GraphDef object. Unknown keys are ignored (as unknown text fields are). The tree is encoded
to wire format and decoded by upb in one call, which is several times faster than building the
message field by field from Python.
"""

from __future__ import annotations

import json
import math
import os
import struct
from pathlib import Path

from google.protobuf import descriptor as _desc
from google.protobuf import text_encoding
from google.protobuf.message import DecodeError

from ..errors import FormatError
from .protoload import ge_ir_pb

__all__ = ["parse_graph_json"]

_FD = _desc.FieldDescriptor
_MASK64 = (1 << 64) - 1
_RANGES = {_FD.TYPE_INT32: (-(1 << 31), (1 << 31) - 1), _FD.TYPE_INT64: (-(1 << 63), (1 << 63) - 1),
           _FD.TYPE_UINT32: (0, (1 << 32) - 1), _FD.TYPE_UINT64: (0, _MASK64)}
_WIRE = {_FD.TYPE_MESSAGE: 2, _FD.TYPE_STRING: 2, _FD.TYPE_BYTES: 2, _FD.TYPE_FLOAT: 5,
         _FD.TYPE_DOUBLE: 1}  # every other type ge.proto uses is a varint


class _JsonShapeError(Exception):
    def __init__(self, where: str, reason: str):
        super().__init__(f"{where}: {reason}")


def _varint(value: int) -> bytes:
    value &= _MASK64
    out = bytearray()
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


_TABLES: dict[_desc.Descriptor, dict[str, tuple[_desc.FieldDescriptor, bytes]]] = {}


def _table(message_desc: _desc.Descriptor) -> dict[str, tuple[_desc.FieldDescriptor, bytes]]:
    """JSON key (proto name and camelCase json_name) -> (field, tag bytes)."""
    table = _TABLES.get(message_desc)
    if table is None:
        table = {}
        for fd in message_desc.fields:
            entry = (fd, _varint(fd.number << 3 | _WIRE.get(fd.type, 0)))
            table[fd.json_name] = entry
            table[fd.name] = entry
        _TABLES[message_desc] = table
    return table


def _as_int(value, bounds: tuple[int, int], where: str) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        raise _JsonShapeError(where, f"expected an integer, got {json.dumps(value)[:40]}")
    try:
        number = int(value)
    except ValueError:
        raise _JsonShapeError(where, f"expected an integer, got {value[:40]!r}") from None
    if not bounds[0] <= number <= bounds[1]:
        raise _JsonShapeError(where, f"integer {number} out of range")
    return number


def _as_float(value, where: str) -> float:
    if value is None:  # nlohmann::json writes NaN and +-inf as null
        return math.nan
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise _JsonShapeError(where, f"expected a number, got {json.dumps(value)[:40]}")
    try:
        return float(value)  # "%g" strings: "0.5", "1e-05", "inf", "nan"
    except ValueError:
        raise _JsonShapeError(where, f"expected a number, got {value[:40]!r}") from None


def _scalar(value, fd: _desc.FieldDescriptor, repeated: bool, where: str) -> bytes:
    """Wire payload (no tag) of one scalar JSON value."""
    kind = fd.type
    if kind in (_FD.TYPE_STRING, _FD.TYPE_BYTES):
        if not isinstance(value, str):
            raise _JsonShapeError(where, f"expected a string, got {json.dumps(value)[:40]}")
        raw = value.encode("utf-8", "surrogateescape")
        if kind == _FD.TYPE_BYTES and not repeated and "\\" in value:
            try:  # newer GE C-escapes singular bytes; older GE wrote them raw (then keep them)
                raw = text_encoding.CUnescape(value)
            except ValueError:
                pass
        return _varint(len(raw)) + raw
    if kind == _FD.TYPE_BOOL:
        if isinstance(value, bool):
            return b"\x01" if value else b"\x00"
        if value in ("true", "false", 0, 1):
            return b"\x01" if value in ("true", 1) else b"\x00"
        raise _JsonShapeError(where, f"expected true or false, got {json.dumps(value)[:40]}")
    if kind == _FD.TYPE_ENUM:
        if isinstance(value, str) and not value.lstrip("-").isdigit():
            enum_value = fd.enum_type.values_by_name.get(value)
            if enum_value is None:
                raise _JsonShapeError(where, f"enum {fd.enum_type.full_name} has no value {value!r}")
            return _varint(enum_value.number)
        return _varint(_as_int(value, _RANGES[_FD.TYPE_INT32], where))
    if kind == _FD.TYPE_FLOAT:
        number = _as_float(value, where)
        try:
            return struct.pack("<f", number)
        except OverflowError:  # beyond float32: what a C cast gives
            return struct.pack("<f", math.copysign(math.inf, number))
    if kind == _FD.TYPE_DOUBLE:
        return struct.pack("<d", _as_float(value, where))
    return _varint(_as_int(value, _RANGES.get(kind, _RANGES[_FD.TYPE_INT64]), where))


def _message(obj, message_desc: _desc.Descriptor, where: str) -> bytes:
    """Wire bytes of one message given as a JSON object (``null`` = empty message)."""
    if obj is None:
        return b""
    if not isinstance(obj, dict):
        raise _JsonShapeError(where, f"expected an object for {message_desc.name}, "
                              f"got {type(obj).__name__}")
    table, out = _table(message_desc), []
    for key, value in obj.items():
        entry = table.get(key)
        if entry is None or value is None:  # unknown key, or a field written as null
            continue
        fd, tag = entry
        here = f"{where}.{key}"
        if fd.is_repeated:
            if isinstance(value, dict) and fd.message_type is not None \
                    and fd.message_type.GetOptions().map_entry:
                value = [{"key": k, "value": v} for k, v in value.items()]  # canonical JSON map
            if not isinstance(value, list):
                raise _JsonShapeError(here, f"expected a list, got {type(value).__name__}")
            items = enumerate(value)
        else:
            items = ((None, value),)
        for index, item in items:
            at = here if index is None else f"{here}[{index}]"
            if fd.type == _FD.TYPE_MESSAGE:
                body = _message(item, fd.message_type, at)
                out.append(tag + _varint(len(body)) + body)
            else:
                out.append(tag + _scalar(item, fd, index is not None, at))
    return b"".join(out)


def parse_graph_json(path: str | os.PathLike):
    """Parse an atc ``--mode=5`` graph JSON into a ``ge.proto.ModelDef``; FormatError if bad."""
    try:
        text = Path(path).read_bytes()
    except OSError as exc:
        raise FormatError(path, f"cannot read: {exc.strerror or exc}") from None
    if not text.strip():
        raise FormatError(path, "empty graph file")
    try:
        tree = json.loads(text)
    except UnicodeDecodeError as exc:
        raise FormatError(path, f"not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    except json.JSONDecodeError as exc:
        raise FormatError(path, f"not JSON: {exc.msg} (line {exc.lineno}, column {exc.colno})") from None
    if isinstance(tree, dict) and "op" in tree and "graph" not in tree:
        tree = {"graph": [tree]}  # a bare GraphDef
    if not isinstance(tree, dict) or not isinstance(tree.get("graph"), list):
        raise FormatError(path, 'not a GE graph JSON: expected an object with a "graph" list')
    model_cls = ge_ir_pb().ModelDef
    try:
        return model_cls.FromString(_message(tree, model_cls.DESCRIPTOR, "$"))
    except _JsonShapeError as exc:
        raise FormatError(path, str(exc)) from None
    except (RecursionError, DecodeError):
        raise FormatError(path, "graph JSON nested too deeply") from None
