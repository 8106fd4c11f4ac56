"""msprobe dumps of PyTorch / MindSpore eager runs (framework-dumps.md A): entries, leaves, files.

:func:`read_msprobe_dump` takes a dump root, a ``step*`` folder, a rank folder or a ``dump.json``
path and returns plain dataclasses: the run's framework / task / level, its steps and ranks, and
per ``dump.json`` the entries in dump order, each with its leaves flattened under stable paths
(``input.0``, ``input.1.2``, ``input.dim`` for a keyword, ``output.0``, ``parameters.weight``;
``weight`` in a ``parameters_grad`` entry) -- the names msprobe's compare and its tensor files use.
Leaves are checked when the file is read and built when first used (:mod:`.leaves`).

Nothing bad in one place stops the rest: a truncated ``dump.json`` keeps its entries before the
cut, a missing one is rebuilt from the tensor file names, and listed-but-absent files, unknown
dtypes and malformed leaves each add one warning line naming the file and the reason. Tensor
bytes are read only by :func:`load_leaf` (``.pt`` through :mod:`.torch_pt`, ``.npy`` through
:mod:`.golden_npy`; MindSpore saves bf16 as fp32 ``.npy``, so the array's dtype can be wider
than :attr:`Leaf.dtype`).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field

import numpy as np

from ...errors import FormatError
from ..golden_npy import load_npy, read_npy_header
from .json_files import read_json_text_lenient, salvage_object
from .leaves import LEAF_ROOTS, Leaf, LeafCounts, build_leaves, check_leaves, leaf_nodes
from .layout import TENSOR_DIR, RankDir, entry_name_fields, find_rank_dirs, split_tensor_file_name
from .side_files import read_construct as _read_construct, read_stack as _read_stack
from ..torch_pt import PtTensor, load_pt_tensor, open_pt

__all__ = ["Entry", "Leaf", "MsprobeDump", "RankDump", "load_leaf", "read_msprobe_dump", "read_rank_dump"]


class Entry:
    """One ``dump.json`` entry; its leaves are built from the entry's JSON object the first time
    :attr:`leaves` is read (:mod:`.leaves`: they were checked when the file was read).
    An entry the statistics scanner read (:mod:`.scan`) holds where its JSON is in the
    file (``source``, a :class:`.scan.JsonFile`, and the span), read when first needed."""
    __slots__ = ("name", "kind", "scope", "prefix", "op", "counter", "_leaves", "_body", "_counts", "_dir",
                 "_source", "_start", "_end")

    def __init__(self, name: str, kind: str, scope: str, prefix: str, op: str, counter: int | None,
                 leaves: list[Leaf] | None = None, *, body: dict | None = None,
                 counts: LeafCounts | None = None, tensor_dir: str = "", source=None,
                 span: tuple[int, int] = (0, 0)):
        self.name, self.kind, self.scope, self.prefix, self.op, self.counter = name, kind, scope, prefix, op, counter
        self._leaves = [] if leaves is None and body is None and source is None else leaves
        self._body, self._counts, self._dir = body, counts, tensor_dir
        self._source, (self._start, self._end) = source, span

    def _json_body(self) -> dict:
        if self._body is None and self._source is not None:    # the scanner checked it is a plain object
            self._body = json.loads(self._source.read(self._start, self._end))
            self._source = None
        return self._body

    @property
    def leaves(self) -> list[Leaf]:
        if self._leaves is None:
            self._leaves = build_leaves(self.kind, self._json_body(), self._dir)
            self._body = None
        return self._leaves

    @property
    def leaves_built(self) -> bool:
        """Whether :attr:`leaves` has made its Leaf objects (or there was no JSON body)."""
        return self._leaves is not None

    @property
    def tensor_dir(self) -> str:
        return self._dir

    def leaf_sources(self) -> list[tuple[str, dict | Leaf | None]]:
        """(path, leaf) of every leaf in dump order without building Leaf objects that are not
        built yet: the leaf's JSON object (None for a null leaf), or its Leaf once built."""
        if self._leaves is not None:
            return [(leaf.path, leaf) for leaf in self._leaves]
        body = self._json_body()
        if self.kind != "parameters_grad":     # the common body, inline: lists of leaf objects
            found: list[tuple[str, dict]] = []
            for key, value in body.items():
                root = LEAF_ROOTS.get(key)
                if root is None or value == {}:
                    continue
                if type(value) is not list or not all(type(n) is dict and type(n.get("type")) is str for n in value):
                    break
                found += [(f"{root}.{i}", node) for i, node in enumerate(value)]
            else:
                return found
        return [(path, node) for path, node, problem in leaf_nodes(self.kind, body) if problem is None]

    @property
    def tensor_count(self) -> int:
        if self._leaves is None:
            return self._counts.tensors
        return sum(1 for leaf in self._leaves if leaf.is_tensor)

    @property
    def file_count(self) -> int:
        if self._leaves is None:
            return self._counts.files
        return sum(1 for leaf in self._leaves if leaf.file)

    def __repr__(self) -> str:
        return f"Entry({self.name!r}, {self.kind!r})"


@dataclass
class RankDump:
    """One ``dump.json`` folder."""
    location: RankDir
    framework: str | None = None     # pytorch | mindspore (a dump.json without the key: pytorch)
    task: str | None = None          # tensor | statistics | md5 (statistics with md5 leaves)
    level: str | None = None         # L0 | L1 | mix | ...
    dump_data_dir: str | None = None     # as recorded at capture time; not used to find files
    entries: list[Entry] = field(default_factory=list)
    stack: dict[str, tuple[str, ...]] = field(default_factory=dict)   # entry name -> frames
    construct: dict[str, str | None] = field(default_factory=dict)    # node -> parent module
    undescribed_files: list[str] = field(default_factory=list)   # tensor files dump.json lacks
    data_names: set[str] = field(default_factory=set)             # tensor files dump.json lists
    warnings: list[str] = field(default_factory=list)
    deferred: int | None = None      # entries not read yet (read in another process): their count
    columns: object = field(default=None, repr=False, compare=False)   # StatsColumns made when read, or None

    @property
    def entry_count(self) -> int:
        return len(self.entries) if self.deferred is None else self.deferred


@dataclass
class MsprobeDump:
    root: str
    ranks: list[RankDump]
    framework: str | None
    task: str | None
    level: str | None
    warnings: list[str] = field(default_factory=list)

    @property
    def steps(self) -> list[int | None]:
        return sorted({r.location.step for r in self.ranks}, key=lambda s: -1 if s is None else s)

    @property
    def rank_names(self) -> list[str]:
        return list(dict.fromkeys(r.location.rank for r in self.ranks))


def read_msprobe_dump(path: str | os.PathLike) -> MsprobeDump:
    """Every rank folder under ``path``, parsed. FormatError only when ``path`` holds no dump."""
    ranks = [read_rank_dump(loc) for loc in find_rank_dirs(path)]
    warnings = [w for r in ranks for w in r.warnings]
    run = {}
    for key in ("framework", "task", "level"):
        values = list(dict.fromkeys(getattr(r, key) for r in ranks if getattr(r, key) is not None))
        run[key] = values[0] if values else None
        if len(values) > 1:
            warnings.append(f"{os.fspath(path)}: ranks disagree on {key}: {', '.join(map(str, values))}")
    return MsprobeDump(os.fspath(path), ranks, warnings=warnings, **run)


def read_rank_dump(location: RankDir) -> RankDump:
    rank = RankDump(location)
    json_path = os.path.join(location.path, "dump.json")
    tensor_dir = os.path.join(location.path, TENSOR_DIR)
    files = _list_tensor_files(tensor_dir, rank.warnings)
    if os.path.exists(json_path):
        _read_dump_json(rank, json_path, tensor_dir, files)
    else:
        rank.warnings.append(f"{json_path}: missing; entries rebuilt from the {len(files)} "
                             f"tensor file names (statistics unknown)")
        rank.framework = "mindspore" if files and all(f.endswith(".npy") for f in files) else "pytorch"
        rank.task = "tensor"
    rank.undescribed_files = [f for f in files if f not in rank.data_names]
    if rank.undescribed_files:
        rank.columns = None      # made of the entries before these are added
        _recover_entries(rank, tensor_dir, rank.undescribed_files)
    rank.stack = _read_stack(os.path.join(location.path, "stack.json"), rank.warnings)
    rank.construct = _read_construct(os.path.join(location.path, "construct.json"), rank.warnings)
    # names in warnings come from the files: keep each warning on one line whatever they hold
    rank.warnings = [w.replace("\n", "\\n").replace("\r", "\\r") for w in rank.warnings]
    return rank


def _list_tensor_files(tensor_dir: str, warnings: list[str]) -> list[str]:
    try:
        with os.scandir(tensor_dir) as it:
            return sorted(e.name for e in it if e.name.endswith((".pt", ".npy")))
    except FileNotFoundError:
        return []
    except OSError as e:
        warnings.append(f"{tensor_dir}: cannot list: {e.strerror or e}")
        return []


def _read_dump_json(rank: RankDump, json_path: str, tensor_dir: str, files: list[str]) -> None:
    if _scan_dump_json(rank, json_path, tensor_dir, files):
        return
    try:
        text, bad_bytes = read_json_text_lenient(json_path)
    except FormatError as e:
        rank.warnings.append(str(e))
        return
    read = salvage_object(text, surrogates=bad_bytes)
    doc = read.doc
    if read.cut is not None:
        rank.warnings.append(f"{json_path}: truncated or invalid ({read.cut}); kept the "
                             f"{len(doc.get('data') or {})} entries before it")
    rank.warnings.extend(f"{json_path}: entry {name}: {why}, skipped (the other entries load)"
                         for name, why in read.skipped)
    if read.duplicates:
        names = sorted(set(read.duplicates))
        shown = ", ".join(names[:3]) + (", ..." if len(names) > 3 else "")
        rank.warnings.append(f"{json_path}: {len(read.duplicates)} duplicate entries (the last of each "
                             f"kept, as json.load keeps it): {shown}")
    _read_header(rank, json_path, doc)
    data = doc.get("data", {})
    if not isinstance(data, dict):
        rank.warnings.append(f"{json_path}: 'data' is not an object")
        return
    take = _EntryTaker(rank, json_path, tensor_dir, files)
    for name, body in data.items():
        entry = take(name, body)
        if entry is not None:
            rank.entries.append(entry)
    if rank.task == "statistics" and take.md5:
        rank.task = "md5"


def _scan_dump_json(rank: RankDump, json_path: str, tensor_dir: str, files: list[str]) -> bool:
    """A statistics dump.json read by the C scanner (:mod:`.scan`); False when it is
    not used or not fit (nothing of ``rank`` changed then)."""
    from .scan import scan_statistics

    scratch = RankDump(rank.location)
    take = _EntryTaker(scratch, json_path, tensor_dir, files)

    def plain(name: str, start: int, end: int, leaves: int, source) -> Entry:
        return Entry(name, *entry_name_fields(name), source=source, span=(start, end),
                     counts=LeafCounts(leaves), tensor_dir=tensor_dir)

    scanned = scan_statistics(json_path, plain, take)
    if scanned is None:
        return False
    _read_header(rank, json_path, scanned.header)
    rank.warnings += scratch.warnings
    rank.data_names |= scratch.data_names
    rank.entries = scanned.entries
    if rank.task == "statistics" and take.md5:
        rank.task = "md5"
    if rank.task == "statistics":
        rank.columns = scanned.columns
    return True


def _read_header(rank: RankDump, json_path: str, doc: dict) -> None:
    header = {}
    for key in ("framework", "task", "level", "dump_data_dir"):
        value = doc.get(key)
        if value is not None and not isinstance(value, str):
            rank.warnings.append(f"{json_path}: {key} {value!r:.60} is not a string, ignored")
            value = None
        header[key] = value
    rank.framework = header["framework"] or "pytorch"    # older dumps have no key (A2)
    rank.task, rank.level, rank.dump_data_dir = header["task"], header["level"], header["dump_data_dir"]


class _EntryTaker:
    """The Entry of one parsed entry body (None: skipped), its checks' warnings and listed files
    into ``rank``; :attr:`md5`: an entry with an md5 leaf was met."""

    def __init__(self, rank: RankDump, json_path: str, tensor_dir: str, files: list[str]):
        self.rank, self.json_path, self.tensor_dir, self.present = rank, json_path, tensor_dir, set(files)
        self.md5 = False

    def __call__(self, name: str, body) -> Entry | None:
        json_path, warnings = self.json_path, self.rank.warnings
        if type(body) is not dict:
            warnings.append(f"{json_path}: entry {name}: not an object, skipped")
            return None
        data_names: list[str] = []
        kind, *fields = entry_name_fields(name)
        counts = check_leaves(kind, body, name, json_path, warnings, data_names)
        self.md5 = self.md5 or counts.md5
        for data_name in data_names:
            self.rank.data_names.add(data_name)
            if data_name not in self.present:
                warnings.append(f"{os.path.join(self.tensor_dir, data_name)}: listed in dump.json "
                                f"({name} {_leaf_path(kind, body, data_name)}) but absent")
        return Entry(name, kind, *fields, body=body, counts=counts, tensor_dir=self.tensor_dir)


def _leaf_path(kind: str, body: dict, data_name: str) -> str:
    """The path of the leaf naming ``data_name`` (for a warning: the walk is made again)."""
    return next((path for path, node, _ in leaf_nodes(kind, body)
                 if node is not None and node.get("data_name") == data_name), "?")


def _recover_entries(rank: RankDump, tensor_dir: str, names: list[str]) -> None:
    """Entries for tensor files dump.json does not describe (a crash before the last flush):
    name, kind and leaf path from the file name, dtype and shape from the file's header."""
    by_name = {e.name: e for e in rank.entries}
    for file_name in names:
        path = os.path.join(tensor_dir, file_name)
        split = split_tensor_file_name(file_name)
        if split is None:
            rank.warnings.append(f"{path}: not described by dump.json and not an msprobe tensor name")
            continue
        entry_name, leaf_path = split
        entry = by_name.get(entry_name)
        if entry is None:
            entry = by_name[entry_name] = Entry(entry_name, *entry_name_fields(entry_name))
            rank.entries.append(entry)
        leaf = Leaf(leaf_path, "tensor", data_name=file_name, file=path)
        try:
            dtype, leaf.shape = _file_header(path)
            leaf.dtype = dtype.name
        except FormatError as e:
            rank.warnings.append(f"{e}")
        entry.leaves.append(leaf)
        rank.warnings.append(f"{path}: not described by dump.json; recovered as {entry_name} {leaf_path}")


def _file_header(path: str) -> tuple[np.dtype, tuple[int, ...]]:
    if path.endswith(".npy"):
        header = read_npy_header(path)
        return header.dtype, header.shape
    tensor = open_pt(path)
    if not isinstance(tensor, PtTensor):
        raise FormatError(path, f"holds a {type(tensor).__name__}, not a single tensor")
    return tensor.dtype, tensor.shape


def load_leaf(leaf: Leaf) -> np.ndarray:
    """The values of a tensor leaf's file; FormatError when it has none or it cannot be read."""
    if leaf.file is None:
        raise FormatError(None, f"{leaf.path}: no tensor file (statistics-only dump or not saved)")
    if leaf.file.endswith(".npy"):
        array = load_npy(leaf.file)
    elif leaf.file.endswith(".pt"):
        array = load_pt_tensor(leaf.file)
    else:    # a CANN binary kernel dump (MindSpore graph mode on Ascend): its leaf path says which tensor
        from ..mindspore_graph.cann import load_cann_tensor

        io, _, index = leaf.path.partition(".")
        if io not in ("input", "output") or not index.isdigit():
            # a damaged dump.json can name any file: only a CANN leaf ("input.N") says which tensor
            raise FormatError(leaf.file, f"{leaf.path}: not a .npy or .pt file, nor a CANN dump's input.N/output.N")
        array = load_cann_tensor(leaf.file, io, int(index))
    if leaf.shape is not None and tuple(array.shape) != leaf.shape:
        raise FormatError(leaf.file, f"shape {list(array.shape)} differs from dump.json's {list(leaf.shape)}")
    return array
