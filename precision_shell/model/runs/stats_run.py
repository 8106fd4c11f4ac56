"""A statistics-mode ``dump.json`` as the run model on columns: what ``vcs`` reads of a
:class:`~precision_shell.model.framework_run.FrameworkRun` -- which rows are tensors, each
tensor's input/output role and name, the inferred dataflow edges, the module chain of an entry
-- as arrays over the rows of the compare's :class:`~precision_shell.formats.msprobe.columns.
StatsColumns`, with no Leaf, tensor or Edge object per row (issue 31: on a 100k-entry dump those
objects cost ~8 s of CPU and ~500 MB before `vcs` judged anything).

The edges are :class:`FrameworkRun`'s inferred ones, the same rule on arrays: an input links to
the latest output of an earlier entry (API entries only when the run has any) with the same
dtype, shape and Max, Min, Mean, Norm -- equal statistics as equal float64 bit patterns (NaN
as one pattern, as ``repr`` keys them), a tensor with no statistics never linked. The rows are
in msprobe's compare order (inputs, parameters, outputs of each entry, in dump order), the
order the run visits them.

:meth:`StatsRun.of` returns None where the columns cannot stand for the run, and callers use
:class:`FrameworkRun` then: a dump with a capture sidecar (exact edges), one with md5 leaves
(the edge key would need them), or one whose row names are not ``ENTRY.PATH`` (tensor files).
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

import numpy as np

from ...errors import CommandError
from ...formats.msprobe.columns import TENSOR, StatsColumns
from ..framework_run import SIDECAR, entry_op, module_chain

INPUT, OUTPUT, PARAMETERS, GRAD = 0, 1, 2, 3      # io codes; GRAD: a parameters_grad leaf
IO_NAMES = ("input", "output", "parameters", "grad")
_ROOT_IO = {"input": INPUT, "output": OUTPUT, "parameters": PARAMETERS}
_NAN_BITS = np.array([math.nan]).view(np.int64)[0]
_OPS_KEPT = 256          # entries' ops kept for panels and printed names


@dataclass
class StatsRun:
    """One statistics ``dump.json``'s tensors and dataflow on its compare columns."""
    columns: StatsColumns
    entries: list                    # the rank's Entry objects (kind, scope, prefix, op), dump order
    construct: dict                  # node -> parent module (construct.json)
    path_code: np.ndarray            # int32 per row: its leaf path (``input.1.0``) in ``tails``
    tails: list[str]                 # per distinct path: what follows the entry in a tensor name
    io: np.ndarray                   # int8 per row: INPUT | OUTPUT | PARAMETERS | GRAD, -1 not a tensor
    producer: np.ndarray             # int64 per row: the output row feeding this input, -1 none
    rank: Any = field(default=None, repr=False)      # the RankDump
    _modules: dict = field(default_factory=dict, repr=False)
    _ops: dict = field(default_factory=dict, repr=False)         # entry -> FrameworkOp (the last few)
    _named: dict = field(default_factory=dict, repr=False)

    @classmethod
    def of(cls, rank, columns: StatsColumns) -> "StatsRun | None":
        """The run of ``rank`` on ``columns`` (its compare columns), or None (module docstring)."""
        entries = rank.entries
        if rank.task != "statistics" or os.path.isfile(os.path.join(rank.location.path, SIDECAR)):
            return None
        if len(entries) != len(columns.entry_names) or \
                any(e.name != n for e, n in zip(entries, columns.entry_names)):
            return None
        found = _path_codes(columns)
        if found is None:
            return None
        path_code, paths = found
        io_of_path = [_io_of(path) for path in paths]
        io = np.array(io_of_path, dtype=np.int8)[path_code] if len(paths) else np.zeros(0, dtype=np.int8)
        io[columns.kind != TENSOR] = -1
        tails = [f":{path}" if code == GRAD else ":" + ":".join(path.partition(".")[::2])
                 for path, code in zip(paths, io_of_path)]
        run = cls(columns, entries, rank.construct, path_code, tails, io, np.full(len(io), -1, dtype=np.int64), rank)
        run._infer_producers()
        return run

    # --- names --------------------------------------------------------------------------------
    def entry_name(self, entry: int) -> str:
        return self.columns.entry_names[entry]

    def tensor_names(self, rows: list[int]) -> list[str]:
        """pshell's names of tensor rows: ``ENTRY:input:1.0``, ``ENTRY:weight`` for a gradient
        (kept, so that :meth:`printed` finds the row of a name given out)."""
        entry_names, tails, named = self.columns.entry_names, self.tails, self._named
        row_entry, path_code = self.row_lists
        found = []
        for row in rows:
            name = entry_names[row_entry[row]] + tails[path_code[row]]
            named[name] = row
            found.append(name)
        return found

    def tensor_name(self, row: int) -> str:
        return self.tensor_names([row])[0]

    @cached_property
    def row_lists(self) -> tuple[list[int], list[int]]:
        """row_entry and path_code as lists (indexing a numpy array per row costs ~10x)."""
        return self.columns.row_entry.tolist(), self.path_code.tolist()

    def printed(self, name: str) -> str:
        """The name tables print of a tensor named by :meth:`tensor_name` (``ENTRY:0``,
        ``ENTRY:in1``), as FrameworkTensor.printed gives it."""
        row = self._named[name]
        io = self.io[row]
        if io == OUTPUT or io == INPUT:
            from ..tensor_ref import tensor_name

            return tensor_name(self.columns.entry_names[self.columns.row_entry[row]], IO_NAMES[io],
                               name.rsplit(":", 1)[1])
        return name

    def op(self, name: str):
        """The :class:`~..framework_run.FrameworkOp` of the entry named ``name`` (exactly), its
        leaves read now: what a panel shows of one entry, without the whole FrameworkRun."""
        at = self._entry_index.get(name)
        if at is None:
            raise CommandError(f"no entry named {name!r} in {self.rank.location.path}")
        found = self._ops.get(at)
        if found is None:
            if len(self._ops) >= _OPS_KEPT:
                self._ops.clear()
            found = self._ops[at] = entry_op(at, self.entries[at])
        return found

    def tensor(self, name: str):
        """A tensor by the name :meth:`tensor_names` gave it (``ENTRY:output:0``), as
        :meth:`FrameworkRun.tensor` has it."""
        row = self._named.get(name)
        entry = self.columns.entry_names[self.columns.row_entry[row]] if row is not None else name.split(":", 1)[0]
        if entry in self._entry_index:
            for t in self.op(entry).tensors:
                if t.name == name:
                    return t
        raise CommandError(f"no tensor {name!r} in {self.rank.location.path}")

    @cached_property
    def _entry_index(self) -> dict[str, int]:
        return {name: i for i, name in enumerate(self.columns.entry_names)}

    def module_path(self, entry: int) -> list[str]:
        """Enclosing modules of an entry, outermost first (one walk per parent module)."""
        first = self.construct.get(self.columns.entry_names[entry])
        if first is None:
            return []
        found = self._modules.get(first)
        if found is None:
            found = self._modules[first] = module_chain(self.construct, first)
        return list(found)

    # --- dataflow -----------------------------------------------------------------------------
    def consumer_lists(self) -> list[list[int]]:
        """Per entry, the entries its outputs feed (sorted, each once)."""
        linked = np.flatnonzero(self.producer >= 0)
        row_entry = self.columns.row_entry.astype(np.int64)
        pairs = np.unique(np.stack([row_entry[self.producer[linked]], row_entry[linked]], axis=1), axis=0) \
            if len(linked) else np.zeros((0, 2), dtype=np.int64)
        found: list[list[int]] = [[] for _ in self.entries]
        for src, dst in zip(pairs[:, 0].tolist(), pairs[:, 1].tolist()):    # sorted by src, then dst
            found[src].append(dst)
        return found

    def _infer_producers(self) -> None:
        columns, io = self.columns, self.io
        n = len(io)
        keyed, bits, absent = _stat_bits(columns, io)
        scopes = np.array([e.scope == "api" for e in self.entries], dtype=bool)
        feeds = scopes if scopes.any() else np.ones(len(self.entries), dtype=bool)
        row_entry = columns.row_entry.astype(np.int64)
        query = keyed & (io == INPUT)
        update = keyed & ((io == OUTPUT) | (io == GRAD)) & feeds[row_entry] if n else keyed
        events = np.flatnonzero(query | update)
        if not len(events):
            return
        is_update = update[events].astype(np.int8)
        keys = [columns.dtype[events].astype(np.int64), columns.shape[events].astype(np.int64),
                *(bits[events, i] for i in range(4)), absent[events].astype(np.int64)]
        # by key, then entry, an entry's inputs before its outputs, then row
        order = np.lexsort([events, is_update, row_entry[events], *keys[::-1]])
        sorted_keys = np.stack([k[order] for k in keys], axis=1)
        group = np.r_[0, np.cumsum(np.any(sorted_keys[1:] != sorted_keys[:-1], axis=1))]
        ups = is_update[order].astype(bool)
        last = np.maximum.accumulate(np.where(ups, np.arange(len(order)), -1))
        queries = np.flatnonzero(~ups)
        found = last[queries]
        linked = (found >= 0) & (group[np.maximum(found, 0)] == group[queries])
        self.producer[events[order[queries[linked]]]] = events[order[found[linked]]]


def _path_codes(columns: StatsColumns) -> tuple[np.ndarray, list[str]] | None:
    """(each row's leaf path as a code, the distinct paths) from the row names ``ENTRY.PATH``;
    None when a row is named otherwise (after its tensor file) or a name repeats (the run would
    keep one tensor of that name)."""
    prefixes = [f"{name}." for name in columns.entry_names]
    known: dict[str, int] = {}
    codes = []
    for name, entry in zip(columns.names, columns.row_entry.tolist()):
        prefix = prefixes[entry]
        if not name.startswith(prefix):
            return None
        path = name[len(prefix):]
        code = known.get(path)
        if code is None:
            code = known[path] = len(known)
        codes.append(code)
    if len(set(columns.names)) != len(columns.names):
        return None
    return np.array(codes, dtype=np.int32).reshape(len(codes)), list(known)


def _io_of(path: str) -> int:
    """The run's io of a tensor at ``path`` (``framework_run.tensor_name``): the path's root when
    it is input/output/parameters with more after it, else a gradient (a parameters_grad leaf)."""
    root, _, rest = path.partition(".")
    return _ROOT_IO.get(root, GRAD) if rest else GRAD


def _stat_bits(columns: StatsColumns, io: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(keyed, bits, absent): which tensor rows have an edge key, the int64 bit patterns of their
    Max/Min/Mean/Norm (NaN as one pattern, None as 0) and which of the four are None (bit mask)."""
    n = len(io)
    stats = np.ascontiguousarray(columns.stats, dtype=np.float64).reshape(n, 4)
    bits = stats.view(np.int64).copy()
    absent = np.zeros(n, dtype=np.int8)
    keyed = io >= 0
    for row, values in columns.values.items():
        if columns.simple[row] or io[row] < 0:
            continue
        if all(v is None for v in values):
            keyed[row] = False          # recovered from a file name: nothing to match on
            continue
        mask = 0
        for i, v in enumerate(values):
            if v is None:
                mask |= 1 << i
                bits[row, i] = 0
            elif v != v:
                bits[row, i] = _NAN_BITS
            else:
                bits[row, i] = np.array([v], dtype=np.float64).view(np.int64)[0]
        absent[row] = mask
    return keyed, bits, absent
