"""The op graph as columns: one row of plain values per op only when that op is asked for.

A 1M-op graph as Python objects (a name string, a row tuple, input tuples per op) is ~1.8 kB an
op and seconds to build; as columns it is ~60 bytes an op: names in one UTF-8 blob with offsets,
types, graphs, engines and pass lists as ids into small tables, inputs as (producer row, output)
int arrays, original names and kernels as blobs with offsets, and each op's text span. The
start-up cache stores these arrays as raw bytes (graph_cache.py).

``row(i)`` gives the row ``OpMap`` makes an ``OpNode`` from (see ``OpGraph``): (name, type,
graph, order, key, [(producer key, output, raw)], control keys, original names or None, passes,
kernel, engine, source), where source is the detail holder [details, reader, start, end] of an
op built in this process, (reader index, start, end) of its text span, or its OpDetails.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

__all__ = ["OpColumns", "StrColumn"]

_NO_CONTROL: list[str] = []  # shared by every op without control inputs (never mutated)


@dataclass
class StrColumn:
    """Strings in one UTF-8 blob: item i is ``blob[off[i]:off[i+1]]``."""

    blob: bytes
    off: np.ndarray  # int64, one more than there are items

    def __len__(self) -> int:
        return len(self.off) - 1

    def __getitem__(self, i: int) -> str:
        off = self.off
        return self.blob[off[i]:off[i + 1]].decode()

    def slice(self, a: int, b: int) -> list[str]:
        blob, off = self.blob, self.off.tolist()
        return [blob[off[k]:off[k + 1]].decode() for k in range(a, b)]

    def all(self) -> list[str]:
        return self.slice(0, len(self))

    @classmethod
    def of(cls, items: list[str]) -> "StrColumn":
        encoded = [s.encode("utf-8", "surrogatepass") for s in items]
        off = np.zeros(len(encoded) + 1, dtype=np.int64)
        np.cumsum([len(b) for b in encoded], out=off[1:])
        return cls(b"".join(encoded), off)


@dataclass
class OpColumns:
    names: StrColumn
    key_override: dict[int, str]  # row -> key where it is not the name ("{graph}/{name}")
    type_id: np.ndarray           # int32 into types
    types: list[str]
    graph_id: np.ndarray          # int32 into graph_names
    graph_names: list[str]
    order: np.ndarray             # int64: position in its graph's op list
    in_off: np.ndarray            # int64, n + 1: op i's data inputs are in_off[i]:in_off[i+1]
    in_op: np.ndarray             # int32: producer row, -1: unconnected or unresolved
    in_out: np.ndarray            # int64: producer output, -1: none
    in_raw: dict[int, str]        # input -> its text where it is not "{producer key}:{output}"
    ctl_off: np.ndarray           # int64, n + 1
    ctl_op: np.ndarray            # int32: rows with a control edge into the op
    orig_present: np.ndarray      # bool
    orig_off: np.ndarray          # int64, n + 1, into originals
    originals: StrColumn
    pass_id: np.ndarray           # int32 into pass_lists
    pass_lists: list[list[str]]
    kernel_present: np.ndarray    # bool
    kernels: StrColumn            # one item per op ("" when absent)
    engine_id: np.ndarray         # int32 into engines, -1: none
    engines: list[str]
    src_reader: np.ndarray        # int32: reader index of the op's text span, -1: see sources
    src_start: np.ndarray         # int64
    src_end: np.ndarray           # int64
    sources: dict[int, object] = field(default_factory=dict)  # row -> holder list or OpDetails
    _keys: list | None = None

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

    def row(self, i: int) -> tuple:
        key = self.key
        a, b = int(self.in_off[i]), int(self.in_off[i + 1])
        inputs = []
        for j, p, o in zip(range(a, b), self.in_op[a:b].tolist(), self.in_out[a:b].tolist()):
            raw = self.in_raw.get(j)
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
    def consumers(self) -> dict[str, list[tuple[str, int, int]]]:
        """producer key -> (consumer key, output, consumer input index), in graph order."""
        keys = self.keys()
        n_in = np.diff(self.in_off)
        consumer = np.repeat(np.arange(len(self), dtype=np.int64), n_in)
        index = np.arange(len(self.in_op), dtype=np.int64) - np.repeat(self.in_off[:-1], n_in)
        found: dict[str, list] = {}
        for p, c, o, j in zip(self.in_op.tolist(), consumer.tolist(), self.in_out.tolist(), index.tolist()):
            if p >= 0:
                found.setdefault(keys[p], []).append((keys[c], o, j))
        return found

    def control_consumers(self) -> dict[str, list[str]]:
        keys = self.keys()
        consumer = np.repeat(np.arange(len(self), dtype=np.int64), np.diff(self.ctl_off))
        found: dict[str, list[str]] = {}
        for p, c in zip(self.ctl_op.tolist(), consumer.tolist()):
            found.setdefault(keys[p], []).append(keys[c])
        return found

    def fused_and_passes(self, graph: int) -> tuple[int, list[str]]:
        """(fused ops, distinct pass names sorted) of the ops of graph ``graph``."""
        mine = self.graph_id == graph
        has_passes = np.array([bool(p) for p in self.pass_lists], dtype=bool)[self.pass_id]
        many = self.orig_present & (np.diff(self.orig_off) > 1)
        fused = int(np.count_nonzero(mine & (has_passes | many)))
        used = np.unique(self.pass_id[mine])
        return fused, sorted({p for k in used.tolist() for p in self.pass_lists[k]})

    # ---- from rows (graphs built op by op: parsed files, the Python scan) ----------------------
    @classmethod
    def from_rows(cls, rows: list, readers: list) -> "OpColumns":
        n = len(rows)
        position = {row[4]: i for i, row in enumerate(rows)}
        reader_of = {id(r): k for k, r in enumerate(readers)}
        types, graphs, engines, passes = {}, {}, {None: -1}, {}
        in_off, in_op, in_out, in_raw = [0], [], [], {}
        ctl_off, ctl_op = [0], []
        orig_present, orig_off, originals = [], [0], []
        kernels, kernel_present = [], []
        src_reader, src_start, src_end, sources = [], [], [], {}
        for i, row in enumerate(rows):
            name, _, _, _, key, inputs, control, original, pass_list, kernel, engine, source = row
            for p, o, raw in inputs:
                if raw is not None:
                    in_raw[len(in_op)] = raw
                in_op.append(-1 if p is None else position[p])
                in_out.append(-1 if o is None else o)
            in_off.append(len(in_op))
            ctl_op += [position[k] for k in control]
            ctl_off.append(len(ctl_op))
            orig_present.append(original is not None)
            originals += original or ()
            orig_off.append(len(originals))
            kernel_present.append(kernel is not None)
            kernels.append(kernel or "")
            if type(source) is list and source[1] is not None and source[0] is None:
                source = (reader_of[id(source[1])], source[2], source[3])
            if type(source) is tuple:
                src_reader.append(source[0]), src_start.append(source[1]), src_end.append(source[2])
            else:
                src_reader.append(-1), src_start.append(0), src_end.append(0)
                sources[i] = source
        pass_keys = [passes.setdefault(tuple(row[8]), len(passes)) for row in rows]
        engine_ids = [engines.setdefault(row[10], len(engines) - 1) for row in rows]
        return cls(
            names=StrColumn.of([row[0] for row in rows]),
            key_override={i: row[4] for i, row in enumerate(rows) if row[4] != row[0]},
            type_id=np.array([types.setdefault(row[1], len(types)) for row in rows], dtype=np.int32),
            types=list(types), graph_id=np.array([graphs.setdefault(row[2], len(graphs)) for row in rows],
                                                 dtype=np.int32),
            graph_names=list(graphs), order=np.array([row[3] for row in rows], dtype=np.int64),
            in_off=np.array(in_off, dtype=np.int64), in_op=np.array(in_op, dtype=np.int32),
            in_out=np.array(in_out, dtype=np.int64), in_raw=in_raw,
            ctl_off=np.array(ctl_off, dtype=np.int64), ctl_op=np.array(ctl_op, dtype=np.int32),
            orig_present=np.array(orig_present, dtype=bool).reshape(n),
            orig_off=np.array(orig_off, dtype=np.int64), originals=StrColumn.of(originals),
            pass_id=np.array(pass_keys, dtype=np.int32), pass_lists=[list(p) for p in passes],
            kernel_present=np.array(kernel_present, dtype=bool).reshape(n), kernels=StrColumn.of(kernels),
            engine_id=np.array(engine_ids, dtype=np.int32), engines=[e for e in engines if e is not None],
            src_reader=np.array(src_reader, dtype=np.int32), src_start=np.array(src_start, dtype=np.int64),
            src_end=np.array(src_end, dtype=np.int64), sources=sources)
