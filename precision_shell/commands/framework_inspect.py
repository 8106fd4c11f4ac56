"""Framework-dump variants of ``info``, ``use``, ``ls``, ``ni``, ``li``, ``lo`` (msprobe dumps of
PyTorch / MindSpore runs: each ``dump.json`` entry is an op, its leaves are its tensors).

Registered as the ``framework`` variants of the graph-mode commands (:mod:`.registry`), so the
same names work on a :class:`~precision_shell.model.framework_session.FrameworkSession`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from precision_shell import __version__
from precision_shell.commands.inspect_cmd import _num, _shape, check_limit, text_matcher
from precision_shell.commands.registry import REGISTRY, arg
from precision_shell.model.tensor_ref import op_of
from precision_shell.commands.results import Message, Sections, Table
from precision_shell.commands.row_schema import conform
from precision_shell.formats.msprobe.layout import parse_entry_name

if TYPE_CHECKING:      # the run model imports numpy: not at start-up
    from precision_shell.model.framework_run import FrameworkOp, FrameworkTensor

FRAMEWORK = "framework"
variant = REGISTRY.variant

# next/prev/goto walk the finding list whatever made it; pt/cp resolve names through the session
REGISTRY.share(FRAMEWORK, "next", "prev", "goto", "print_tensor", "compare_tensors")


def _location(rank) -> str:
    loc = rank.location
    return f"step {'-' if loc.step is None else loc.step} {loc.rank}"


def _steps_text(steps: list) -> str:
    """``steps 0, 1``; a dump without ``step*`` folders (a rank folder or dump.json opened
    directly) has none to name."""
    named = [str(s) for s in steps if s is not None]
    if not named:
        return "no step folders"
    return f"steps {', '.join(named)}" + (" and files outside step folders" if len(named) < len(steps) else "")


@variant(FRAMEWORK, "info", summary="Dump summary: framework, task, level, steps, ranks, entry "
                                    "counts of target and golden, pairing, output folder.")
def info(session, args) -> Sections:
    from precision_shell.model.framework_run import summarize

    target = session.target
    run = session.run if session.run_built else None     # edges: counted once something built them
    total = summarize(target.ranks)
    golden_rank = session.golden_rank
    data: dict[str, Any] = {
        "workspace": str(target.root), "target": str(target.root), "golden": str(session.golden_dump.root) if session.golden_dump else None,
        "framework": target.framework, "task": target.task, "level": target.level,
        "steps": total.steps, "ranks": total.ranks,
        "active": {"step": session.selected.location.step, "rank": session.selected.location.rank,
                   "path": session.selected.location.path},
        "ops": len(session.selected.entries), "entries": total.entries, "kinds": total.kinds,
        "tensors": total.tensors, "tensor_files": total.tensor_files,
        "edges": len(run.edges) if run else None, "exact_edges": sum(e.exact for e in run.edges) if run else None,
        "golden_ops": golden_rank.entry_count if golden_rank is not None else 0,
        "golden_task": session.golden_dump.task if session.golden_dump else None,
        "mapping": str(session.mapping_file) if session.mapping_file else None,
        "output_dir": str(session.workspace.output_dir), "errors": list(session.load_errors),
    }
    kinds = ", ".join(f"{n} {k}" for k, n in total.kinds.items())
    rows = [("framework", f"{target.framework or '?'}  task {target.task or '?'}  level {target.level or '?'}"),
            ("target", f"{target.root}: {total.entries:,} entries ({kinds}), {total.tensors:,} tensors, "
                       f"{total.tensor_files:,} tensor files"),
            ("steps / ranks", f"{_steps_text(total.steps)}; ranks {', '.join(total.ranks)}"),
            ("active", f"{_location(session.selected)}: {data['ops']:,} entries" + (
                f"; {len(run.edges):,} dataflow edges ({data['exact_edges']:,} exact)" if run else ""))]
    if session.golden_dump is not None:
        where = _location(golden_rank) if golden_rank is not None else "no matching rank"
        rows.append(("golden", f"{session.golden_dump.root}: task {session.golden_dump.task or '?'}; {where}, "
                               f"{data['golden_ops']:,} entries"))
    if session.mapping_file is not None:
        rows.append(("mapping", f"{session.mapping_file}: {len(session.mapping or {})} names"))
    rows.append(("output", str(session.workspace.output_dir)))
    blocks: list = [("", rows)]
    if session.golden_dump is None:
        blocks.append(("missing", ["golden: no golden dump (pass --golden GOLDEN)"]))
    if data["errors"]:
        blocks.append(("errors", data["errors"]))
    return Sections(title=f"precision-shell {__version__} — {target.framework or 'framework'} dump "
                          f"{target.root}", blocks=blocks, data=data)


@variant(FRAMEWORK, "use", summary="Select the step and rank of the target (and the golden's match).",
         example="use --step 1\nuse --rank 3\nuse --step 0 --rank rank0",
         args=[arg("--step", type=int, complete="step", help="step number (step{N} folder)"),
               arg("--rank", complete="rank", help="rank folder name (rank3, proc12) or number")])
def use(session, args) -> Message:
    rank = session.use(step=args.step, rank=args.rank)
    golden = session.golden_rank
    lines = [f"active: {_location(rank)}: {len(rank.entries):,} entries", f"  {rank.location.path}"]
    if golden is not None:
        lines.append(f"golden: {_location(golden)}  {golden.location.path}")
    return Message(lines, data={"active": {"step": rank.location.step, "rank": rank.location.rank,
                                           "path": rank.location.path, "ops": len(rank.entries)},
                                "golden": golden.location.path if golden is not None else None})


# --- ls ------------------------------------------------------------------------------------------

def _api_type(op: FrameworkOp) -> str:
    """What ``-t`` matches: ``Functional.linear``, ``Module.fc1.Linear``."""
    return f"{op.entry.prefix}.{op.entry.op}"


@variant(FRAMEWORK, "list_ops", summary="List dump entries by name, API type or module; without a "
                                        "filter, a histogram of API types.",
         example="ls -t linear\nls -m attn\nls -n /backward/ -l 0",
         args=[arg("-n", "--name", metavar="NAME", help="entry name contains NAME (or /regex/)"),
               arg("-t", "--type", metavar="TYPE", complete="optype", help="API type (Functional.linear) contains TYPE"),
               arg("-m", "--module", metavar="MODULE", help="inside a module whose name contains MODULE"),
               arg("-l", "--limit", type=int, default=None, help="rows to show (0 = all)")])
def list_ops(session, args) -> Table:
    run = session.run
    limit = check_limit(args.limit, session)
    ops = run.ops
    if args.module is not None:
        ops = run.in_module(args.module)
    for value, flag, key in ((args.name, "-n", lambda o: o.name), (args.type, "-t", _api_type)):
        if value is not None:
            match = text_matcher(value, flag)
            ops = [o for o in ops if match(key(o))]
    if not any(v is not None for v in (args.name, args.type, args.module)):
        counts: dict[str, int] = {}
        for o in ops:
            counts[_api_type(o)] = counts.get(_api_type(o), 0) + 1
        ranked = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))
        shown = ranked if limit == 0 else ranked[:limit]
        return Table(["type", "entries"], [[t, n] for t, n in shown],
                     title=f"{len(ops)} entries of {len(counts)} API types (filter with -n -t -m)",
                     json_rows=conform([{"type": t, "ops": n, "entries": n} for t, n in ranked], "op_types"), total=len(ranked))
    shown = ops if limit == 0 else ops[:limit]
    rows = [[o.index, o.name, o.kind, _api_type(o), len(o.inputs), len(o.outputs),
             ", ".join(parse_entry_name(m).op or m for m in run.module_path(o.name)[-1:]) or "-"] for o in shown]
    return Table(["#", "entry", "kind", "type", "inputs", "outputs", "module"], rows,
                 title=f"{len(ops)} of {len(run.ops)} entries match",
                 json_rows=conform([{"order": o.index, "op": o.name, "type": _api_type(o), "kind": o.kind,
                                     "passes": [], "original_ops": [], "modules": run.module_path(o.name)}
                                    for o in ops], "ops"),
                 total=len(ops), notes=[] if ops else ["no entry matches; `ls` alone shows the API types"])


# --- ni / li / lo --------------------------------------------------------------------------------

def _tensor_row(t: FrameworkTensor) -> list:
    leaf = t.leaf
    return [t.printed(), leaf.dtype_raw or leaf.dtype or "-", _shape(leaf.shape),
            _num(leaf.max), _num(leaf.min), _num(leaf.mean), _num(leaf.norm),
            "file" if leaf.file else "-"]


_TENSOR_HEADERS = ["tensor", "dtype", "shape", "max", "min", "mean", "norm", "data"]


def _tensor_json(t: FrameworkTensor) -> dict:
    leaf = t.leaf
    return {"tensor": t.name, "io": t.io, "dtype": leaf.dtype_raw or leaf.dtype,
            "shape": list(leaf.shape) if leaf.shape is not None else None, "max": leaf.max,
            "min": leaf.min, "mean": leaf.mean, "norm": leaf.norm, "md5": leaf.md5,
            "file": leaf.file, "requires_grad": leaf.requires_grad}


def _slot(run, tensor: str) -> int | None:
    index = run.tensor(tensor).index
    return int(index) if index.isdigit() else None


def _edge_rows(run, edges, upstream: bool) -> tuple[list[list], list[dict]]:
    rows, docs = [], []
    for e in edges:
        other, mine, theirs = (e.src_op, e.dst, e.src) if upstream else (e.dst_op, e.src, e.dst)
        how = "exact" if e.exact else "inferred"
        rows.append([run.tensor(mine).printed(), other, run.tensor(theirs).printed(), how])
        docs.append({"depth": 1, "op": other, "type": run.op(other).type, "edge": how,
                     "output": _slot(run, e.src), "input": _slot(run, e.dst), "parent": e.dst_op if upstream else e.src_op,
                     "repeated": False, "tensor": mine, "other_tensor": theirs})
    return rows, docs


# where a frame is the framework's, not the user's: installed packages and the frameworks' own trees
_LIBRARY_PARTS = ("site-packages", "dist-packages", "/torch/", "/mindspore/", "/msprobe/", "/lib/python3")
_STACK_SHOWN = 8


def _in_library(frame: str) -> bool:
    path = frame.split(",", 1)[0]          # "File PATH, line N, in f, code"
    return any(part in path for part in _LIBRARY_PARTS)


def shown_stack(frames: list[str]) -> list[str]:
    """The frames ``ni`` shows: the user's own first (files outside installed packages, in
    recorded order), then the framework's, cut at 8 with what the cut hid."""
    ordered = [f for f in frames if not _in_library(f)] + [f for f in frames if _in_library(f)]
    hidden = ordered[_STACK_SHOWN:]
    if not hidden:
        return ordered
    library = sum(_in_library(f) for f in hidden)
    what = "in installed packages" if library == len(hidden) else f"{library} in installed packages"
    return ordered[:_STACK_SHOWN] + [f"... {len(hidden)} more ({what})"]


@variant(FRAMEWORK, "node_info", summary="One entry: kind, module path, tensors with dtype, shape "
                                         "and statistics, producers and consumers (edges exact or inferred).",
         example="ni Functional.softmax.0.forward\nni softmax.0.forward",
         args=[arg("op", help="entry name, or a unique part of it (a tensor name: its entry)")])
def node_info(session, args) -> Sections:
    run = session.run
    op = run.op(op_of(args.op.removeprefix("golden:")))
    modules = run.module_path(op.name)
    # a frame holds "File ..., in f, \n code": one line each on screen
    stack = [" ".join(frame.split()) for frame in session.selected.stack.get(op.name, ())]
    info = [("kind", f"{op.kind} ({op.entry.scope})"), ("type", _api_type(op)), ("order", str(op.index)),
            ("modules", " > ".join(modules) or "-")]
    tensors = Table(_TENSOR_HEADERS, [_tensor_row(t) for t in op.tensors])
    producers, p_json = _edge_rows(run, run.producers(op.name), upstream=True)
    consumers, c_json = _edge_rows(run, run.consumers(op.name), upstream=False)
    blocks: list = [("", info), ("tensors", tensors),
                    ("producers", Table(["input", "producer", "its output", "edge"], producers)),
                    ("consumers", Table(["output", "consumer", "its input", "edge"], consumers))]
    if stack:
        blocks.append(("stack", shown_stack(stack)))
    data = {"op": op.name, "order": op.index, "kind": op.kind, "type": _api_type(op), "modules": modules,
            "tensors": [_tensor_json(t) for t in op.tensors], "producers": p_json, "consumers": c_json,
            "stack": list(stack)}
    return Sections(title=op.name, blocks=blocks, data=data)


def _neighbours(session, name: str, upstream: bool) -> Table:
    run = session.run
    op = run.op(op_of(name.removeprefix("golden:")))
    edges = run.producers(op.name) if upstream else run.consumers(op.name)
    rows, docs = _edge_rows(run, edges, upstream)
    what = "inputs" if upstream else "outputs"
    notes = [] if rows else [f"no dataflow edge: {'no input of' if upstream else 'no later entry reads'} "
                             f"{op.name} {'came from an earlier output' if upstream else 'its outputs'}"]
    return Table(["input" if upstream else "output", "producer" if upstream else "consumer",
                  "its output" if upstream else "its input", "edge"], rows,
                 title=f"{op.name}: {what} ({len(rows)} edge{'s' * (len(rows) != 1)})",
                 json_rows=conform(docs, "edges"), notes=notes)


@variant(FRAMEWORK, "list_inputs", summary="The entries whose outputs feed an entry's inputs.",
         example="li Torch.matmul.1.forward", args=[arg("op", help="entry name, or a unique part of it (a tensor name: its entry)")])
def list_inputs(session, args) -> Table:
    return _neighbours(session, args.op, upstream=True)


@variant(FRAMEWORK, "list_outputs", summary="The entries that read an entry's outputs.",
         example="lo Functional.softmax.0.forward", args=[arg("op", help="entry name, or a unique part of it (a tensor name: its entry)")])
def list_outputs(session, args) -> Table:
    return _neighbours(session, args.op, upstream=False)
