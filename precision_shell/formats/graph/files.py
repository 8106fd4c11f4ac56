"""Find the GE graph dumps of a run and load any of them (formats.md §3.1, §3.6).

Which files (the rule §3.6 suggests, in tiers; the first tier with a match wins):

1. ``ge_proto_<counter>_[graph_<id>_]Build.txt`` anywhere below the root (all of them: one per
   compiled graph; later counters are later compiles of possibly the same graph);
2. else ``ge_proto_<counter>_[graph_<id>_]PreRunAfterBuild.txt`` (the same graph, other stage name);
3. else the JSON that ``atc --mode=5`` made of those (``<name>.txt.json`` or ``<name>.json``);
4. else any other ``*.json`` whose start looks like a GE graph (``"graph"`` key), e.g. a graph
   converted by hand.

Files are sorted by their numeric counter (then path), so consumers that keep the last copy of a
graph name keep the newest compile.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from ...errors import FormatError
from ..input_files import cannot_list, open_regular, read_regular
from ..quoting import clipped

__all__ = ["find_graph_files", "load_graph_file"]

_NAME = r"ge_proto_(\d+)_(?:graph_\d+_)?"
_TIERS = (
    re.compile(_NAME + r"Build\.txt\Z"),
    re.compile(_NAME + r"PreRunAfterBuild\.txt\Z"),
    re.compile(_NAME + r"(?:Build|PreRunAfterBuild)(?:\.txt)?\.json\Z"),
)
_GRAPH_JSON_SNIFF = re.compile(rb'^\s*[\[{][\s\S]{0,4096}?"(graph|op)"\s*:')


def _walk(root: Path, warnings: list[str]) -> list[Path]:
    """Every file below root, following directory symlinks once (no loops). Folders that cannot
    be listed and folders named like graph files are named in ``warnings``."""
    files, seen = [], set()
    for folder, dirs, names in os.walk(root, followlinks=True,
                                       onerror=lambda exc: warnings.append(cannot_list(exc.filename, exc))):
        real = os.path.realpath(folder)
        if real in seen:
            dirs[:] = []
            continue
        seen.add(real)
        dirs.sort()
        warnings.extend(f"{Path(folder, d)}: is a directory, not a graph file"
                        for d in dirs if any(p.match(d) for p in _TIERS))
        files.extend(Path(folder, name) for name in sorted(names))
    return files


def _counter_key(path: Path, counter: str | None) -> tuple:
    return (int(counter) if counter is not None else -1, str(path))


def _looks_like_graph_json(path: Path, warnings: list[str]) -> bool:
    try:
        with os.fdopen(open_regular(path), "rb") as handle:   # a FIFO named *.json: no hang
            head = handle.read(8192)
    except OSError as exc:
        warnings.append(f"{path}: cannot read ({exc.strerror or exc})")
        return False
    return _GRAPH_JSON_SNIFF.match(head) is not None


def find_graph_files(root: str | os.PathLike, warnings: list[str] | None = None) -> list[Path]:
    """Graph files to load for a run, oldest compile first (see the module doc for the rule).
    What stops a graph from being found (an unreadable folder, a folder named like a graph
    file) is added to ``warnings``, one line each."""
    warnings = [] if warnings is None else warnings
    root = Path(root)
    if root.is_file():
        return [root]
    if not root.is_dir():
        return []
    files = _walk(root, warnings)
    for pattern in _TIERS:
        found = [(m.group(1), f) for f in files if (m := pattern.match(f.name))]
        if found:
            return [f for counter, f in sorted(found, key=lambda cf: _counter_key(cf[1], cf[0]))]
    return [f for f in files if f.suffix == ".json" and _looks_like_graph_json(f, warnings)]


def load_graph_file(path: str | os.PathLike):
    """A ``ge.proto.ModelDef`` from a graph text (``.txt``/``.pbtxt``), JSON (``.json``) or
    binary (``.pb``) file; FormatError if it cannot be read."""
    from google.protobuf.message import DecodeError  # the parsers: not needed to find the files

    from .atc_json import parse_graph_json
    from .text import parse_graph_text
    from ..protoload import ge_ir_pb

    path = Path(path)
    suffix = path.suffix.lower()
    if suffix == ".json":
        return parse_graph_json(path)
    if suffix == ".pb":
        try:
            data = read_regular(path)
        except OSError as exc:
            raise FormatError(path, f"cannot read: {exc.strerror or exc}") from None
        try:
            model = ge_ir_pb().ModelDef.FromString(data)
        except DecodeError as exc:
            model, problem = None, f"not a binary ModelDef: {clipped(exc)}"
        if model is not None and any(g.op for g in model.graph):
            return model
        # a protobuf of another kind parses as a ModelDef of 0 ops (unknown fields are skipped):
        # never a graph; say what it is when we know
        if _is_mindspore_graph(path, data):
            raise FormatError(path, f"a MindSpore ANF IR graph, not a GE ModelDef: open the MindSpore "
                                    f"dump (its rank_R or root folder) as PATH instead")
        raise FormatError(path, problem if model is None else "not a GE ModelDef: no graph with ops")
    if _head(path).startswith(b"# IR entry"):
        raise FormatError(path, "a MindSpore IR text (.ir), not a GE graph: open the MindSpore dump "
                                "(its rank_R or root folder) as PATH instead")
    return parse_graph_text(path)


def _is_mindspore_graph(path: Path, data: bytes) -> bool:
    from ..mindspore_graph.anf_graph import is_anf_model, parse_anf_model

    try:
        return is_anf_model(parse_anf_model(str(path), data))
    except FormatError:
        return False


def _head(path: Path) -> bytes:
    try:
        with path.open("rb") as handle:
            return handle.read(64)
    except OSError:
        return b""      # the text parser says why it cannot read it
