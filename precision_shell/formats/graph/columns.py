"""The start-up scan of a GE graph text into columns, by the optional C kernel ``_graph_scan``.

Same contract as :func:`.scan.scan_graph_text` (names, types, inputs and the fusion attrs
of every op, each op's body span for details read on demand), but no Python object per op: the
kernel walks the text once (memory-mapped, pages dropped behind it) and fills flat arrays (name
bytes in one blob with offsets, type ids, input texts, ...). Everything outside the op blocks is
parsed exactly here (``skeleton``). The kernel returns None for anything that is not GE's own
layout or that the Python scan would read with the exact parser; :func:`scan_columns` then
returns None and the caller uses the Python scan (same graph, slower). ``PSHELL_NO_EXT=1`` or a
kernel that was not built: None too.
"""

from __future__ import annotations

import mmap
import os
from dataclasses import dataclass

from ...errors import FormatError
from .scan import OpTextReader
from ..input_files import open_regular

try:
    from . import _graph_scan as _kernel
except ImportError:  # not built: the Python scan
    _kernel = None

__all__ = ["ScannedColumns", "kernel_available", "link_inputs", "scan_columns"]


def kernel_available() -> bool:
    return _kernel is not None and os.environ.get("PSHELL_NO_EXT") != "1"


@dataclass
class ScannedColumns:
    """One file's ops in file order; ``graphs``: (name, first op) of each GraphDef. Int columns
    are memoryviews of the kernel's bytes ("q": int64, "i": int32; no numpy at start-up), flag
    columns bytes of 0/1."""

    graphs: list[tuple[str, int]]
    names: bytes
    name_off: memoryview       # q, n + 1
    type_id: memoryview        # i, into types
    types: list[str]
    in_blob: bytes             # the input texts of every op, in order
    in_item_off: memoryview    # q, one more than there are inputs
    in_off: memoryview         # q, n + 1: op i's inputs are items in_off[i]:in_off[i+1]
    orig_present: bytes        # the op has _datadump_original_op_names
    orig_off: memoryview       # q, n + 1, into the original-name items
    orig_blob: bytes
    orig_item_off: memoryview  # q
    pass_id: memoryview        # i, into pass_lists ([] = none)
    pass_lists: list[list[str]]
    kernel_present: bytes
    kernel_blob: bytes
    kernel_off: memoryview     # q, n + 1
    engine_id: memoryview      # i, into engines, -1: none
    engines: list[str]
    start: memoryview          # q: the op's body span (OpTextReader.op)
    end: memoryview
    fused: bytes               # passes, or more than one original name (GraphSummary.fused_ops)

    @property
    def op_count(self) -> int:
        return len(self.type_id)

    def input_text(self, j: int) -> str:
        return self.in_blob[self.in_item_off[j]:self.in_item_off[j + 1]].decode()


def _i64(raw: bytes) -> memoryview:
    return memoryview(raw).cast("q")


def _i32(raw: bytes) -> memoryview:
    return memoryview(raw).cast("i")


def _strings(items: list[bytes]) -> list[str]:
    return [b.decode() for b in items]  # the kernel checked the file is UTF-8


def scan_columns(path: str | os.PathLike) -> tuple[ScannedColumns, OpTextReader] | None:
    """The columns of ``path`` in GE's layout, or None (not that layout, or no kernel)."""
    if not kernel_available():
        return None
    path = os.fspath(path)
    try:
        fd = open_regular(path)
    except OSError as exc:
        raise FormatError(path, f"cannot read: {exc.strerror or exc}") from None
    try:
        st = os.fstat(fd)
        if st.st_size == 0:
            return None
        mapped = mmap.mmap(fd, 0, access=mmap.ACCESS_READ)
    except (OSError, ValueError):
        return None  # not mappable: the Python scan reads it
    finally:
        os.close(fd)
    try:
        def release(done: int) -> None:  # the pages scanned so far: not kept in this process
            mapped.madvise(mmap.MADV_DONTNEED, 0, done - done % mmap.PAGESIZE)

        found = _kernel.scan(mapped, release if hasattr(mmap, "MADV_DONTNEED") else None)
    finally:
        mapped.close()
    if found is None or not _skeleton_holds(found["skeleton"], found["graphs"]):
        return None
    columns = ScannedColumns(
        graphs=[(name.decode(), first) for name, first in found["graphs"]],
        names=found["names"], name_off=_i64(found["name_off"]), type_id=_i32(found["type_id"]),
        types=_strings(found["types"]), in_blob=found["in_blob"], in_item_off=_i64(found["in_item_off"]),
        in_off=_i64(found["in_off"]), orig_present=found["orig_present"],
        orig_off=_i64(found["orig_off"]), orig_blob=found["orig_blob"], orig_item_off=_i64(found["orig_item_off"]),
        pass_id=_i32(found["pass_id"]), pass_lists=[_strings(p) for p in found["pass_lists"]],
        kernel_present=found["kernel_present"], kernel_blob=found["kernel_blob"],
        kernel_off=_i64(found["kernel_off"]), engine_id=_i32(found["engine_id"]), engines=_strings(found["engines"]),
        start=_i64(found["start"]), end=_i64(found["end"]), fused=found["fused"])
    return columns, OpTextReader(path, (st.st_size, st.st_mtime_ns))


def _skeleton_holds(skeleton: bytes, graphs: list) -> bool:
    """Everything outside the op blocks, parsed exactly: valid, and holding exactly the graphs
    the kernel found (the op blocks were left out of it; their bodies are parsed when read)."""
    from ..protoload import ge_ir_pb   # here: a start from the cache parses nothing (~20 ms)
    from ..text_wire import text_to_wire

    model_cls = ge_ir_pb().ModelDef
    try:
        model = model_cls.FromString(text_to_wire(skeleton, model_cls.DESCRIPTOR))
    except Exception:  # TextError, DecodeError: the whole-file parse says where
        return False
    return [(g.name, len(g.op)) for g in model.graph] == [(name.decode(), 0) for name, _ in graphs]


def link_inputs(c: ScannedColumns) -> dict | None:
    """Inputs resolved by op name (see _graph_scan.c ``link``), or None: the Python linker."""
    if not kernel_available():
        return None
    found = _kernel.link(c.names, c.name_off.obj, c.in_blob, c.in_item_off.obj, c.in_off.obj)
    if found is None:
        return None
    return {"data_op": _i32(found["data_op"]), "data_out": _i64(found["data_out"]),
            "data_off": _i64(found["data_off"]), "raw": _i64(found["raw"]), "ctl_op": _i32(found["ctl_op"]),
            "ctl_off": _i64(found["ctl_off"]), "warnings": found["warnings"]}


def pack_ints(values) -> tuple[bool, int, bytes]:
    """(delta, itemsize, bytes): an int64 ("q") or int32 ("i") column as the narrowest ints of
    its values or of its differences (see _graph_scan.c ``pack``). Without the kernel: numpy."""
    view = memoryview(values)
    if kernel_available():
        delta, size, raw = _kernel.pack(view.cast("B"), view.itemsize)
        return bool(delta), size, raw
    import numpy as np  # imported here: without the kernel only

    values = np.frombuffer(view.cast("B"), dtype=f"<i{view.itemsize}").astype(np.int64)
    best = None
    for delta, column in ((False, values), (True, np.diff(values, prepend=0))):
        lo, hi = (int(column.min()), int(column.max())) if len(column) else (0, 0)
        size = next(k for k in (1, 2, 4, 8) if k == 8 or -(1 << (8 * k - 1)) <= lo and hi < 1 << (8 * k - 1))
        if best is None or size < best[1]:
            best = (delta, size, column)
    delta, size, column = best
    return delta, size, column.astype(f"<i{size}").tobytes()


def unpack_ints(raw, itemsize: int, delta: bool, out_itemsize: int) -> tuple[bytes, int, int, bool] | None:
    """A start-up cache column (see _graph_scan.c ``unpack``): (ints of ``out_itemsize`` bytes,
    min, max, non-decreasing), or None when a value does not fit. Without the kernel: numpy."""
    if kernel_available():
        return _kernel.unpack(raw, itemsize, int(delta), out_itemsize)
    import numpy as np  # imported here: start-up without the kernel only

    values = np.frombuffer(raw, dtype=f"<i{itemsize}").astype(np.int64)
    if delta:
        values = np.cumsum(values)
    out = np.dtype(f"<i{out_itemsize}")
    if len(values) and (values.min() < np.iinfo(out).min or values.max() > np.iinfo(out).max):
        return None
    lo, hi = (int(values.min()), int(values.max())) if len(values) else (0, 0)
    return values.astype(out).tobytes(), lo, hi, bool(np.all(values[1:] >= values[:-1]))
