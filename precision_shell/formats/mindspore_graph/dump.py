"""One iteration folder of a MindSpore graph-mode dump as kernels in execution order.

The kernel files are grouped by (op type, op name) and each group is given the graph full name
it belongs to:

1. the execution order's (or graph's) full name whose ``/ -> _`` spelling is the op name, when
   its op type agrees;
2. the renumbering quirk (framework-dumps.md): ops inserted late are numbered differently on
   disk and in the graph (graph ``Cast-op2``/``-op3``, files ``Cast-op0``/``-op1``), so the groups
   left over are paired, per op type, with the full names of that type left over, both in
   execution order (the files' first timestamps);
3. a group that still has no full name keeps its op name, is ordered by its timestamp and named
   in one warning line.

Without ``execution_order/`` the order is the files' timestamps; without ``graphs/`` there are no
edges; each is said once. ``Parameter.*`` files (weights, graph inputs; written at the end of the
iteration, after the optimizer) are listed apart, by the graph's parameter name.
"""

from __future__ import annotations

import csv
import io
import os
from dataclasses import dataclass, field

from ...errors import FormatError
from ..input_files import read_regular
from .anf_graph import AnfGraph, load_anf_graph
from .layout import MsIteration
from .names import PARAMETER, KernelFile, mangled, parse_file_name

__all__ = ["IterationDump", "Kernel", "ParameterFile", "read_execution_order", "read_iteration"]

_SHOWN = 3


@dataclass
class Kernel:
    full_name: str
    op_type: str
    order: int
    timestamp: int
    files: list[KernelFile] = field(default_factory=list)
    matched: str = "name"        # name | renumbered (by type and order) | none
    kind: str = "forward"        # forward | backward (from the first Gradients/ kernel on)

    @property
    def file_name(self) -> str:
        """The op name as the files spell it."""
        return self.files[0].op_name if self.files else mangled(self.full_name)


@dataclass
class ParameterFile:
    name: str                    # the graph's parameter name (fc1.weight), else the file's
    file: KernelFile


@dataclass
class IterationDump:
    iteration: MsIteration
    kernels: list[Kernel]
    parameters: list[ParameterFile]
    graph: AnfGraph | None
    order_source: str            # execution_order | timestamps
    warnings: list[str] = field(default_factory=list)
    not_run: list[str] = field(default_factory=list)    # execution-order kernels without files


def read_execution_order(path: str) -> list[str]:
    """The kernel full names of ``ms_execution_order_graph_{G}.csv``, in run order."""
    try:
        text = read_regular(path).decode("utf-8", "replace")
    except OSError as exc:
        raise FormatError(path, f"cannot read: {exc.strerror or exc}") from None
    rows = [row[0].strip() for row in csv.reader(io.StringIO(text)) if row and row[0].strip()]
    if rows and rows[0].startswith("NodeExecutionOrder"):
        rows = rows[1:]
    return rows


def _list_files(folder: str, warnings: list[str]) -> list[KernelFile]:
    try:
        with os.scandir(folder) as it:
            names = sorted(e.name for e in it if e.is_file(follow_symlinks=False) or e.is_symlink())
    except OSError as exc:
        raise FormatError(folder, f"cannot list: {exc.strerror or exc}") from None
    files, strange = [], []
    for name in names:
        f = parse_file_name(name)
        (strange if f is None else files).append(f or name)
    if strange:
        shown = ", ".join(repr(n)[1:-1] for n in strange[:_SHOWN])
        warnings.append(f"{folder}: {len(strange)} file(s) not named as kernel dumps, skipped: {shown}"
                        + (", ..." if len(strange) > _SHOWN else ""))
    return files


def _type_of(full_name: str) -> str:
    """``MatMul`` of ``.../MatMul-op3``."""
    return full_name.rsplit("/", 1)[-1].split("-op", 1)[0]


class GraphCache:
    """A rank's graph and execution order, read once for all its iterations."""

    def __init__(self):
        self._graphs: dict[tuple[str, int], tuple[AnfGraph | None, list[str] | None, list[str]]] = {}

    def get(self, it: MsIteration) -> tuple[AnfGraph | None, list[str] | None, list[str]]:
        key = (it.rank.path, it.graph_id)
        if key not in self._graphs:
            problems: list[str] = []
            graph = order = None
            pb = it.rank.graph_file(it.graph_id, "pb")
            if os.path.exists(pb):
                try:
                    ir = it.rank.graph_file(it.graph_id, "ir")
                    graph = load_anf_graph(pb, ir if os.path.exists(ir) else None)
                except FormatError as exc:
                    problems.append(f"{exc}; no dataflow edges")
            else:
                problems.append(f"{os.path.dirname(pb)}: no graph {os.path.basename(pb)}; no dataflow edges, "
                                f"no source lines")
            csv_path = it.rank.order_file(it.graph_id)
            if os.path.exists(csv_path):
                try:
                    order = read_execution_order(csv_path)
                except FormatError as exc:
                    problems.append(f"{exc}; kernels ordered by their files' timestamps")
            else:
                problems.append(f"{os.path.dirname(csv_path)}: no {os.path.basename(csv_path)}; kernels "
                                f"ordered by their files' timestamps")
            self._graphs[key] = graph, order, problems
        return self._graphs[key]


def read_iteration(it: MsIteration, cache: GraphCache | None = None) -> IterationDump:
    """The kernels and parameter files of one iteration folder (FormatError only when the folder
    cannot be listed)."""
    graph, order, problems = (cache or GraphCache()).get(it)
    warnings = list(problems)
    files = _list_files(it.path, warnings)
    groups: dict[tuple[str, str], list[KernelFile]] = {}
    params: list[ParameterFile] = []
    param_names = {mangled_param(p): p for p in (graph.parameters if graph else ())}
    for f in files:
        if f.op_type == PARAMETER:
            params.append(ParameterFile(param_names.get(f.op_name, f.op_name), f))
        else:
            groups.setdefault((f.op_type, f.op_name), []).append(f)
    params.sort(key=lambda p: p.file.timestamp)

    on_disk = {op for _, op in groups}
    if order is not None and groups and not any(mangled(n) in on_disk for n in order):
        # a CSV of another graph or run (or no CSV at all, in content): worse than none
        warnings.append(f"{it.rank.order_file(it.graph_id)}: names none of this iteration's kernel files; "
                        f"kernels ordered by their files' timestamps")
        order = None
    names = order if order is not None else list(graph.by_full_name) if graph is not None else []
    by_mangled: dict[str, str] = {}
    for name in names:
        by_mangled.setdefault(mangled(name), name)
    position = {name: i for i, name in enumerate(names)}
    first_ts = {key: min(f.timestamp for f in group) for key, group in groups.items()}
    taken: dict[str, Kernel] = {}
    left: dict[str, list[tuple[str, str]]] = {}
    for key in sorted(groups, key=first_ts.get):
        op_type, op_name = key
        name = by_mangled.get(op_name)
        if name is not None and _type_of(name) == op_type and name not in taken:
            taken[name] = Kernel(name, op_type, position[name], first_ts[key], sorted(groups[key], key=_slot_key))
        else:
            left.setdefault(op_type, []).append(key)
    unmatched: list[Kernel] = []
    free_by_type: dict[str, list[str]] = {}
    if left:
        for name in names:      # in execution order
            if name not in taken and _type_of(name) in left:
                free_by_type.setdefault(_type_of(name), []).append(name)
    for op_type, keys in left.items():
        kernels_left = [Kernel(key[1], op_type, -1, first_ts[key], sorted(groups[key], key=_slot_key))
                        for key in keys]
        free = free_by_type.get(op_type, [])
        # the same scope first (``..._Block_Cast-op0`` -> ``.../Block/Cast-op2``), then any of the type
        by_scope: dict[str, list[str]] = {}
        for name in reversed(free):
            by_scope.setdefault(_scope(mangled(name)), []).append(name)    # pop() gives the earliest
        used: set[str] = set()

        def give(kernel: Kernel, name: str) -> None:
            used.add(name)
            kernel.full_name, kernel.order, kernel.matched = name, position[name], "renumbered"
            taken[name] = kernel

        for kernel in kernels_left:
            same = by_scope.get(_scope(kernel.full_name))
            if same:
                give(kernel, same.pop())
        rest = iter([n for n in free if n not in used])
        for kernel in kernels_left:
            if kernel.matched != "renumbered":
                name = next(rest, None)
                if name is not None:
                    give(kernel, name)
                else:
                    kernel.matched = "none"
                    unmatched.append(kernel)
    kernels = sorted(taken.values(), key=lambda k: (k.order, k.timestamp))
    if unmatched:
        shown = ", ".join(k.file_name for k in unmatched[:_SHOWN])
        warnings.append(f"{it.path}: {len(unmatched)} kernel(s) whose file names match no "
                        f"{'execution-order' if order is not None else 'graph'} op, kept by their "
                        f"timestamps: {shown}" + (", ..." if len(unmatched) > _SHOWN else "")
                        if names else "")
        kernels = _merge_by_time(kernels, unmatched)
    for i, k in enumerate(kernels):
        k.order = i
    backward = False
    for k in kernels:
        backward = backward or k.full_name.startswith(("Gradients/", "Gradients_"))   # _: a file name kept
        k.kind = "backward" if backward else "forward"
    not_run = [n for n in (order or ()) if n not in taken]
    return IterationDump(it, kernels, params, graph, "execution_order" if order is not None else "timestamps",
                         [w for w in warnings if w], not_run)


def _scope(name: str) -> str:
    """A (mangled) full name without its ``-opN`` number."""
    return name.rsplit("-op", 1)[0]


def mangled_param(name: str) -> str:
    """A parameter's name as its file spells it (``fc1.weight`` -> ``fc1_weight``)."""
    return name.replace(".", "_").replace("/", "_")


def _slot_key(f: KernelFile) -> tuple:
    return (f.io != "input", f.slot if f.slot is not None else -1, f.timestamp)


def _merge_by_time(ordered: list[Kernel], extra: list[Kernel]) -> list[Kernel]:
    """``extra`` slotted into ``ordered`` by timestamp (``ordered`` keeps its own order)."""
    out: list[Kernel] = []
    extra = sorted(extra, key=lambda k: k.timestamp)
    j = 0
    for k in ordered:
        while j < len(extra) and extra[j].timestamp < k.timestamp:
            out.append(extra[j])
            j += 1
        out.append(k)
    return out + extra[j:]
