"""Everything known about one op, for ``ni`` (product.md §4): graph facts, its dumps with value
statistics, the golden tensors it stands for, and compare metrics when a compare has run.

Tensor statistics are computed here from the files (one tensor at a time, memory-mapped goldens),
never cached across commands: the panel always shows what is on disk now.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from precision_shell.analysis.compare.tensor import TensorStats, tensor_stats
from precision_shell.errors import FormatError
from precision_shell.formats.dump_file import read_device_array, read_logical_array
from precision_shell.formats.golden_npy import load_npy


@dataclass
class InputInfo:
    index: int
    dtype: str | None
    format: str | None
    shape: tuple[int, ...] | None
    origin_format: str | None
    origin_shape: tuple[int, ...] | None
    producer: str | None             # None: unconnected optional input
    producer_output: int | None
    producer_type: str | None


@dataclass
class OutputInfo:
    index: int
    dtype: str
    format: str
    shape: tuple[int, ...]
    origin_format: str | None
    origin_shape: tuple[int, ...] | None
    origin_name: str | None
    origin_output_index: int | None
    consumers: list[tuple[str, int | None]] = field(default_factory=list)   # (op, its input index)


@dataclass
class DumpTensorInfo:
    kind: str                        # "input" | "output"
    index: int
    dtype: str
    device_format: str
    device_shape: tuple[int, ...]
    logical_shape: tuple[int, ...] | None
    stats: TensorStats | None
    error: str | None = None         # why stats are missing (or note: device layout shown)


@dataclass
class DumpInfo:
    path: Path
    timestamp: int
    size: int
    tensors: list[DumpTensorInfo] = field(default_factory=list)
    error: str | None = None


@dataclass
class GoldenInfo:
    tensor: str                      # "framework/op:index"
    path: Path | None                # None: the op's output maps here but no file exists
    for_output: int | None           # which NPU output this golden is compared with, if any
    stats: TensorStats | None = None
    error: str | None = None


@dataclass
class MetricRow:
    tensor: str                      # "OP:output:0"
    golden: str | None
    metrics: dict[str, float | None]  # snake_case metric name -> value (None = NaN)
    reason: str | None = None        # why the pair could not be compared (vendor wording)


@dataclass
class NodePanel:
    name: str
    type: str
    graph: str
    order: int
    id: int
    stream_id: int
    kernel: str | None
    engine: str | None
    passes: list[str]
    original_ops: list[str]
    inputs: list[InputInfo]
    control_inputs: list[str]
    outputs: list[OutputInfo]
    control_outputs: list[str]
    dumps: list[DumpInfo]
    golden: list[GoldenInfo]
    metrics: list[MetricRow]
    role: str | None = None          # suspect role from the current findings, if any
    attrs: dict[str, Any] | None = None   # every attr, with ``-a``
    notes: list[str] = field(default_factory=list)

    def to_json(self) -> dict:
        def stats(s: TensorStats | None):
            return stats_json(s) if s is not None else None

        data = {
            "op": self.name, "type": self.type, "graph": self.graph, "order": self.order,
            "id": self.id, "stream_id": self.stream_id, "kernel": self.kernel, "engine": self.engine,
            "passes": self.passes, "original_ops": self.original_ops, "role": self.role,
            "inputs": [{"index": i.index, "dtype": i.dtype, "format": i.format,
                        "shape": list(i.shape) if i.shape is not None else None,
                        "origin_format": i.origin_format,
                        "origin_shape": list(i.origin_shape) if i.origin_shape is not None else None,
                        "producer": i.producer, "producer_output": i.producer_output,
                        "producer_type": i.producer_type} for i in self.inputs],
            "control_inputs": self.control_inputs,
            "outputs": [{"index": o.index, "dtype": o.dtype, "format": o.format, "shape": list(o.shape),
                         "origin_format": o.origin_format,
                         "origin_shape": list(o.origin_shape) if o.origin_shape is not None else None,
                         "origin_name": o.origin_name, "origin_output_index": o.origin_output_index,
                         "consumers": [{"op": c, "input": i} for c, i in o.consumers]}
                        for o in self.outputs],
            "control_outputs": self.control_outputs,
            "dumps": [{"file": str(d.path), "timestamp": d.timestamp, "size": d.size, "error": d.error,
                       "tensors": [{"kind": t.kind, "index": t.index, "dtype": t.dtype,
                                    "device_format": t.device_format, "device_shape": list(t.device_shape),
                                    "logical_shape": list(t.logical_shape) if t.logical_shape else None,
                                    "stats": stats(t.stats), "error": t.error} for t in d.tensors]}
                      for d in self.dumps],
            "golden": [{"tensor": g.tensor, "file": str(g.path) if g.path else None,
                        "for_output": g.for_output, "stats": stats(g.stats), "error": g.error}
                       for g in self.golden],
            "metrics": [{"tensor": m.tensor, "golden": m.golden, **m.metrics, "reason": m.reason}
                        for m in self.metrics],
            "notes": self.notes,
        }
        if self.attrs is not None:
            data["attrs"] = self.attrs
        return data


def stats_json(s: TensorStats) -> dict:
    return {"shape": list(s.shape), "dtype": str(s.dtype), "count": s.count, "min": s.min, "max": s.max,
            "mean": s.mean, "std": s.std, "nan": s.nan, "pos_inf": s.pos_inf, "neg_inf": s.neg_inf,
            "zero": s.zero}


# ---------------------------------------------------------------------------------------------
# what earlier analyses found (duck-typed: the panel works whether or not they ran)

def _get(obj: Any, *names: str) -> Any:
    for name in names:
        value = obj.get(name) if isinstance(obj, dict) else getattr(obj, name, None)
        if value is not None:
            return value
    return None


def _compare_rows(session: Any) -> list[Any]:
    result = session.results.get("compare")
    if result is None:
        return []
    rows = result if isinstance(result, (list, tuple)) else _get(result, "rows", "pairs", "results", "items")
    # an interrupted compare leaves None in place of the rows it did not reach
    return [r for r in rows if r is not None] if rows is not None else []


def _metrics_dict(row: Any) -> dict[str, float | None]:
    metrics = _get(row, "metrics")
    if metrics is None:
        cos = _get(row, "cosine")
        return {"cosine": cos} if cos is not None else {}
    if hasattr(metrics, "as_json"):
        return dict(metrics.as_json())
    if isinstance(metrics, dict):
        from precision_shell.analysis.compare.metrics import JSON_KEYS  # vendor column -> snake_case

        return {JSON_KEYS.get(k, k): (None if isinstance(v, float) and math.isnan(v) else v)
                for k, v in metrics.items()}
    return {}


def _row_op(row: Any) -> str | None:
    op = _get(row, "op", "npu_op", "op_name")
    if op is None:
        tensor = _get(row, "tensor")
        if isinstance(tensor, str) and tensor.count(":") >= 2:
            op = tensor.rsplit(":", 2)[0]
    return op


def _row_is_output(row: Any) -> bool:
    kind = _get(row, "kind", "io")
    if kind is not None:
        return kind == "output"
    tensor = _get(row, "tensor")
    return not (isinstance(tensor, str) and ":input:" in tensor)


def compare_rows_for(session: Any, op_name: str) -> list[MetricRow]:
    out = []
    for row in _compare_rows(session):
        if _row_op(row) != op_name:
            continue
        tensor = _get(row, "tensor")
        if not isinstance(tensor, str):
            kind = "output" if _row_is_output(row) else "input"
            tensor = f"{op_name}:{kind}:{_get(row, 'tensor_index', 'index') or 0}"
        golden = _get(row, "golden_ref", "golden", "golden_ops", "golden_tensor")
        if isinstance(golden, (list, tuple)):
            golden = ", ".join(map(str, golden))
        reason = _get(row, "reason")
        out.append(MetricRow(tensor, golden, _metrics_dict(row), reason or None))
    return out


def known_cosines(session: Any) -> dict[str, float]:
    """op -> the lowest output cosine of the last compare (NaN counts as lowest); {} without one."""
    found: dict[str, float] = {}
    for row in _compare_rows(session):
        op = _row_op(row)
        # rows that could not be compared (no golden, e.g. GE-inserted ops) are not failures here
        if op is None or not _row_is_output(row) or _get(row, "compared") is False:
            continue
        cos = _metrics_dict(row).get("cosine")
        value = math.nan if cos is None else float(cos)
        old = found.get(op)
        if old is None or math.isnan(value) or (not math.isnan(old) and value < old):
            found[op] = value
    return found


def known_roles(session: Any) -> dict[str, str]:
    """op -> root/propagated/producer from the finding lists in the session (compare, overflow)."""
    roles: dict[str, str] = {}
    sources = []
    for value in session.results.values():
        items = value if isinstance(value, (list, tuple)) else _get(value, "findings", "items", "suspects")
        if isinstance(items, (list, tuple)):
            sources.append(items)
    for items in sources:
        for item in items:
            op, role = _get(item, "op"), _get(item, "role")
            if isinstance(op, str) and isinstance(role, str) and role:
                # a root/producer verdict wins over "propagated" from another list
                if roles.get(op) in (None, "propagated"):
                    roles[op] = role
    return roles


# ---------------------------------------------------------------------------------------------
# building the panel

def _dump_infos(session: Any, op_name: str) -> list[DumpInfo]:
    infos = []
    for f in session.dumps.files_for_op(op_name):
        info = DumpInfo(f.path, f.name.timestamp, f.size)
        infos.append(info)
        try:
            header = session.dumps.header(f)
        except FormatError as exc:
            info.error = str(exc)
            continue
        for entry in header.inputs + header.outputs:
            t = DumpTensorInfo(entry.kind, entry.index, entry.dtype_name, entry.format_name,
                               tuple(entry.shape), entry.original_shape, None)
            try:
                try:
                    array = read_logical_array(header, entry)
                except FormatError as exc:
                    # no layout converter: stats of the device layout are still worth showing
                    array = read_device_array(header, entry)
                    t.error = f"device layout (padding included): {exc}"
                t.stats = tensor_stats(array)
            except FormatError as exc:
                t.error = str(exc)
            info.tensors.append(t)
    return infos


def _golden_infos(session: Any, op: Any, outputs: list[OutputInfo]) -> list[GoldenInfo]:
    golden = session.golden
    # which golden tensor each NPU output is compared with (formats.md §3.5 / A.8.5)
    wanted: dict[tuple[str, int], int] = {}
    single = op.golden_names()[0] if len(op.golden_names()) == 1 else None
    for out in outputs:
        name = out.origin_name or single
        if name:
            idx = out.origin_output_index if out.origin_output_index is not None else out.index
            wanted.setdefault((name, idx), out.index)
    names = list(dict.fromkeys(op.golden_names() + [name for name, _ in wanted]))
    infos, seen = [], set()
    for name in names:
        for f in golden.outputs_of(name):
            key = (name, f.name.output_index)
            seen.add(key)
            info = GoldenInfo(f"{name}:{f.name.output_index}", f.path, wanted.get(key))
            try:
                info.stats = tensor_stats(load_npy(f.path))
            except FormatError as exc:
                info.error = str(exc)
            infos.append(info)
    for (name, idx), out_index in wanted.items():
        if (name, idx) not in seen:
            infos.append(GoldenInfo(f"{name}:{idx}", None, out_index, error="no golden file"))
    return infos


def _attr_value(value: Any) -> Any:
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    if isinstance(value, (list, tuple)):
        return [_attr_value(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _attr_value(v) for k, v in value.items()}
    if isinstance(value, (str, int, float, bool)) or value is None:
        return value
    return str(value)


_NOT_DUMPED = frozenset({"Data", "Const", "Constant", "NetOutput", "Variable", "VariableV2"})


def node_panel(session: Any, op: Any, *, all_attrs: bool = False, with_stats: bool = True) -> NodePanel:
    """The ``ni`` panel of ``op`` (an OpNode of ``session.graph``)."""
    graph = session.graph
    nxg = graph.edges  # networkx's edge queries, without building the networkx graph
    inputs = []
    for ref in op.inputs:
        d = ref.desc
        producer = graph.ops.get(ref.producer) if ref.producer else None
        inputs.append(InputInfo(ref.index, d.dtype if d else None, d.layout if d else None,
                                tuple(d.shape) if d else None, d.origin_format if d else None,
                                tuple(d.origin_shape) if d and d.origin_shape is not None else None,
                                ref.producer, ref.producer_output,
                                producer.type if producer is not None else None))
    outputs = [OutputInfo(d.index, d.dtype, d.layout, tuple(d.shape), d.origin_format,
                          tuple(d.origin_shape) if d.origin_shape is not None else None,
                          d.origin_name, d.origin_output_index) for d in op.outputs]
    by_index = {o.index: o for o in outputs}
    control_outputs = []
    # out_edges lists consumers in execution order: a stable sort by output keeps that order
    # (no rank of every op: a 1M-op graph's ni makes no 1M-entry dict)
    for _, dst, data in sorted(nxg.out_edges(op.key, data=True), key=lambda e: e[2].get("src_output") or 0):
        if data.get("kind", "data") == "data":
            target = by_index.get(data.get("src_output"))
            if target is not None:
                target.consumers.append((dst, data.get("dst_input")))
        else:
            control_outputs.append(dst)
    notes = []
    dumps = _dump_infos(session, op.name) if with_stats else []
    if with_stats and not dumps:
        where = session.active.label if session.active is not None else "no NPU dump set"
        # GE runs no task for these, so they never have dump files
        why = "; Data/Const/NetOutput ops are never dumped" if op.type in _NOT_DUMPED else ""
        notes.append(f"no dump file for this op in the active dump set ({where}){why}")
    if session.golden.folder is None:
        golden: list[GoldenInfo] = []
        notes.append("no golden dump loaded (tf/dump/*.npy or --golden DIR)")
    else:
        golden = _golden_infos(session, op, outputs) if with_stats else []
    return NodePanel(
        name=op.name, type=op.type, graph=op.graph, order=op.order, id=op.id, stream_id=op.stream_id,
        kernel=op.kernel, engine=op.engine, passes=list(op.passes), original_ops=list(op.original_ops),
        inputs=inputs, control_inputs=list(op.control_inputs), outputs=outputs,
        control_outputs=control_outputs, dumps=dumps, golden=golden,
        metrics=compare_rows_for(session, op.name), role=known_roles(session).get(op.name),
        attrs={k: _attr_value(v) for k, v in sorted(op.attrs.items())} if all_attrs else None,
        notes=notes)
