"""Find the parts of a training workspace on disk (product.md §2, formats.md §5).

Discovery only looks at directory entries: no dump is opened here, so start-up stays fast on
workspaces with tens of thousands of files.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path

from precision_shell.errors import FormatError
from precision_shell.formats.dump_names import parse_dump_name

_DIGIT_DIR = re.compile(r"[0-9]")
_LEVELS = ("time", "device", "model", "model_id", "step")


@dataclass(frozen=True)
class DumpSet:
    """One leaf folder of binary dumps: a run's time/device/model/model_id/step."""

    run: str
    path: Path
    time: str = ""
    device: str = ""
    model: str = ""
    model_id: str = ""
    step: str = ""

    @property
    def label(self) -> str:
        parts = [f"run {self.run}"]
        if self.time:
            parts.append(f"time {self.time}")
        if self.device:
            parts.append(f"device {self.device}")
        if self.model:
            parts.append(f"model {self.model}")
        if self.step:
            parts.append(f"step {self.step}")
        return ", ".join(parts)


@dataclass
class Workspace:
    root: Path
    precision_data: Path | None
    dump_sets: list[DumpSet] = field(default_factory=list)
    graph_files: list[Path] = field(default_factory=list)
    overflow_dirs: list[Path] = field(default_factory=list)
    golden_dir: Path | None = None
    fusion_file: Path | None = None
    compare_csvs: list[Path] = field(default_factory=list)
    output_dir: Path = Path("pshell_out")
    missing: list[str] = field(default_factory=list)

    @property
    def runs(self) -> list[str]:
        return sorted({s.run for s in self.dump_sets})

    def default_dump_set(self, run: str | None = None) -> DumpSet | None:
        """Newest time, first device, first step of the run (first run when not given)."""
        sets = [s for s in self.dump_sets if run is None or s.run == run]
        if not sets:
            return None
        run = run or sorted(sets, key=lambda s: _natural(s.run))[0].run
        sets = [s for s in sets if s.run == run]
        newest = max(s.time for s in sets)
        sets = [s for s in sets if s.time == newest]
        return sorted(sets, key=lambda s: (_natural(s.device), _natural(s.step), s.model))[0]


def _natural(text: str) -> tuple:
    return tuple(int(p) if p.isdigit() else p for p in re.split(r"(\d+)", text))


def _has_dump_files(path: Path) -> bool:
    try:
        with os.scandir(path) as it:
            for entry in it:
                if entry.is_file() and (parse_dump_name(entry.name) or entry.name.isdigit()):
                    return True
    except OSError:
        return False
    return False


def find_dump_leaves(root: Path, max_depth: int = 8) -> list[Path]:
    """Every folder under ``root`` (itself included) that directly holds dump files."""
    leaves: list[Path] = []
    stack = [(root, 0)]
    while stack:
        folder, depth = stack.pop()
        if _has_dump_files(folder):
            leaves.append(folder)
        if depth >= max_depth:
            continue
        try:
            subdirs = [Path(e.path) for e in os.scandir(folder) if e.is_dir()]
        except OSError:
            continue
        stack.extend((d, depth + 1) for d in subdirs)
    return sorted(leaves)


def level_labels(dump_root: Path, folder: Path) -> dict[str, str]:
    """time/device/model/model_id/step of a leaf folder below ``dump_root`` (formats.md §5), or
    {} when the folder is not at that depth. An overflow root's own ``dump/`` level is skipped."""
    rel = folder.relative_to(dump_root).parts
    if len(rel) == len(_LEVELS) + 1 and rel[0] == "dump":
        rel = rel[1:]
    return dict(zip(_LEVELS, rel)) if len(rel) == len(_LEVELS) else {}


def dump_sets_under(dump_root: Path, run: str) -> list[DumpSet]:
    """Label each leaf below ``dump_root`` by the vendor levels time/device/model/model_id/step."""
    sets = []
    for leaf in find_dump_leaves(dump_root):
        rel = leaf.relative_to(dump_root).parts
        labels = dict(zip(_LEVELS, rel)) if len(rel) == len(_LEVELS) else {}
        if not labels and rel:
            # Shorter trees (MindSpore, hand-made folders): keep the first level as time when it
            # is a timestamp, the rest joined as the model label.
            if _DIGIT_DIR.match(rel[0]):
                labels = {"time": rel[0], "model": "/".join(rel[1:])}
            else:
                labels = {"model": "/".join(rel)}
        sets.append(DumpSet(run=run, path=leaf, **labels))
    return sets


def _first_existing(*paths: Path) -> Path | None:
    return next((p for p in paths if p.exists()), None)


def _check_dir(path: str | os.PathLike, what: str) -> Path:
    p = Path(path)
    if not p.exists():
        raise FormatError(p, f"{what} does not exist")
    if not p.is_dir():
        raise FormatError(p, f"{what} is not a directory")
    if not os.access(p, os.R_OK | os.X_OK):
        raise FormatError(p, f"{what} is not readable")
    return p


def discover(path: str | os.PathLike | None = None, *, npu: str | None = None,
             golden: str | None = None, graph: str | None = None, overflow: str | None = None,
             fusion: str | None = None, output: str | None = None) -> Workspace:
    """Locate every part of the workspace; what is absent is listed in ``missing``."""
    from precision_shell.formats.graph_files import find_graph_files

    root = _check_dir(path or ".", "workspace")
    if (root / "precision_data").is_dir():
        pd: Path | None = root / "precision_data"
    elif root.name == "precision_data" or any((root / d).is_dir() for d in ("npu", "tf", "overflow")):
        pd = root
    else:
        pd = None  # a raw NPU dump folder
    ws = Workspace(root=root, precision_data=pd)

    if npu:
        npu_dir = _check_dir(npu, "NPU dump folder")
        ws.dump_sets = dump_sets_under(npu_dir, "npu")
    elif pd is not None:
        for run_dir in sorted((pd / "npu").glob("debug_*"), key=lambda p: _natural(p.name)):
            if (run_dir / "dump").is_dir():
                ws.dump_sets += dump_sets_under(run_dir / "dump", run_dir.name)
    else:
        ws.dump_sets = dump_sets_under(root, "npu")

    if graph:
        g = Path(graph)
        if not g.is_file():
            raise FormatError(g, "graph file does not exist")
        ws.graph_files = [g]
    elif pd is not None:
        for run_dir in sorted((pd / "npu").glob("debug_*"), key=lambda p: _natural(p.name)):
            if (run_dir / "graph").is_dir():
                ws.graph_files += find_graph_files(run_dir / "graph")
                break  # one run's graphs describe the model; debug_1 is usually the same model

    if overflow:
        ws.overflow_dirs = [_check_dir(overflow, "overflow folder")]
    elif pd is not None and (pd / "overflow").is_dir():
        ws.overflow_dirs = [pd / "overflow"]

    if golden:
        ws.golden_dir = _check_dir(golden, "golden folder")
    elif pd is not None:
        ws.golden_dir = _first_existing(pd / "tf" / "dump")

    if fusion:
        f = Path(fusion)
        if not f.is_file():
            raise FormatError(f, "fusion result file does not exist")
        ws.fusion_file = f
    else:
        candidates = [root / "fusion_result.json"]
        if pd is not None:
            candidates.insert(0, pd / "fusion" / "fusion_result.json")
        ws.fusion_file = _first_existing(*candidates)

    if pd is not None:
        ws.compare_csvs = sorted((pd / "temp" / "vector_compare").glob("*/result_*.csv"))

    if output:
        ws.output_dir = Path(output)
    elif pd is not None:
        ws.output_dir = pd / "temp" / "pshell"
    else:
        # A raw dump folder: ./pshell_out, unless the current folder is inside the dumps (pshell
        # never writes there); then a sibling folder next to the dumps.
        ws.output_dir = Path.cwd() / "pshell_out"
        if ws.output_dir.resolve().is_relative_to(root.resolve()):
            ws.output_dir = root.resolve().parent / f"{root.resolve().name}_pshell"

    ws.missing = _missing_parts(ws)
    return ws


def _missing_parts(ws: Workspace) -> list[str]:
    """What is absent, each with how to produce it (shown once at start-up)."""
    missing = []
    if not ws.dump_sets:
        missing.append("npu dumps: none found (enable dump_mode=all in the NPU run, or pass --npu DIR)")
    if not ws.graph_files:
        missing.append("graph: no ge_proto_*_Build.txt (set DUMP_GE_GRAPH=2 DUMP_GRAPH_LEVEL=3, or pass --graph FILE)")
    if ws.golden_dir is None:
        missing.append("golden: no tf/dump/*.npy (dump the CPU/GPU run, or pass --golden DIR)")
    if not ws.overflow_dirs:
        missing.append("overflow: no overflow/ dump (run with overflow detection, or pass --overflow DIR)")
    if ws.fusion_file is None:
        missing.append("fusion: no fusion_result.json (pass --fusion FILE)")
    return missing
