"""What a whole-network compare will do: its ops and one row per tensor pair, kept in columns.

A 50k-op dump has ~200k rows. As objects (a job with two sources and their path strings each)
they cost ~2 kB a row and most of the planning time; here a row is a few array items and
pointers to shared strings (~60 bytes). ``ComparePlan.jobs`` still hands out
:class:`~compare_worker.PairJob` objects, built on demand, for callers that want one pair at a
time (tests, the naive benchmark baseline).
"""

from __future__ import annotations

import os
from array import array
from dataclasses import dataclass, field
from typing import Any, Sequence

from precision_shell.analysis.compare.worker import PairJob, TensorSource

INPUT, OUTPUT = 0, 1
_IO = ("input", "output")


def file_path(f: Any) -> str | None:
    """The path of a DumpFile/GoldenFile record (folder + file name; no pathlib on hot paths).
    Plans keep the session's records, not 10^5 path strings of ~200 bytes."""
    return None if f is None else os.path.join(str(f.folder), f.filename)


@dataclass(slots=True)
class OpPlan:
    """One NPU op of the compare, in execution order."""

    op: str
    type: str
    order: int                          # 1-based position in execution order (CSV Index)
    golden_ops: list[str]               # framework ops it stands for (GroundTruth column)
    passes: list[str] = field(default_factory=list)
    fused: bool = False
    dump: Any = None                    # the DumpFile compared (None: the op has no dump)
    timestamp: int | None = None
    rows: Sequence[int] = field(default_factory=list)   # a range once planned
    other: Any = None                   # NPU vs NPU: the other run's DumpFile of this op
    packed: tuple | None = None         # its dump's header as planning parsed it (compare_tasks)

    @property
    def dump_path(self) -> str | None:
        return file_path(self.dump)


class PlanTable:
    """The rows of a plan, one column per field."""

    def __init__(self) -> None:
        self.op_pos = array("i")        # position of the row's op in ``ComparePlan.ops``
        self.io = bytearray()           # INPUT | OUTPUT
        self.index = array("i")
        self.golden_ref: list[str | None] = []
        self.reason: list[str] = []     # why the pair cannot be compared ("" = it can)
        self.golden: list[Any] = []     # GoldenFile (NPU vs NPU: the other DumpFile), None = none
        # (target_format, fallback_shape) of the NPU side (shared tuples), None = no NPU tensor
        self.spec: list[tuple | None] = []
        self.nbytes = array("q")        # bytes both sides occupy on disk (batching)
        self.alias = array("i")         # row whose bytes this input repeats, -1 = none
        # rows that cannot run: (kind, unreadable file or None), see analysis.compare.coverage
        self.why: dict[int, tuple[str, str | None]] = {}

    def __len__(self) -> int:
        return len(self.io)

    def add(self, op_pos: int, io: int, index: int, spec: tuple | None, golden: Any,
            golden_ref: str | None, reason: str, nbytes: int, alias: int = -1,
            why: tuple[str, str | None] | None = None) -> int:
        """``why``: for a row that cannot run, its kind and the unreadable file, if one."""
        row = len(self.io)
        if why is not None:
            self.why[row] = why
        self.op_pos.append(op_pos)
        self.io.append(io)
        self.index.append(index)
        self.spec.append(spec)
        self.golden.append(golden)
        self.golden_ref.append(golden_ref)
        self.reason.append(reason)
        self.nbytes.append(nbytes)
        self.alias.append(alias)
        return row

    def runnable(self, row: int) -> bool:
        return self.spec[row] is not None and self.golden[row] is not None

    def without_aliases(self) -> "PlanTable":
        """The same rows with every alias dropped (each input computed on its own)."""
        copy = PlanTable()
        copy.__dict__.update(self.__dict__)
        copy.alias = array("i", [-1]) * len(self)
        return copy


@dataclass
class ComparePlan:
    mode: str                           # "golden" | "npu"
    ops: list[OpPlan]
    table: PlanTable
    npu_label: str
    golden_label: str
    problems: list[str] = field(default_factory=list)
    expected_ops: int = 0               # while planning: about how many ops will have dumps (0: unknown)

    @property
    def device_shape_mode(self) -> bool:
        return self.mode == "npu"

    @property
    def total_bytes(self) -> int:
        return sum(self.table.nbytes)

    def __len__(self) -> int:
        return len(self.table)

    def npu_source(self, row: int, path=file_path) -> TensorSource | None:
        t = self.table
        spec = t.spec[row]
        if spec is None:
            return None
        return TensorSource(path(self.ops[t.op_pos[row]].dump), "dump", _IO[t.io[row]], t.index[row], *spec)

    def golden_path(self, row: int) -> str | None:
        return file_path(self.table.golden[row])

    def golden_source(self, row: int, path=file_path) -> TensorSource | None:
        t = self.table
        f = t.golden[row]
        if f is None:
            return None
        if self.device_shape_mode:
            return TensorSource(path(f), "dump", _IO[t.io[row]], t.index[row])
        return TensorSource(path(f), "npy")

    def job(self, row: int, path=file_path) -> PairJob:
        t = self.table
        op = self.ops[t.op_pos[row]]
        npu = self.npu_source(row, path)
        alias = t.alias[row]
        return PairJob(row, op.op, _IO[t.io[row]], t.index[row], npu, self.golden_source(row, path),
                       t.golden_ref[row], t.reason[row], t.nbytes[row], self.device_shape_mode,
                       (alias, self.npu_source(alias, path)) if alias >= 0 else None)

    @property
    def jobs(self) -> list[PairJob]:
        """One :class:`PairJob` per row (built on each access, not kept: ~1 kB a row)."""
        paths: dict[int, str | None] = {}   # one path string per file, shared by its jobs

        def path(f: Any) -> str | None:
            found = paths.get(id(f))
            if found is None:
                found = paths[id(f)] = file_path(f)
            return found
        return [self.job(row, path) for row in range(len(self.table))]
