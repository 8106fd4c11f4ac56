"""Read GE graph dumps ``ge_proto_*.txt``: protobuf TextFormat of ``ge.proto.ModelDef`` (formats.md §3).

Two parsers, one contract (path in, identical ``ModelDef`` out):

* :func:`parse_graph_text_reference` is ``text_format.Parse(..., allow_unknown_field=True)``: the
  definition of correct, but ~1.5 MB/s, i.e. over half a minute for a 20k-op graph.
* :func:`parse_graph_text` translates the text straight into protobuf *wire format*
  (:mod:`.text_wire`, which relies on GE printing one statement per line and repeating most lines
  verbatim) and lets upb's C decoder build the message (``ModelDef.FromString``).

Where text_format.Parse is strict (a singular field given twice, two members of a oneof, bad
UTF-8, integer out of range, unknown enum name) so is this parser, with "line N: reason". Unknown
fields and unknown nested blocks are skipped (validated, dropped) like ``allow_unknown_field``.
Not supported (GE never prints them): message values inside ``[...]`` lists and ``[ext.name]``
extension / Any field names.
"""

from __future__ import annotations

import os

from google.protobuf import text_format
from google.protobuf.message import DecodeError

from ...errors import FormatError
from ..input_files import read_regular
from ..protoload import ge_ir_pb
from ..quoting import clipped
from ..text_wire import CHUNK, TextError, line_of, text_to_wire

__all__ = ["parse_graph_text", "parse_graph_text_reference"]

_CHUNK = CHUNK  # read at each parse, so it can be lowered (tests cut files into tiny chunks)


def _read(path: str | os.PathLike) -> bytes:
    try:
        data = read_regular(path)
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
    try:
        wire = text_to_wire(data, model_cls.DESCRIPTOR, _CHUNK)
    except TextError as exc:
        line = exc.line if exc.line is not None else line_of(data, exc.offset)
        raise FormatError(path, f"line {line}: {exc.reason}") from None
    try:
        return model_cls.FromString(wire)
    except DecodeError as exc:  # e.g. nesting deeper than upb's limit
        raise FormatError(path, f"cannot build the model: {clipped(exc)}") from None


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
