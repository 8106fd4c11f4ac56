"""Load the run's graph files into one :class:`OpGraph`, by the fastest exact route per file.

GE's own text layout is scanned: by the C kernel into columns (formats.graph.columns), else in
Python (formats.graph.scan): names, types, inputs and fusion attrs at start-up, the rest of each
op parsed exactly when first read. Any other text, JSON or binary file is parsed whole
(formats.graph.files). A single scanned file whose op names are all distinct (the usual Build
graph) is linked by the kernel too and never becomes per-op Python objects; anything else goes
through the op-by-op builder (``OpGraph.from_sources``), which gives the same graph.
"""

from __future__ import annotations

import os
from array import array
from functools import partial
from pathlib import Path

from ..errors import FormatError
from ..formats.graph.columns import ScannedColumns, link_inputs, scan_columns
from ..formats.graph.files import load_graph_file
from ..formats.graph.scan import ScannedGraph, ScannedOp, scan_graph_text
from ..formats.input_files import open_regular
from .op_columns import OpColumns, StrColumn
from .op_graph import GraphSummary, OpGraph, _graphdef_records, _scanned_records

__all__ = ["load_op_graph"]


def _read_text(path: Path) -> tuple[bytes, tuple[int, int]]:
    try:
        with os.fdopen(open_regular(path), "rb") as handle:
            st = os.fstat(handle.fileno())
            return handle.read(), (st.st_size, st.st_mtime_ns)
    except OSError as exc:
        raise FormatError(path, f"cannot read: {exc.strerror or exc}") from None


def load_op_graph(files: list[Path], errors: list[str]) -> tuple[OpGraph | None, int]:
    """The graph of ``files`` (in file-counter order) and how many of them loaded; a file that
    cannot be read adds one line to ``errors`` and is left out."""
    loaded_files = []  # (path, kind, value): "columns" (ScannedColumns, reader), "scan", "model"
    for path in files:
        try:
            if path.suffix.lower() not in (".json", ".pb"):
                found = scan_columns(path)
                if found is not None:
                    loaded_files.append((path, "columns", found))
                    continue
                data, stamp = _read_text(path)
                scanned = scan_graph_text(path, data, stamp)
                del data
                if scanned is not None:
                    scanned[1].release()  # ops are read again by span when shown: keep no 100 MB text
                    loaded_files.append((path, "scan", scanned))
                    continue
            loaded_files.append((path, "model", load_graph_file(path)))
        except FormatError as exc:
            errors.append(str(exc))
    if not loaded_files:
        return None, 0
    if len(loaded_files) == 1 and loaded_files[0][1] == "columns":
        path, _, (columns, reader) = loaded_files[0]
        graph = _linked(str(path), columns, reader)
        if graph is not None:
            return graph, 1
    sources, readers, memo = [], [], {}
    for path, kind, value in loaded_files:
        if kind == "model":
            sources += [(str(path), g.name, partial(_graphdef_records, g, memo)) for g in value.graph]
            continue
        graphs, reader = (_scanned_graphs(*value), value[1]) if kind == "columns" else value
        readers.append(reader)
        sources += [(str(path), g.name, partial(_scanned_records, g, reader)) for g in graphs]
    return OpGraph.from_sources(sources, readers), len(loaded_files)


def _linked(source: str, c: ScannedColumns, reader) -> OpGraph | None:
    """The graph of one file's columns, linked by the kernel; None when the op-by-op builder
    must decide (repeated graph or op names, inputs of unusual forms)."""
    names = [name for name, _ in c.graphs]
    if len(set(names)) != len(names):
        return None
    link = link_inputs(c)
    if link is None:
        return None
    n = c.op_count
    firsts = [first for _, first in c.graphs] + [n]
    graph_id, order = array("i"), array("q")
    for g in range(len(names)):
        graph_id += array("i", [g]) * (firsts[g + 1] - firsts[g])
        order += array("q", range(firsts[g + 1] - firsts[g]))
    raw_pairs = link["raw"].tolist()
    columns = OpColumns(
        names=StrColumn(c.names, c.name_off), key_override={}, type_id=c.type_id, types=c.types,
        graph_id=graph_id, graph_names=names, order=order,
        in_off=link["data_off"], in_op=link["data_op"], in_out=link["data_out"],
        in_raw={d: c.input_text(j) for d, j in zip(raw_pairs[::2], raw_pairs[1::2])},
        ctl_off=link["ctl_off"], ctl_op=link["ctl_op"],
        orig_present=c.orig_present, orig_off=c.orig_off, originals=StrColumn(c.orig_blob, c.orig_item_off),
        pass_id=c.pass_id, pass_lists=c.pass_lists, kernel_present=c.kernel_present,
        kernels=StrColumn(c.kernel_blob, c.kernel_off), engine_id=c.engine_id, engines=c.engines,
        src_reader=array("i", bytes(4 * n)), src_start=c.start, src_end=c.end)
    graph = OpGraph.from_cache_state([], [], [reader], columns)
    for g, name in enumerate(names):
        a, b = firsts[g], firsts[g + 1]
        passes = sorted({p for k in set(c.pass_id[a:b]) for p in c.pass_lists[k]})
        graph.graphs.append(GraphSummary(name, source, b - a, c.fused[a:b].count(1), passes))
    for op, kind, item, data_index in link["warnings"]:  # as OpGraph._row words them
        key, producer = columns.key(op), c.input_text(item).rpartition(":")[0]
        graph.warnings.append(f"op {key!r}: control input from missing op {producer!r}" if kind else
                              f"op {key!r}: input {data_index} from missing op {producer!r}")
    return graph


def _scanned_graphs(c: ScannedColumns, reader) -> list[ScannedGraph]:
    """The columns as the Python scan gives them (for the op-by-op builder)."""
    names = StrColumn(c.names, c.name_off).all()
    inputs = StrColumn(c.in_blob, c.in_item_off).all()
    originals = StrColumn(c.orig_blob, c.orig_item_off).all()
    kernels = StrColumn(c.kernel_blob, c.kernel_off)
    in_off, orig_off = c.in_off.tolist(), c.orig_off.tolist()
    firsts = [first for _, first in c.graphs] + [c.op_count]
    graphs = []
    for g, (name, first) in enumerate(c.graphs):
        ops = []
        for i in range(first, firsts[g + 1]):
            engine = int(c.engine_id[i])
            ops.append(ScannedOp(names[i], c.types[c.type_id[i]], tuple(inputs[in_off[i]:in_off[i + 1]]),
                                 tuple(originals[orig_off[i]:orig_off[i + 1]]) if c.orig_present[i] else None,
                                 tuple(c.pass_lists[c.pass_id[i]]), kernels[i] if c.kernel_present[i] else None,
                                 c.engines[engine] if engine >= 0 else None, int(c.start[i]), int(c.end[i])))
        graphs.append(ScannedGraph(name, ops))
    return graphs
