"""``fusion``: which ops GE/FE fused, by which pass, from which framework ops; and the pass
statistics of ``fusion_result.json`` (formats.md §3.5, §4)."""

from __future__ import annotations

from typing import Any

from precision_shell.commands.inspect_cmd import short_list, op_row_json, text_matcher
from precision_shell.commands.registry import arg, command
from precision_shell.commands.results import Sections, Table
from precision_shell.errors import CommandError
from precision_shell.model.session import Session

_HELP_JSON = ('JSON (--format json) is one object: {"fused_ops": [{op, type, graph, passes, original_ops}], '
              '"passes": [{pass, kind (graph|ub), match_times, effect_times, repository_hit_times, graph, ops}]}, '
              '"ops" being the fused ops of the loaded graph that name the pass.')


def _fused_ops(session: Session, args: Any) -> list[Any]:
    graph = session.graph
    if graph is None:
        return []
    match_graph = text_matcher(args.graph, "-g") if args.graph is not None else None
    match_pass = text_matcher(args.pass_, "-p") if args.pass_ is not None else None
    match_op = text_matcher(args.op, "-n") if args.op is not None else None
    out = []
    for op in graph.in_exec_order():
        if not op.is_fused:
            continue
        if match_graph is not None and not match_graph(op.graph):
            continue
        if match_pass is not None and not any(match_pass(p) for p in op.passes):
            continue
        if match_op is not None and not (match_op(op.key) or any(match_op(o) for o in op.original_ops)):
            continue
        out.append(op)
    return out


def _fusion_graph_matches(graph_id: str, ge_graphs: list[str], match) -> bool:
    """-g names a GE graph or a fusion_result.json id ("0_1"). GE does not link the two in the
    files we read, but GE graph names end in the graph id (``ge_default_<time>_1``) and the
    fusion id is ``<session>_<graph>``, so a matched GE graph selects the ids ending like it."""
    if match(graph_id):
        return True
    tail = graph_id.rsplit("_", 1)[-1]
    return any(match(name) and name.rsplit("_", 1)[-1] == tail for name in ge_graphs)


def _pass_rows(session: Session, args: Any, fused: list[Any]) -> list[dict]:
    """One row per pass per fusion_result.json graph, filtered like the ops."""
    match_graph = text_matcher(args.graph, "-g") if args.graph is not None else None
    match_pass = text_matcher(args.pass_, "-p") if args.pass_ is not None else None
    ops_by_pass: dict[str, list[str]] = {}
    for op in fused:
        for p in op.passes:
            ops_by_pass.setdefault(p, []).append(op.key)
    rows = []
    ge_graphs = [g.name for g in session.graph.graphs] if session.graph is not None else []
    for stats in session.fusion:
        if match_graph is not None and not _fusion_graph_matches(str(stats.graph_id), ge_graphs, match_graph):
            continue
        for p in stats.passes:
            if match_pass is not None and not match_pass(p.name):
                continue
            if args.op is not None and p.name not in ops_by_pass:
                continue   # -n narrows the passes to those behind the matched ops
            rows.append({"pass": p.name, "kind": p.kind, "match_times": p.match_times,
                         "effect_times": p.effect_times, "repository_hit_times": p.repository_hit_times,
                         "graph": str(stats.graph_id), "ops": ops_by_pass.get(p.name, [])})
    rows.sort(key=lambda r: (r["graph"], r["kind"] != "graph", -r["effect_times"], r["pass"]))
    return rows


@command("fusion",
         summary="Fused ops with the passes that made them and the framework ops inside, per graph; "
                 "then the fusion_result.json graph-fusion and UB-fusion passes with match/effect counts.",
         example="fusion\nfusion -p MatMul\nfusion -n conv1\nfusion --format json\n# " + _HELP_JSON,
         args=[arg("-g", "--graph", metavar="GRAPH",
                   help="GE graph name or fusion_result.json graph id contains GRAPH (or /regex/)"),
               arg("-p", "--pass", dest="pass_", metavar="PASS", help="pass name contains PASS (or /regex/)"),
               arg("-n", "--op", metavar="OP", complete="op",
                   help="fused op name, or one of its original op names, contains OP (or /regex/)")])
def fusion(session: Session, args: Any) -> Sections:
    if session.graph is None and not session.fusion:
        raise CommandError("no graph and no fusion_result.json loaded: nothing to show "
                           "(pass --graph FILE and/or --fusion FILE)")
    fused = _fused_ops(session, args)
    passes = _pass_rows(session, args, fused)
    blocks: list[tuple[str, Any]] = []
    graphs = [g.name for g in session.graph.graphs] if session.graph is not None else []
    for name in graphs:
        ops = [op for op in fused if op.graph == name]
        if not ops and (args.graph is not None or args.pass_ is not None or args.op is not None):
            continue
        rows = [[op.order, op.key, op.type, ", ".join(op.passes) or "-",
                 ", ".join(op.original_ops) if op.original_ops else "-"] for op in ops]
        blocks.append((f"graph {name}: {len(ops)} fused op{'s' * (len(ops) != 1)}",
                       Table(["#", "op", "type", "passes", "original ops"], rows)))
    if session.graph is None:
        blocks.append(("fused ops", ["(no graph loaded: ops unknown; pass --graph FILE)"]))
    if session.fusion:
        rows = [[r["graph"], r["kind"], r["pass"], r["match_times"], r["effect_times"],
                 "-" if r["repository_hit_times"] is None else r["repository_hit_times"],
                 short_list(r["ops"], 50) or "-"] for r in passes]
        blocks.append(("fusion_result.json passes", Table(
            ["graph", "kind", "pass", "matched", "effective", "repository hits", "fused ops (loaded graph)"], rows)))
    else:
        blocks.append(("fusion_result.json", ["(not loaded: copy it from the training folder to "
                                              "precision_data/fusion/, or pass --fusion FILE)"]))
    data = {"fused_ops": [{**op_row_json(op), "graph": op.graph} for op in fused], "passes": passes}
    title = f"{len(fused)} fused op{'s' * (len(fused) != 1)}, {len(passes)} pass record{'s' * (len(passes) != 1)}"
    return Sections(title=title, blocks=blocks, data=data)
