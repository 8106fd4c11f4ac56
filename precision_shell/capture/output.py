"""The files of one ``step{N}/rank{R}`` folder: msprobe's layout (framework-dumps.md A1-A3) and
the ``pshell_meta.json`` sidecar msprobe ignores (B3)."""

from __future__ import annotations

import json
import linecache
import os

from ..atomic_write import write_atomic

META_FILE = "pshell_meta.json"
META_VERSION = 1       # "pshell_meta": 1, the key model/framework_run.py reads the sidecar by
PARAMETER = "param:"   # recorder sources naming a model parameter, not an output leaf

EDGE_RULE = ("edges: forward input leaf -> the output leaf that produced that tensor object "
             "(a view made by an unrecorded call, e.g. .T or detach, resolved to its base); "
             "parameter_inputs: input leaf -> model parameter name; external_inputs: input "
             "leaves made before the capture or by unrecorded calls")


def split_edges(sources: dict[str, str | None]) -> dict:
    """The recorder's input -> source map as the sidecar's three keys."""
    edges, params, external = {}, {}, []
    for dst, src in sources.items():
        if src is None:
            external.append(dst)
        elif src.startswith(PARAMETER):
            params[dst] = src[len(PARAMETER):]
        else:
            edges[dst] = src
    return {"edges": edges, "parameter_inputs": params, "external_inputs": external}


def _write_json(path: str, obj, indent: int | None = 1) -> None:
    # json.dumps without indent runs the C encoder: 10x faster on a large dump.json
    write_atomic(path, lambda f: f.write(json.dumps(obj, indent=indent) + "\n"))


def _frame_text(frame: tuple) -> str:
    file, line, function = frame
    return f"File {file}, line {line}, in {function}, \n {linecache.getline(file, line).strip()}"


def grouped_stacks(stacks: dict[str, tuple]) -> dict[str, list]:
    """stack.json in msprobe's grouped format: names sharing one call stack, then its frames."""
    groups: dict[tuple, list[str]] = {}
    for name, frames in stacks.items():
        groups.setdefault(frames, []).append(name)
    return {str(i): [names, [_frame_text(f) for f in frames]]
            for i, (frames, names) in enumerate(groups.items())}


def write_rank_folder(rec, meta: dict) -> None:
    """dump.json, stack.json, construct.json and pshell_meta.json of one recorder."""
    rec.leaves.resolve()
    tensor_dir = rec.files.folder if rec.files is not None else None
    _write_json(os.path.join(rec.rank_dir, "dump.json"),
                {"task": rec.mode, "level": rec.level, "framework": "pytorch",
                 "dump_data_dir": tensor_dir, "data": rec.data}, indent=None)
    _write_json(os.path.join(rec.rank_dir, "stack.json"), grouped_stacks(rec.stacks))
    _write_json(os.path.join(rec.rank_dir, "construct.json"), rec.construct)
    _write_json(os.path.join(rec.rank_dir, META_FILE),
                {"pshell_meta": META_VERSION, **meta, "edge_rule": EDGE_RULE, **split_edges(rec.edges)})
