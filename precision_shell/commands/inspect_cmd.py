"""Graph inspection: ``ls``/``list_ops``, ``ni``/``node_info``, ``li``/``list_inputs``,
``lo``/``list_outputs`` (product.md §4)."""

from __future__ import annotations

import math
import re
import shutil
from collections import Counter
from pathlib import Path
from typing import Any, Callable

from precision_shell.atomic_write import write_atomic
from precision_shell.commands.registry import arg, command
from precision_shell.commands.results import Message, Sections, Table
from precision_shell.commands.row_schema import conform
from precision_shell.errors import CommandError
from precision_shell.formats.dump_names import escape_op_name
from precision_shell.model.session import Session
from precision_shell.model.tensor_ref import golden_name_of, name_of, op_of, parse_tensor_ref, tensor_name

DOT_TIMEOUT_S = 30


def require_graph(session: Session) -> Any:
    if session.graph is None:
        raise CommandError("no graph loaded: this needs the GE graph ge_proto_*_Build.txt "
                           "(dump with DUMP_GE_GRAPH=2 DUMP_GRAPH_LEVEL=3, or pass --graph FILE)")
    return session.graph


def text_matcher(pattern: str, what: str) -> Callable[[str], bool]:
    """``/regex/`` (``/regex/i`` ignores case) searches; anything else is a case-insensitive
    substring, which is what people type when they half remember a name."""
    if len(pattern) >= 2 and pattern.startswith("/") and (pattern.endswith("/") or pattern.endswith("/i")):
        flags = re.IGNORECASE if pattern.endswith("/i") and len(pattern) >= 3 else 0
        body = pattern[1:-2] if flags else pattern[1:-1]
        try:
            rx = re.compile(body, flags)
        except re.error as exc:
            raise CommandError(f"bad regular expression for {what} {pattern!r}: {exc}") from None
        return lambda text: rx.search(text) is not None
    lowered = pattern.lower()
    return lambda text: lowered in text.lower()


def op_argument(session: Session, text: str) -> Any:
    """The op ``ni``/``li``/``lo`` show for what was pasted: an op name (or a unique part of it),
    a tensor name (its op), or a golden tensor name (the NPU op compared with that golden)."""
    if text.startswith("golden:"):
        escaped = escape_op_name(parse_tensor_ref(text).name)
        for op in require_graph(session).in_exec_order():
            if any(escape_op_name(name) == escaped for name in op.golden_names()):
                return op
        raise CommandError(f"no NPU op is compared with {text}")
    return session.resolve_op(op_of(text))


def check_limit(limit: int | None, session: Session) -> int:
    if limit is None:
        return session.settings.limit
    if limit < 0:
        raise CommandError("-l must be 0 (all) or a positive number")
    return limit


def short_list(items: list[str], width: int = 60) -> str:
    text = ", ".join(items)
    return text if len(text) <= width else text[:width - 3] + "..."


def op_row_json(op: Any, order: int | None = None) -> dict:
    """``ls`` row (commands/row_schema "ops"); ``order``: the op's execution position."""
    return {"order": order, "op": op.name, "type": op.type, "kind": "kernel", "passes": list(op.passes),
            "original_ops": list(op.original_ops), "modules": []}


# ---------------------------------------------------------------------------------------------
# ls

@command("list_ops", aliases=("ls",),
         summary="List ops by name, type, fusion pass, kernel (substring, or /regex/); "
                 "without a filter, an op-type histogram.",
         example="ls\nls -t MatMul\nls -n /^fc[0-9]+/\nls -f TbeCommonRules0FusionPass\nls --fused -l 0\n"
                 "# JSON rows: {op, type, passes, original_ops}; without a filter {type, ops, fused}",
         args=[arg("-n", "--name", metavar="NAME", complete="op", help="op name contains NAME (or /regex/)"),
               arg("-t", "--type", metavar="TYPE", complete="optype", help="op type contains TYPE (or /regex/)"),
               arg("-f", "--pass", dest="pass_", metavar="PASS",
                   help="made by a fusion pass whose name contains PASS (or /regex/)"),
               arg("-k", "--kernel", metavar="KERNEL", help="kernel name contains KERNEL (or /regex/)"),
               arg("--fused", action="store_true", help="only fused ops (several original ops or a pass)"),
               arg("-l", "--limit", type=int, default=None,
                   help="rows to show (0 = all; default: the config limit). JSON has every row")])
def list_ops(session: Session, args: Any) -> Table:
    graph = require_graph(session)
    limit = check_limit(args.limit, session)
    filters: list[Callable[[Any], bool]] = []
    if args.name is not None:
        m_name = text_matcher(args.name, "-n")
        filters.append(lambda op: m_name(op.name))
    if args.type is not None:
        m_type = text_matcher(args.type, "-t")
        filters.append(lambda op: m_type(op.type))
    if args.pass_ is not None:
        m_pass = text_matcher(args.pass_, "-f")
        filters.append(lambda op: any(m_pass(p) for p in op.passes))
    if args.kernel is not None:
        m_kernel = text_matcher(args.kernel, "-k")
        filters.append(lambda op: op.kernel is not None and m_kernel(op.kernel))
    if args.fused:
        filters.append(lambda op: op.is_fused)
    ops = graph.in_exec_order()
    if not filters:
        return _type_histogram(ops, limit)
    hits = [op for op in ops if all(f(op) for f in filters)]
    shown = hits if limit == 0 else hits[:limit]
    multi_graph = len(graph.graphs) > 1
    headers = ["#", "op", "type", "passes", "original ops"] + (["graph"] if multi_graph else [])
    rows = []
    for op in shown:
        row = [op.order, op.key, op.type, ", ".join(op.passes) or "-",
               short_list(op.original_ops) if op.original_ops else "-"]
        rows.append(row + ([op.graph] if multi_graph else []))
    title = f"{len(hits)} of {len(ops)} ops match"
    notes = [] if hits else ["no op matches; `ls` without filters shows the op types"]
    position = {op.key: i for i, op in enumerate(ops)}
    return Table(headers, rows, title=title,
                 json_rows=conform([op_row_json(op, position[op.key]) for op in hits], "ops"),
                 notes=notes, total=len(hits))


def _type_histogram(ops: list[Any], limit: int) -> Table:
    counts = Counter(op.type for op in ops)
    fused = Counter(op.type for op in ops if op.is_fused)
    ranked = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))
    peak = ranked[0][1] if ranked else 1
    shown = ranked if limit == 0 else ranked[:limit]
    rows = [[t, n, fused[t], "#" * max(1, round(n / peak * 30))] for t, n in shown]
    return Table(["type", "ops", "fused", ""], rows,
                 title=f"{len(ops)} ops of {len(counts)} types (filter with -n -t -f -k --fused)",
                 json_rows=conform([{"type": t, "ops": n, "entries": n, "fused": fused[t]} for t, n in ranked],
                                   "op_types"),
                 total=len(ranked))


# ---------------------------------------------------------------------------------------------
# ni

def _num(value: Any) -> str:
    if isinstance(value, float):
        if math.isnan(value):
            return "nan"
        return f"{value:.6g}"
    return "-" if value is None else str(value)


def _shape(shape: Any) -> str:
    return "-" if shape is None else "(" + ", ".join(str(d) for d in shape) + ")"


def _panel_sections(panel: Any, op: str) -> list[tuple[str, Any]]:
    """The ``ni`` blocks; every tensor in them by its printed name (``OP:N``, ``OP:inN``,
    ``golden:OP:N``), so any of them pastes into ``pt``/``cp``."""
    facts = [("type", panel.type), ("graph", f"{panel.graph}  (position {panel.order}, id {panel.id}, "
                                             f"stream {panel.stream_id})"),
             ("kernel", panel.kernel or "-"), ("engine", panel.engine or "-"),
             ("fusion passes", ", ".join(panel.passes) or "-"),
             ("original ops", ", ".join(panel.original_ops) or "-")]
    if panel.role:
        facts.append(("finding", panel.role))
    blocks: list[tuple[str, Any]] = [("", facts)]
    blocks.append(("inputs", Table(
        ["#", "dtype", "format", "shape", "origin", "producer"],
        [[i.index, i.dtype or "-", i.format or "-", _shape(i.shape),
          f"{i.origin_format or '-'} {_shape(i.origin_shape)}",
          f"{tensor_name(i.producer, 'output', i.producer_output)} ({i.producer_type})"
          if i.producer else "(unconnected)"]
         for i in panel.inputs])))
    blocks.append(("outputs", Table(
        ["#", "dtype", "format", "shape", "origin", "golden name", "consumers"],
        [[o.index, o.dtype, o.format, _shape(o.shape), f"{o.origin_format or '-'} {_shape(o.origin_shape)}",
          golden_name_of(f"{o.origin_name}:{o.origin_output_index if o.origin_output_index is not None else o.index}")
          if o.origin_name else "-",
          short_list([tensor_name(c, "input", i) for c, i in o.consumers]) or "-"] for o in panel.outputs])))
    control = []
    if panel.control_inputs:
        control.append(("control in", short_list(panel.control_inputs, 100)))
    if panel.control_outputs:
        control.append(("control out", short_list(panel.control_outputs, 100)))
    if control:
        blocks.append(("control edges", control))
    for dump in panel.dumps:
        rows = []
        for t in dump.tensors:
            s = t.stats
            stat_cells = [_num(s.min), _num(s.max), _num(s.mean), _num(s.std), s.nan, s.pos_inf + s.neg_inf,
                          s.zero] if s is not None else ["-"] * 7
            rows.append([tensor_name(op, t.kind, t.index), t.dtype, f"{t.device_format} {_shape(t.device_shape)}",
                         _shape(t.logical_shape), *stat_cells])
        table = Table(["tensor", "dtype", "device", "logical", "min", "max", "mean", "std", "nan", "inf",
                       "zero"], rows,
                      notes=[f"  {tensor_name(op, t.kind, t.index)}: {t.error}" for t in dump.tensors if t.error]
                      + ([f"  {dump.error}"] if dump.error else []))
        blocks.append((f"dump {dump.path.name}  ({dump.size:,} bytes)", table))
    if panel.golden:
        rows = []
        for g in panel.golden:
            s = g.stats
            stat_cells = [_shape(s.shape), _num(s.min), _num(s.max), _num(s.mean), _num(s.std),
                          s.nan + s.pos_inf + s.neg_inf] if s is not None else [g.error or "-", "", "", "", "", ""]
            rows.append([golden_name_of(g.tensor), tensor_name(op, "output", g.for_output)
                         if g.for_output is not None else "-", *stat_cells])
        blocks.append(("golden", Table(["golden tensor", "compared with", "shape", "min", "max", "mean", "std",
                                        "non-finite"], rows)))
    if panel.metrics:
        keys = ["cosine", "max_abs_error", "mean_abs_error", "max_relative_error", "kl_divergence"]
        rows = [[name_of(m.tensor), golden_name_of(m.golden), *[_num(m.metrics.get(k)) for k in keys]]
                for m in panel.metrics]
        notes = [f"  {name_of(m.tensor)}: {m.reason}" for m in panel.metrics if m.reason]
        blocks.append(("compare", Table(["tensor", "golden", *keys], rows, notes=notes)))
    if panel.attrs is not None:
        blocks.append(("attrs", [(k, short_list([str(v)], 200)) for k, v in panel.attrs.items()]
                       or [("(none)", "")]))
    if panel.notes:
        blocks.append(("notes", panel.notes))
    return blocks


def graph_file_stem(op_name: str) -> str:
    """File-system friendly op name; very long names keep a hash so they stay unique."""
    stem = escape_op_name(op_name).replace(":", "_")
    if len(stem) > 150:
        import hashlib   # (here: `ac` and `ls` import this module; OpenSSL's ~2 ms is for long names)

        stem = stem[:140] + "_" + hashlib.sha1(op_name.encode()).hexdigest()[:8]
    return stem


def render_svg(dot_path, svg_path) -> str | None:
    """Run Graphviz ``dot`` when it is installed; the reason it did not work otherwise."""
    import subprocess   # (here: `!`/pipes and this are its only users, ~3 ms of imports)

    exe = shutil.which("dot")
    if exe is None:
        return "Graphviz `dot` is not on PATH, so no SVG (install graphviz, or open the .dot file " \
               "in any Graphviz viewer)"
    tmp = svg_path.with_name(f".{svg_path.name}.tmp")
    try:
        proc = subprocess.run([exe, "-Tsvg", str(dot_path), "-o", str(tmp)], capture_output=True,
                              timeout=DOT_TIMEOUT_S, check=False)
    except subprocess.TimeoutExpired:
        tmp.unlink(missing_ok=True)
        return f"`dot` took longer than {DOT_TIMEOUT_S} s; no SVG"
    except OSError as exc:
        return f"cannot run `dot` ({exc.strerror or exc}); no SVG"
    if proc.returncode != 0 or not tmp.exists():
        tmp.unlink(missing_ok=True)
        first = (proc.stderr or b"").decode("utf-8", "replace").strip().splitlines()[:1]
        return f"`dot` failed (exit {proc.returncode}{': ' + first[0] if first else ''}); no SVG"
    tmp.replace(svg_path)
    return None


def write_neighbourhood(session: Session, op: Any, depth: int, given: str | None = None) -> dict:
    """The depth-``depth`` neighbourhood as DOT, and as SVG when Graphviz is installed; ``given``:
    the file the user named (``.dot`` or ``.svg``), else ``<output>/graphs/<op>_d<depth>.dot``."""
    from precision_shell.analysis.inspect.neighbourhood import neighbourhood_dot

    hood, text = neighbourhood_dot(session, op.key, depth)
    default = f"graphs/{graph_file_stem(op.key)}_d{depth}.dot"
    dot_path = session.output_path(str(Path(given).with_suffix(".dot")) if given else None, default)
    write_atomic(dot_path, lambda fh: fh.write(text))
    svg_path = dot_path.with_suffix(".svg")
    problem = None
    if given is None or given.endswith(".svg"):
        session.check_writable_location(svg_path)
        problem = render_svg(dot_path, svg_path)
    elif given:
        problem = "a .dot file was asked for (-s FILE.svg also renders it with Graphviz)"
    return {"dot": str(dot_path), "svg": None if problem else str(svg_path), "svg_note": problem,
            "depth": depth, "nodes": hood.nodes, "edges": len(hood.edges)}


def _subgraph_request(value: str | None, depth: int | None) -> tuple[int, str | None] | None:
    """``-s DEPTH`` or ``-s FILE.dot|FILE.svg`` (depth from ``-d``, default 2)."""
    if value is None:
        return None
    if value.lower().endswith((".dot", ".svg")):
        chosen = SUBGRAPH_DEPTH if depth is None else depth
        if chosen < 0:
            raise CommandError("-d DEPTH must be 0 or more")
        return chosen, value
    try:
        chosen = int(value)
    except ValueError:
        raise CommandError(f"-s {value}: give a depth (-s 2) or a file ending .dot or .svg") from None
    if chosen < 0:
        raise CommandError("-s DEPTH must be 0 or more")
    return chosen, None


SUBGRAPH_DEPTH = 2


@command("node_info", aliases=("ni",),
         summary="One op's panel: type, kernel, engine, fusion passes, original framework ops, inputs "
                 "(producers), outputs (consumers), dump files and golden tensors with stats, compare "
                 "metrics when known; -s N writes the depth-N neighbourhood as DOT (+ SVG with Graphviz).",
         example="ni fc1/MatMul\nni MatMul -a\nni fc1/MatMul -s 2\nni fc1/MatMul -s fc1.svg -d 3",
         args=[arg("op", complete="op", help="op name, or a unique part of it (a tensor name: its op; golden:X: the op compared with it)"),
               arg("-a", "--attrs", action="store_true", help="also list every attribute of the op"),
               arg("-s", "--subgraph", metavar="DEPTH|FILE",
                   help="write the ops within DEPTH data edges (either direction) to "
                        "<output>/graphs/<op>_d<DEPTH>.dot, and .svg when Graphviz `dot` is installed; "
                        "or to FILE.dot / FILE.svg (depth -d, default 2); nodes coloured by role and "
                        "cosine, with a legend"),
               arg("-d", "--depth", type=int, metavar="DEPTH",
                   help="the depth of -s FILE (default 2)")])
def node_info(session: Session, args: Any) -> Sections:
    require_graph(session)
    op = op_argument(session, args.op)
    subgraph = _subgraph_request(args.subgraph, args.depth)
    from precision_shell.analysis.inspect.node_panel import node_panel  # numpy: not at start-up

    panel = node_panel(session, op, all_attrs=args.attrs)
    blocks = _panel_sections(panel, op.key)
    data = panel.to_json()
    if subgraph is not None:
        depth, given = subgraph
        files = write_neighbourhood(session, op, depth, given)
        data["subgraph"] = files
        where = [("ops", f"{len(files['nodes'])} within {depth} data edges, {files['edges']} edges"),
                 ("dot", files["dot"]), ("svg", files["svg"] or files["svg_note"])]
        blocks.append(("neighbourhood", where))
    title = f"{op.key} ({op.type})"
    return Sections(title=title, blocks=blocks, data=data)


# ---------------------------------------------------------------------------------------------
# li / lo

def _tree(session: Session, args: Any, direction: str) -> Message:
    graph = require_graph(session)
    op = op_argument(session, args.op)
    if args.depth < 0:
        raise CommandError("-d DEPTH must be 0 (unlimited) or more")
    from precision_shell.analysis.inspect.neighbourhood import op_tree, tree_lines

    rows = op_tree(graph, op.key, direction, args.depth, control=args.control)
    lines = tree_lines(op.key, op.type, rows, direction)
    if not rows:
        lines.append(f"  (no {'producers' if direction == 'inputs' else 'consumers'}"
                     f"{'' if args.control else ' over data edges; -c adds control edges'})")
    return Message(lines, data=conform([_edge_json(r, direction) for r in rows], "edges"))


def _edge_json(row: Any, direction: str) -> dict:
    """A tree row with its two tensors named (``tensor``: the parent's side of the edge)."""
    doc = row.to_json()
    if row.op is not None and row.edge == "data":
        producer, consumer = (row.op, row.parent) if direction == "inputs" else (row.parent, row.op)
        produced, consumed = f"{producer}:output:{row.src_output}", f"{consumer}:input:{row.dst_input}"
        doc["tensor"], doc["other_tensor"] = (consumed, produced) if direction == "inputs" else (produced, consumed)
    return doc


_TREE_ARGS = [arg("op", complete="op", help="op name, or a unique part of it (a tensor name: its op; golden:X: the op compared with it)"),
              arg("-d", "--depth", type=int, default=1, help="levels to follow (0 = all; default 1)"),
              arg("-c", "--control", action="store_true", help="also show control edges (dashed in pictures)")]


@command("list_inputs", aliases=("li",),
         summary="Producer tree of an op: which op output feeds each input, DEPTH levels up.",
         example="li fc1/MatMul\nli fc1/MatMul -d 3 -c", args=_TREE_ARGS)
def list_inputs(session: Session, args: Any) -> Message:
    return _tree(session, args, "inputs")


@command("list_outputs", aliases=("lo",),
         summary="Consumer tree of an op: which ops read each output, DEPTH levels down.",
         example="lo conv1/Conv2D\nlo conv1/Conv2D -d 0", args=_TREE_ARGS)
def list_outputs(session: Session, args: Any) -> Message:
    return _tree(session, args, "outputs")
