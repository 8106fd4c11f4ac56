"""Build protobuf message classes from the `.proto` sources shipped in ``protos/`` at run time.

Why not generated ``*_pb2.py``: generated code pins the protobuf runtime version it was made
with, and ``protoc`` must not be needed on a user's machine. The schemas we read are plain proto3
(messages, enums, maps, oneofs, nesting), so a small parser turns them into a
``FileDescriptorProto`` that any protobuf >= 4.21 accepts.
"""

from __future__ import annotations

import re
import types
from functools import lru_cache
from importlib import resources

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
from google.protobuf.internal import enum_type_wrapper

_FDP = descriptor_pb2.FieldDescriptorProto
_SCALARS = {
    "double": _FDP.TYPE_DOUBLE, "float": _FDP.TYPE_FLOAT, "int64": _FDP.TYPE_INT64,
    "uint64": _FDP.TYPE_UINT64, "int32": _FDP.TYPE_INT32, "fixed64": _FDP.TYPE_FIXED64,
    "fixed32": _FDP.TYPE_FIXED32, "bool": _FDP.TYPE_BOOL, "string": _FDP.TYPE_STRING,
    "bytes": _FDP.TYPE_BYTES, "uint32": _FDP.TYPE_UINT32, "sfixed32": _FDP.TYPE_SFIXED32,
    "sfixed64": _FDP.TYPE_SFIXED64, "sint32": _FDP.TYPE_SINT32, "sint64": _FDP.TYPE_SINT64,
}
_TOKEN = re.compile(r'\s+|//[^\n]*|/\*.*?\*/|("(?:[^"\\]|\\.)*")|([A-Za-z_][\w.]*|-?\d+|[{}=;<>,\[\]()])', re.S)


class ProtoSyntaxError(ValueError):
    pass


def _tokens(text: str) -> list[str]:
    out, pos = [], 0
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if not m:
            raise ProtoSyntaxError(f"unexpected character {text[pos]!r} at offset {pos}")
        pos = m.end()
        if m.group(1) or m.group(2):
            out.append(m.group(1) or m.group(2))
    return out


def _camel(name: str) -> str:
    return "".join(p[:1].upper() + p[1:] for p in name.split("_"))


def _json_name(name: str) -> str:
    parts = name.split("_")
    return parts[0] + "".join(p[:1].upper() + p[1:] for p in parts[1:])


class _Parser:
    """Recursive-descent parser for the proto3 subset our schemas use."""

    def __init__(self, text: str):
        self.toks = _tokens(text)
        self.i = 0
        self.file = descriptor_pb2.FileDescriptorProto()
        # (field proto, type name as written, scope of the referencing message)
        self.unresolved: list[tuple[descriptor_pb2.FieldDescriptorProto, str, str]] = []
        self.kinds: dict[str, int] = {}  # full name ".pkg.Msg" -> TYPE_MESSAGE / TYPE_ENUM

    def peek(self) -> str | None:
        return self.toks[self.i] if self.i < len(self.toks) else None

    def next(self) -> str:
        tok = self.peek()
        if tok is None:
            raise ProtoSyntaxError("unexpected end of file")
        self.i += 1
        return tok

    def expect(self, tok: str) -> None:
        got = self.next()
        if got != tok:
            raise ProtoSyntaxError(f"expected {tok!r}, got {got!r}")

    def skip_statement(self) -> None:
        depth = 0
        while True:
            tok = self.next()
            if tok == "{":
                depth += 1
            elif tok == "}":
                depth -= 1
            elif tok == ";" and depth == 0:
                return

    def parse(self, name: str) -> descriptor_pb2.FileDescriptorProto:
        self.file.name = name
        while (tok := self.peek()) is not None:
            if tok == "syntax":
                self.next(); self.expect("=")
                self.file.syntax = self.next().strip('"'); self.expect(";")
            elif tok == "package":
                self.next(); self.file.package = self.next(); self.expect(";")
            elif tok in ("option", "import"):
                if tok == "import":
                    raise ProtoSyntaxError("imports are not supported by the built-in loader")
                self.skip_statement()
            elif tok == "message":
                self.parse_message(self.file.message_type.add(), "." + self.file.package)
            elif tok == "enum":
                self.parse_enum(self.file.enum_type.add(), "." + self.file.package)
            elif tok == ";":
                self.next()
            else:
                raise ProtoSyntaxError(f"unexpected {tok!r} at top level")
        self.resolve()
        return self.file

    def parse_enum(self, enum, scope: str) -> None:
        self.expect("enum")
        enum.name = self.next()
        self.kinds[f"{scope}.{enum.name}"] = _FDP.TYPE_ENUM
        self.expect("{")
        while (tok := self.next()) != "}":
            if tok in ("option", "reserved"):
                self.i -= 1; self.skip_statement(); continue
            if tok == ";":
                continue
            value = enum.value.add(name=tok)
            self.expect("=")
            value.number = int(self.next())
            if self.peek() == "[":
                while self.next() != "]":
                    pass
            self.expect(";")

    def parse_message(self, msg, scope: str) -> None:
        self.expect("message")
        msg.name = self.next()
        full = f"{scope}.{msg.name}"
        self.kinds[full] = _FDP.TYPE_MESSAGE
        self.expect("{")
        while (tok := self.peek()) != "}":
            if tok == "message":
                self.parse_message(msg.nested_type.add(), full)
            elif tok == "enum":
                self.parse_enum(msg.enum_type.add(), full)
            elif tok in ("option", "reserved", "extensions"):
                self.skip_statement()
            elif tok == "oneof":
                self.next()
                index = len(msg.oneof_decl)
                msg.oneof_decl.add(name=self.next())
                self.expect("{")
                while self.peek() != "}":
                    if self.peek() == "option":
                        self.skip_statement(); continue
                    self.parse_field(msg, full, oneof_index=index)
                self.expect("}")
            elif tok == "map":
                self.parse_map(msg, full)
            elif tok == ";":
                self.next()
            else:
                self.parse_field(msg, full)
        self.expect("}")

    def _finish_field(self, field, type_name: str, scope: str) -> None:
        if type_name in _SCALARS:
            field.type = _SCALARS[type_name]
        else:
            self.unresolved.append((field, type_name, scope))
        self.expect("=")
        field.number = int(self.next())
        if self.peek() == "[":  # field options (packed, deprecated): irrelevant for parsing
            while self.next() != "]":
                pass
        self.expect(";")

    def parse_field(self, msg, scope: str, oneof_index: int | None = None) -> None:
        label = _FDP.LABEL_OPTIONAL
        tok = self.next()
        if tok == "repeated":
            label, tok = _FDP.LABEL_REPEATED, self.next()
        elif tok == "optional":
            tok = self.next()  # proto3 explicit presence is not needed for reading
        field = msg.field.add(label=label)
        field.name = self.next()
        field.json_name = _json_name(field.name)
        if oneof_index is not None:
            field.oneof_index = oneof_index
        self._finish_field(field, tok, scope)

    def parse_map(self, msg, scope: str) -> None:
        self.expect("map"); self.expect("<")
        key_type = self.next(); self.expect(",")
        value_type = self.next(); self.expect(">")
        name = self.next()
        entry = msg.nested_type.add(name=_camel(name) + "Entry")
        entry.options.map_entry = True
        key = entry.field.add(name="key", number=1, label=_FDP.LABEL_OPTIONAL, json_name="key")
        if key_type not in _SCALARS:
            raise ProtoSyntaxError(f"map key type {key_type!r} must be a scalar")
        key.type = _SCALARS[key_type]
        value = entry.field.add(name="value", number=2, label=_FDP.LABEL_OPTIONAL, json_name="value")
        entry_scope = f"{scope}.{entry.name}"
        self.kinds[entry_scope] = _FDP.TYPE_MESSAGE
        if value_type in _SCALARS:
            value.type = _SCALARS[value_type]
        else:
            self.unresolved.append((value, value_type, entry_scope))
        field = msg.field.add(name=name, label=_FDP.LABEL_REPEATED, json_name=_json_name(name))
        field.type = _FDP.TYPE_MESSAGE
        field.type_name = entry_scope
        self.expect("=")
        field.number = int(self.next())
        self.expect(";")

    def resolve(self) -> None:
        """Resolve type names the way protoc does: innermost enclosing scope first."""
        for field, written, scope in self.unresolved:
            if written.startswith("."):
                candidates = [written]
            else:
                parts = scope.split(".")
                candidates = [".".join(parts[:n] + [written]) for n in range(len(parts), 0, -1)]
            for cand in candidates:
                if cand in self.kinds:
                    field.type = self.kinds[cand]
                    field.type_name = cand
                    break
            else:
                raise ProtoSyntaxError(f"unknown type {written!r} used in {scope}")


def parse_proto(text: str, name: str) -> descriptor_pb2.FileDescriptorProto:
    return _Parser(text).parse(name)


@lru_cache(maxsize=None)
def load_proto(filename: str) -> types.SimpleNamespace:
    """Message classes and enum wrappers of ``protos/<filename>``, by their top-level names."""
    text = resources.files(__package__).joinpath("protos", filename).read_text("utf-8")
    fdp = parse_proto(text, filename)
    pool = descriptor_pool.DescriptorPool()
    file_desc = pool.Add(fdp) if hasattr(pool, "Add") else None
    if file_desc is None or not hasattr(file_desc, "message_types_by_name"):
        file_desc = pool.FindFileByName(filename)
    ns = types.SimpleNamespace()
    for msg_name, desc in file_desc.message_types_by_name.items():
        setattr(ns, msg_name, message_factory.GetMessageClass(desc))
    for enum_name, desc in file_desc.enum_types_by_name.items():
        setattr(ns, enum_name, enum_type_wrapper.EnumTypeWrapper(desc))
    return ns


def dump_data_pb() -> types.SimpleNamespace:
    """``toolkit.dumpdata``: DumpData, OpInput, OpOutput, OutputDataType, OutputFormat ..."""
    return load_proto("dump_data.proto")


def ge_ir_pb() -> types.SimpleNamespace:
    """``ge.proto``: ModelDef, GraphDef, OpDef, AttrDef, TensorDescriptor, DataType ..."""
    return load_proto("ge_ir.proto")
