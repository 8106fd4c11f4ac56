"""Resolve a :class:`TensorRef` against a session: which file, which entry, how to read it.

:func:`resolve_tensor` is the one entry point (``pt``, ``cp``, ``replay``, expressions): a name
in any form of the grammar (model/tensor_ref.py) becomes a :class:`ResolvedTensor` labelled with
the printed form; a wrong op name, kind or index says what exists (did-you-mean, valid range)."""

from __future__ import annotations

from pathlib import Path

from precision_shell.errors import CommandError
from precision_shell.formats.dump_file import read_logical_array
from precision_shell.formats.golden_npy import load_npy, read_npy_header
from precision_shell.model.session import Session
from precision_shell.formats.dump_names import escape_op_name
from precision_shell.model.suggest import did_you_mean
from precision_shell.model.tensor_ref import ResolvedTensor, TensorRef, parse_tensor_ref, tensor_name


def resolve_tensor(session: Session, ref: TensorRef | str) -> ResolvedTensor:
    if isinstance(ref, str):
        try:
            ref = parse_tensor_ref(ref)
        except CommandError:
            found = session.resolve_leaf(ref) if getattr(session, "kind", "graph") != "graph" else None
            if found is None:
                raise
            return found
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
    raise CommandError(f"no dump for op {typed!r} (no graph loaded to resolve names)"
                       + did_you_mean(escape_op_name(typed), session.dumps.by_key))


def _index_error(name: str, io: str, index: int, count: int, where: str) -> CommandError:
    valid = f"valid: {tensor_name(name, io, 0)}" + (f" .. {tensor_name(name, io, count - 1)}" if count > 1 else "")
    if not count:
        return CommandError(f"{name} has no {io}s in {where}")
    return CommandError(f"{tensor_name(name, io, index)}: {name} has {count} {io}{'s' * (count != 1)} "
                        f"in {where} ({valid})")


def _resolve_npu(session: Session, ref: TensorRef) -> ResolvedTensor:
    op_name = _op_name_for_dump(session, ref.name)
    dump = session.op_dump(op_name)
    if dump is None:
        where = session.active.label if session.active else "no dump set"
        raise CommandError(f"op {op_name} has no dump file in the active dump set ({where})")
    header = session.dumps.header(dump)
    entries = header.inputs if ref.io == "input" else header.outputs
    if ref.io not in ("input", "output") or ref.leaf:
        raise CommandError(f"{ref.text!r}: graph-mode tensors are OP:N (output N) or OP:inN (input N)")
    if ref.index >= len(entries):
        raise _index_error(op_name, ref.io, ref.index, len(entries), dump.path.name)
    entry = entries[ref.index]
    logical = entry.original_shape if entry.original_shape else entry.shape
    return ResolvedTensor(
        ref=ref, label=tensor_name(op_name, ref.io, ref.index), path=dump.path, dtype=entry.dtype_name,
        logical_shape=tuple(logical), device_format=entry.format_name,
        device_shape=tuple(entry.shape),
        loader=lambda: read_logical_array(header, entry), op=op_name,
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
    if ref.io == "input" or ref.leaf:
        raise CommandError(f"{ref.text!r}: golden .npy dumps hold outputs only: golden:OP:N")
    found, name, index = _golden_file(session, ref.name, ref.index)
    if found is None:
        raise _golden_missing(session, ref)
    header = read_npy_header(found.path)
    return ResolvedTensor(
        ref=ref, label=tensor_name(escape_op_name(name), "output", index, golden=True), path=found.path,
        dtype=str(header.dtype),
        logical_shape=tuple(header.shape), loader=lambda: load_npy(found.path),
    )


def _golden_missing(session: Session, ref: TensorRef) -> CommandError:
    """Which golden outputs the op has, or which golden op names are close."""
    where = session.golden.folder
    outputs = session.golden.outputs_of(ref.name)
    if outputs:
        count = max(f.name.output_index for f in outputs) + 1
        return _index_error(f"golden:{escape_op_name(ref.name)}", "output", ref.index, count, str(where))
    names = {f"golden:{n.rpartition(':')[0]}" for n in session.golden.names()}
    return CommandError(f"no golden tensor {ref.text!r} in {where}"
                        + did_you_mean(f"golden:{escape_op_name(ref.name)}", names))


def _resolve_file(ref: TensorRef) -> ResolvedTensor:
    path = Path(ref.name).expanduser()
    header = read_npy_header(path)
    return ResolvedTensor(
        ref=ref, label=str(path), path=path, dtype=str(header.dtype),
        logical_shape=tuple(header.shape), loader=lambda: load_npy(path),
    )
