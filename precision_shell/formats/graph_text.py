"""Read GE graph dumps ``ge_proto_*.txt``: protobuf TextFormat of ``ge.proto.ModelDef`` (formats.md §3).

Two parsers, one contract (path in, identical ``ModelDef`` out):

* :func:`parse_graph_text_reference` is ``text_format.Parse(..., allow_unknown_field=True)``: the
  definition of correct, but ~1.5 MB/s, i.e. over half a minute for a 20k-op graph.
* :func:`parse_graph_text` translates the text straight into protobuf *wire format* and lets upb's
  C decoder build the message (``ModelDef.FromString``), so Python never touches a message object
  per field. GE prints one statement per line (``name: value``, ``name {``, ``}``) and most lines
  repeat verbatim (``key: "origin_format"``, ``dtype: DT_FLOAT16``, ``}``), so the text is split
  into lines and each distinct line is translated once per message type (descriptor-driven:
  field name -> tag, type) into an *action* (bytes to append, block to open or close) that is
  cached. Input that is not one statement per line (hand-written files) switches to a regex
  statement splitter feeding the same machinery, so any TextFormat layout is accepted.

Where text_format.Parse is strict (a singular field given twice, two members of a oneof, bad
UTF-8, integer out of range, unknown enum name) so is this parser, with "line N: reason". Unknown
fields and unknown nested blocks are skipped (validated, dropped) like ``allow_unknown_field``.
Not supported (GE never prints them): message values inside ``[...]`` lists and ``[ext.name]``
extension / Any field names.
"""

from __future__ import annotations

import gc
import math
import os
import re
import struct
import warnings
from dataclasses import dataclass, field
from pathlib import Path

from google.protobuf import descriptor as _desc
from google.protobuf import text_encoding, text_format
from google.protobuf.message import DecodeError

from ..errors import FormatError
from .protoload import ge_ir_pb

__all__ = ["parse_graph_text", "parse_graph_text_reference"]

# ---- one statement, as a regex (possessive quantifiers: no catastrophic backtracking) -----------
_WS = rb"(?:[ \t\r\n\f\v]++|\#[^\n]*+)*+"  # whitespace and '#' comments, as text_format skips them
_STR = rb'(?:"[^"\\\n]*+(?:\\.[^"\\\n]*+)*+"' + rb"|'[^'\\\n]*+(?:\\.[^'\\\n]*+)*+')"
# A value token, split as text_format splits them: identifiers have no '.', numbers may.
_ATOM = rb"(?:[A-Za-z_][\w+-]*+|(?:[0-9+-]|\.[0-9])[\w.+-]*+)"
_NAME = rb"[A-Za-z_][\w+-]*+|\d[\w.+-]*+"  # text_format's identifier-or-number tokens
_SEP = rb"(?:" + _WS + rb"[,;])?"  # a field may end with one ',' or ';'
_STMT_RE = (
    _WS + rb"(?:(" + _NAME + rb")" + _WS
    + rb"(?::" + _WS + rb"(?:(" + _STR + rb")((?:" + _WS + _STR + rb")*+)" + _SEP  # 2 str, 3 more
    + rb"|(" + _ATOM + rb")" + _SEP  # 4 atom
    + rb"|(\[(?:" + _WS + rb"(?:" + _STR + rb"|" + _ATOM + rb"|,))*+" + _WS + rb"\])" + _SEP  # 5 list
    + rb"|([{<]))"  # 6 message opened after a colon
    + rb"|([{<]))"  # 7 message opened
    + rb"|([}>])" + _SEP + rb")"  # 8 message closed
)
_STMT = re.compile(_STMT_RE)
_LINE = re.compile(_STMT_RE + _WS)  # fullmatch: a line holding exactly one statement
_WS_ONLY = re.compile(_WS)
_TRAILER = re.compile(_WS + rb"\Z")
# A line starting with a quote or separator continues the statement of an earlier line ("a" "b"
# concatenation, a ',' after a value), which line mode has already applied: such (hand-written)
# files are parsed again from the start on the statement path.
_CONTINUES = (b'"', b"'", b",", b";")
_CONTINUATION = re.compile(rb"\n[ \t\r\f\v]*+[\"',;]")
_LIST_ITEM = re.compile(_WS + rb"(?:(" + _STR + rb")|(" + _ATOM + rb")|(,)|(\]))")
_STR_PIECE = re.compile(_STR)
_IDENT = re.compile(rb"[A-Za-z_]")
_PLAIN_STRING_LINE = re.compile(rb'[ \t]*+([A-Za-z_]\w*+)[ \t]*+:[ \t]*+"([^"\\\n]*+)"[ \t\r]*+')
_C_OCTAL = re.compile(rb"(-?)0(\d+)\Z")
_CHUNK = 1 << 22  # lines are split 4 MB at a time: bounded memory for huge files

# ---- wire format ----------------------------------------------------------------------------------
_MASK64 = (1 << 64) - 1


def _varint(value: int) -> bytes:
    value &= _MASK64  # negative int32/int64/enum values are sign-extended to 10 bytes
    out = bytearray()
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


_VARINT = varints = [_varint(i) for i in range(1 << 14)]  # lengths, small ints: no Python loop

_MSG, _STRING, _BYTES, _INT, _SINT, _BOOL, _ENUM, _FLOAT, _PACKED = range(9)
_FD = _desc.FieldDescriptor
_I32, _I64, _U32, _U64 = (-(1 << 31), (1 << 31) - 1), (-(1 << 63), (1 << 63) - 1), (0, (1 << 32) - 1), (0, _MASK64)
# descriptor type -> (kind, wire type, integer range or struct format)
_TYPES = {_FD.TYPE_MESSAGE: (_MSG, 2, None), _FD.TYPE_STRING: (_STRING, 2, None),
          _FD.TYPE_BYTES: (_BYTES, 2, None), _FD.TYPE_BOOL: (_BOOL, 0, None),
          _FD.TYPE_ENUM: (_ENUM, 0, _I32), _FD.TYPE_FLOAT: (_FLOAT, 5, "<f"),
          _FD.TYPE_DOUBLE: (_FLOAT, 1, "<d"), _FD.TYPE_INT32: (_INT, 0, _I32),
          _FD.TYPE_INT64: (_INT, 0, _I64), _FD.TYPE_UINT32: (_INT, 0, _U32),
          _FD.TYPE_UINT64: (_INT, 0, _U64), _FD.TYPE_SINT32: (_SINT, 0, _I32),
          _FD.TYPE_SINT64: (_SINT, 0, _I64), _FD.TYPE_FIXED32: (_PACKED, 5, ("<I", _U32)),
          _FD.TYPE_SFIXED32: (_PACKED, 5, ("<i", _I32)), _FD.TYPE_FIXED64: (_PACKED, 1, ("<Q", _U64)),
          _FD.TYPE_SFIXED64: (_PACKED, 1, ("<q", _I64))}
_BOOLS = {b"true": True, b"t": True, b"1": True, b"True": True,
          b"false": False, b"f": False, b"0": False, b"False": False}
# text_format.Parse refuses a field with presence (message, oneof member) given twice, and a
# plain proto3 scalar given again once it holds a non-default value.
_DUP_NONE, _DUP_PRESENCE, _DUP_NONDEFAULT = range(3)


@dataclass(frozen=True)
class _Field:
    kind: int
    tag: bytes
    number: int
    dup: int
    oneof: int | None  # key in a block's "seen" dict (negative, so never a field number)
    desc: _desc.FieldDescriptor
    enum_names: dict[bytes, int] | None
    form: object  # integer range, or struct format (+ range) for fixed-size fields


_FIELDS: dict[_desc.Descriptor, dict[bytes, _Field]] = {}


def _fields_of(message_desc: _desc.Descriptor) -> dict[bytes, _Field]:
    """Field name (bytes) -> how to encode it; cached per message type."""
    fields = _FIELDS.get(message_desc)
    if fields is None:
        fields = {}
        for fd in message_desc.fields:
            if fd.type not in _TYPES:  # no groups in proto3
                continue
            kind, wire, form = _TYPES[fd.type]
            dup = _DUP_NONE if fd.is_repeated else _DUP_PRESENCE if fd.has_presence else _DUP_NONDEFAULT
            fields[fd.name.encode()] = _Field(
                kind, _varint(fd.number << 3 | wire), fd.number, dup,
                -1 - fd.containing_oneof.index if fd.containing_oneof is not None else None, fd,
                {v.name.encode(): v.number for v in fd.enum_type.values} if fd.enum_type else None, form)
        _FIELDS[message_desc] = fields
    return fields


@dataclass(eq=False)
class _Spec:
    """A message type during one parse: its fields, translated lines, memoised blocks."""
    fields: dict[bytes, _Field]
    cache: dict[bytes, tuple] = field(default_factory=dict)
    blocks: dict[bytes, bytes] = field(default_factory=dict)


class _TextError(Exception):
    def __init__(self, reason: str, offset: int | None = None, line: int | None = None):
        super().__init__(reason)
        self.reason, self.offset, self.line = reason, offset, line


_EXPECTS = {_INT: "an integer", _SINT: "an integer", _PACKED: "an integer", _BOOL: "true or false",
            _ENUM: "an enum value", _FLOAT: "a number"}


# ---- scalar values ------------------------------------------------------------------------------
def _show(raw: bytes) -> str:
    text = raw.decode("utf-8", "replace")
    return repr(text if len(text) <= 40 else text[:40] + "...")


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
                raise _TextError(f"bad escape in string {_show(piece)}: {exc}") from None
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


def _encode_scalar(f: _Field, atom: bytes | None, first: bytes | None,
                   more: bytes | None) -> tuple[bytes, bool]:
    """Payload bytes (without tag) of one scalar value, and whether it is non-default."""
    kind, name = f.kind, f.desc.name
    if kind in (_STRING, _BYTES):
        if first is None:
            raise _TextError(f"field {name!r} expects a string, got {_show(atom or b'')}")
        body = _unquote(first, more)
        if kind == _STRING and not body.isascii():
            try:
                body.decode("utf-8")
            except UnicodeDecodeError:
                raise _TextError(f"field {name!r}: string is not valid UTF-8") from None
        return (_VARINT[len(body)] if len(body) < 16384 else _varint(len(body))) + body, bool(body)
    if atom is None:
        raise _TextError(f"field {name!r} expects {_EXPECTS[kind]}, got a string")
    if kind == _BOOL:
        if atom not in _BOOLS:
            raise _TextError(f"field {name!r} expects true or false, got {_show(atom)}")
        return b"\x01" if _BOOLS[atom] else b"\x00", _BOOLS[atom]
    if kind == _ENUM:
        number = f.enum_names.get(atom)
        if number is None:
            try:  # numbers are allowed too (any int32 for an open proto3 enum)
                number = text_format.ParseEnum(f.desc, atom.decode("utf-8"))
            except ValueError:
                raise _TextError(f"enum {f.desc.enum_type.full_name} has no value named "
                                 f"{_show(atom)}") from None
            if not f.form[0] <= number <= f.form[1]:
                raise _TextError(f"enum value {number} out of range")
        return _varint(number), number != 0
    if kind == _FLOAT:
        try:
            value = text_format.ParseFloat(atom.decode("utf-8"))
        except ValueError:
            raise _TextError(f"field {name!r} expects a number, got {_show(atom)}") from None
        try:
            return struct.pack(f.form, value), value != 0.0
        except OverflowError:  # finite double beyond float32: C's cast (and upb) give +-inf
            return struct.pack(f.form, value * math.inf), True
    try:
        value = _parse_int(atom)
    except ValueError:
        raise _TextError(f"field {name!r} expects an integer, got {_show(atom)}") from None
    low, high = f.form[1] if kind == _PACKED else f.form
    if not low <= value <= high:
        raise _TextError(f"integer {value} out of range for field {name!r}")
    if kind == _PACKED:
        return struct.pack(f.form[0], value), value != 0
    if kind == _SINT:  # zigzag
        value = value << 1 if value >= 0 else (-value << 1) - 1
    return (_VARINT[value] if 0 <= value < 16384 else _varint(value)), value != 0


def _check_unknown_value(atom: bytes | None, first: bytes | None, more: bytes | None) -> None:
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
        raise _TextError(f"invalid value {_show(first or atom)}") from None


def _list_items(listed: bytes) -> list[tuple[bytes | None, bytes | None]]:
    """(atom, string) items of a scalar list ``[a, "b", c]``; checks the commas."""
    items: list[tuple[bytes | None, bytes | None]] = []
    pos, want_value = 1, True
    while True:
        m = _LIST_ITEM.match(listed, pos)  # cannot fail: the statement regex matched the list
        string, atom, comma, end = m.groups()
        if end is not None:
            if want_value and items:
                raise _TextError("expected a value before ']'")
            return items
        if (comma is not None) == want_value:
            raise _TextError("expected ',' between list values" if comma is None else "unexpected ','")
        if comma is None:
            items.append((atom, string))
        want_value = comma is not None
        pos = m.end()


# ---- statements -> actions ------------------------------------------------------------------------
# An action is (code, bytes, field number, dup rule, oneof key, record?, field name, child spec,
# closer, closing line). "closing line" is the line that ends a block opened by this line when
# the file is indented the way GE prints it (same indent + '}'); see _Builder.run.
_SCALAR, _OPEN, _CLOSE, _NOTHING = range(4)
_BLANK = (_NOTHING, None, 0, 0, None, False, None, None, None, None)
_CLOSERS = {b"{": b"}", b"<": b">"}
_MAX_BLOCK_LINES = 100  # larger blocks (a whole op, a graph) are never repeated verbatim


def _action(specs: dict, spec: _Spec, unit: bytes) -> tuple | None:
    """Translate one line (or one statement) in the context of ``spec``; None if not exactly one."""
    plain = _PLAIN_STRING_LINE.fullmatch(unit)  # most lines seen once are `name: "text"`
    if plain is not None:
        f = spec.fields.get(plain.group(1))
        if f is not None and (f.kind == _BYTES or f.kind == _STRING):  # file is valid UTF-8
            size = plain.end(2) - plain.start(2)
            payload = (varints[size] if size < 16384 else _varint(size)) + plain.group(2)
            record = f.dup == _DUP_PRESENCE or (f.dup == _DUP_NONDEFAULT and size > 0)
            return (_SCALAR, f.tag + payload, f.number, f.dup, f.oneof, record, plain.group(1),
                    None, None, None)
    m = _LINE.fullmatch(unit)
    if m is None:
        return _BLANK if _WS_ONLY.fullmatch(unit) else None
    name, first, more, atom, listed, open1, open2, close = m.groups()
    if name is None:
        return (_CLOSE, None, 0, 0, None, False, None, None, close, None)
    f = spec.fields.get(name)
    opener = open1 or open2
    if opener is not None:
        closing_line = unit[:m.start(1)] + _CLOSERS[opener]
    if f is None:  # unknown field: validate and drop; an unknown block is parsed with no fields
        if opener is not None:
            return (_OPEN, None, 0, 0, None, False, name, specs[None], _CLOSERS[opener], closing_line)
        for item_atom, item_str in _list_items(listed) if listed is not None else [(atom, first)]:
            _check_unknown_value(item_atom, item_str, more if listed is None else None)
        return _BLANK
    if f.kind == _MSG:
        if opener is None:
            raise _TextError(f"field {f.desc.name!r} is a message: expected '{{'")
        child = specs.get(f.desc.message_type)
        if child is None:
            child = specs[f.desc.message_type] = _Spec(_fields_of(f.desc.message_type))
        return (_OPEN, f.tag, f.number, f.dup, f.oneof, f.dup != _DUP_NONE, name, child,
                _CLOSERS[opener], closing_line)
    if opener is not None:
        raise _TextError(f"field {f.desc.name!r} is not a message: expected ':'")
    if listed is not None:
        if not f.desc.is_repeated:
            raise _TextError(f"field {f.desc.name!r} is not repeated: no '[...]' list")
        chunk = b"".join(f.tag + _encode_scalar(f, a, s, None)[0] for a, s in _list_items(listed))
        return (_SCALAR, chunk, f.number, _DUP_NONE, None, False, name, None, None, None)
    payload, nondefault = _encode_scalar(f, atom, first, more)
    record = f.dup == _DUP_PRESENCE or (f.dup == _DUP_NONDEFAULT and nondefault)
    return (_SCALAR, f.tag + payload, f.number, f.dup, f.oneof, record, name, None, None, None)


class _Builder:
    """Wire-format output under construction: the open blocks and what each holds so far."""

    def __init__(self, root: _Spec):
        self.specs: dict = {None: _Spec({})}
        self.spec, self.out, self.seen, self.closer, self.stack = root, [], {}, None, []

    def run(self, units: list[bytes], lines: bool) -> int:
        """Apply units (lines, or statements when ``lines`` is false) in order; returns the index
        of the first unit that is not exactly one statement, len(units) when all were applied.

        Line mode also memoises whole blocks: a block opened on line i whose closing line (same
        indent + '}') is line j has the text lines[i..j]; once that text has been parsed and
        really closed at j, the same text in the same message type later gives the same bytes
        and is appended in one step (GE repeats attr/desc blocks verbatim thousands of times).
        """
        specs, spec, out, seen, closer, stack = (
            self.specs, self.spec, self.out, self.seen, self.closer, self.stack)
        cache, varints, i, count = spec.cache, _VARINT, 0, len(units)
        try:
            while i < count:
                unit = units[i]
                act = cache.get(unit)
                if act is None:
                    act = _action(specs, spec, unit)
                    if act is None:
                        return i
                    cache[unit] = act
                code, chunk, number, dup, oneof, record, name, child, close, closing = act
                if dup:  # text_format's duplicate-field and oneof rules
                    if number in seen:
                        raise _TextError(f"field {name.decode()!r} given more than once")
                    if oneof is not None:
                        other = seen.get(oneof)
                        if other is not None and other != number:
                            raise _TextError(f"field {name.decode()!r} and another member of "
                                             "its oneof are both set")
                        seen[oneof] = number
                    if record:
                        seen[number] = 1
                if code == _SCALAR:
                    out.append(chunk)
                elif code == _CLOSE:
                    if close != closer:
                        raise _TextError(f"unexpected {close.decode()!r}" if closer is None else
                                         f"expected {closer.decode()!r}, got {close.decode()!r}")
                    body = b"".join(out)
                    spec, out, seen, closer, tag, key, end = stack.pop()
                    cache = spec.cache
                    if tag is not None:  # None: an unknown block, dropped
                        body = tag + (varints[len(body)] if len(body) < 16384 else _varint(len(body))) + body
                        out.append(body)
                        if end == i:
                            spec.blocks[key] = body
                elif code == _OPEN:
                    key = end = None
                    if lines and chunk is not None:
                        try:
                            end = units.index(closing, i + 1, i + _MAX_BLOCK_LINES)
                        except ValueError:
                            pass
                        else:
                            key = b"\n".join(units[i:end + 1])
                            body = spec.blocks.get(key)
                            if body is not None:
                                out.append(body)
                                i = end + 1
                                continue
                    stack.append((spec, out, seen, closer, chunk, key, end))
                    spec, out, seen, closer = child, [], {}, close
                    cache = spec.cache
                i += 1
            return count
        except _TextError as exc:
            exc.line = i  # index of the failing unit; the caller turns it into a position
            raise
        finally:
            self.spec, self.out, self.seen, self.closer = spec, out, seen, closer
            # Blocks still open close in another chunk: their line index cannot be checked.
            stack[:] = [frame[:5] + (None, None) for frame in stack]


def _line_pass(builder: _Builder, data: bytes) -> int:
    """Apply ``data`` line by line while each line is one statement; returns where it stopped
    (len(data) when done, 0 when the file must be read as statements from the start)."""
    pos, line = 0, 1
    while pos < len(data):
        end = len(data)
        if pos + _CHUNK < end:  # cut at a line end (after the chunk if one line is longer)
            end = data.rfind(b"\n", pos, pos + _CHUNK)
            if end < 0:
                end = data.find(b"\n", pos + _CHUNK)
                end = len(data) if end < 0 else end
        lines = data[pos:end].split(b"\n")
        try:
            done = builder.run(lines, True)
        except _TextError as exc:
            if _CONTINUATION.search(data) is not None:
                return 0  # a later line may change this statement: decide on the statement path
            exc.line += line
            raise
        if done < len(lines):
            if lines[done].lstrip()[:1] in _CONTINUES:
                return 0
            return pos + sum(map(len, lines[:done])) + done
        pos, line = end + 1, line + len(lines)
    return len(data)


def _text_to_wire(data: bytes, message_desc: _desc.Descriptor) -> bytes:
    """Translate TextFormat bytes (valid UTF-8) of ``message_desc`` into its wire format."""
    builder = _Builder(_Spec(_fields_of(message_desc)))
    pos = _line_pass(builder, data)
    if pos < len(data):  # the rest, statement by statement
        if pos == 0:
            builder = _Builder(_Spec(_fields_of(message_desc)))
        units, offsets = [], []
        for m in _STMT.finditer(data, pos):
            if m.start() != pos:
                break
            units.append(m.group())
            offsets.append(m.start())
            pos = m.end()
        try:
            builder.run(units, False)
        except _TextError as exc:
            exc.offset, exc.line = offsets[exc.line], None
            raise
        if not _TRAILER.match(data, pos):
            raise _TextError(_syntax_reason(data, pos), offset=pos)
    if builder.stack:
        raise _TextError(f"unexpected end of text: {len(builder.stack)} block(s) not closed",
                         offset=len(data))
    return b"".join(builder.out)


_NAME_AHEAD = re.compile(rb"(" + _NAME + rb")" + _WS + rb"(:" + _WS + rb")?")


def _syntax_reason(data: bytes, offset: int) -> str:
    """Say what is wrong where no statement matches."""
    at = _WS_ONLY.match(data, offset).end()
    m = _NAME_AHEAD.match(data, at)
    after = data[m.end() if m else at:][:30].split(b"\n", 1)[0]
    if m is None:
        return f"syntax error: unexpected {_show(after)}"
    if m.group(2) is None:
        return f"syntax error: expected ':' or '{{' after {_show(m.group(1))}"
    if after[:1] in (b'"', b"'"):
        return f"syntax error: string not closed on its line: {_show(after)}"
    return f"syntax error: bad value for {_show(m.group(1))}: {_show(after)}"


def _line_of(data: bytes, offset: int) -> int:
    """1-based line of the first token at or after ``offset``."""
    token_at = _WS_ONLY.match(data, offset).end()
    return data.count(b"\n", 0, token_at if token_at < len(data) else offset) + 1


def _read(path: str | os.PathLike) -> bytes:
    try:
        data = Path(path).read_bytes()
    except OSError as exc:
        raise FormatError(path, f"cannot read: {exc.strerror or exc}") from None
    if not data.strip():
        raise FormatError(path, "empty graph file")
    return data


def _utf8_error(path, data: bytes, exc: UnicodeDecodeError) -> FormatError:
    line = data.count(b"\n", 0, exc.start) + 1
    return FormatError(path, f"line {line}: not valid UTF-8")


def parse_graph_text(path: str | os.PathLike):
    """Parse a ``ge_proto_*.txt`` file into a ``ge.proto.ModelDef`` (the fast path).

    Raises FormatError(path, "line N: reason") for everything text_format.Parse rejects.
    """
    data = _read(path)
    model_cls = ge_ir_pb().ModelDef
    if not data.isascii():  # text_format reads text: the whole file must be UTF-8
        try:
            data.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise _utf8_error(path, data, exc) from None
    gc_was_enabled = gc.isenabled()
    gc.disable()  # the line cache holds 100k+ tuples: cyclic GC passes over them cost ~30%
    try:
        wire = _text_to_wire(data, model_cls.DESCRIPTOR)
    except _TextError as exc:
        line = exc.line if exc.line is not None else _line_of(data, exc.offset)
        raise FormatError(path, f"line {line}: {exc.reason}") from None
    finally:
        if gc_was_enabled:
            gc.enable()
    try:
        return model_cls.FromString(wire)
    except DecodeError as exc:  # e.g. nesting deeper than upb's limit
        raise FormatError(path, f"cannot build the model: {exc}") from None


def parse_graph_text_reference(path: str | os.PathLike):
    """Parse with ``text_format.Parse(..., allow_unknown_field=True)``: slow, the definition."""
    data = _read(path)
    model = ge_ir_pb().ModelDef()
    try:
        text_format.Parse(data.decode("utf-8"), model, allow_unknown_field=True)
    except UnicodeDecodeError as exc:
        raise _utf8_error(path, data, exc) from None
    except text_format.ParseError as exc:
        line, reason = exc.GetLine(), str(exc).split(" : ", 1)[-1]
        raise FormatError(path, f"line {line}: {reason}" if line is not None else reason) from None
    return model
