"""Decode GE ``AttrDef`` values and tensor descriptors into plain Python (formats.md §3.3, §3.5).

Kept apart from ``op_graph`` so the graph code reads as graph code; everything here is a pure
function of one protobuf message.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import NamedTuple


# GE attribute names that mean something to pshell (formats.md §3.5).
ORIGINAL_OP_NAMES = "_datadump_original_op_names"
PASS_NAME = "pass_name"
KERNEL_LIB = "_ge_attr_op_kernel_lib_name"
KERNEL_SUFFIX = "_kernelname"
ORIGIN_NAME = "_datadump_origin_name"
ORIGIN_OUTPUT_INDEX = "_datadump_origin_output_index"
ORIGIN_FORMAT_DUMP = "_datadump_origin_format"
ORIGIN_FORMAT = "origin_format"
ORIGIN_SHAPE = "origin_shape"


def text(raw: bytes) -> str:
    """GE stores names as ``bytes``; anything not UTF-8 is shown, not fatal (§3.7)."""
    return raw.decode("utf-8", "replace")


# ListValue.val_type -> the repeated field holding the values; VT_LIST_NONE means "look".
_LIST_FIELD_BY_TYPE = {1: "s", 2: "i", 3: "f", 4: "b", 5: "bt", 6: "td", 7: "t", 8: "g", 9: "na",
                       10: "dt"}
_LIST_FIELDS = ("s", "i", "f", "b", "bt", "td", "t", "g", "na", "dt")


def _desc_summary(desc) -> dict:
    return {"name": desc.name, "dtype": dtype_name(desc.dtype), "layout": desc.layout,
            "shape": list(desc.shape.dim)}


def _list_value(lst) -> list:
    name = _LIST_FIELD_BY_TYPE.get(lst.val_type)
    if name is None or not len(getattr(lst, name)):
        name = next((n for n in _LIST_FIELDS if len(getattr(lst, n))), None)
        if name is None:
            return []
    values = getattr(lst, name)
    if name == "s":
        return [text(v) for v in values]
    if name == "td":
        return [_desc_summary(v) for v in values]
    if name == "t":
        return [{"desc": _desc_summary(v.desc), "data_bytes": len(v.data)} for v in values]
    if name == "g":
        return [{"graph": v.name, "ops": len(v.op)} for v in values]
    if name == "na":
        return [{"name": v.name, "attr": decode_attrs(v.attr)} for v in values]
    return list(values)  # i, f, b, bt (bytes), dt (DataType numbers)


def decode_attr(value) -> object:
    """One ``AttrDef`` as str / int / float / bool / bytes / list / dict (None if unset)."""
    kind = value.WhichOneof("value")
    if kind == "s":
        return text(value.s)
    if kind == "list":
        return _list_value(value.list)
    if kind in ("i", "b", "f", "dt", "bt"):
        return getattr(value, kind)
    if kind == "expression":
        return text(value.expression)
    if kind == "list_list_int":
        return [list(v.list_i) for v in value.list_list_int.list_list_i]
    if kind == "list_list_float":
        return [list(v.list_f) for v in value.list_list_float.list_list_f]
    if kind == "func":
        return {"name": value.func.name, "attr": decode_attrs(value.func.attr)}
    if kind == "td":
        return _desc_summary(value.td)
    if kind == "t":
        return {"desc": _desc_summary(value.t.desc), "data_bytes": len(value.t.data)}
    if kind == "g":
        return {"graph": value.g.name, "ops": len(value.g.op)}
    return None


def decode_attrs(attr_map) -> dict[str, object]:
    """A ``map<string, AttrDef>`` as a dict sorted by key (stable display)."""
    return {key: decode_attr(attr_map[key]) for key in sorted(attr_map)}


_DTYPE_NAMES: dict[int, str] = {}


def dtype_name(number: int) -> str:
    """``ge.proto.DataType`` number -> name ("DT_FLOAT16"); unknown numbers as "DT_<n>"."""
    if not _DTYPE_NAMES:
        from ..formats.protoload import ge_ir_pb   # (here: protobuf's ~15 ms once an op is shown)

        for value in ge_ir_pb().DataType.DESCRIPTOR.values:
            _DTYPE_NAMES[value.number] = value.name
    return _DTYPE_NAMES.get(number) or f"DT_{number}"


class TensorDesc(NamedTuple):
    """One input or output tensor of an op, as the graph describes it (shared, hence immutable;
    a tuple: 10^5 of them come back from the details cache)."""

    index: int
    name: str
    dtype: str  # "DT_FLOAT16"
    layout: str  # device format, e.g. "NC1HWC0"
    shape: tuple[int, ...]  # device shape
    origin_format: str | None  # _datadump_origin_format, else origin_format; None if unset/RESERVED
    origin_shape: tuple[int, ...] | None
    origin_name: str | None  # _datadump_origin_name: framework op this tensor corresponds to
    origin_output_index: int | None  # _datadump_origin_output_index


def tensor_desc(index: int, desc, memo: dict | None = None) -> TensorDesc:
    """``desc`` (a ``TensorDescriptor``) as a TensorDesc. With ``memo``, identical descriptors
    (most inputs of a layer look alike) share one object: serialising is 3x cheaper than
    reading the fields through the protobuf API."""
    if memo is not None:
        key = (index, desc.SerializeToString())
        found = memo.get(key)
        if found is None:
            found = memo[key] = tensor_desc(index, desc)
        return found
    attrs = desc.attr
    origin_format = None
    for key in (ORIGIN_FORMAT_DUMP, ORIGIN_FORMAT):
        value = attrs.get(key)  # .get: indexing a message map would insert the key
        if value is not None and value.s and value.s != b"RESERVED":
            origin_format = text(value.s)
            break
    shape = attrs.get(ORIGIN_SHAPE)
    name = attrs.get(ORIGIN_NAME)
    output_index = attrs.get(ORIGIN_OUTPUT_INDEX)
    return TensorDesc(
        index, desc.name, dtype_name(desc.dtype), desc.layout, tuple(desc.shape.dim), origin_format,
        tuple(shape.list.i) if shape is not None else None,
        text(name.s) if name is not None else None,
        output_index.i if output_index is not None else None)


class LazyAttrs(Mapping):
    """An op's attrs, decoded to Python (``decode_attrs``) on first use.

    Decoding every attr of a 20k-op graph costs seconds through the protobuf API while only a
    few ops are ever displayed; the few attrs the graph needs are read directly instead.
    """

    __slots__ = ("_source", "_decoded")

    def __init__(self, attr_map):
        self._source = attr_map
        self._decoded: dict[str, object] | None = None

    def _values(self) -> dict[str, object]:
        if self._decoded is None:
            self._decoded, self._source = decode_attrs(self._map()), None
        return self._decoded

    def _map(self):
        if isinstance(self._source, bytes):  # from the start-up cache: parse on first use
            self._source = _named_attrs_class().FromString(self._source).attr
        elif callable(self._source):  # details from the cache: the op's attrs read again on use
            self._source = self._source()
        return self._source

    def __getitem__(self, key: str) -> object:
        return self._values()[key]

    def __iter__(self):
        return iter(self._values())

    def __len__(self) -> int:
        return len(self._values())

    def __contains__(self, key: object) -> bool:
        return key in (self._map() if self._decoded is None else self._decoded)

    def __repr__(self) -> str:
        return repr(self._values())

    def serialized(self) -> bytes:
        """The attrs as a serialized ``NamedAttrs``, still undecoded (the start-up cache keeps them
        so: decoding every op's attrs would cost seconds; only displayed ops ever need them).
        ValueError once decoded (the message is gone): such a graph is not cached."""
        if isinstance(self._source, bytes):
            return self._source
        if self._decoded is not None:
            raise ValueError("attrs already decoded")
        holder = _named_attrs_class()()
        source = self._map()
        for key in source:
            holder.attr[key].CopyFrom(source[key])
        return holder.SerializeToString()


def valid_serialized_attrs(blobs: list[bytes]) -> bool:
    """Whether every blob parses as a ``NamedAttrs`` (what :meth:`LazyAttrs.serialized` gives):
    checked in one C-speed parse of them all, as the ``na`` items of one ``ListValue``."""
    if not blobs:   # (a graph without attrs in its details: no protobuf import for nothing)
        return True
    from ..formats.proto_wire import varint   # (here: proto_wire imports protobuf's descriptors)
    from ..formats.protoload import ge_ir_pb

    wrapped = b"".join(b"%c%s%s" % (_NA_TAG, varint(len(b)), b) for b in blobs)
    try:
        return len(ge_ir_pb().AttrDef.ListValue.FromString(wrapped).na) == len(blobs)
    except Exception:  # upb's DecodeError, nesting too deep
        return False


_NA_TAG = 11 << 3 | 2  # ListValue.na: field 11, length-delimited


def string_list(value: object) -> list[str]:
    """An attr that GE writes either as ``s`` or as ``list.s`` (pass_name), as a list."""
    if value is None:
        return []
    if isinstance(value, str):
        return [value] if value else []
    if isinstance(value, list):
        return [v for v in value if isinstance(v, str) and v]
    return []


def _named_attrs_class():
    from precision_shell.formats.protoload import ge_ir_pb

    return ge_ir_pb().NamedAttrs
