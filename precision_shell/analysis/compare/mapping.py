"""Plan a whole-network compare: which NPU tensor meets which golden tensor (formats.md A.8.5).

Planning runs in the parent and only touches names and dump headers; the pairs it produces are
executed by :mod:`compare_worker`. Rules, as the vendor engine applies them with a fusion rule:

* output i of an NPU op -> ``output_desc[i]`` (``[0]`` when i is past the end) ->
  ``_datadump_origin_name`` at ``_datadump_origin_output_index`` (default i). Fallbacks, in
  order: the dump header's ``original_op`` of that output, then the op's golden names when there
  is exactly one (an unfused op, or an op without ``_datadump_original_op_names``).
* input j -> its producer through the graph edge, walking up through ``Cast`` and ``TransData``
  producers (GE inserts them; the framework never saw them) -> that producer's output mapping.
  So a golden file is compared as "output of its op" and again as "input of every consumer".
* output i of a ``Cast``/``TransData`` (every one: GE-inserted, or an AMP cast with original op
  names) is never looked up by its own origin name: it stands for the op's input i, walked up
  the same way. A TransData output meets the golden of the op that feeds it, an fp32 -> bf16
  cast's output the producer's fp32 golden (the cast's rounding is its error).
* NPU run vs NPU run: same op name, same tensor position; device shapes must agree.
"""

from __future__ import annotations

from collections import deque
from itertools import islice
from typing import Any, Iterable, Iterator

from precision_shell.analysis.compare.plan import INPUT, OUTPUT, ComparePlan, OpPlan, PlanTable, file_path
from precision_shell.analysis.compare.tasks import pack_header
from precision_shell.analysis.compare import coverage
from precision_shell.analysis.compare.worker import NO_DUMP, NO_GOLDEN
from precision_shell.errors import FormatError
from precision_shell.formats.dump_file import DumpHeader, TensorEntry, read_dump_header
from precision_shell.formats.dump_header import read_dump_headers
from precision_shell.model.dump_index import DumpFile, DumpIndex
from precision_shell.model.execution_order import execution_entries
from precision_shell.model.golden_index import GoldenIndex

__all__ = ["ComparePlan", "OpPlan", "plan_golden_compare", "plan_npu_compare"]

# Layout/dtype conversions (GE-inserted or AMP casts): their inputs and outputs are matched
# through them to the real producer's golden.
WALK_THROUGH_TYPES = frozenset({"Cast", "TransData"})
# Formats the layout converters accept as the logical target of a 4-D restore.
_TARGET_FORMATS = frozenset({"NCHW", "NHWC", "HWCN", "CHWN", "NCDHW", "NDHWC", "DHWCN"})
_MAX_WALK = 64  # a Cast/TransData chain longer than this is a cycle in a corrupt graph
# Parsed headers kept while planning: a producer is usually one of the ops just planned. The
# session's DumpIndex cache is not used: 50k headers kept for the session cost ~100 MB.
_HEADER_CACHE = 64
# Headers read ahead at a time (read_dump_headers: one GIL wait per block, not six per file,
# which matters when vc's workers hold the GIL); the first block is small so the first task
# starts soon, and the blocks double from there (a first task of many small ops needed a
# second block of 256 headers, ~20 ms, before it could start).
_AHEAD_FIRST, _AHEAD = 16, 256


def dump_path(f: DumpFile) -> str:
    # pathlib's / and str() cost ~5 us each, 10^5 times
    return file_path(f)


def _target_format(desc: Any) -> str | None:
    fmt = getattr(desc, "origin_format", None) if desc is not None else None
    fmt = fmt.upper() if isinstance(fmt, str) else None
    return fmt if fmt in _TARGET_FORMATS else None


def _logical_shape(desc: Any) -> tuple[int, ...] | None:
    shape = getattr(desc, "origin_shape", None) if desc is not None else None
    if not shape or min(shape) < 0:
        return None
    return tuple(shape)


class _Planner:
    """Shared state of one planning run: indexes, the graph, cached headers, problems."""

    def __init__(self, graph: Any, dumps: DumpIndex, golden: GoldenIndex | None):
        self.graph = graph
        self.dumps = dumps
        self.golden = golden
        self.problems: list[str] = []
        self.table = PlanTable()
        self.ops: list[OpPlan] = []
        self._headers: dict[str, DumpHeader] = {}
        self._ahead: dict[str, DumpHeader | FormatError] = {}   # read ahead, not asked for yet
        # unreadable dumps: each becomes a row naming the file and why (not a warning per file)
        self.errors: dict[str, FormatError] = {}
        self._golden: dict[str, tuple[Any, int]] = {}
        self._specs: dict[tuple, tuple] = {}
        self._refs: dict[str, str] = {}
        self._graph_ops: dict[str, Any] = {}     # name -> graph op or None (each asked ~6 times)
        self._sources: dict[tuple[str, int], tuple[str | None, str]] = {}   # source_golden's answers
        self.packed: dict[tuple, tuple] = {}   # shared entry groups of packed headers

    # -- dumps --------------------------------------------------------------------------------
    def read_ahead(self, entries: Iterable[tuple]) -> Iterator[tuple]:
        """``entries`` (execution_entries' tuples) as they come, the headers of their dumps read
        a block ahead of them in one call (``read_dump_headers``)."""
        it, block, size = iter(entries), deque(), _AHEAD_FIRST
        while True:
            if not block:
                block.extend(islice(it, size))
                if not block:
                    return
                size = min(2 * size, _AHEAD)
                paths = [dump_path(e[3]) for e in block if e[3] is not None]
                paths = [p for p in paths if p not in self._headers and p not in self.errors]
                self._ahead = dict(zip(paths, read_dump_headers(paths)))
            yield block.popleft()

    def header(self, index: DumpIndex, f: DumpFile | None) -> DumpHeader | None:
        if f is None:
            return None
        path = dump_path(f)
        header = self._headers.get(path)
        if header is None:
            if path in self.errors:
                return None
            header = self._ahead.pop(path, None)
            try:
                if header is None:
                    header = read_dump_header(path)
                elif isinstance(header, FormatError):
                    raise header
            except FormatError as exc:
                self.errors[path] = exc
                return None
            if len(self._headers) >= _HEADER_CACHE:
                del self._headers[next(iter(self._headers))]
            self._headers[path] = header
        return header

    def spec(self, target_format: str | None, fallback_shape: tuple[int, ...] | None) -> tuple:
        key = (target_format, fallback_shape)
        return self._specs.setdefault(key, key)

    def add_unreadable(self, plan: OpPlan, path: str) -> None:
        """The one row of an op whose dump could not be read: the reader's reason, and the file."""
        exc = self.errors[path]
        self.add(plan, OUTPUT, 0, None, None, None, str(exc), 0,
                 why=(coverage.reason_kind(exc.reason), exc.path or path))

    def ref(self, text: str | None) -> str | None:
        return text if text is None else self._refs.setdefault(text, text)

    def graph_op(self, name: str):
        try:
            return self._graph_ops[name]
        except KeyError:
            op = self._graph_ops[name] = self.graph.ops.get(name) if self.graph is not None else None
            return op

    # -- golden mapping ------------------------------------------------------------------------
    def output_golden(self, op: Any, name: str, i: int, entry: TensorEntry | None) -> tuple[str, int] | None:
        """(framework op, output index) that NPU output ``i`` of ``name`` stands for."""
        outs = op.outputs if op is not None else None
        if outs:
            desc = outs[i] if i < len(outs) else outs[0]
            if desc.origin_name:
                idx = desc.origin_output_index if desc.origin_output_index is not None else i
                return desc.origin_name, idx
        if entry is not None and entry.original_name:
            idx = entry.original_output_index if entry.original_output_index is not None else i
            return entry.original_name, idx
        names = op.golden_names() if op is not None else [name]
        return (names[0], i) if len(names) == 1 else None

    def producer_golden(self, op: Any, j: int, n_inputs: int) -> tuple[str | None, str]:
        """(golden "name:idx" or None, how it was found) for NPU input ``j`` of ``op``."""
        refs = list(op.inputs)
        if len(refs) != n_inputs:
            # unconnected optional inputs are not dumped: align with the connected ones
            refs = [r for r in refs if r.producer]
        if j >= len(refs) or not refs[j].producer:
            return None, f"input {j} has no producer in the graph"
        return self.source_golden(refs[j].producer, refs[j].producer_output or 0)

    def source_golden(self, name: str, out: int) -> tuple[str | None, str]:
        """(golden "name:idx" or None, the op it was found at, or why not) for output ``out`` of
        op ``name``, walked up through Cast/TransData: their output k stands for their input k
        (the vendor's assumption; its input list skips unconnected and control inputs). An op's
        output feeds several consumers: each answer is kept."""
        key = (name, out)
        found = self._sources.get(key)
        if found is None:
            found = self._sources[key] = self._source_golden(name, out)
        return found

    def _source_golden(self, name: str, out: int) -> tuple[str | None, str]:
        for _ in range(_MAX_WALK + 1):
            prod = self.graph_op(name)
            if prod is None or prod.type not in WALK_THROUGH_TYPES:
                break
            data = [r for r in prod.inputs if r.producer]
            if out >= len(data):
                return None, f"{name}:input:{out} has no producer in the graph"
            name, out = data[out].producer, data[out].producer_output or 0
        else:
            return None, f"more than {_MAX_WALK} Cast/TransData ops in a row (a cycle?) at {name}"
        entry = None
        desc = None
        outs = prod.outputs if prod is not None else None
        if outs:
            desc = outs[out] if out < len(outs) else outs[0]
        if prod is not None and (desc is None or not desc.origin_name):
            # the producer's own dump header may still name its framework op
            header = self.header(self.dumps, self.dumps.latest_for_op(prod.name))
            if header is not None and out < len(header.outputs):
                entry = header.outputs[out]
        target = self.output_golden(prod, prod.name, out, entry) if prod is not None else (name, out)
        if target is None:
            return None, f"producer {name}:output:{out} has no framework op"
        return self.ref(f"{target[0]}:{target[1]}"), name

    def golden_source(self, ref: str | None) -> tuple[Any, int]:
        """(GoldenFile, its size) of golden tensor ``ref``; (None, 0) when there is none."""
        if ref is None or self.golden is None:
            return None, 0
        known = self._golden.get(ref)
        if known is None:
            name, idx = ref.rsplit(":", 1)
            found = self.golden.find(name, int(idx))
            known = self._golden[ref] = (found, found.size) if found is not None else (None, 0)
        return known

    # -- rows ----------------------------------------------------------------------------------
    def start_op(self, plan: OpPlan) -> None:
        plan.rows = range(len(self.table), len(self.table))
        self.ops.append(plan)

    def add(self, plan: OpPlan, io: int, index: int, spec: tuple | None, golden: str | None,
            golden_ref: str | None, reason: str, nbytes: int, alias: int = -1,
            why: tuple[str, str | None] | None = None) -> int:
        if spec is not None and golden is None and not reason:
            reason = NO_GOLDEN.format(tensor=f"{plan.op}:{('input', 'output')[io]}:{index}")
        if why is None and (spec is None or golden is None):
            why = (coverage.NO_DUMP if spec is None else coverage.NO_GOLDEN, None)
        row = self.table.add(len(self.ops) - 1, io, index, spec, golden, golden_ref, reason, nbytes, alias,
                             why)
        plan.rows = range(plan.rows.start, row + 1)
        return row

    def alias_for(self, op: Any, j: int, n_inputs: int, spec: tuple, golden_ref: str | None,
                  outputs: dict) -> int:
        """The output row whose bytes input ``j`` most likely repeats: the direct producer's
        dumped output (no Cast/TransData between), compared with the same golden; -1 = none."""
        refs = op.inputs
        if len(refs) != n_inputs:
            refs = [r for r in refs if r.producer]
        if golden_ref is None or j >= len(refs) or not refs[j].producer:
            return -1
        prod = self.graph_op(refs[j].producer)
        if prod is None:
            return -1
        row = outputs.get((prod.name, refs[j].producer_output or 0), -1)
        if row < 0 or self.table.golden_ref[row] != golden_ref:
            return -1
        if self.table.spec[row] != spec:
            return -1   # restored differently: same bytes would not mean same metrics
        return row


def plan_golden_compare(graph: Any, dumps: DumpIndex, golden: GoldenIndex, *,
                        npu_label: str = "npu", golden_label: str = "golden") -> ComparePlan:
    """NPU dumps vs framework goldens. Ops come from the graph (execution order: dump timestamp,
    graph order as tie-break); dumps of ops the graph does not know are mapped by their headers."""
    plan, steps = golden_plan_steps(graph, dumps, golden, npu_label=npu_label, golden_label=golden_label)
    for _ in steps:
        pass
    return plan


def golden_plan_steps(graph: Any, dumps: DumpIndex, golden: GoldenIndex, *, npu_label: str = "npu",
                      golden_label: str = "golden") -> tuple[ComparePlan, Iterator[OpPlan]]:
    """:func:`plan_golden_compare`'s plan, still empty, and the generator that fills it: each op
    is yielded once its rows are in, so ``vc`` compares the first ops while it reads the headers
    of the rest. The plan's problems are complete when the generator is exhausted (they go before
    any a caller appended meanwhile, as when planning came first)."""
    p = _Planner(graph, dumps, golden)
    plan = ComparePlan("golden", p.ops, p.table, npu_label, golden_label, [], expected_ops=len(dumps.by_key))

    def steps() -> Iterator[OpPlan]:
        yield from _golden_ops(p, graph, dumps)
        plan.problems[:0] = p.problems + dumps.warnings
    return plan, steps()


def _golden_ops(p: _Planner, graph: Any, dumps: DumpIndex) -> Iterator[OpPlan]:
    def header_name(f: DumpFile) -> str | None:
        header = p.header(dumps, f)
        return header.op_name if header is not None and header.op_name else None

    outputs: dict[tuple[str, int], int] = {}   # (op, output index) -> its row, when it has a golden
    if graph is not None:   # every op's descs are read: the details cache first, not 64 text parses
        graph.want_all_details()
    for position, op, name, f in p.read_ahead(execution_entries(graph, dumps, header_name)):
        plan = OpPlan(name, op.type if op is not None else (f.name.op_type if f else "?"), position,
                      op.golden_names() if op is not None else [name],
                      op.passes if op is not None else [],
                      bool(op.is_fused) if op is not None else False,
                      f, f.name.timestamp if f is not None else None)
        p.start_op(plan)
        header = p.header(dumps, f)
        if header is None:
            if f is None:
                p.add(plan, OUTPUT, 0, None, None, None, NO_DUMP, 0)
            else:
                p.add_unreadable(plan, dump_path(f))
            yield plan
            continue
        plan.packed = pack_header(header, p.packed)   # workers do not parse it again
        outs = op.outputs if op is not None else ()
        n_inputs = len(header.inputs)
        for entry in header.inputs:
            ref, how = (p.producer_golden(op, entry.index, n_inputs) if op is not None
                        else (None, "no graph to find the producer"))
            desc = op.inputs[entry.index].desc if op is not None and entry.index < len(op.inputs) else None
            spec = p.spec(_target_format(desc), _logical_shape(desc))
            src, size = p.golden_source(ref)
            reason = "" if ref is not None else f"no golden for {plan.op}:input:{entry.index} ({how})"
            alias = p.alias_for(op, entry.index, n_inputs, spec, ref, outputs) \
                if op is not None and src is not None else -1
            p.add(plan, INPUT, entry.index, spec, src, ref, reason,
                  2 * entry.size if alias >= 0 else entry.size + size, alias)
        for entry in header.outputs:
            reason = ""
            if op is not None and op.type in WALK_THROUGH_TYPES:
                ref, how = p.source_golden(op.name, entry.index)
                if ref is None:
                    reason = f"no golden for {plan.op}:output:{entry.index} ({how})"
            else:
                target = p.output_golden(op, name, entry.index, entry)
                ref = p.ref(f"{target[0]}:{target[1]}") if target is not None else None
            desc = outs[entry.index] if entry.index < len(outs) else None
            spec = p.spec(_target_format(desc), _logical_shape(desc))
            src, size = p.golden_source(ref)
            row = p.add(plan, OUTPUT, entry.index, spec, src, ref, reason, entry.size + size)
            if src is not None:
                outputs[(name, entry.index)] = row
        yield plan


def plan_npu_compare(graph: Any, left: DumpIndex, right: DumpIndex, *, left_label: str,
                     right_label: str) -> ComparePlan:
    """NPU run vs NPU run (e.g. fusion on vs off): same op, same tensor position; ops in the
    left run's execution order, ops only the right run has after them (as the vendor does)."""
    p = _Planner(graph, left, None)
    keys = sorted(left.by_key, key=lambda k: left.by_key[k][-1].name.timestamp)
    right_only = sorted((k for k in right.by_key if k not in left.by_key),
                        key=lambda k: right.by_key[k][-1].name.timestamp)
    plain = p.spec(None, None)
    for position, key in enumerate(keys + right_only, 1):
        lf = left.by_key[key][-1] if key in left.by_key else None
        rf = right.by_key[key][-1] if key in right.by_key else None
        lh, rh = p.header(left, lf), p.header(right, rf)
        some = lh or rh
        name = some.op_name if some is not None and some.op_name else key
        op = p.graph_op(name)
        op_type = op.type if op is not None else (lf or rf).name.op_type
        plan = OpPlan(name, op_type, position, [name], op.passes if op is not None else [],
                      bool(op.is_fused) if op is not None else False,
                      lf, lf.name.timestamp if lf else None, other=rf)
        p.start_op(plan)
        if lh is None or rh is None:
            unreadable = [dump_path(f) for f, h in ((lf, lh), (rf, rh)) if f is not None and h is None]
            if unreadable:
                p.add_unreadable(plan, unreadable[0])
            else:
                p.add(plan, OUTPUT, 0, None, None, None,
                      f"{name} has no dump in {left_label if lh is None else right_label}", 0)
            continue
        for io, kind in ((INPUT, "input"), (OUTPUT, "output")):
            lefts, rights = getattr(lh, kind + "s"), getattr(rh, kind + "s")
            for i in range(max(len(lefts), len(rights))):
                if i >= len(lefts) or i >= len(rights):
                    side = left_label if i >= len(lefts) else right_label
                    p.add(plan, io, i, None, None, None, f"{name}:{kind}:{i} is missing in {side}", 0,
                          why=(coverage.MISSING, None))
                    continue
                p.add(plan, io, i, plain, rf, p.ref(f"{name}:{kind}:{i}"), "",
                      lefts[i].size + rights[i].size)
    return ComparePlan("npu", p.ops, p.table, left_label, right_label,
                       p.problems + left.warnings + right.warnings)


def op_golden_refs(graph: Any, dumps: DumpIndex, golden: GoldenIndex | None, op: Any,
                   header: DumpHeader) -> tuple[list[str | None], list[str | None]]:
    """("name:idx" or None per dumped input, per dumped output) of one op: the goldens a whole
    compare would meet its tensors with (``replay`` judges one op by them)."""
    p = _Planner(graph, dumps, golden)
    inputs = [p.producer_golden(op, j, len(header.inputs))[0] for j in range(len(header.inputs))]
    outputs = []
    for i, entry in enumerate(header.outputs):
        if op.type in WALK_THROUGH_TYPES:
            outputs.append(p.source_golden(op.name, i)[0] if i < len(op.inputs) else None)
            continue
        target = p.output_golden(op, op.name, i, entry)
        outputs.append(None if target is None else f"{target[0]}:{target[1]}")
    return inputs, outputs
