"""``info`` and ``ni`` on MindSpore graph-mode dumps; every other command runs its framework
variant (:meth:`.registry.Registry.inherit`): a MindSpore iteration is a framework run.
"""

from __future__ import annotations

import os
from typing import Any

from precision_shell import __version__
from precision_shell.commands.framework_inspect import node_info as framework_node_info
from precision_shell.commands.registry import REGISTRY
from precision_shell.commands.results import Sections

KIND = "mindspore-graph"
REGISTRY.inherit(KIND, "framework")
variant = REGISTRY.variant
_FRAMES_SHOWN = 6


def _iteration_text(rank) -> str:
    it = rank.dump.iteration
    return f"{it.rank.name} {it.net} graph {it.graph_id} iteration {it.iteration}"


def _tree(dump) -> dict[str, Any]:
    """What the reader found in a dump: ranks, nets, graphs, iterations, counts, problems."""
    ranks = [r for r in dump.ranks]
    its = [r.dump.iteration for r in ranks]
    first = ranks[0].dump
    meta = its[0].rank.metadata
    return {
        "root": str(dump.root), "device_target": meta.get("device_target"), "ms_version": meta.get("ms_version"),
        "ranks": sorted({it.rank.name for it in its}), "nets": sorted({it.net for it in its}),
        "graphs": sorted({it.graph_id for it in its}), "iterations": sorted({it.iteration for it in its}),
        "kernels": len(first.kernels), "parameters": len(first.parameters),
        "kernel_files": sum(len(k.files) for k in first.kernels),
        "renumbered": sum(k.matched == "renumbered" for k in first.kernels),
        "unmatched": sum(k.matched == "none" for k in first.kernels),
        "graph": first.graph.path if first.graph is not None else None,
        "source_lines": bool(first.graph is not None and (first.graph.sources or any(
            n.trace for n in first.graph.nodes.values()))),
        "order": first.order_source,
    }


def _describe(tree: dict[str, Any]) -> list[tuple[str, str]]:
    rows = [("device", f"{tree['device_target'] or '?'}  MindSpore {tree['ms_version'] or '?'}"),
            ("tree", f"{', '.join(tree['ranks'])} / {', '.join(tree['nets'])} / graph "
                     f"{', '.join(map(str, tree['graphs']))} / iterations "
                     f"{', '.join(map(str, tree['iterations']))}"),
            ("kernels", f"{tree['kernels']:,} kernels ({tree['kernel_files']:,} files), {tree['parameters']:,} "
                        f"parameter files per iteration; order from "
                        f"{'execution_order/' if tree['order'] == 'execution_order' else 'file timestamps'}")]
    names = []
    if tree["renumbered"]:
        names.append(f"{tree['renumbered']} renumbered on disk (paired by type and order)")
    if tree["unmatched"]:
        names.append(f"{tree['unmatched']} match no graph op")
    if names:
        rows.append(("file names", "; ".join(names)))
    rows.append(("graph", (f"{tree['graph']}" + ("" if tree["source_lines"] else " (no source lines)"))
                 if tree["graph"] else "none: no dataflow edges"))
    return rows


@variant(KIND, "info", summary="Dump summary: the MindSpore dump tree (ranks, net, graph, iterations), "
                               "kernels, graph and execution order, the golden and its pairing, output folder.")
def info(session, args) -> Sections:
    target = session.target
    tree = _tree(target)
    run = session.run if session.run_built else None
    sel = session.selected
    data: dict[str, Any] = {"kind": KIND, "workspace": str(target.root), "target": tree, "active": {
        "rank": sel.location.rank, "iteration": sel.location.step, "path": sel.location.path,
        "ops": len(sel.entries)}, "edges": len(run.edges) if run else None,
        "golden": None, "output_dir": str(session.workspace.output_dir), "errors": list(session.load_errors)}
    rows = [("target", str(target.root)), *_describe(tree),
            ("active", f"{_iteration_text(sel)}: {len(sel.entries):,} entries" + (
                f"; {len(run.edges):,} dataflow edges (graph)" if run else ""))]
    blocks: list = [("", rows)]
    if session.golden_dump is not None:
        gtree = _tree(session.golden_dump)
        golden = session.golden_rank
        g_rows = [("golden", str(session.golden_dump.root)), *_describe(gtree)]
        pairing = None
        if golden is not None:
            mine = {k.full_name for k in sel.dump.kernels}
            theirs = {k.full_name for k in golden.dump.kernels}
            pairing = {"golden_iteration": _iteration_text(golden), "paired": len(mine & theirs),
                       "target_only": sorted(mine - theirs, key=[k.full_name for k in sel.dump.kernels].index),
                       "golden_only": sorted(theirs - mine, key=[k.full_name for k in golden.dump.kernels].index)}
            g_rows.append(("pairing", f"{_iteration_text(golden)}: {pairing['paired']:,} kernels by full name; "
                                      f"{len(pairing['target_only'])} target only, {len(pairing['golden_only'])} "
                                      f"golden only"))
        else:
            g_rows.append(("pairing", "no golden iteration for the active one"))
        blocks.append(("golden", g_rows))
        if pairing and (pairing["target_only"] or pairing["golden_only"]):
            blocks.append(("one side only", [f"target: {n}" for n in pairing["target_only"]]
                           + [f"golden: {n}" for n in pairing["golden_only"]]))
        data["golden"] = {**gtree, "pairing": pairing}
    else:
        blocks.append(("missing", ["golden: no golden dump (pass --golden GOLDEN)"]))
    blocks.append(("", [("output", str(session.workspace.output_dir))]))
    if data["errors"]:
        blocks.append(("errors", data["errors"]))
    return Sections(title=f"precision-shell {__version__} — MindSpore graph-mode dump {target.root}",
                    blocks=blocks, data=data)


@variant(KIND, "node_info", summary="One kernel: type, cell scopes, source line, tensors (dtype, shape, "
                                    "file), scalar attributes, producers and consumers from the graph.",
         example="ni Softmax-op0\nni fc2-Dense/MatMul-op0")
def node_info(session, args) -> Sections:
    panel = framework_node_info(session, args)
    run = session.run
    op = run.op(panel.data["op"])
    frames = list(session.selected.stack.get(op.name, ()))
    line = run.source_line(op.name)
    attrs = [leaf for leaf in op.entry.leaves if not leaf.is_tensor]
    blocks: list = []
    for heading, block in panel.blocks:
        if heading == "":
            block = [*block[:1], ("type", op.entry.op), *block[2:], ("source", line or "-")]
        if heading == "stack":    # innermost last: the user's line is near the end
            hidden = len(frames) - _FRAMES_SHOWN
            block = ([f"... {hidden} outer frames"] if hidden > 0 else []) + frames[-_FRAMES_SHOWN:]
        blocks.append((heading, block))
        if heading == "tensors" and attrs:
            blocks.append(("scalar inputs (graph constants)",
                           [f"{leaf.path.replace('input.', 'in')} = {leaf.value!r} ({leaf.dtype_raw or leaf.type})"
                            for leaf in attrs]))
    data = {**panel.data, "type": op.entry.op, "source": line,
            "scalar_inputs": [{"input": leaf.path, "value": leaf.value, "dtype": leaf.dtype_raw} for leaf in attrs],
            "file_name": os.path.basename(op.tensors[0].leaf.file) if op.tensors and op.tensors[0].leaf.file else None}
    return Sections(title=panel.title, blocks=blocks, data=data)
