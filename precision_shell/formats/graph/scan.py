"""Index a GE graph text without parsing all of it (formats.md §3): the start-up fast path.

A 50k-op Build graph is ~160 MB of TextFormat; even the line-memoising :mod:`.text_wire` needs
seconds for it, while start-up needs only each op's name, type, inputs and the three attrs that
say what it fused (``_datadump_original_op_names``, ``pass_name``, the kernel name and engine).
GE prints the text with one statement per line, two spaces per level and fields in field-number
order (name, type, inputs, attrs sorted by key, ..., input_desc, output_desc), so those values sit
at fixed indentation and a few regex passes over the whole bytes (C speed) find them.

Everything else of an op (descs, all attrs, id, stream_id) is parsed later, one op at a time, by
the exact parser (:class:`OpTextReader`, text_wire), from the op's byte span.

:func:`scan_graph_text` returns None whenever the text is not in that layout or any count does
not add up (hand-written or reformatted files, a truncated file, other tools' printers): the
caller then parses the whole file with :func:`.text.parse_graph_text`, which also gives
the "line N: reason" errors. An op whose head is unusual (escaped quotes in its name, fields out
of order) is read by the exact parser on its own, so the scan never guesses.
"""

from __future__ import annotations

import os
import re
from typing import NamedTuple

from ...errors import FormatError
from ..input_files import open_regular
from ..quoting import clipped

# protobuf and the text translator (``protoload``, ``text_wire``: ~20 ms of imports) are
# imported by the functions that parse: a start from the cache makes readers and parses nothing.

__all__ = ["OpTextReader", "ScannedGraph", "ScannedOp", "scan_graph_text"]

ORIGINAL_OP_NAMES = "_datadump_original_op_names"
PASS_NAME = "pass_name"
KERNEL_LIB = "_ge_attr_op_kernel_lib_name"
KERNEL_SUFFIX = "_kernelname"

WHOLE_AFTER = 16  # ops read one span at a time before the whole file is read once

_S = rb'"([^"\\\n]*)"'  # a string literal without escapes: its bytes are its value
_GRAPH_OPEN = b"\ngraph {\n"
_GRAPH_NAME = re.compile(rb'  name: ' + _S + rb'\n')
_OP_OPEN = b"\n  op {\n"
_OP_CLOSE = b"\n  }\n"
_OP_HEAD = re.compile(rb'\n  op \{\n    name: ' + _S + rb'\n    type: ' + _S
                      + rb'\n((?:    input: "[^"\\\n]*"\n)*)')
_INPUT = re.compile(rb'    input: ' + _S + rb'\n')
_ORIGINAL, _PASS, _LIB, _KERNEL_SUFFIX = (ORIGINAL_OP_NAMES.encode(), PASS_NAME.encode(), KERNEL_LIB.encode(),
                                          KERNEL_SUFFIX.encode())
# An op-level fusion attr and, in the same match, its value when it has one of the two forms GE
# prints (group 2: the ``s`` bytes; group 3: the ``list { s... }`` lines); neither: another form.
_ATTR = re.compile(rb'\n    attr \{\n      key: "(' + ORIGINAL_OP_NAMES.encode() + rb'|'
                   + PASS_NAME.encode() + rb'|' + KERNEL_LIB.encode() + rb'|[^"\\\n]*'
                   + KERNEL_SUFFIX.encode() + rb')"\n'
                   rb'(?:      value \{\n        s: ' + _S + rb'\n      \}\n    \}(?=\n)'
                   rb'|      value \{\n        list \{\n((?:          s: "[^"\\\n]*"\n)*)'
                   rb'(?:          val_type: VT_LIST_[A-Z_]+\n)?        \}\n      \}\n    \}(?=\n))?')
# (the value ends before its newline: the next attr's match starts with it)
_LIST_ITEM = re.compile(rb'          s: ' + _S + rb'\n')
# The heads and _ATTR see only GE's exact indentation. TextFormat does not care about it: an
# input or a fusion attr's key on a line indented otherwise is still the op's (the whole-file
# parse sees it). So every line holding such a statement, at any indentation, must be one the
# scan accounted for (counted over the op bodies: the file minus its skeleton). Other fields
# are the exact parse's anyway (an op's details are parsed from its span).
_BODY_LINE = b"\n    "
_WS = rb'[ \t\r\f\v]*+'
# one pass finds both kinds: group 1 is b"input" for an input line, b"" for a fusion attr's key
_COUNTED_LINE = re.compile(rb'\n' + _WS + rb'(?:(input)' + _WS + rb':|key' + _WS + rb':' + _WS + rb'"(?:'
                           + ORIGINAL_OP_NAMES.encode() + rb'|' + PASS_NAME.encode() + rb'|' + KERNEL_LIB.encode()
                           + rb'|[^"\\\n]*' + KERNEL_SUFFIX.encode() + rb')")')


_decode = bytes.decode   # map(_decode, ...): no generator frame per op (1M ops at start-up)


def _text(raw: bytes) -> str:
    return raw.decode("utf-8", "replace")


class ScannedOp(NamedTuple):
    name: str
    type: str
    inputs: tuple[str, ...]
    original_ops: tuple[str, ...] | None  # None: no _datadump_original_op_names attr
    passes: tuple[str, ...]
    kernel: str | None                    # {name}_kernelname, else the first *_kernelname
    engine: str | None
    start: int                            # byte span of the op's body (inside "op { ... }")
    end: int


class ScannedGraph(NamedTuple):
    name: str
    ops: list[ScannedOp]


def names_of(value) -> list[str]:
    """A names attr (AttrDef) GE writes as ``list.s`` or as ``s``: its non-empty names."""
    kind = value.WhichOneof("value")
    if kind == "list":
        return [_text(v) for v in value.list.s if v]
    if kind == "s":
        return [_text(value.s)] if value.s else []
    return []


def special_attrs(name: str, attr_map) -> tuple:
    """(original_ops or None, passes, kernel, engine) of an op's attr map (upb message map), the
    definition the scan's fast path must agree with."""
    original = attr_map.get(ORIGINAL_OP_NAMES)  # .get: indexing a message map would insert the key
    passes = attr_map.get(PASS_NAME)
    kernel = attr_map.get(name + KERNEL_SUFFIX)
    if kernel is None:  # the first in key order: GE prints the map sorted, so the text agrees
        kernel = next((attr_map[k] for k in sorted(attr_map) if k.endswith(KERNEL_SUFFIX)), None)
    engine = attr_map.get(KERNEL_LIB)
    return (tuple(names_of(original)) if original is not None else None,
            tuple(names_of(passes)) if passes is not None else (),
            _text(kernel.s) or None if kernel is not None else None,
            _text(engine.s) or None if engine is not None else None)


class OpTextReader:
    """Exact parse of single ops of one graph file, from their byte spans (on demand).

    Holds the file's bytes (read again if dropped) and a :class:`Translator` shared by all ops, so
    each op after the first costs ~0.1 ms. The file must still be what was scanned: a changed
    size or mtime is an error, not a silently wrong op. The start-up cache keeps a reader as
    its ``path`` and ``stamp`` (size, mtime in ns) and makes it again with this constructor.
    """

    def __init__(self, path: str, stamp: tuple[int, int], data: bytes | None = None):
        self.path, self.stamp, self._data = path, stamp, data
        self._translate = None
        self.memo: dict = {}  # for the caller: identical descriptors -> one decoded object
        self.decoded = 0  # ops decoded in this process (the caller counts)
        self._reads = 0  # spans read one by one (see _span)
        self.before_bulk = None  # the caller's hook once many ops were decoded one by one

    def _check_stamp(self, fd: int) -> None:
        st = os.fstat(fd)
        if (st.st_size, st.st_mtime_ns) != self.stamp:
            raise FormatError(self.path, "changed since pshell loaded it: restart pshell to read it again")

    def data(self) -> bytes:
        """The whole file (kept: many ops are being read)."""
        if self._data is None:
            try:
                with os.fdopen(open_regular(self.path), "rb") as handle:
                    self._check_stamp(handle.fileno())
                    self._data = handle.read()
            except OSError as exc:
                raise FormatError(self.path, f"cannot read: {exc.strerror or exc}") from None
        return self._data

    def _span(self, start: int, end: int) -> bytes:
        """``data[start:end]``: one read of the span for the first few ops (``ni``, ``pt`` read
        one op, not a 160 MB file), then the whole file once."""
        if self._data is not None or self._reads >= WHOLE_AFTER:
            return self.data()[start:end]
        self._reads += 1
        try:
            fd = open_regular(self.path)    # swapped for a FIFO since the scan: no hang
            try:
                self._check_stamp(fd)
                return os.pread(fd, end - start, start)
            finally:
                os.close(fd)
        except OSError as exc:
            raise FormatError(self.path, f"cannot read: {exc.strerror or exc}") from None

    def release(self) -> None:
        """Drop the file's bytes (re-read on the next op) and the translator's caches."""
        self._data = self._translate = None
        self._reads = 0
        self.memo = {}

    def op(self, start: int, end: int):
        """The ``ge.proto.OpDef`` whose body is ``data[start:end]``; FormatError "line N"."""
        from ..protoload import ge_ir_pb
        from ..text_wire import TextError, Translator, line_of

        text = self._span(start, end)
        op_cls = ge_ir_pb().OpDef
        if self._translate is None:
            self._translate = Translator(op_cls.DESCRIPTOR)
        try:
            return op_cls.FromString(self._translate(text))
        except TextError as exc:
            data = self.data()  # the line number counts from the start of the file
            if exc.line is not None:
                line = data.count(b"\n", 0, start) + exc.line
            else:
                line = line_of(data, start + exc.offset)
            raise FormatError(self.path, f"line {line}: {exc.reason}") from None
        except Exception as exc:  # upb's DecodeError: nesting too deep
            raise FormatError(self.path, f"cannot build op at byte {start}: {clipped(exc)}") from None


def _value(s_value: bytes | None, list_lines: bytes | None) -> tuple[str, tuple[str, ...]] | None:
    """("s", (value,)) or ("list", items) from an _ATTR match's groups 2 and 3; None for any
    other form of value (the op is then parsed exactly)."""
    if s_value is not None:
        return "s", (s_value.decode(),)  # the scan checked the file is UTF-8
    if list_lines is not None:
        return "list", tuple(map(_decode, _LIST_ITEM.findall(list_lines)))
    return None


def _names(value: tuple[str, tuple[str, ...]] | None) -> tuple[str, ...]:
    return tuple(filter(None, value[1])) if value is not None else ()  # as names_of


def _string(value: tuple[str, tuple[str, ...]] | None) -> str | None:
    return (value[1][0] or None) if value is not None and value[0] == "s" else None


class _NotCanonical(Exception):
    pass


def scan_graph_text(path: str | os.PathLike, data: bytes, stamp: tuple[int, int]
                    ) -> tuple[list[ScannedGraph], OpTextReader] | None:
    """Graphs and ops of a ``ge_proto_*.txt`` (its bytes ``data``) in GE's own layout, or None
    when the file must be parsed whole (see the module doc)."""
    path = os.fspath(path)
    if not data.isascii():
        try:
            data.decode("utf-8")
        except UnicodeDecodeError:
            return None  # the exact parser reports where
    reader = OpTextReader(path, stamp, data)
    try:
        return _scan(data, reader), reader
    except _NotCanonical:
        return None


def _scan(data: bytes, reader: OpTextReader) -> list[ScannedGraph]:
    starts = [0] if data.startswith(_GRAPH_OPEN[1:]) else []
    pos = data.find(_GRAPH_OPEN)
    while pos >= 0:
        starts.append(pos + 1)
        pos = data.find(_GRAPH_OPEN, pos + 1)
    if not starts:
        raise _NotCanonical
    result = []
    for start in starts:
        m = _GRAPH_NAME.match(data, start + len(_GRAPH_OPEN) - 1)
        if m is None:
            raise _NotCanonical
        result.append(ScannedGraph(m.group(1).decode(), []))
    bounds = starts[1:] + [len(data)]

    heads = {m.start(): m.groups() for m in _OP_HEAD.finditer(data)}
    # (offset, key, value) of every op-level fusion attr, in file order
    specials = [(m.start(), *m.group(1, 2, 3)) for m in _ATTR.finditer(data)]
    specials.append((len(data), b"", None, None))
    n_inputs, find, g, a = 0, data.find, 0, 0
    # types, engines and pass lists repeat: one object each (smaller, faster start-up cache)
    pool: dict = {}
    shared = pool.setdefault   # shared(v, v): no lambda frame per op
    other_keys = (_ORIGINAL, _PASS, _LIB)   # the keys _ATTR matches besides *_kernelname
    new_op = tuple.__new__     # ScannedOp without its Python-level __new__ (1M ops at start-up)
    ops = result[0].ops
    pos = find(_OP_OPEN)
    while pos >= 0:
        while pos >= bounds[g]:
            g += 1
            ops = result[g].ops
        end = find(_OP_CLOSE, pos + 8)
        if end < 0 or end > bounds[g]:
            raise _NotCanonical  # truncated, or not GE's layout
        # ops follow each other: "\n  }" closes one, "\n  op {" opens the next
        nxt = end + 4 if data.startswith(_OP_OPEN, end + 4) else find(_OP_OPEN, end)
        if specials[a][0] < pos:
            raise _NotCanonical  # an op-level attr outside any op
        found = {}
        while specials[a][0] < end:
            _, key, s_value, list_lines = specials[a]
            found[key] = _value(s_value, list_lines)  # a later same key wins, as in text_format
            a += 1
        head = heads.get(pos)
        if head is not None and None not in found.values():
            raw_name, raw_type, raw_inputs = head
            inputs = tuple(map(_decode, _INPUT.findall(raw_inputs))) if raw_inputs else ()
            n_inputs += len(inputs)
            op_type = raw_type.decode()
            if found:
                kernel = found.get(raw_name + _KERNEL_SUFFIX)
                if kernel is None and len(found) > sum(k in found for k in other_keys):
                    kernel = next((v for k, v in sorted(found.items()) if k.endswith(_KERNEL_SUFFIX)), None)
                original = found.get(_ORIGINAL)
                passes = _names(found.get(_PASS))
                engine = _string(found.get(_LIB))
                op = new_op(ScannedOp, (raw_name.decode(), shared(op_type, op_type), inputs,
                                        _names(original) if original is not None else None,
                                        shared(passes, passes), _string(kernel), shared(engine, engine),
                                        pos + 8, end + 1))
            else:
                op = new_op(ScannedOp, (raw_name.decode(), shared(op_type, op_type), inputs, None, (), None,
                                        None, pos + 8, end + 1))
        else:  # unusual head or attr value: this op by the exact parser
            op = _exact_op(reader, data, pos + 8, end + 1)
            n_inputs += _counted_lines(data, pos, end)[0]
        ops.append(op)
        pos = nxt
    if data.count(_OP_OPEN) != sum(len(r.ops) for r in result):
        raise _NotCanonical  # an op opened inside another: not GE's layout
    skeleton = _check_skeleton(data, result)
    # Every line of an op body is indented by at least the op's 4 spaces: a shallower one (an op
    # closed early, "x: 1  }", then the text that follows taken for its body) is not GE's layout.
    # (The body's lines are the newlines in the bodies; each starts after one, the first after
    # its "op {" line's: those followed by 4 spaces must be all of them.)
    body_lines = data.count(b"\n") - skeleton.count(b"\n")
    if data.count(_BODY_LINE) - skeleton.count(_BODY_LINE) != body_lines:
        raise _NotCanonical
    # Every input line in an op body must be one the heads accounted for (GE prints inputs right
    # after name and type), every fusion attr key one _ATTR matched (counted in the file, less
    # the skeleton's). A second name or type line needs no check: it is an error in TextFormat,
    # which the exact parse of that op reports.
    (inputs, keys), (skeleton_inputs, skeleton_keys) = _counted_lines(data), _counted_lines(skeleton)
    if inputs - skeleton_inputs != n_inputs or keys - skeleton_keys != len(specials) - 1:
        raise _NotCanonical
    return result


def _counted_lines(data: bytes, pos: int = 0, end: int | None = None) -> tuple[int, int]:
    """(input lines, fusion attr key lines) of ``data[pos:end]``, at any indentation."""
    found = _COUNTED_LINE.findall(data, pos, len(data) if end is None else end)
    inputs = found.count(b"input")
    return inputs, len(found) - inputs


def _check_skeleton(data: bytes, graphs: list[ScannedGraph]) -> bytes:
    """Everything outside the op bodies (model and graph fields, graph-level attrs), parsed
    exactly with every body cut out: it must be valid and hold exactly the scanned graphs and
    op counts. Op bodies are parsed exactly when first read. Returns that skeleton's text."""
    pieces, pos = [], 0
    for graph in graphs:
        for op in graph.ops:
            pieces.append(data[pos:op.start])
            pos = op.end
    pieces.append(data[pos:])
    from ..protoload import ge_ir_pb
    from ..text_wire import text_to_wire

    model_cls = ge_ir_pb().ModelDef
    skeleton = b"".join(pieces)
    try:
        model = model_cls.FromString(text_to_wire(skeleton, model_cls.DESCRIPTOR))
    except Exception:  # TextError, DecodeError: the whole-file parse says where
        raise _NotCanonical from None
    if [(g.name, len(g.op)) for g in model.graph] != [(g.name, len(g.ops)) for g in graphs]:
        raise _NotCanonical
    return skeleton


def _exact_op(reader: OpTextReader, data: bytes, start: int, end: int) -> ScannedOp:
    try:
        op = reader.op(start, end)
    except FormatError:
        raise _NotCanonical from None  # the whole-file parse reports it with its line
    original, passes, kernel, engine = special_attrs(op.name, op.attr)
    return ScannedOp(op.name, op.type, tuple(op.input), original, passes, kernel, engine, start, end)
