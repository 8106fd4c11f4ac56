"""Overflow scan (``ac``): hardware Opdebug records joined to op dumps, plus a value scan.

Two sources make one list of ops in execution order:
1. Opdebug records (formats.md §2): each names the task/stream id of the overflowing kernel; the
   op is the earliest non-Opdebug dump with those ids in the Opdebug file's own folder (§2.5).
2. A value scan of every dumped tensor of the dump set for nan, ±inf and fp16 saturation
   (``value_scan``: in this process or on an executor).
An op is a ``producer`` when all its inputs are finite and an output is not (or the hardware flagged
it); otherwise it only ``propagated`` an overflow that came in through an input.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from precision_shell.analysis.compare.coverage import ReasonTally, UnreadableFiles
from precision_shell.analysis.overflow.values import (  # noqa: F401  (looks_clean & co. re-exported)
    TensorOverflow, _SmallFileBatch, dump_looks_clean, looks_clean, scan_values, tensor_overflows,
)
from precision_shell.errors import FormatError
from precision_shell.formats.opdebug import OverflowRecord, read_opdebug
from precision_shell.model.dump_index import DumpFile, DumpIndex
from precision_shell.model.execution_order import execution_entries


_NOT_IN_GRAPH = 1 << 30     # graph_order of an op the graph does not have (sorts after the rest)


def _execution_positions(graph, dumps: DumpIndex, findings: dict) -> dict[str, int]:
    """Op name -> its `order` in the set's execution order (model.execution_order, as `vc` numbers
    its rows). Dumps of ops the graph lacks are named as the scan named them (no header re-read)."""
    named = {f.dump_path: name for name, f in findings.items() if f.dump_path is not None}
    return {name: pos for pos, _, name, _ in
            execution_entries(graph, dumps, lambda f: named.get(f.path))}


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
    rank: str = ""            # the dump set's device and step folder names
    step: str = ""

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
        """producer: nan/inf out, none in; propagated: in and out; healed: nan/inf inputs whose
        outputs are finite (a Sigmoid of +inf is 1): listed, but not an overflowing op."""
        inputs_bad = any(t.bad for t in self.inputs)
        outputs_bad = any(t.bad for t in self.outputs) or bool(self.records)
        if not outputs_bad:
            self.role = "healed"
        else:
            self.role = "propagated" if inputs_bad else "producer"

    def to_json(self, first: bool = False) -> dict:
        """The ``ac`` row (commands/row_schema "overflow"); ``first``: the list's first producer."""
        return {"order": self.order, "rank": _level(self.rank), "step": _level(self.step), "op": self.op, "type": self.type,
                "kind": "kernel", "source": self.source,
                "status": self.status_words, "role": self.role, "first": first, "timestamp": self.timestamp,
                "outputs": [t.to_json() for t in self.outputs],
                "inputs": [t.to_json() for t in self.inputs],
                "bad_outputs": [f"{self.op}:output:{t.index}" for t in self.outputs if t.bad],
                "bad_inputs": [f"{self.op}:input:{t.index}" for t in self.inputs if t.bad], "modules": [],
                "dump": str(self.dump_path) if self.dump_path else None,
                "records": [{"unit": r.unit, "task_id": r.task_id, "stream_id": r.stream_id,
                             "status": r.status, "file": r.path} for r in self.records]}


def _level(text: str) -> int | str | None:
    return int(text) if text.isdigit() else (text or None)


@dataclass
class OverflowScan:
    findings: list[OverflowFinding]
    problems: list[str]            # records matching no dump, duplicate ids
    scanned_files: int
    opdebug_files: int
    value_scan: bool
    cancelled: bool = False
    unreadable: ReasonTally = field(default_factory=ReasonTally)   # dump and Opdebug files, per reason

    @property
    def first_producer(self) -> OverflowFinding | None:
        return next((f for f in self.findings if f.role == "producer"), None)


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


def _record_targets(opdebug: DumpFile, index: DumpIndex, problems: list[str], unreadable: UnreadableFiles):
    """(record, matched dump or None) for each record of an Opdebug file."""
    try:
        records = read_opdebug(opdebug.path)
    except FormatError as exc:
        unreadable.add(exc)
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


def scan_overflow(session, *, values: bool = True, opdebug: bool = True, dump_set=None,
                  dumps: DumpIndex | None = None, executor=None) -> OverflowScan:
    """The overflow scan of one dump set (default: the active one). Opdebug records come from
    that set's own folder and from the overflow-mode dump of its device and step only
    (``Session.overflow_opdebug``). ``executor``: run the value scan's batches there."""
    if dumps is None:
        dump_set, dumps = session.active, session.dumps
    graph = session.graph
    problems: list[str] = []
    unreadable = UnreadableFiles()
    findings: dict[str, OverflowFinding] = {}
    rank, step = (dump_set.device, dump_set.step) if dump_set is not None else ("", "")

    def op_identity(f: DumpFile, op_name: str) -> tuple[str, str, int]:
        name = op_name or f.op_key
        op = graph.ops.get(name) if graph is not None else None
        if op is None and graph is not None:
            found = [o for o in graph.ops.values() if o.name.replace("/", "_").replace(".", "_") == f.op_key]
            op = found[0] if len(found) == 1 else None
        if op is not None:
            return op.name, op.type, op.order
        return name, f.name.op_type, _NOT_IN_GRAPH

    def finding_for(f: DumpFile, op_name: str) -> OverflowFinding:
        name, op_type, order = op_identity(f, op_name)
        if name not in findings:
            findings[name] = OverflowFinding(name, op_type, f.name.timestamp, order, f.path,
                                             rank=rank, step=step)
        return findings[name]

    opdebug_files = 0
    if opdebug:
        sources = [(f, session.overflow_dumps) for f in session.overflow_opdebug(dump_set)]
        sources += [(f, dumps) for f in dumps.opdebug]
        opdebug_files = len(sources)
        for dbg, index in sources:
            for rec, dump in _record_targets(dbg, index, problems, unreadable):
                if dump is None:
                    continue
                try:
                    header = index.header(dump)
                    finding = finding_for(dump, header.op_name)
                    if not finding.outputs and not finding.inputs:
                        tensors = tensor_overflows(header)
                        finding.inputs = [t for t in tensors if t.kind == "input"]
                        finding.outputs = [t for t in tensors if t.kind == "output"]
                except FormatError as exc:
                    unreadable.add(exc)
                    continue
                finding.records.append(rec)

    scanned = 0
    cancelled = False
    if values:
        files = dumps.op_files
        with session.progress("scanning values", len(files)) as bar:
            found, errors, scanned, cancelled = scan_values(files, bar, executor)
        for exc in errors:
            unreadable.add(exc)
        for f, op_name, tensors in found:
            finding = finding_for(f, op_name)
            # the normal dump run orders the list; keep its tensors and timestamp
            finding.timestamp, finding.dump_path = f.name.timestamp, f.path
            finding.inputs = [t for t in tensors if t.kind == "input"]
            finding.outputs = [t for t in tensors if t.kind == "output"]

    ordered = sorted(findings.values(), key=lambda x: (x.timestamp, x.graph_order, x.op))
    order = _execution_positions(graph, dumps, findings) if findings else {}
    for finding in ordered:
        # the execution order every list prints (vc/vcs rows, the report), not the list position
        finding.order = order.get(finding.op, 0)
        finding.decide_role()
    return OverflowScan(ordered, problems, scanned, opdebug_files, values, cancelled, unreadable.tally)
