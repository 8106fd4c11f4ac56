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

from google.protobuf import descriptor as _desc
from google.protobuf import text_encoding
from google.protobuf.message import DecodeError

from ...errors import FormatError
from ..input_files import read_regular
from ..proto_wire import VARINT as _VARINT, WireField, varint as _varint, wire_field
from ..protoload import ge_ir_pb
from ..quoting import JSON_LONG_NUMBER, JSON_TOO_DEEP, shown

__all__ = ["parse_graph_json"]

_FD = _desc.FieldDescriptor


class _JsonShapeError(Exception):
    """A value that does not fit the schema; ``path`` grows while the error unwinds."""

    def __init__(self, reason: str):
        super().__init__(reason)
        self.reason, self.path = reason, []

    def where(self) -> str:
        return "$" + "".join(reversed(self.path))


_TABLES: dict[_desc.Descriptor, dict[str, WireField]] = {}


def _table(message_desc: _desc.Descriptor) -> dict[str, WireField]:
    """JSON key (proto name and camelCase json_name) -> how to encode the field."""
    table = _TABLES.get(message_desc)
    if table is None:
        table = {}
        for fd in message_desc.fields:
            table[fd.json_name] = table[fd.name] = wire_field(fd)
        _TABLES[message_desc] = table
    return table


def _as_int(value, bounds: tuple[int, int]) -> int:
    if type(value) is not int:
        if isinstance(value, bool) or not isinstance(value, (int, str)):
            raise _JsonShapeError(f"expected an integer, got {shown(value)}")
        try:
            value = int(value)
        except ValueError:
            raise _JsonShapeError(f"expected an integer, got {shown(value)}") from None
    if not bounds[0] <= value <= bounds[1]:
        raise _JsonShapeError(f"integer {shown(value)} out of range")
    return value


def _as_float(value) -> float:
    if value is None:  # nlohmann::json writes NaN and +-inf as null
        return math.nan
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise _JsonShapeError(f"expected a number, got {shown(value)}")
    try:
        return float(value)  # "%g" strings: "0.5", "1e-05", "inf", "nan"
    except ValueError:
        raise _JsonShapeError(f"expected a number, got {shown(value)}") from None


def _scalar(value, f: WireField, repeated: bool) -> bytes:
    """Wire payload (no tag) of one scalar JSON value."""
    kind = f.desc.type
    if f.bounds is not None and type(value) is int and kind != _FD.TYPE_ENUM \
            and 0 <= value < 16384 and f.bounds[0] <= 0 and kind != _FD.TYPE_SINT32 and kind != _FD.TYPE_SINT64:
        return _VARINT[value]  # the common small int
    if kind == _FD.TYPE_STRING or kind == _FD.TYPE_BYTES:
        if type(value) is not str:
            raise _JsonShapeError(f"expected a string, got {shown(value)}")
        raw = value.encode("utf-8", "surrogateescape")
        if kind == _FD.TYPE_BYTES and not repeated and "\\" in value:
            try:  # newer GE C-escapes singular bytes; older GE wrote them raw (then keep them)
                raw = text_encoding.CUnescape(value)
            except ValueError:
                pass
        return (_VARINT[len(raw)] if len(raw) < 16384 else _varint(len(raw))) + raw
    if f.bounds is not None and kind != _FD.TYPE_ENUM:
        number = _as_int(value, f.bounds)
        if kind == _FD.TYPE_SINT32 or kind == _FD.TYPE_SINT64:
            number = number << 1 if number >= 0 else (-number << 1) - 1
        return _VARINT[number] if 0 <= number < 16384 else _varint(number)
    if kind == _FD.TYPE_ENUM:
        if isinstance(value, str) and not value.lstrip("-").isdigit():
            enum_value = f.desc.enum_type.values_by_name.get(value)
            if enum_value is None:
                raise _JsonShapeError(f"enum {f.desc.enum_type.full_name} has no value {shown(value)}")
            return _varint(enum_value.number)
        return _varint(_as_int(value, f.bounds))
    if kind == _FD.TYPE_BOOL:
        if value is True or value in ("true", 1):
            return b"\x01"
        if value is False or value in ("false", 0):
            return b"\x00"
        raise _JsonShapeError(f"expected true or false, got {shown(value)}")
    if kind == _FD.TYPE_FLOAT:
        number = _as_float(value)
        try:
            return struct.pack("<f", number)
        except OverflowError:  # beyond float32: what a C cast gives
            return struct.pack("<f", math.copysign(math.inf, number))
    if kind == _FD.TYPE_DOUBLE:
        return struct.pack("<d", _as_float(value))
    raise _JsonShapeError(f"field type {kind} is not supported")


def _message(obj, table: dict[str, WireField]) -> bytes:
    """Wire bytes of one message given as a JSON object (``null`` = empty message)."""
    if obj is None:
        return b""
    if type(obj) is not dict:
        raise _JsonShapeError(f"expected an object, got {type(obj).__name__}")
    out = []
    for key, value in obj.items():
        f = table.get(key)
        if f is None or value is None:  # unknown key, or a field written as null
            continue
        try:
            if f.message is None and not f.repeated:
                out.append(f.tag + _scalar(value, f, False))
                continue
            if not f.repeated:
                body = _message(value, _table(f.message))
                out.append(f.tag + (_VARINT[len(body)] if len(body) < 16384 else _varint(len(body))))
                out.append(body)
                continue
            if f.is_map and type(value) is dict:  # canonical proto3 JSON map
                value = [{"key": k, "value": v} for k, v in value.items()]
            if type(value) is not list:
                raise _JsonShapeError(f"expected a list, got {type(value).__name__}")
            child = _table(f.message) if f.message is not None else None
            for index, item in enumerate(value):
                try:
                    if child is not None:
                        body = _message(item, child)
                        out.append(f.tag + (_VARINT[len(body)] if len(body) < 16384 else _varint(len(body))))
                        out.append(body)
                    else:
                        out.append(f.tag + _scalar(item, f, True))
                except _JsonShapeError as exc:
                    exc.path.append(f"[{index}]")
                    raise
        except _JsonShapeError as exc:
            exc.path.append(f".{key}")
            raise
    return b"".join(out)


def parse_graph_json(path: str | os.PathLike):
    """Parse an atc ``--mode=5`` graph JSON into a ``ge.proto.ModelDef``; FormatError if bad."""
    try:
        text = read_regular(path)
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
    except RecursionError:  # the C decoder recurses per level: a bound, not a crash
        raise FormatError(path, JSON_TOO_DEEP) from None
    except ValueError:  # json's int(): a number of more than 4300 digits
        raise FormatError(path, JSON_LONG_NUMBER) from None
    if isinstance(tree, dict) and "op" in tree and "graph" not in tree:
        tree = {"graph": [tree]}  # a bare GraphDef
    if not isinstance(tree, dict) or not isinstance(tree.get("graph"), list):
        raise FormatError(path, 'not a GE graph JSON: expected an object with a "graph" list')
    model_cls = ge_ir_pb().ModelDef
    try:
        return model_cls.FromString(_message(tree, _table(model_cls.DESCRIPTOR)))
    except _JsonShapeError as exc:
        raise FormatError(path, f"{exc.where()}: {exc.reason}") from None
    except (RecursionError, DecodeError):
        raise FormatError(path, "graph JSON nested too deeply") from None
