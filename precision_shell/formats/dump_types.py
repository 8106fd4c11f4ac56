"""The header of an NPU tensor dump file as pshell keeps it (:class:`DumpHeader` of
:class:`TensorEntry`), and the entries of a ``DumpData`` protobuf message (formats.md §1.3).
Parsing the containers lives in ``dump_header`` (v2, nano) and ``dump_v1``."""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache

from ..errors import FormatError
from .dtypes import DT_UNDEFINED, FORMAT_ND, dtype_name, format_name


@lru_cache(maxsize=None)
def _dump_data_class():
    from .protoload import dump_data_pb   # protobuf only when a header needs it (dump_header._parse)

    return dump_data_pb().DumpData


@dataclass(frozen=True, slots=True)
class TensorEntry:
    kind: str                                  # "input" | "output" | "buffer" | "space"
    index: int
    dtype: int                                 # OutputDataType code (buffers/spaces: DT_UNDEFINED)
    format: int                                # OutputFormat code
    shape: tuple[int, ...]                     # device shape
    original_shape: tuple[int, ...] | None     # logical shape when the header has one
    sub_format: int
    original_name: str | None                  # original_op.name (outputs)
    original_output_index: int | None
    offset: int                                # absolute byte offset of the data in the file
    size: int                                  # bytes

    @property
    def dtype_name(self) -> str:
        return dtype_name(self.dtype)

    @property
    def format_name(self) -> str:
        return format_name(self.format)

    @property
    def label(self) -> str:
        return f"{self.kind}:{self.index}"


@dataclass
class DumpHeader:
    path: str
    op_name: str
    version: str
    dump_time: int
    variant: str                               # "v2" | "v1" | "nano"
    header_len: int                            # v1: the whole file is the header
    file_size: int
    inputs: list[TensorEntry] = field(default_factory=list)
    outputs: list[TensorEntry] = field(default_factory=list)
    buffers: list[TensorEntry] = field(default_factory=list)
    spaces: list[TensorEntry] = field(default_factory=list)
    attrs: list[tuple[str, str]] = field(default_factory=list)

    def entry(self, kind: str, index: int) -> TensorEntry:
        """``entry("output", 0)``; FormatError when the file has no such tensor."""
        group = {"input": self.inputs, "output": self.outputs, "buffer": self.buffers, "space": self.spaces}.get(kind)
        if group is None or not 0 <= index < len(group):
            count = len(group) if group is not None else 0
            raise FormatError(self.path, f"no {kind}:{index} in this dump ({count} {kind}s)")
        return group[index]


def _entry(kind: str, index: int, t, offset: int, size: int) -> TensorEntry:
    if kind not in ("input", "output"):
        return TensorEntry(kind, index, DT_UNDEFINED, FORMAT_ND, (size,), None, 0, None, None, offset, size)
    # an absent or empty original shape both mean "no logical shape recorded"
    original = tuple(t.original_shape.dim) if t.HasField("original_shape") else ()
    has_op = kind == "output" and t.HasField("original_op")
    return TensorEntry(kind, index, t.data_type, t.format, tuple(t.shape.dim), original or None, t.sub_format,
                       (t.original_op.name or None) if has_op else None,
                       t.original_op.output_index if has_op else None, offset, size)


def _tensor_entries(kind: str, tensors, start: int) -> tuple[list[TensorEntry], int]:
    """Entries whose data segments lie back to back from ``start``; returns them and the end."""
    entries, offset = [], start
    for i, t in enumerate(tensors):
        entries.append(_entry(kind, i, t, offset, t.size))
        offset += t.size
    return entries, offset

