"""Load the run's graph files into one :class:`OpGraph`, by the fastest exact route per file.

GE's own text layout is scanned (formats.graph_scan: names, types, inputs and fusion attrs at
start-up, the rest of each op parsed exactly when first read); any other text, JSON or binary
file is parsed whole (formats.graph_files).
"""

from __future__ import annotations

import os
from functools import partial
from pathlib import Path

from ..errors import FormatError
from ..formats.graph_files import load_graph_file
from ..formats.graph_scan import scan_graph_text
from ..formats.input_files import open_regular
from .op_graph import OpGraph, _graphdef_records, _scanned_records

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
    sources, readers, memo, loaded = [], [], {}, 0
    for path in files:
        try:
            scanned = None
            if path.suffix.lower() not in (".json", ".pb"):
                data, stamp = _read_text(path)
                scanned = scan_graph_text(path, data, stamp)
                del data
            if scanned is not None:
                graphs, reader = scanned
                reader.release()  # ops are read again by span when shown: keep no 100 MB text
                readers.append(reader)
                sources += [(str(path), g.name, partial(_scanned_records, g, reader)) for g in graphs]
            else:
                model = load_graph_file(path)
                sources += [(str(path), g.name, partial(_graphdef_records, g, memo)) for g in model.graph]
            loaded += 1
        except FormatError as exc:
            errors.append(str(exc))
    if not loaded:
        return None, 0
    graph = OpGraph.from_sources(sources)
    graph.readers = readers
    return graph, loaded
