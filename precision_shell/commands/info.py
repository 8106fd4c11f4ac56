"""``info``: what the workspace holds, what is active, what is missing."""

from __future__ import annotations

import os
from importlib.util import find_spec
from pathlib import Path

from precision_shell import __version__
from precision_shell.commands.registry import arg, command
from precision_shell.commands.results import Sections
from precision_shell.errors import FormatError
from precision_shell.model.session import Session


def human_bytes(n: int) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if n < 1024 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} TB"


def metrics_kernel() -> str:
    """Which path computes compare metrics (analysis/compare/fused_metrics.py decides the same way), found
    without importing the kernel: it pulls in numpy, which start-up does not load."""
    if os.environ.get("PSHELL_NO_EXT") == "1":
        return "numpy (PSHELL_NO_EXT=1)"
    if find_spec("precision_shell.analysis.compare._fused_metrics") is None:
        return "numpy (the C kernel was not built: reinstall with a C compiler)"
    return "c-extension"


def count_overflow_records(session: Session) -> tuple[int, list[str]]:
    """Decoded Opdebug records in the overflow dump and beside the active dumps."""
    from precision_shell.formats.opdebug import read_opdebug  # numpy: only when there are any

    records, errors = 0, []
    for f in session.overflow_dumps.opdebug + session.dumps.opdebug:
        try:
            records += len(read_opdebug(f.path))
        except FormatError as exc:
            errors.append(str(exc))
    return records, errors


def _rel(session: Session, path) -> str:
    """``path`` as the workspace's own relative path when inside it (a cached entry holds it
    resolved), else as it is."""
    try:
        return str(Path(os.path.realpath(path)).relative_to(os.path.realpath(session.workspace.root)))
    except ValueError:
        return str(path)


_COUNTING = "size being counted; `info --sizes` waits for it"


def _size_text(n: int | None) -> str:
    """A byte total, or what is not known yet (a big tree's sizes are read after start-up)."""
    return _COUNTING if n is None else human_bytes(n)


@command("info", summary="Workspace summary: graphs, runs, devices, steps, counts, sizes, what is missing.",
         example="info\ninfo --sizes   (waits for the file sizes of a big tree)\n"
                 "info --format json   (batch: pshell WS -c info --format json)",
         args=[arg("--sizes", action="store_true",
                   help="wait for the byte totals when a big tree's file sizes are still being counted")])
def info(session: Session, args) -> Sections:
    ws = session.workspace
    if args.sizes:
        session.wait_for_sizes()
    graph = session.graph
    graphs = []
    if graph is not None:
        graphs = [{"name": g.name, "ops": g.ops, "fused_ops": g.fused_ops, "passes": len(g.passes),
                   "source": g.source} for g in graph.graphs]
    overflow_records, overflow_errors = count_overflow_records(session)
    devices = sorted({s.device for s in ws.dump_sets if s.device})
    steps = sorted({s.step for s in ws.dump_sets if s.step}, key=lambda s: (len(s), s))
    dumps = session.dumps
    data = {
        "workspace": str(ws.precision_data or ws.root),
        "graphs": graphs,
        "ops": graph.op_count if graph is not None else 0,
        "npu_dump_files": dumps.op_file_count,
        "npu_dump_bytes": dumps.known_bytes,    # null: still being counted
        "golden_bytes": session.golden.known_bytes,
        "golden_tensors": len(session.golden),
        "overflow_records": overflow_records,
        "fusion_graphs": len(session.fusion),
        "runs": ws.runs,
        "devices": devices,
        "steps": steps,
        "active": None if session.active is None else {
            "run": session.active.run, "time": session.active.time, "device": session.active.device,
            "model": session.active.model, "step": session.active.step,
            "path": str(session.active.path)},
        "output_dir": str(ws.output_dir),
        "metrics_kernel": metrics_kernel(),
        "missing": list(ws.missing),
        "errors": session.load_errors + dumps.warnings + overflow_errors,
    }

    rows: list[tuple[str, str]] = []
    for g in graphs:
        rows.append(("graph", f"{g['name']}  {g['ops']:,} ops ({g['fused_ops']} fused, "
                              f"{g['passes']} passes)  [{_rel(session, Path(g['source']))}]"))
    if session.active is not None:
        rows.append(("npu", f"{session.active.label}: {dumps.op_file_count:,} dump files "
                            f"({_size_text(data['npu_dump_bytes'])})"))
        if len(ws.dump_sets) > 1:
            rows.append(("", f"{len(ws.dump_sets)} dump sets: runs {', '.join(ws.runs)}; "
                             f"devices {', '.join(devices) or '-'}; steps {', '.join(steps) or '-'}"))
    if ws.golden_dir is not None:
        rows.append(("golden", f"{len(session.golden):,} tensors ({_size_text(data['golden_bytes'])}) "
                               f"in {_rel(session, ws.golden_dir)}"))
    if ws.overflow_dirs or dumps.opdebug:
        where = ", ".join(_rel(session, d) for d in ws.overflow_dirs) or "beside the dumps"
        rows.append(("overflow", f"{overflow_records} debug record{'s' * (overflow_records != 1)} ({where})"))
    if ws.fusion_file is not None:
        n_pass = sum(len(g.passes) for g in session.fusion)
        rows.append(("fusion", f"{ws.fusion_file.name}: {len(session.fusion)} graph"
                               f"{'s' * (len(session.fusion) != 1)}, {n_pass} passes"))
    rows.append(("output", str(ws.output_dir)))
    rows.append(("metrics", data["metrics_kernel"]))
    blocks: list = [("", rows)]
    if ws.missing:
        blocks.append(("missing", list(ws.missing)))
    if data["errors"]:
        blocks.append(("errors", list(data["errors"])))
    title = f"precision-shell {__version__} — workspace {data['workspace']}"
    return Sections(title=title, blocks=blocks, data=data)
