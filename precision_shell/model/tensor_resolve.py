"""Resolve a :class:`TensorRef` against a session: which file, which entry, how to read it."""

from __future__ import annotations

from pathlib import Path

from precision_shell.errors import CommandError
from precision_shell.formats.dump_file import read_logical_array
from precision_shell.formats.golden_npy import load_npy, read_npy_header
from precision_shell.model.session import Session
from precision_shell.model.tensor_ref import ResolvedTensor, TensorRef, parse_tensor_ref


def resolve_tensor(session: Session, ref: TensorRef | str) -> ResolvedTensor:
    if isinstance(ref, str):
        ref = parse_tensor_ref(ref)
    if getattr(session, "kind", "graph") != "graph":    # framework dumps name tensors their own way
        found = session.resolve_tensor(ref)
        if found is not None:
            return found
    if ref.kind == "npu":
        return _resolve_npu(session, ref)
    if ref.kind == "golden":
        return _resolve_golden(session, ref)
    return _resolve_file(ref)


def _op_name_for_dump(session: Session, typed: str) -> str:
    if session.graph is not None:
        return session.resolve_op(typed).name
    # Without a graph, dump file names are the only source of op names.
    if session.dumps.files_for_op(typed):
        return typed
    raise CommandError(f"no dump for op {typed!r} (no graph loaded to resolve names)")


def _resolve_npu(session: Session, ref: TensorRef) -> ResolvedTensor:
    op_name = _op_name_for_dump(session, ref.name)
    dump = session.op_dump(op_name)
    if dump is None:
        where = session.active.label if session.active else "no dump set"
        raise CommandError(f"op {op_name} has no dump file in the active dump set ({where})")
    header = session.dumps.header(dump)
    entries = header.inputs if ref.io == "input" else header.outputs
    if ref.index >= len(entries):
        raise CommandError(f"{op_name} has {len(entries)} {ref.io}s in {dump.path.name}; "
                           f"{ref.io} {ref.index} does not exist")
    entry = entries[ref.index]
    logical = entry.original_shape if entry.original_shape else entry.shape
    label = f"{op_name}:{ref.io}:{ref.index}"
    return ResolvedTensor(
        ref=ref, label=label, path=dump.path, dtype=entry.dtype_name,
        logical_shape=tuple(logical), device_format=entry.format_name,
        device_shape=tuple(entry.shape),
        loader=lambda: read_logical_array(header, entry),
    )


def _golden_file(session: Session, name: str, index: int):
    found = session.golden.find(name, index)
    if found is not None:
        return found, name, index
    # An NPU op name: follow its output description to the framework op it stands for.
    if session.graph is not None:
        matches = session.graph.find(name)
        if len(matches) == 1:
            op = matches[0]
            if index < len(op.outputs) and op.outputs[index].origin_name:
                desc = op.outputs[index]
                origin_idx = desc.origin_output_index if desc.origin_output_index is not None else index
                found = session.golden.find(desc.origin_name, origin_idx)
                if found is not None:
                    return found, desc.origin_name, origin_idx
    return None, name, index


def _resolve_golden(session: Session, ref: TensorRef) -> ResolvedTensor:
    if session.golden.folder is None:
        raise CommandError("no golden dump loaded (tf/dump/*.npy); pass --golden DIR")
    found, name, index = _golden_file(session, ref.name, ref.index)
    if found is None:
        raise CommandError(f"no golden tensor for {ref.name}:{ref.index} in {session.golden.folder}")
    header = read_npy_header(found.path)
    return ResolvedTensor(
        ref=ref, label=f"golden:{name}:{index}", path=found.path, dtype=str(header.dtype),
        logical_shape=tuple(header.shape), loader=lambda: load_npy(found.path),
    )


def _resolve_file(ref: TensorRef) -> ResolvedTensor:
    path = Path(ref.name).expanduser()
    header = read_npy_header(path)
    return ResolvedTensor(
        ref=ref, label=str(path), path=path, dtype=str(header.dtype),
        logical_shape=tuple(header.shape), loader=lambda: load_npy(path),
    )
