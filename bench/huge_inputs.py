"""Huge inputs to the prompt (issue 31): a 1M-op GE graph and a 200k-file dump tree, first start
(no start-up cache) and warm start, this tree's pshell side by side with another tree's.

    python bench/huge_inputs.py --graph-ops 1000000 --files 200000 --runs 3 --against /tmp/base

* graph: a workspace holding only ``ge_proto_00000001_Build.txt`` with ``--graph-ops`` compact
  ops (name, type, one or two inputs, ``_datadump_original_op_names``, one output desc: ~0.5 kB
  an op in GE's text layout, printed once by text_format and replicated with renamed layers);
  written once into ``--workdir/graph_N``.
* tree: the sample generator's ``--files N`` workspace (N tiny dumps, 2N golden ``.npy``, an
  N-op graph) in ``--workdir/files_N``, reused when its manifest matches.

Each run is a fresh ``pshell WS -o OUT -c info`` (the banner a user waits for): "cold" deletes
OUT's start-up cache first, "warm" runs again right after. Wall, CPU of the process tree and
peak summed PSS (``common.run_child``); medians of ``--runs``, the sides alternating round by
round; the load average is printed with each round. Page cache warm (every file read once).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import Series, bench_env, ensure_workspace, run_child, warm_page_cache, workspace_files  # noqa: E402

_LAYER = "@LAYER@"
_TYPES = ["MatMulV2", "Add", "LayerNorm", "Cast", "Mul", "GeluV2", "SoftmaxV2", "RealDiv"]


def _block_text(ops: int) -> str:
    """The text of one block of ``ops`` chained ops named '@LAYER@/...', as GE prints it."""
    from google.protobuf import text_format

    from precision_shell.formats.protoload import ge_ir_pb

    pb = ge_ir_pb()
    graph = pb.GraphDef()
    for i in range(ops):
        op = graph.op.add()
        op.name, op.type, op.id = f"{_LAYER}/op_{i}", _TYPES[i % len(_TYPES)], i
        op.input.append(f"{_LAYER}/op_{i - 1}:0" if i else "@PREV@:0")
        if i % 4 == 3:
            op.input.append(f"{_LAYER}/op_{i - 3}:0")
        names = op.attr["_datadump_original_op_names"].list
        names.s.append(f"{_LAYER}/tf/{op.type.lower()}_{i}".encode())
        names.val_type = 1
        desc = op.output_desc.add()
        desc.name, desc.dtype, desc.layout = "y", pb.DataType.Value("DT_FLOAT16"), "ND"
        desc.shape.dim.extend([16, 1024])
    body = text_format.MessageToString(graph, indent=2)
    return body


def write_graph_workspace(path: Path, n_ops: int, block: int = 100) -> dict:
    """``path/precision_data/npu/debug_0/graph/ge_proto_00000001_Build.txt`` with ``n_ops`` ops
    (a multiple of ``block``); reused when ``path/graph.json`` records the same count."""
    record = path / "graph.json"
    graph_file = path / "precision_data/npu/debug_0/graph/ge_proto_00000001_Build.txt"
    if record.exists() and graph_file.exists() and json.loads(record.read_text()).get("ops") == n_ops:
        return json.loads(record.read_text())
    shutil.rmtree(path, ignore_errors=True)
    graph_file.parent.mkdir(parents=True)
    ops_text = _block_text(block)
    with graph_file.open("w") as out:
        out.write('name: "ge_default_bench"\nversion: 1\ngraph {\n  name: "ge_default_bench_1"\n'
                  '  op {\n    name: "input"\n    type: "Data"\n  }\n')
        previous = "input"
        for layer in range(n_ops // block):
            name = f"model/layer_{layer}"
            out.write(ops_text.replace("@PREV@", previous).replace(_LAYER, name))
            previous = f"{name}/op_{block - 1}"
        out.write('  attr {\n    key: "_session_graph_id"\n    value {\n      s: "0_1"\n    }\n  }\n}\n')
    info = {"ops": n_ops // block * block, "bytes": graph_file.stat().st_size}
    record.write_text(json.dumps(info))
    return info


def _side(label: str, tree: Path | None) -> dict:
    """A pshell to measure; it starts in its own tree (``python -m`` puts the working folder
    first on sys.path, before PYTHONPATH: started here, the other side would run this tree)."""
    env = bench_env()
    tree = (tree or Path(__file__).resolve().parent.parent).resolve()
    env["PYTHONPATH"] = str(tree)
    return {"label": label, "env": env, "cwd": str(tree), "cold": [], "warm": []}


def measure(ws: Path, sides: list[dict], runs: int, out: Path, log=print) -> list[dict]:
    warm_page_cache(workspace_files(ws))
    for round_no in range(runs):
        for k, side in enumerate(sides):
            where = out / f"side{k}"
            shutil.rmtree(where, ignore_errors=True)
            cmd = [sys.executable, "-m", "precision_shell", str(ws), "-o", str(where), "-c", "info"]
            for phase in ("cold", "warm"):
                run = run_child(cmd, env=side["env"], cwd=side["cwd"], wait_detached=True)
                if not run.ok:
                    raise SystemExit(f"{side['label']}: pshell failed:\n{run.stderr.strip()[-2000:]}")
                side[phase].append(run)
        log(f"  {ws.name}: round {round_no + 1} done (load average {os.getloadavg()[0]:.2f})")
    return [{"label": s["label"], **{f"{phase}_{what}": Series([getattr(r, attr) for r in s[phase]]).median
                                     for phase in ("cold", "warm")
                                     for what, attr in (("wall_s", "wall"), ("cpu_s", "tree_cpu"),
                                                        ("pss_mb", "pss_mb"))}}
            for s in sides]


# The session's own start-up in one process, graph left out (a graph child's work is the graph
# index's): CPU seconds of the whole process (all threads) to the prompt, then until the file
# sizes counted after start-up are in. Prints one JSON line.
_SESSION_CHILD = r"""
import json, resource, sys, time
cpu0, wall0 = time.process_time(), time.perf_counter()
from precision_shell.model.session import Session
from precision_shell.model.workspace import discover
imports = time.process_time() - cpu0
ws = discover(sys.argv[1], output=sys.argv[2])
ws.graph_files = []
session = Session(workspace=ws)
session._load()
prompt_cpu, prompt_wall = time.process_time() - cpu0, time.perf_counter() - wall0
getattr(session, "wait_for_sizes", lambda: None)()  # an older pshell: total_bytes stats
total = session.dumps.total_bytes + session.golden.total_bytes
print(json.dumps({"imports_cpu_s": imports, "prompt_cpu_s": prompt_cpu, "prompt_wall_s": prompt_wall,
                  "sizes_cpu_s": time.process_time() - cpu0 - prompt_cpu, "bytes": total,
                  "files": session.dumps.op_file_count + len(session.golden),
                  "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
"""


def measure_session(ws: Path, sides: list[dict], runs: int, out: Path, log=print) -> list[dict]:
    """The session side alone (see ``_SESSION_CHILD``), cold (no start-up cache) and warm."""
    warm_page_cache(workspace_files(ws))
    found = {k: {"cold": [], "warm": []} for k in range(len(sides))}
    for round_no in range(runs):
        for k, side in enumerate(sides):
            where = out / f"session{k}"
            shutil.rmtree(where, ignore_errors=True)
            for phase in ("cold", "warm"):
                run = run_child([sys.executable, "-c", _SESSION_CHILD, str(ws), str(where)], env=side["env"],
                                cwd=side["cwd"])
                if not run.ok:
                    raise SystemExit(f"{side['label']}: session side failed:\n{run.stderr.strip()[-2000:]}")
                found[k][phase].append(dict(json.loads(run.stdout.strip().splitlines()[-1]), pss_mb=run.pss_mb))
        log(f"  {ws.name} session side: round {round_no + 1} done (load average {os.getloadavg()[0]:.2f})")
    return [{"label": side["label"], **{f"{phase}_{what}": Series([r[what] for r in found[k][phase]]).median
                                        for phase in ("cold", "warm")
                                        for what in ("prompt_cpu_s", "prompt_wall_s", "sizes_cpu_s", "pss_mb",
                                                     "peak_rss_mb")},
             "imports_cpu_s": Series([r["imports_cpu_s"] for r in found[k]["cold"]]).median,
             "files": found[k]["cold"][0]["files"], "bytes": found[k]["cold"][0]["bytes"]}
            for k, side in enumerate(sides)]


def _session_table(rows: dict[str, list[dict]]) -> list[str]:
    lines = ["", "Session side alone (in-process, graph left out; CPU of all threads; 'prompt': the session "
             "loaded, 'sizes': then until every file size is read, which the branch base's `info` waits for):", "",
             "| workspace | pshell | cold CPU to prompt s | cold wall to prompt s | then sizes CPU s | "
             "cold peak RSS MB | warm CPU to prompt s | warm sizes CPU s | imports CPU s |",
             "|---|---|---|---|---|---|---|---|---|"]
    for name, sides in rows.items():
        for r in sides:
            lines.append(f"| {name} | {r['label']} | {r['cold_prompt_cpu_s']:.2f} | {r['cold_prompt_wall_s']:.2f} | "
                         f"{r['cold_sizes_cpu_s']:.2f} | {r['cold_peak_rss_mb']:.0f} | {r['warm_prompt_cpu_s']:.2f} | "
                         f"{r['warm_sizes_cpu_s']:.2f} | {r['imports_cpu_s']:.2f} |")
    return lines


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--graph-ops", type=int, default=1_000_000, help="ops of the graph workspace (0: none)")
    p.add_argument("--files", type=int, default=200_000, help="dump files of the tree workspace (0: none)")
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--workdir", default="/work/bench_ws")
    p.add_argument("--out", default=str(Path(__file__).resolve().parent / "out" / "huge"))
    p.add_argument("--against", type=Path, default=None,
                   help="another pshell source tree measured side by side (e.g. the main branch)")
    p.add_argument("--session-only", action="store_true",
                   help="tree: only the session side in-process (no whole `info` with its graph child)")
    opts = p.parse_args(argv)
    out = Path(opts.out).resolve()  # the sides start in their own trees
    out.mkdir(parents=True, exist_ok=True)
    against = opts.against.resolve() if opts.against else None
    sides = [_side("this tree", None)] + ([_side(str(against), against)] if against else [])
    results, session_rows, started = {}, {}, time.perf_counter()
    print(f"load average at start {os.getloadavg()[0]:.2f}", flush=True)
    if opts.graph_ops:
        ws = Path(opts.workdir).resolve() / f"graph_{opts.graph_ops}"
        info = write_graph_workspace(ws, opts.graph_ops)
        print(f"{ws}: {info['ops']:,} ops, {info['bytes'] / 1e6:.0f} MB of graph text", flush=True)
        results[ws.name] = measure(ws, [dict(s, cold=[], warm=[]) for s in sides], opts.runs, out)
    if opts.files:
        ws = ensure_workspace(Path(opts.workdir).resolve(), files=opts.files)
        t = ws.totals
        print(f"{ws.path}: {t['npu_dump_files']:,} dumps, {t['golden_files']:,} goldens", flush=True)
        if not opts.session_only:
            results[ws.name] = measure(ws.path, [dict(s, cold=[], warm=[]) for s in sides], opts.runs, out)
        session_rows[ws.name] = measure_session(ws.path, sides, opts.runs, out)
    lines = ["| workspace | pshell | cold wall s | cold CPU s | cold peak PSS MB | warm wall s | warm CPU s |",
             "|---|---|---|---|---|---|---|"]
    for name, rows in results.items():
        for r in rows:
            lines.append(f"| {name} | {r['label']} | {r['cold_wall_s']:.2f} | {r['cold_cpu_s']:.2f} | "
                         f"{r['cold_pss_mb']:.0f} | {r['warm_wall_s']:.2f} | {r['warm_cpu_s']:.2f} |")
    text = (f"{os.cpu_count()} CPUs; medians of {opts.runs}; load average at end {os.getloadavg()[0]:.2f}; "
            f"elapsed {time.perf_counter() - started:.0f} s\n\n" + "\n".join(lines + _session_table(session_rows)) + "\n")
    (out / "results.json").write_text(json.dumps({**results, "session_side": session_rows}, indent=1))
    (out / "results.md").write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
