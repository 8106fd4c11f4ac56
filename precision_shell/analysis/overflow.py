"""Overflow scan (``ac``): hardware Opdebug records joined to op dumps, plus a value scan.

Two sources make one list of ops in execution order:
1. Opdebug records (formats.md §2): each names the task/stream id of the overflowing kernel; the
   op is the earliest non-Opdebug dump with those ids in the Opdebug file's own folder (§2.5).
2. A value scan of every dumped tensor of the active dump set for nan, ±inf and fp16 saturation
   (|x| == 65504), one tensor at a time (memory-mapped), so memory does not grow with the dump.
An op is a ``producer`` when all its inputs are finite and an output is not (or the hardware flagged
it); otherwise it only ``propagated`` an overflow that came in through an input.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from precision_shell.analysis.tensor_compare import TensorStats, tensor_stats
from precision_shell.errors import FormatError
from precision_shell.formats.dump_file import DumpHeader, read_device_array, read_logical_array
from precision_shell.formats.opdebug import OverflowRecord, read_opdebug
from precision_shell.model.dump_index import DumpFile, DumpIndex


@dataclass
class TensorOverflow:
    kind: str                  # "input" | "output"
    index: int
    dtype: str
    shape: tuple[int, ...]
    stats: TensorStats

    @property
    def bad(self) -> bool:
        s = self.stats
        return bool(s.nan or s.pos_inf or s.neg_inf or s.fp16_saturated)

    def to_json(self) -> dict:
        s = self.stats
        return {"index": self.index, "dtype": self.dtype, "shape": list(self.shape), "nan": s.nan,
                "pos_inf": s.pos_inf, "neg_inf": s.neg_inf, "saturated": s.fp16_saturated,
                "max": s.max, "min": s.min}


@dataclass
class OverflowFinding:
    op: str
    type: str
    timestamp: int
    graph_order: int
    dump_path: Path | None
    records: list[OverflowRecord] = field(default_factory=list)
    inputs: list[TensorOverflow] = field(default_factory=list)
    outputs: list[TensorOverflow] = field(default_factory=list)
    order: int = 0
    role: str = ""

    @property
    def source(self) -> str:
        return "opdebug" if self.records else "value"

    @property
    def status_words(self) -> list[str]:
        words: list[str] = []
        for rec in self.records:
            words += [w for w in rec.status_words if w not in words]
        return words

    def decide_role(self) -> None:
        inputs_bad = any(t.bad for t in self.inputs)
        outputs_bad = any(t.bad for t in self.outputs) or bool(self.records)
        self.role = "producer" if outputs_bad and not inputs_bad else "propagated"

    def to_json(self) -> dict:
        return {"order": self.order, "op": self.op, "type": self.type, "source": self.source,
                "status": self.status_words, "role": self.role, "timestamp": self.timestamp,
                "outputs": [t.to_json() for t in self.outputs],
                "inputs": [t.to_json() for t in self.inputs],
                "dump": str(self.dump_path) if self.dump_path else None,
                "records": [{"unit": r.unit, "task_id": r.task_id, "stream_id": r.stream_id,
                             "status": r.status, "file": r.path} for r in self.records]}


@dataclass
class OverflowScan:
    findings: list[OverflowFinding]
    problems: list[str]            # corrupt records, records matching no dump, duplicate ids
    scanned_files: int
    opdebug_files: int
    value_scan: bool
    cancelled: bool = False

    @property
    def first_producer(self) -> OverflowFinding | None:
        return next((f for f in self.findings if f.role == "producer"), None)


# |x| as an unsigned bit pattern at or above this means: not finite (fp32, bf16), or not finite
# or saturated at ±65504 (fp16, whose largest finite magnitude is 0x7BFF).
_SUSPECT_BITS = {"float16": (np.uint16, 0x7FFF, 0x7BFF), "bfloat16": (np.uint16, 0x7FFF, 0x7F80),
                 "float32": (np.uint32, 0x7FFFFFFF, 0x7F800000),
                 "float64": (np.uint64, 0x7FFFFFFFFFFFFFFF, 0x7FF0000000000000)}
_CHUNK = 1 << 20


def looks_clean(array: np.ndarray) -> bool:
    """True when a tensor certainly has no nan, inf or fp16 saturation: one integer max over
    the sign-stripped bit patterns, in chunks (no float work, bounded memory). Most tensors of a
    dump are clean, so the full statistics are computed only for the few that are not."""
    spec = _SUSPECT_BITS.get(array.dtype.name)
    if spec is None or array.size == 0:
        return array.dtype.kind not in "fc"  # ints and bools cannot overflow into inf/nan
    utype, mask, limit = spec
    bits = array.reshape(-1).view(utype)
    buf = np.empty(min(_CHUNK, bits.size), dtype=utype)
    for start in range(0, bits.size, _CHUNK):
        part = bits[start:start + _CHUNK]
        out = buf[:part.size]
        np.bitwise_and(part, mask, out=out)
        if out.max() >= limit:
            return False
    return True


def dump_looks_clean(header: DumpHeader) -> bool:
    """Every input and output of a dump passes :func:`looks_clean` (device layout: padding is
    zero, so it cannot hide or fake an overflow)."""
    for entry in header.inputs + header.outputs:
        try:
            array = read_device_array(header, entry)
        except FormatError:
            return False  # let the full path report it
        if not looks_clean(array):
            return False
    return True


def tensor_overflows(header: DumpHeader, kinds=("input", "output")) -> list[TensorOverflow]:
    """Stats of each tensor of one dump, read one at a time (layout restored so padding is not
    counted as data)."""
    out = []
    for entry in header.inputs + header.outputs:
        if entry.kind not in kinds:
            continue
        array = read_logical_array(header, entry)
        out.append(TensorOverflow(entry.kind, entry.index, entry.dtype_name, tuple(array.shape),
                                  tensor_stats(array)))
    return out


def _matches(record: OverflowRecord, f: DumpFile) -> bool:
    name = f.name
    if name.is_opdebug or name.task_id != record.task_id:
        return False
    if name.stream_id is not None and name.stream_id != record.stream_id:
        return False
    # context/thread ids only count when both the record and the file name carry valid ones
    for rec_val, file_val in ((record.context_id, name.context_id), (record.thread_id, name.thread_id)):
        if rec_val is not None and file_val is not None and file_val != 65535 and rec_val != file_val:
            return False
    return True


def _record_targets(opdebug: DumpFile, index: DumpIndex, problems: list[str]):
    """(record, matched dump or None) for each record of an Opdebug file."""
    try:
        records = read_opdebug(opdebug.path)
    except FormatError as exc:
        problems.append(str(exc))
        return []
    folder = opdebug.path.parent
    candidates = [f for f in index.files if f.path.parent == folder or folder in f.path.parents]
    pairs = []
    for rec in records:
        hits = sorted((f for f in candidates if _matches(rec, f)), key=lambda f: f.name.timestamp)
        if not hits:
            problems.append(f"{opdebug.path}: {rec.unit} record (task {rec.task_id}, stream "
                            f"{rec.stream_id}) matches no op dump in {folder}")
            pairs.append((rec, None))
            continue
        ops = sorted({f.op_key for f in hits})
        if len(ops) > 1:
            problems.append(f"{opdebug.path}: task {rec.task_id}, stream {rec.stream_id} appears "
                            f"in dumps of {len(ops)} ops ({', '.join(ops)}); using the earliest, "
                            f"{hits[0].op_key}")
        pairs.append((rec, hits[0]))
    return pairs


def scan_overflow(session, *, values: bool = True, opdebug: bool = True) -> OverflowScan:
    graph = session.graph
    problems: list[str] = []
    findings: dict[str, OverflowFinding] = {}

    def op_identity(f: DumpFile, header: DumpHeader | None) -> tuple[str, str, int]:
        name = header.op_name if header is not None and header.op_name else f.op_key
        op = graph.ops.get(name) if graph is not None else None
        if op is None and graph is not None:
            found = [o for o in graph.ops.values() if o.name.replace("/", "_").replace(".", "_") == f.op_key]
            op = found[0] if len(found) == 1 else None
        if op is not None:
            return op.name, op.type, op.order
        return name, f.name.op_type, 1 << 30

    def finding_for(f: DumpFile, header: DumpHeader) -> OverflowFinding:
        name, op_type, order = op_identity(f, header)
        if name not in findings:
            findings[name] = OverflowFinding(name, op_type, f.name.timestamp, order, f.path)
        return findings[name]

    opdebug_files = 0
    if opdebug:
        sources = [(f, session.overflow_dumps) for f in session.overflow_dumps.opdebug]
        sources += [(f, session.dumps) for f in session.dumps.opdebug]
        opdebug_files = len(sources)
        for dbg, index in sources:
            for rec, dump in _record_targets(dbg, index, problems):
                if dump is None:
                    continue
                try:
                    header = index.header(dump)
                    finding = finding_for(dump, header)
                    if not finding.outputs and not finding.inputs:
                        tensors = tensor_overflows(header)
                        finding.inputs = [t for t in tensors if t.kind == "input"]
                        finding.outputs = [t for t in tensors if t.kind == "output"]
                except FormatError as exc:
                    problems.append(str(exc))
                    continue
                finding.records.append(rec)

    scanned = 0
    cancelled = False
    if values:
        files = session.dumps.op_files
        try:
            with session.progress("scanning values", len(files)) as bar:
                for f in files:
                    scanned += 1
                    bar.advance()
                    try:
                        header = session.dumps.header(f)
                        if dump_looks_clean(header):
                            continue
                        tensors = tensor_overflows(header)
                    except FormatError as exc:
                        problems.append(str(exc))
                        continue
                    if not any(t.bad for t in tensors):
                        continue
                    finding = finding_for(f, header)
                    # the normal dump run orders the list; keep its tensors and timestamp
                    finding.timestamp, finding.dump_path = f.name.timestamp, f.path
                    finding.inputs = [t for t in tensors if t.kind == "input"]
                    finding.outputs = [t for t in tensors if t.kind == "output"]
        except KeyboardInterrupt:
            cancelled = True

    ordered = sorted(findings.values(), key=lambda x: (x.timestamp, x.graph_order, x.op))
    for pos, finding in enumerate(ordered, 1):
        finding.order = pos
        finding.decide_role()
    return OverflowScan(ordered, problems, scanned, opdebug_files, values, cancelled)

