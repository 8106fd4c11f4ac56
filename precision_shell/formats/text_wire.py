"""Translate protobuf TextFormat straight into wire format, driven by the message's descriptor.

The caller hands the result to upb's C decoder (``Message.FromString``), so Python never touches
a message object per field: this is many times faster than ``text_format.Parse`` and gives the
same message. Machine-printed text has one statement per line (``name: value``, ``name {``,
``}``) and most lines repeat verbatim (``key: "origin_format"``, ``dtype: DT_FLOAT16``, ``}``),
so the text is split into lines and each distinct line is translated once per message type
(descriptor-driven: field name -> tag, type) into an *action* (bytes to append, block to open or
close) that is cached. Input that is not one statement per line (hand-written files) switches to
a regex statement splitter feeding the same machinery, so any TextFormat layout is accepted.

Where text_format.Parse is strict (a singular field given twice, two members of a oneof, bad
UTF-8, integer out of range, unknown enum name) so is :func:`text_to_wire`, raising
:class:`TextError` (reason, and the line or the offset). Unknown fields and unknown nested blocks
are skipped (validated, dropped) like ``allow_unknown_field``. Not supported: message values
inside ``[...]`` lists and ``[ext.name]`` extension / Any field names.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from google.protobuf import descriptor as _desc

from .proto_wire import (BYTES, DUP_NONE, DUP_NONDEFAULT, DUP_PRESENCE, MSG, STRING,
                         VARINT as _VARINT, WireField, varint as _varint, wire_field)
from .quoting import shown
from .text_values import ATOM, STR, WS, TextError, check_unknown_value, encode_scalar, list_items
from ..gc_pause import gc_paused

__all__ = ["CHUNK", "TextError", "Translator", "line_of", "text_to_wire"]

# ---- one statement, as a regex (possessive quantifiers: no catastrophic backtracking) -----------
_NAME = rb"[A-Za-z_][\w+-]*+|\d[\w.+-]*+"  # text_format's identifier-or-number tokens
_SEP = rb"(?:" + WS + rb"[,;])?"  # a field may end with one ',' or ';'
_STMT_RE = (
    WS + rb"(?:(" + _NAME + rb")" + WS
    + rb"(?::" + WS + rb"(?:(" + STR + rb")((?:" + WS + STR + rb")*+)" + _SEP  # 2 str, 3 more
    + rb"|(" + ATOM + rb")" + _SEP  # 4 atom
    + rb"|(\[(?:" + WS + rb"(?:" + STR + rb"|" + ATOM + rb"|,))*+" + WS + rb"\])" + _SEP  # 5 list
    + rb"|([{<]))"  # 6 message opened after a colon
    + rb"|([{<]))"  # 7 message opened
    + rb"|([}>])" + _SEP + rb")"  # 8 message closed
)
_STMT = re.compile(_STMT_RE)
_LINE = re.compile(_STMT_RE + WS)  # fullmatch: a line holding exactly one statement
_WS_ONLY = re.compile(WS)
_TRAILER = re.compile(WS + rb"\Z")
# A line starting with a quote or separator continues the statement of an earlier line ("a" "b"
# concatenation, a ',' after a value), which line mode has already applied: such (hand-written)
# files are parsed again from the start on the statement path.
_CONTINUES = (b'"', b"'", b",", b";")
_CONTINUATION = re.compile(rb"\n[ \t\r\f\v]*+[\"',;]")
_PLAIN_STRING_LINE = re.compile(rb'[ \t]*+([A-Za-z_]\w*+)[ \t]*+:[ \t]*+"([^"\\\n]*+)"[ \t\r]*+')
CHUNK = 1 << 22  # lines are split 4 MB at a time: bounded memory for huge files


_FIELDS: dict[_desc.Descriptor, dict[bytes, WireField]] = {}


def _fields_of(message_desc: _desc.Descriptor) -> dict[bytes, WireField]:
    """Field name (bytes) -> how to encode it; cached per message type."""
    fields = _FIELDS.get(message_desc)
    if fields is None:
        fields = {}
        for fd in message_desc.fields:
            f = wire_field(fd)
            if f.kind is not None:  # no groups in proto3
                fields[fd.name.encode()] = f
        _FIELDS[message_desc] = fields
    return fields


@dataclass(eq=False)
class _Spec:
    """A message type during one parse: its fields, translated lines, memoised blocks."""
    fields: dict[bytes, WireField]
    cache: dict[bytes, tuple] = field(default_factory=dict)
    blocks: dict[bytes, bytes] = field(default_factory=dict)


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
        if f is not None and (f.kind == BYTES or f.kind == STRING):  # file is valid UTF-8
            size = plain.end(2) - plain.start(2)
            payload = (_VARINT[size] if size < 16384 else _varint(size)) + plain.group(2)
            record = f.dup == DUP_PRESENCE or (f.dup == DUP_NONDEFAULT and size > 0)
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
        for item_atom, item_str in list_items(listed) if listed is not None else [(atom, first)]:
            check_unknown_value(item_atom, item_str, more if listed is None else None)
        return _BLANK
    if f.kind == MSG:
        if opener is None:
            raise TextError(f"field {f.desc.name!r} is a message: expected '{{'")
        child = specs.get(f.desc.message_type)
        if child is None:
            child = specs[f.desc.message_type] = _Spec(_fields_of(f.desc.message_type))
        return (_OPEN, f.tag, f.number, f.dup, f.oneof, f.dup != DUP_NONE, name, child,
                _CLOSERS[opener], closing_line)
    if opener is not None:
        raise TextError(f"field {f.desc.name!r} is not a message: expected ':'")
    if listed is not None:
        if not f.desc.is_repeated:
            raise TextError(f"field {f.desc.name!r} is not repeated: no '[...]' list")
        chunk = b"".join(f.tag + encode_scalar(f, a, s, None)[0] for a, s in list_items(listed))
        return (_SCALAR, chunk, f.number, DUP_NONE, None, False, name, None, None, None)
    payload, nondefault = encode_scalar(f, atom, first, more)
    record = f.dup == DUP_PRESENCE or (f.dup == DUP_NONDEFAULT and nondefault)
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
                        raise TextError(f"field {name.decode()!r} given more than once")
                    if oneof is not None:
                        other = seen.get(oneof)
                        if other is not None and other != number:
                            raise TextError(f"field {name.decode()!r} and another member of "
                                            "its oneof are both set")
                        seen[oneof] = number
                    if record:
                        seen[number] = 1
                if code == _SCALAR:
                    out.append(chunk)
                elif code == _CLOSE:
                    if close != closer:
                        raise TextError(f"unexpected {close.decode()!r}" if closer is None else
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
        except TextError as exc:
            exc.line = i  # index of the failing unit; the caller turns it into a position
            raise
        finally:
            self.spec, self.out, self.seen, self.closer = spec, out, seen, closer
            # Blocks still open close in another chunk: their line index cannot be checked.
            stack[:] = [frame[:5] + (None, None) for frame in stack]


def _line_pass(builder: _Builder, data: bytes, chunk: int) -> int:
    """Apply ``data`` line by line (``chunk`` bytes at a time) while each line is one statement;
    returns where it stopped (len(data) when done, 0 when the file must be read as statements
    from the start)."""
    pos, line = 0, 1
    while pos < len(data):
        end = len(data)
        if pos + chunk < end:  # cut at a line end (after the chunk if one line is longer)
            end = data.rfind(b"\n", pos, pos + chunk)
            if end < 0:
                end = data.find(b"\n", pos + chunk)
                end = len(data) if end < 0 else end
        lines = data[pos:end].split(b"\n")
        try:
            done = builder.run(lines, True)
        except TextError as exc:
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


def text_to_wire(data: bytes, message_desc: _desc.Descriptor, chunk: int = CHUNK) -> bytes:
    """Translate TextFormat bytes (valid UTF-8) of ``message_desc`` into its wire format.

    Raises TextError where text_format.Parse would fail, with ``line`` (1-based) or ``offset``
    set (see :func:`line_of`).
    """
    with gc_paused():  # the line cache holds 100k+ tuples: cyclic GC passes over them cost ~30%
        return _translate(data, message_desc, chunk)


class Translator:
    """:func:`text_to_wire` for many small texts of one message type (the ops of one graph file,
    parsed one by one on demand): translated lines and memoised blocks are kept between calls,
    so the second op costs a fraction of the first (GE repeats most lines verbatim)."""

    def __init__(self, message_desc: _desc.Descriptor):
        self._root = _Spec(_fields_of(message_desc))
        self._specs: dict = {None: _Spec({})}

    def _builder(self) -> _Builder:
        builder = _Builder(self._root)
        builder.specs = self._specs
        return builder

    def __call__(self, data: bytes) -> bytes:
        """Like text_to_wire (same TextError rules); ``data`` must be valid UTF-8."""
        with gc_paused():
            return _translate(data, None, CHUNK, self._builder)


def _translate(data: bytes, message_desc: _desc.Descriptor | None, chunk: int,
               new_builder=None) -> bytes:
    if new_builder is None:
        new_builder = lambda: _Builder(_Spec(_fields_of(message_desc)))  # noqa: E731
    builder = new_builder()
    pos = _line_pass(builder, data, chunk)
    if pos < len(data):  # the rest, statement by statement
        if pos == 0:
            builder = new_builder()
        units, offsets = [], []
        for m in _STMT.finditer(data, pos):
            if m.start() != pos:
                break
            units.append(m.group())
            offsets.append(m.start())
            pos = m.end()
        try:
            builder.run(units, False)
        except TextError as exc:
            exc.offset, exc.line = offsets[exc.line], None
            raise
        if not _TRAILER.match(data, pos):
            raise TextError(_syntax_reason(data, pos), offset=pos)
    if builder.stack:
        raise TextError(f"unexpected end of text: {len(builder.stack)} block(s) not closed",
                        offset=len(data))
    return b"".join(builder.out)


_NAME_AHEAD = re.compile(rb"(" + _NAME + rb")" + WS + rb"(:" + WS + rb")?")


def _syntax_reason(data: bytes, offset: int) -> str:
    """Say what is wrong where no statement matches."""
    at = _WS_ONLY.match(data, offset).end()
    m = _NAME_AHEAD.match(data, at)
    after = data[m.end() if m else at:][:30].split(b"\n", 1)[0]
    if m is None:
        return f"syntax error: unexpected {shown(after)}"
    if m.group(2) is None:
        return f"syntax error: expected ':' or '{{' after {shown(m.group(1))}"
    if after[:1] in (b'"', b"'"):
        return f"syntax error: string not closed on its line: {shown(after)}"
    return f"syntax error: bad value for {shown(m.group(1))}: {shown(after)}"


def line_of(data: bytes, offset: int) -> int:
    """1-based line of the first token at or after ``offset``."""
    token_at = _WS_ONLY.match(data, offset).end()
    return data.count(b"\n", 0, token_at if token_at < len(data) else offset) + 1
