"""The op graph as columns: one row of plain values per op only when that op is asked for.

A 1M-op graph as Python objects (a name string, a row tuple, input tuples per op) is ~1.8 kB an
op and seconds to build; as columns it is ~100 bytes an op: names in one UTF-8 blob with offsets,
types, graphs, engines and pass lists as ids into small tables, inputs as (producer row, output)
int arrays, original names and kernels as blobs with offsets, and each op's text span. The
start-up cache stores these arrays as raw bytes (graph_cache.py). Int columns are memoryviews
("q" int64, "i" int32) or ``array`` arrays, flag columns bytes of 0/1: the standard library
indexes them, so start-up imports no numpy.

``row(i)`` gives the row ``OpMap`` makes an ``OpNode`` from (see ``OpGraph``): (name, type,
graph, order, key, [(producer key, output, raw)], control keys, original names or None, passes,
kernel, engine, source), where source is the detail holder [details, reader, start, end] of an
op built in this process, (reader index, start, end) of its text span, or its OpDetails.
"""

from __future__ import annotations

from array import array
from bisect import bisect_right
from dataclasses import dataclass, field
from itertools import accumulate

__all__ = ["OpColumns", "StrColumn"]

_NO_CONTROL: list[str] = []  # shared by every op without control inputs (never mutated)


@dataclass
class StrColumn:
    """Strings in one UTF-8 blob: item i is ``blob[off[i]:off[i+1]]``."""

    blob: bytes
    off: object  # int64 ("q"), one more than there are items

    def __len__(self) -> int:
        return len(self.off) - 1

    def __getitem__(self, i: int) -> str:
        off = self.off
        return self.blob[off[i]:off[i + 1]].decode()

    def slice(self, a: int, b: int) -> list[str]:
        blob, off = self.blob, self.off[a:b + 1].tolist()
        return [blob[x:y].decode() for x, y in zip(off, off[1:])]

    def all(self) -> list[str]:
        return self.slice(0, len(self))

    @classmethod
    def of(cls, items: list[str]) -> "StrColumn":
        encoded = [s.encode("utf-8", "surrogatepass") for s in items]
        return cls(b"".join(encoded), array("q", accumulate(map(len, encoded), initial=0)))


@dataclass
class OpColumns:
    names: StrColumn
    key_override: dict[int, str]  # row -> key where it is not the name ("{graph}/{name}")
    type_id: object               # int32 into types
    types: list[str]
    graph_id: object              # int32 into graph_names
    graph_names: list[str]
    order: object                 # int64: position in its graph's op list
    in_off: object                # int64, n + 1: op i's data inputs are in_off[i]:in_off[i+1]
    in_op: object                 # int32: producer row, -1: unconnected or unresolved
    in_out: object                # int64: producer output, -1: none
    in_raw: dict[int, str]        # input -> its text where it is not "{producer key}:{output}"
    ctl_off: object               # int64, n + 1
    ctl_op: object                # int32: rows with a control edge into the op
    orig_present: bytes           # 1: the op has _datadump_original_op_names
    orig_off: object              # int64, n + 1, into originals
    originals: StrColumn
    pass_id: object               # int32 into pass_lists
    pass_lists: list[list[str]]
    kernel_present: bytes         # 1: the op has a kernel name
    kernels: StrColumn            # one item per op ("" when absent)
    engine_id: object             # int32 into engines, -1: none
    engines: list[str]
    src_reader: object            # int32: reader index of the op's text span, -1: see sources
    src_start: object             # int64
    src_end: object               # int64
    sources: dict[int, object] = field(default_factory=dict)  # row -> holder list or OpDetails
    in_out_big: dict[int, int] = field(default_factory=dict)  # input -> an output beyond int64
    _keys: list | None = None
    _override_rows: dict | None = None
    _consumer_index: tuple | None = None

    def __len__(self) -> int:
        return len(self.type_id)

    # ---- per op -------------------------------------------------------------------------------
    def keys(self) -> list[str]:
        """Every op's key, in row order (made once, when names are first needed)."""
        if self._keys is None:
            keys = self.names.all()
            for i, key in self.key_override.items():
                keys[i] = key
            self._keys = keys
        return self._keys

    def key(self, i: int) -> str:
        if self._keys is not None:
            return self._keys[i]
        found = self.key_override.get(i)
        return found if found is not None else self.names[i]

    def find_row(self, key: str) -> int | None:
        """The row whose key is ``key``, by a search of the name blob (no per-op object)."""
        if self.key_override:
            if self._override_rows is None:
                self._override_rows = {k: i for i, k in self.key_override.items()}
            found = self._override_rows.get(key)
            if found is not None:
                return found
        try:
            wanted = key.encode()
        except UnicodeEncodeError:
            return None
        blob, off, size = self.names.blob, self.names.off, len(wanted)
        if not size:  # an empty name: no byte to find
            return next((i for i in range(len(self)) if off[i] == off[i + 1] and i not in self.key_override), None)
        at = blob.find(wanted)
        while at >= 0:
            row = bisect_right(off, at) - 1  # the name holding byte ``at``
            if off[row] == at and off[row + 1] == at + size and row not in self.key_override:
                return row
            at = blob.find(wanted, at + 1)
        return None

    def row(self, i: int) -> tuple:
        key = self.key
        a, b = int(self.in_off[i]), int(self.in_off[i + 1])
        inputs = []
        big = self.in_out_big
        for j, p, o in zip(range(a, b), self.in_op[a:b].tolist(), self.in_out[a:b].tolist()):
            raw = self.in_raw.get(j)
            if big:
                o = big.get(j, o)
            inputs.append((key(p), o, raw) if p >= 0 else (None, None, raw))
        c0, c1 = int(self.ctl_off[i]), int(self.ctl_off[i + 1])
        control = [key(p) for p in self.ctl_op[c0:c1].tolist()] or _NO_CONTROL
        original = self.originals.slice(int(self.orig_off[i]), int(self.orig_off[i + 1])) \
            if self.orig_present[i] else None
        engine = int(self.engine_id[i])
        source = self.sources.get(i)
        if source is None:
            source = (int(self.src_reader[i]), int(self.src_start[i]), int(self.src_end[i]))
        return (self.names[i], self.types[self.type_id[i]], self.graph_names[self.graph_id[i]],
                int(self.order[i]), key(i), inputs, control, original, self.pass_lists[self.pass_id[i]],
                self.kernels[i] if self.kernel_present[i] else None,
                self.engines[engine] if engine >= 0 else None, source)

    # ---- whole graph --------------------------------------------------------------------------
    def _consumers(self) -> tuple:
        """Inputs sorted by producer row (stable: consumers in graph order), per producer where
        its run starts, and each input's op; made once, with numpy (a command's import)."""
        if self._consumer_index is None:
            import numpy as np

            n = len(self)
            in_off = np.frombuffer(memoryview(self.in_off).cast("B"), dtype=np.int64)
            in_op = np.frombuffer(memoryview(self.in_op).cast("B"), dtype=np.int32)
            ctl_off = np.frombuffer(memoryview(self.ctl_off).cast("B"), dtype=np.int64)
            ctl_op = np.frombuffer(memoryview(self.ctl_op).cast("B"), dtype=np.int32)
            rows = np.arange(n + 1, dtype=np.int64)
            found = []
            for off, ops in ((in_off, in_op), (ctl_off, ctl_op)):
                order = np.argsort(ops, kind="stable")
                starts = np.searchsorted(ops[order], rows)
                owner = np.repeat(rows[:-1], np.diff(off))
                found.append((order, starts, owner))
            self._consumer_index = tuple(found)
        return self._consumer_index

    def consumer_rows(self, i: int) -> list[tuple[int, int, int]]:
        """(consumer row, output, consumer input index) of each data edge out of row ``i``, in
        graph order."""
        order, starts, owner = self._consumers()[0]
        found = []
        for j in order[starts[i]:starts[i + 1]].tolist():
            c = int(owner[j])
            found.append((c, self.in_out_big.get(j, self.in_out[j]), j - self.in_off[c]))
        return found

    def control_consumer_rows(self, i: int) -> list[int]:
        order, starts, owner = self._consumers()[1]
        return owner[order[starts[i]:starts[i + 1]]].tolist()

    # ---- from rows (graphs built op by op: parsed files, the Python scan) ----------------------
    @classmethod
    def from_rows(cls, rows: list, readers: list) -> "OpColumns":
        position = {row[4]: i for i, row in enumerate(rows)}
        reader_of = {id(r): k for k, r in enumerate(readers)}
        types, graphs, engines, passes = {}, {}, {None: -1}, {}
        in_off, in_op, in_out, in_raw, in_out_big = [0], [], [], {}, {}
        ctl_off, ctl_op = [0], []
        orig_off, originals = [0], []
        src_reader, src_start, src_end, sources = [], [], [], {}
        add_op, add_out, add_ctl = in_op.append, in_out.append, ctl_op.extend  # 10^5 ops: no lookups
        add_reader, add_start, add_end = src_reader.append, src_start.append, src_end.append
        for i, row in enumerate(rows):
            inputs, control, original, source = row[5], row[6], row[7], row[11]
            for p, o, raw in inputs:
                if raw is not None:
                    in_raw[len(in_op)] = raw
                if p is None:  # unconnected or unresolved: no output either
                    add_op(-1), add_out(-1)
                    continue
                if not -(1 << 63) <= o < 1 << 63:  # "x:99999999999999999999"
                    in_out_big[len(in_op)], o = o, 0
                add_op(position[p]), add_out(o)
            in_off.append(len(in_op))
            if control:
                add_ctl([position[k] for k in control])
            ctl_off.append(len(ctl_op))
            if original is not None:
                originals += original
            orig_off.append(len(originals))
            if type(source) is list and source[1] is not None and source[0] is None:
                source = (reader_of[id(source[1])], source[2], source[3])
            if type(source) is tuple:
                add_reader(source[0]), add_start(source[1]), add_end(source[2])
            else:
                add_reader(-1), add_start(0), add_end(0)
                sources[i] = source
        orig_present = [row[7] is not None for row in rows]
        kernel_present = [row[9] is not None for row in rows]
        kernels = [row[9] or "" for row in rows]
        pass_keys = [passes.setdefault(tuple(row[8]), len(passes)) for row in rows]
        engine_ids = [engines.setdefault(row[10], len(engines) - 1) for row in rows]
        return cls(
            names=StrColumn.of([row[0] for row in rows]),
            key_override={i: row[4] for i, row in enumerate(rows) if row[4] != row[0]},
            type_id=array("i", [types.setdefault(row[1], len(types)) for row in rows]), types=list(types),
            graph_id=array("i", [graphs.setdefault(row[2], len(graphs)) for row in rows]),
            graph_names=list(graphs), order=array("q", [row[3] for row in rows]),
            in_off=array("q", in_off), in_op=array("i", in_op), in_out=array("q", in_out), in_raw=in_raw,
            ctl_off=array("q", ctl_off), ctl_op=array("i", ctl_op), orig_present=bytes(orig_present),
            orig_off=array("q", orig_off), originals=StrColumn.of(originals),
            pass_id=array("i", pass_keys), pass_lists=[list(p) for p in passes],
            kernel_present=bytes(kernel_present), kernels=StrColumn.of(kernels),
            engine_id=array("i", engine_ids), engines=[e for e in engines if e is not None],
            src_reader=array("i", src_reader), src_start=array("q", src_start), src_end=array("q", src_end),
            sources=sources, in_out_big=in_out_big)
