"""The leaves of msprobe ``dump.json`` entries: checked when the file is read, built when used.

A 100k-entry ``dump.json`` holds ~300k leaves. Opening a dump only needs what they say in
total (how many tensors and files, which files they name, whether md5 was dumped) and their
problems (one warning line each, at start-up); building a :class:`Leaf` per leaf as well cost
~1 s per dump. So :func:`check_leaves` walks an entry's leaves once when the file is read (the
warnings and the counts), and :func:`build_leaves` makes the Leaf objects of an entry the first
time someone asks for them (:attr:`.dump.Entry.leaves`), silently: both walk the same
paths in the same order (:func:`leaf_nodes`), so what was checked is what gets built.

Paths: ``input.0``, ``input.1.2``, ``input.dim`` for a keyword, ``output.0``,
``parameters.weight``; ``weight`` (or ``weight.0`` when a grad is a list) in a
``parameters_grad`` entry -- the names msprobe's compare and its tensor files use.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from typing import Iterator

from .layout import normalize_dtype

_MAX_LEAF_DEPTH = 16
# entry keys -> leaf path roots; input_args and input_kwargs both become "input" (A6)
_ROOTS = {"input_args": "input", "input_kwargs": "input", "input": "input", "output": "output",
          "parameters": "parameters"}
LEAF_ROOTS = _ROOTS


@dataclass(slots=True)     # 300k of them in a 100k-entry dump: slots halve their size
class Leaf:
    """One argument, result or parameter of an entry: a tensor (dtype, shape, statistics, file)
    or a plain value (``type`` "int", "float", "str", ... with ``value``), or None (``type`` None)."""
    path: str
    type: str | None
    dtype: str | None = None         # numpy / ml_dtypes name ("bfloat16"); None when unknown
    dtype_raw: str | None = None     # as written ("torch.bfloat16", "BFloat16")
    shape: tuple[int, ...] | None = None
    max: float | None = None
    min: float | None = None
    mean: float | None = None
    norm: float | None = None
    md5: str | None = None
    requires_grad: bool | None = None
    value: object = None
    data_name: str | None = None
    file: str | None = None          # data_name resolved in dump_tensor_data/ next to dump.json

    @property
    def is_tensor(self) -> bool:
        return self.shape is not None


def leaf_nodes(kind: str, body: dict) -> Iterator[tuple[str, dict | None, str | None]]:
    """(path, leaf object or None for a null leaf, problem) for every leaf of an entry body, in
    dump order; a part that is no leaf gives (path, None, why it is skipped)."""
    if kind == "parameters_grad":
        for param, value in body.items():
            grads = value if isinstance(value, list) else [value]
            for i, item in enumerate(grads):
                yield from _walk(item, param if len(grads) == 1 else f"{param}.{i}", 0)
        return
    for key, value in body.items():
        root = _ROOTS.get(key)
        if root is None:
            continue    # extra keys (msprobe adds some per version) carry no leaves
        if type(value) is not list:
            yield from _walk(value, root, 0)
            continue
        for i, node in enumerate(value):    # the common shape, unrolled: a list of leaf objects
            if type(node) is dict and type(node.get("type")) is str:
                yield f"{root}.{i}", node, None
            else:
                yield from _walk(node, f"{root}.{i}", 1)


def _walk(node, path: str, depth: int) -> Iterator[tuple[str, dict | None, str | None]]:
    if depth > _MAX_LEAF_DEPTH:
        yield path, None, f"nested deeper than {_MAX_LEAF_DEPTH}, skipped"
    elif node is None:
        yield path, None, None
    elif isinstance(node, dict) and isinstance(node.get("type"), str):
        yield path, node, None
    elif isinstance(node, dict):
        for key, value in node.items():
            yield from _walk(value, f"{path}.{key}", depth + 1)
    elif isinstance(node, list):
        for i, value in enumerate(node):
            yield from _walk(value, f"{path}.{i}", depth + 1)
    else:
        yield path, None, f"unexpected {type(node).__name__}, skipped"


@dataclass(slots=True)
class LeafCounts:
    """What :func:`check_leaves` found in an entry, without building its leaves."""
    tensors: int = 0
    files: int = 0
    md5: bool = False


def _is_tensor(node: dict) -> bool:
    return "dtype" in node and "shape" in node and "value" not in node


def _good_data_name(data_name) -> bool:
    return (type(data_name) is str and data_name not in ("", ".", "..")
            and os.path.basename(data_name) == data_name)


def check_leaves(kind: str, body: dict, entry: str, json_path: str, warnings: list[str],
                 data_names: list[str]) -> LeafCounts:
    """The problems of an entry's leaves as warning lines (the text naming a leaf is made only
    when there is one), its counts, and the tensor file names it lists (into ``data_names``).
    The common entry (lists of well-formed tensor leaves, an empty ``input_kwargs``) is checked
    inline; anything else takes :func:`leaf_nodes`' walk."""
    if kind != "parameters_grad":
        plain = _plain_counts(body, data_names)
        if plain is not None:
            return plain
        data_names.clear()
    counts = LeafCounts()
    for path, node, problem in leaf_nodes(kind, body):
        if node is None:
            if problem is not None:
                warnings.append(f"{json_path}: {entry} {path}: {problem}")
            continue
        if _is_tensor(node):
            counts.tensors += 1
            if _shape(node["shape"]) is None:
                warnings.append(f"{json_path}: {entry} {path}: bad shape {node['shape']!r:.60}")
            raw = node["dtype"]
            if normalize_dtype(raw) is None:
                warnings.append(f"{json_path}: {entry} {path}: unknown dtype "
                                f"{(raw if type(raw) is str else repr(raw))!r}")
        data_name = node.get("data_name")
        if data_name is not None:
            if _good_data_name(data_name):
                counts.files += 1
                data_names.append(data_name)
            else:
                warnings.append(f"{json_path}: {entry} {path}: bad data_name {data_name!r:.80}, ignored")
        if not counts.md5 and type(node.get("md5")) is str and node["md5"]:
            counts.md5 = True
    return counts


_GOOD_DTYPES: set[str] = set()     # dtype strings normalize_dtype knows, as met


def _plain_counts(body: dict, data_names: list[str]) -> LeafCounts | None:
    """Counts of an entry whose leaves give no warning: lists of tensor leaves with a known
    dtype, a list of ints >= 0 as shape, a plain file name if any, no md5 (what nearly every
    entry is, so this runs 300k times at start-up: one tight loop, no calls per leaf); None
    for anything else (the caller walks it)."""
    tensors = files = 0
    for key, value in body.items():
        if key not in _ROOTS:
            continue
        if type(value) is not list:
            if value == {}:
                continue
            return None
        for node in value:
            if type(node) is not dict or type(node.get("type")) is not str or "value" in node or "md5" in node:
                return None
            raw, shape = node.get("dtype"), node.get("shape")
            if type(raw) is not str or type(shape) is not list or len(shape) > 64:
                return None
            if raw not in _GOOD_DTYPES:
                if normalize_dtype(raw) is None:
                    return None
                _GOOD_DTYPES.add(raw)
            for d in shape:
                if type(d) is not int or d < 0:
                    return None
            tensors += 1
            data_name = node.get("data_name")
            if data_name is not None:
                if not _good_data_name(data_name):
                    return None
                files += 1
                data_names.append(data_name)
    return LeafCounts(tensors, files)


def build_leaves(kind: str, body: dict, tensor_dir: str) -> list[Leaf]:
    """The Leaf objects of an entry that :func:`check_leaves` has checked (no warnings here)."""
    return [Leaf(path, None) if node is None else _leaf(node, path, tensor_dir)
            for path, node, problem in leaf_nodes(kind, body) if problem is None]


def leaf_of(node: dict, path: str, tensor_dir: str) -> Leaf:
    """The Leaf of one checked leaf object (what :func:`build_leaves` makes of it)."""
    return _leaf(node, path, tensor_dir)


def _leaf(node: dict, path: str, tensor_dir: str) -> Leaf:
    get = node.get
    shape = dtype = dtype_raw = None
    if _is_tensor(node):
        shape = _shape(node["shape"])
        if shape is None:
            shape = ()
        raw = node["dtype"]
        dtype_raw = raw if type(raw) is str else repr(raw)
        dtype = normalize_dtype(raw)
    md5, rg, data_name = get("md5"), get("requires_grad"), get("data_name")
    if data_name is not None and not _good_data_name(data_name):
        data_name = None
    high, low, mean, norm = get("Max"), get("Min"), get("Mean"), get("Norm")
    return Leaf(path, node["type"], dtype, dtype_raw, shape,
                high if type(high) is float else _stat(high), low if type(low) is float else _stat(low),
                mean if type(mean) is float else _stat(mean), norm if type(norm) is float else _stat(norm),
                md5 if type(md5) is str else None, rg if type(rg) is bool else None,
                get("value"), data_name, None if data_name is None else os.path.join(tensor_dir, data_name))


def _shape(value) -> tuple[int, ...] | None:
    if type(value) is not list or len(value) > 64:
        return None
    for d in value:
        if type(d) is not int or d < 0:
            return None
    return tuple(value)


def _stat(value) -> float | None:
    if isinstance(value, (bool, int, float)):
        try:
            return float(value)
        except OverflowError:   # an integer of more than 308 digits: beyond any float
            return math.inf if value > 0 else -math.inf
    if isinstance(value, str):     # older dumps wrote "inf"/"nan" as strings
        try:
            return float(value)
        except ValueError:
            return None
    return None
