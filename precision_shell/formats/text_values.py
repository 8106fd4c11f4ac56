"""TextFormat tokens and scalar values, encoded as protobuf wire-format payloads.

The lexical half of :mod:`.text_wire`: what a string, number or identifier token is (as
``text_format`` splits them), and how one scalar value (or a ``[...]`` list of them) of a given
field becomes wire bytes, with text_format's checks (UTF-8, ranges, enum names, escapes).
"""

from __future__ import annotations

import math
import re
import struct
import warnings

from google.protobuf import text_encoding, text_format

from .proto_wire import (BOOL, BYTES, ENUM, FLOAT, INT, PACKED, SINT, STRING, VARINT as _VARINT,
                         WireField, varint as _varint)
from .quoting import clipped, shown

__all__ = ["ATOM", "STR", "WS", "TextError", "check_unknown_value", "encode_scalar", "list_items"]

# ---- tokens (possessive quantifiers: no catastrophic backtracking) -------------------------------
WS = rb"(?:[ \t\r\n\f\v]++|\#[^\n]*+)*+"  # whitespace and '#' comments, as text_format skips them
STR = rb'(?:"[^"\\\n]*+(?:\\.[^"\\\n]*+)*+"' + rb"|'[^'\\\n]*+(?:\\.[^'\\\n]*+)*+')"
# A value token, split as text_format splits them: identifiers have no '.', numbers may.
ATOM = rb"(?:[A-Za-z_][\w+-]*+|(?:[0-9+-]|\.[0-9])[\w.+-]*+)"
_LIST_ITEM = re.compile(WS + rb"(?:(" + STR + rb")|(" + ATOM + rb")|(,)|(\]))")
_STR_PIECE = re.compile(STR)
_IDENT = re.compile(rb"[A-Za-z_]")
_C_OCTAL = re.compile(rb"(-?)0(\d+)\Z")
_BOOLS = {b"true": True, b"t": True, b"1": True, b"True": True,
          b"false": False, b"f": False, b"0": False, b"False": False}


class TextError(Exception):
    """Text that text_format.Parse would reject: ``reason``, and where (``line`` or ``offset``)."""

    def __init__(self, reason: str, offset: int | None = None, line: int | None = None):
        super().__init__(reason)
        self.reason, self.offset, self.line = reason, offset, line


_EXPECTS = {INT: "an integer", SINT: "an integer", PACKED: "an integer", BOOL: "true or false",
            ENUM: "an enum value", FLOAT: "a number"}


# ---- scalar values ------------------------------------------------------------------------------
def _unquote(first: bytes, more: bytes | None) -> bytes:
    """Bytes of a string literal, or of adjacent literals ("a" 'b' concatenate)."""
    out = []
    for piece in [first] + _STR_PIECE.findall(more) if more else [first]:
        body = piece[1:-1]
        if b"\\" in body:
            try:  # text_format's own unescaper: same octal, \xH, \u and unknown-escape rules
                with warnings.catch_warnings():  # "\q" is kept as is, with a DeprecationWarning
                    warnings.simplefilter("ignore", DeprecationWarning)
                    body = text_encoding.CUnescape(body.decode("utf-8"))
            except ValueError as exc:
                raise TextError(f"bad escape in string {shown(piece)}: {clipped(exc)}") from None
        out.append(body)
    return b"".join(out)


def _parse_int(atom: bytes) -> int:
    """text_format's integer syntax: Python literals (0x.., 0o..) plus C octal ``0755``."""
    try:
        return int(atom, 0)
    except ValueError:
        octal = _C_OCTAL.match(atom)
        if octal is None:
            raise
        return int(octal.group(1) + b"0o" + octal.group(2), 0)


def encode_scalar(f: WireField, atom: bytes | None, first: bytes | None,
                  more: bytes | None) -> tuple[bytes, bool]:
    """Payload bytes (without tag) of one scalar value, and whether it is non-default."""
    kind, name = f.kind, f.desc.name
    if kind in (STRING, BYTES):
        if first is None:
            raise TextError(f"field {name!r} expects a string, got {shown(atom or b'')}")
        body = _unquote(first, more)
        if kind == STRING and not body.isascii():
            try:
                body.decode("utf-8")
            except UnicodeDecodeError:
                raise TextError(f"field {name!r}: string is not valid UTF-8") from None
        return (_VARINT[len(body)] if len(body) < 16384 else _varint(len(body))) + body, bool(body)
    if atom is None:
        raise TextError(f"field {name!r} expects {_EXPECTS[kind]}, got a string")
    if kind == BOOL:
        if atom not in _BOOLS:
            raise TextError(f"field {name!r} expects true or false, got {shown(atom)}")
        return b"\x01" if _BOOLS[atom] else b"\x00", _BOOLS[atom]
    if kind == ENUM:
        number = f.enum_names.get(atom)
        if number is None:
            try:  # numbers are allowed too (any int32 for an open proto3 enum)
                number = text_format.ParseEnum(f.desc, atom.decode("utf-8"))
            except ValueError:
                raise TextError(f"enum {f.desc.enum_type.full_name} has no value named "
                                f"{shown(atom)}") from None
            if not f.form[0] <= number <= f.form[1]:
                raise TextError(f"enum value {number} out of range")
        return _varint(number), number != 0
    if kind == FLOAT:
        try:
            value = text_format.ParseFloat(atom.decode("utf-8"))
        except ValueError:
            raise TextError(f"field {name!r} expects a number, got {shown(atom)}") from None
        try:
            return struct.pack(f.form, value), value != 0.0
        except OverflowError:  # finite double beyond float32: C's cast (and upb) give +-inf
            return struct.pack(f.form, value * math.inf), True
    try:
        value = _parse_int(atom)
    except ValueError:
        raise TextError(f"field {name!r} expects an integer, got {shown(atom)}") from None
    low, high = f.form[1] if kind == PACKED else f.form
    if not low <= value <= high:
        raise TextError(f"integer {shown(value)} out of range for field {name!r}")
    if kind == PACKED:
        return struct.pack(f.form[0], value), value != 0
    if kind == SINT:  # zigzag
        value = value << 1 if value >= 0 else (-value << 1) - 1
    return (_VARINT[value] if 0 <= value < 16384 else _varint(value)), value != 0


def check_unknown_value(atom: bytes | None, first: bytes | None, more: bytes | None) -> None:
    """A skipped value must still be well-formed (text_format's _SkipFieldValue)."""
    try:
        if first is not None:
            _unquote(first, more)
        elif not _IDENT.match(atom):
            try:
                _parse_int(atom)
            except ValueError:
                text_format.ParseFloat(atom.decode("utf-8"))
    except ValueError:
        raise TextError(f"invalid value {shown(first or atom)}") from None


def list_items(listed: bytes) -> list[tuple[bytes | None, bytes | None]]:
    """(atom, string) items of a scalar list ``[a, "b", c]``; checks the commas."""
    items: list[tuple[bytes | None, bytes | None]] = []
    pos, want_value = 1, True
    while True:
        m = _LIST_ITEM.match(listed, pos)  # cannot fail: the statement regex matched the list
        string, atom, comma, end = m.groups()
        if end is not None:
            if want_value and items:
                raise TextError("expected a value before ']'")
            return items
        if (comma is not None) == want_value:
            raise TextError("expected ',' between list values" if comma is None else "unexpected ','")
        if comma is None:
            items.append((atom, string))
        want_value = comma is not None
        pos = m.end()

