"""The result of a whole-network compare: rows kept in arrays, handed out as objects.

200k :class:`TensorResult` objects (each with its :class:`Metrics`) cost ~1 kB apiece; kept for
the session they made ``vc`` on a 50k-file dump the largest process of the machine. Here a row is
an index into a table of distinct results (rows whose tensors repeat another row's bytes share
that row's entry), and each distinct result is one line of a few numpy arrays (~150 bytes).
``CompareResult.rows`` builds a :class:`TensorResult` when one is asked for.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator, Sequence

import numpy as np

from precision_shell.analysis.compare.plan import ComparePlan, OpPlan
from precision_shell.analysis.compare.tasks import VALUE_FIELDS, result_row
from precision_shell.analysis.compare.worker import PairResult
from precision_shell.analysis.compare.coverage import NO_COUNTERPART, Coverage
from precision_shell.analysis.compare.metrics import Metrics

_IO = ("input", "output")
# object columns of a distinct result: interned values, see ResultStore._intern
_NOT_COMPUTED, _REASONS, _NPU_DTYPE, _GOLDEN_DTYPE, _SHAPE, _REASON, _KIND, _FILE = range(8)
_BOTH_ZERO, _COMPARED, _IDENTICAL, _UNREADABLE = 1, 2, 4, 8
_EXAMPLE_ROWS = 500   # rows looked at for the few examples a coverage names


@dataclass
class TensorResult:
    """One compared tensor (a CSV row)."""

    order: int                      # the op's execution position (CSV Index)
    op: str
    op_type: str
    io: str                         # "input" | "output"
    index: int
    golden_ops: list[str]
    golden_ref: str | None
    metrics: Metrics
    npu_dtype: str = "NaN"
    golden_dtype: str = "NaN"
    shape: tuple[int, ...] | None = None
    reason: str = ""
    compared: bool = False
    identical: bool = False         # NPU vs NPU: the two tensors are bit-identical
    coverage_kind: str = ""         # why not compared, counted alike (analysis.compare.coverage)
    file: str | None = None         # the file that could not be read
    unreadable: bool = False        # a file could not be read, or the pair failed

    @property
    def tensor(self) -> str:
        return f"{self.op}:{self.io}:{self.index}"

    def to_json(self) -> dict:
        return {"index": self.order, "op": self.op, "type": self.op_type, "tensor": self.tensor,
                "golden": self.golden_ops, "golden_tensor": self.golden_ref, "npu_dtype": self.npu_dtype,
                "golden_dtype": self.golden_dtype, "shape": list(self.shape) if self.shape else None,
                "compared": self.compared, **self.metrics.as_json(), "reason": self.reason or None}


class ResultStore:
    """Results of the rows of one plan as they come back from the workers."""

    def __init__(self, plan: ComparePlan):
        self.plan = plan
        n = len(plan.table)
        self.rid = np.full(n, -1, np.int32)          # distinct result of each row; -1 = none yet
        self.same: dict[int, int] = {}               # row -> row whose result it is (resolved last)
        # capacity for every row; np.empty pages only become resident when written
        self.values = np.empty((max(n, 1), len(VALUE_FIELDS)), np.float64)
        self.count = np.empty(max(n, 1), np.int64)
        self.objs = np.empty((max(n, 1), 8), np.int32)
        self.flags = np.empty(max(n, 1), np.uint8)
        self.size = 0
        self.objects: list[Any] = []
        self._ids: dict[Any, int] = {}
        self.bytes_read = 0

    def _intern(self, value: Any) -> int:
        key = (type(value), value)
        found = self._ids.get(key)
        if found is None:
            found = self._ids[key] = len(self.objects)
            self.objects.append(value)
        return found

    def add(self, t: tuple) -> None:
        """One result tuple (``compare_tasks`` layout)."""
        row, same_as, nbytes = t[0], t[1], t[2]
        self.bytes_read += nbytes
        if same_as >= 0:
            self.same[row] = same_as
            return
        d = self.size
        self.size += 1
        self.values[d] = t[3]
        self.count[d] = t[4]
        intern = self._intern
        self.objs[d] = (intern(t[5]), intern(t[7]), intern(t[8]), intern(t[9]), intern(t[10]), intern(t[11]),
                        intern(t[14]), intern(t[15]))
        self.flags[d] = (_BOTH_ZERO if t[6] else 0) | (_COMPARED if t[12] else 0) | \
            (_IDENTICAL if t[13] else 0) | (_UNREADABLE if t[16] else 0)
        self.rid[row] = d

    def add_result(self, res: PairResult) -> None:
        self.add(result_row(res))

    def resolve(self) -> None:
        """Rows that repeat another row take its result (still none if that row was not reached
        before an interrupt). Sources are earlier rows, so one pass in row order follows chains."""
        for row in sorted(self.same):
            self.rid[row] = self.rid[self.same[row]]
        self.same.clear()

    def done(self) -> np.ndarray:
        return self.rid >= 0

    def compared(self) -> np.ndarray:
        """Per row: compared from data (False for rows without a result)."""
        ok = self.rid >= 0
        out = np.zeros(len(self.rid), bool)
        out[ok] = (self.flags[self.rid[ok]] & _COMPARED) != 0
        return out

    def metrics(self, d: int) -> Metrics:
        objs = self.objects
        o = self.objs[d]
        return Metrics(*self.values[d].tolist(), count=int(self.count[d]), not_computed=objs[o[_NOT_COMPUTED]],
                       cosine_both_zero=bool(self.flags[d] & _BOTH_ZERO), reasons=objs[o[_REASONS]])

    def tensor(self, row: int) -> TensorResult | None:
        d = int(self.rid[row])
        if d < 0:
            return None
        t = self.plan.table
        op = self.plan.ops[t.op_pos[row]]
        o, flags, objs = self.objs[d], int(self.flags[d]), self.objects
        return TensorResult(op.order, op.op, op.type, _IO[t.io[row]], t.index[row], op.golden_ops,
                            t.golden_ref[row], self.metrics(d), objs[o[_NPU_DTYPE]], objs[o[_GOLDEN_DTYPE]],
                            objs[o[_SHAPE]], objs[o[_REASON]], bool(flags & _COMPARED),
                            bool(flags & _IDENTICAL), objs[o[_KIND]], objs[o[_FILE]],
                            bool(flags & _UNREADABLE))

    def tally(self, cov: Coverage) -> None:
        """Add the counts of every row with a result to ``cov``, per kind from the arrays, and
        the first examples: unreadable files, then tensors skipped although they had a
        counterpart, then the others (a few hundred rows are looked at, not all)."""
        done, compared = self.done(), self.compared()
        cov.compared += int(compared.sum())
        cov.not_reached += len(done) - int(done.sum())
        rows = np.flatnonzero(done & ~compared)
        d = self.rid[rows]
        kinds = self.objs[d, _KIND]
        unread = (self.flags[d] & _UNREADABLE) != 0
        t, objs = self.plan.table, self.objects
        for mask, tally in ((unread, cov.unreadable), (~unread, cov.skipped)):
            ids, counts = np.unique(kinds[mask], return_counts=True)
            for i, n in zip(ids.tolist(), counts.tolist()):
                tally.counts[objs[i] or "unknown"] += n
        # a few kinds: one comparison each (np.isin would import numpy.ma, 40 ms of every vc)
        lacking = np.zeros(len(kinds), bool)
        for i in {i for i in set(kinds.tolist()) if objs[i] in NO_COUNTERPART}:
            lacking |= kinds == i
        for mask, tally in ((unread, cov.unreadable), (~unread & ~lacking, cov.skipped),
                            (~unread & lacking, cov.skipped)):
            for row, r in zip(rows[mask][:_EXAMPLE_ROWS].tolist(), d[mask][:_EXAMPLE_ROWS].tolist()):
                o = self.objs[r]
                where = objs[o[_FILE]] or f"{self.plan.ops[t.op_pos[row]].op}:{_IO[t.io[row]]}:{t.index[row]}"
                if not tally.example(where, objs[o[_REASON]]):
                    break

    def trim(self) -> None:
        """Give back the capacity no distinct result used."""
        n = max(self.size, 1)
        self.values, self.count = self.values[:n].copy(), self.count[:n].copy()
        self.objs, self.flags = self.objs[:n].copy(), self.flags[:n].copy()


def candidate_rows(store: ResultStore, threshold: float) -> np.ndarray:
    """Output rows that may fail ``root_cause.Criteria(threshold)``: compared, not identical,
    and cosine NaN or <= threshold or max_abs_error not finite (a superset: the caller checks
    each with the Criteria itself)."""
    t = store.plan.table
    outputs = np.frombuffer(bytes(t.io), np.uint8) == 1
    rid = store.rid
    ok = outputs & (rid >= 0)
    d = rid[ok]
    flags = store.flags[d]
    cos = store.values[d, VALUE_FIELDS.index("cosine")]
    max_abs = store.values[d, VALUE_FIELDS.index("max_abs_error")]
    with np.errstate(invalid="ignore"):
        bad = np.isnan(cos) | (cos <= threshold) | ~np.isfinite(max_abs)
    bad &= ((flags & _COMPARED) != 0) & ((flags & _IDENTICAL) == 0)
    return np.flatnonzero(ok)[bad]


class RowView(Sequence):
    """``CompareResult.rows`` of a run compare: a TensorResult per row, built on access."""

    def __init__(self, store: ResultStore):
        self.store = store

    def __len__(self) -> int:
        return len(self.store.rid)

    def __getitem__(self, i):
        if isinstance(i, slice):
            return [self.store.tensor(r) for r in range(*i.indices(len(self)))]
        if i < 0:
            i += len(self)
        if not 0 <= i < len(self):
            raise IndexError(i)
        return self.store.tensor(i)

    def __iter__(self) -> Iterator[TensorResult | None]:
        tensor = self.store.tensor
        for row in range(len(self)):
            yield tensor(row)


@dataclass
class CompareResult:
    mode: str                       # "golden" | "npu" | "csv"
    npu_label: str
    golden_label: str
    ops: list[OpPlan]
    rows: Sequence[TensorResult | None]  # by row; None = not computed (interrupted)
    cancelled: bool = False
    workers: int = 1
    elapsed: float = 0.0
    bytes_read: int = 0
    problems: list[str] = field(default_factory=list)
    csv_path: Path | None = None

    @property
    def store(self) -> ResultStore | None:
        return self.rows.store if isinstance(self.rows, RowView) else None

    def iter_done(self) -> Iterator[TensorResult]:
        return (r for r in self.rows if r is not None)

    @property
    def done_rows(self) -> list[TensorResult]:
        return list(self.iter_done())

    def count_done(self) -> tuple[int, int]:
        """(rows with a result, rows compared from data)."""
        store = self.store
        if store is not None:
            return int(store.done().sum()), int(store.compared().sum())
        done = self.done_rows
        return len(done), sum(r.compared for r in done)

    def coverage(self) -> Coverage:
        """Compared, skipped and unreadable tensors, per reason."""
        cov = Coverage(total=len(self.rows))
        store = self.store
        if store is not None:
            store.tally(cov)
            return cov
        skipped = []
        for r in self.rows:
            if r is None:
                cov.not_reached += 1
            elif r.compared:
                cov.compared += 1
            elif r.unreadable:
                cov.unreadable.add(r.coverage_kind or "unknown", r.file or r.tensor, r.reason)
            else:
                skipped.append(r)
        skipped.sort(key=lambda r: r.coverage_kind in NO_COUNTERPART)   # stable: row order within
        for r in skipped:
            cov.skipped.add(r.coverage_kind or "unknown", r.tensor, r.reason)
        return cov

    def rows_of(self, plan: OpPlan) -> list[TensorResult]:
        return [r for r in (self.rows[i] for i in plan.rows) if r is not None]

    @property
    def mb_per_s(self) -> float:
        return self.bytes_read / 1e6 / self.elapsed if self.elapsed > 0 else 0.0
