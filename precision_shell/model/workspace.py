"""Find the parts of a training workspace on disk (product.md §2, formats.md §5).

Discovery only looks at directory entries: no dump is opened here, so start-up stays fast on
workspaces with tens of thousands of files.
"""

from __future__ import annotations

import os
import re
import stat
from dataclasses import dataclass, field
from pathlib import Path

from precision_shell.errors import FormatError
from precision_shell.formats.dump_names import is_dump_name
from precision_shell.formats.input_files import NOT_REGULAR, cannot_list
from precision_shell.model.folder_listing import folder_stamp, forget_entries, read_entries, remember_entries

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
    output_given: bool = False     # -o DIR: the user chose it (a symlink there is theirs to follow)
    missing: list[str] = field(default_factory=list)
    # folders that could not be listed, graph paths that are folders: one line each, shown at
    # start-up, so an unreadable folder is not taken for an empty one
    warnings: list[str] = field(default_factory=list)

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


def _scan_folder(folder: Path, warnings: list[str]) -> tuple[bool, list[Path]]:
    """(whether ``folder`` directly holds dump files, its subfolders, linked ones first); a
    folder that cannot be listed adds a line to ``warnings``."""
    has_dumps, linked, subdirs = False, [], []
    stamp = folder_stamp(folder)
    try:
        names, others = read_entries(folder)
    except OSError as exc:
        warnings.append(cannot_list(folder, exc))
        return False, []
    has_dumps = any(map(is_dump_name, names)) or any(map(str.isdigit, names))
    for entry in others:  # folders, links, special files: few
        try:
            if entry.is_dir():
                (linked if entry.is_symlink() else subdirs).append(Path(entry.path))
            elif not has_dumps and (is_dump_name(entry.name) or entry.name.isdigit()):
                has_dumps = entry.is_file()
        except OSError:  # the entry vanished or cannot be stat'ed: the index reports it
            continue
    if has_dumps:  # its dump listing reads the same entries: one pass over the folder
        remember_entries(folder, stamp, names, others)
    # links first: popped last, so a folder reached both ways is labelled by its real path
    return has_dumps, linked + subdirs


def find_dump_leaves(root: Path, max_depth: int = 8, warnings: list[str] | None = None) -> list[Path]:
    """Every folder under ``root`` (itself included) that directly holds dump files; folders
    that cannot be listed are named in ``warnings``."""
    warnings = [] if warnings is None else warnings
    leaves: list[Path] = []
    stack, seen = [(root, 0)], set()
    while stack:
        folder, depth = stack.pop()
        real = os.path.realpath(folder)
        if real in seen:  # a link to a folder listed already (or above it): one dump set, not two
            warnings.append(f"{folder}: symbolic link to {real}, a folder listed already; not followed")
            continue
        seen.add(real)
        has_dumps, subdirs = _scan_folder(folder, warnings)
        if has_dumps:
            leaves.append(folder)
        if depth < max_depth:
            stack.extend((d, depth + 1) for d in subdirs)
    return sorted(leaves)


def level_labels(dump_root: Path, folder: Path) -> dict[str, str]:
    """time/device/model/model_id/step of a leaf folder below ``dump_root`` (formats.md §5), or
    {} when the folder is not at that depth. An overflow root's own ``dump/`` level is skipped."""
    rel = folder.relative_to(dump_root).parts
    if len(rel) == len(_LEVELS) + 1 and rel[0] == "dump":
        rel = rel[1:]
    return dict(zip(_LEVELS, rel)) if len(rel) == len(_LEVELS) else {}


def dump_sets_under(dump_root: Path, run: str, warnings: list[str] | None = None) -> list[DumpSet]:
    """Label each leaf below ``dump_root`` by the vendor levels time/device/model/model_id/step."""
    sets = []
    for leaf in find_dump_leaves(dump_root, warnings=warnings):
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


def _exists(path: Path, warnings: list[str], folder: bool = False) -> bool:
    """``path.exists()`` (``is_dir()`` with ``folder``), except that a path that cannot be
    looked at (a parent folder without search permission) is named in ``warnings`` instead of
    being taken for absent."""
    try:
        st = os.stat(path)
    except (FileNotFoundError, NotADirectoryError):
        return False
    except OSError as exc:
        warnings.append(f"{path}: cannot access ({exc.strerror or exc})")
        return False
    return stat.S_ISDIR(st.st_mode) or not folder


def _first_existing(warnings: list[str], *paths: Path) -> Path | None:
    return next((p for p in paths if _exists(p, warnings)), None)


def _check_dir(path: str | os.PathLike, what: str) -> Path:
    p = Path(path)
    if not p.exists():
        raise FormatError(p, f"{what} does not exist")
    if not p.is_dir():
        raise FormatError(p, f"{what} is not a directory")
    try:
        os.scandir(p).close()
    except OSError as exc:
        raise FormatError(p, f"{what}: cannot list folder ({exc.strerror or exc})") from None
    return p


def _check_file(path: str | os.PathLike, what: str) -> Path:
    p = Path(path)
    if p.is_dir():
        raise FormatError(p, f"is a directory, not a {what}")
    if not p.exists():
        raise FormatError(p, f"{what} does not exist")
    if not p.is_file():
        raise FormatError(p, f"{what} is {NOT_REGULAR}")
    return p


def _runs(pd: Path, warnings: list[str]) -> list[Path]:
    """The ``npu/debug_*`` run folders, in natural order."""
    npu = pd / "npu"
    try:
        with os.scandir(npu) as it:
            names = [e.name for e in it if e.name.startswith("debug_")]
    except FileNotFoundError:
        return []
    except OSError as exc:
        warnings.append(cannot_list(npu, exc))
        return []
    return sorted((npu / n for n in names), key=lambda p: _natural(p.name))


def discover(path: str | os.PathLike | None = None, *, npu: str | None = None,
             golden: str | None = None, graph: str | None = None, overflow: str | None = None,
             fusion: str | None = None, output: str | None = None) -> Workspace:
    """Locate every part of the workspace; what is absent is listed in ``missing``."""
    from precision_shell.formats.graph.files import find_graph_files

    forget_entries()  # a former discovery's folders
    root = _check_dir(path or ".", "workspace")
    if (root / "precision_data").is_dir():
        pd: Path | None = root / "precision_data"
    elif root.name == "precision_data" or any((root / d).is_dir() for d in ("npu", "tf", "overflow")):
        pd = root
    else:
        pd = None  # a raw NPU dump folder
    ws = Workspace(root=root, precision_data=pd)
    runs = _runs(pd, ws.warnings) if pd is not None else []

    if npu:
        npu_dir = _check_dir(npu, "NPU dump folder")
        ws.dump_sets = dump_sets_under(npu_dir, "npu", ws.warnings)
    elif pd is not None:
        for run_dir in runs:
            if _exists(run_dir / "dump", ws.warnings, folder=True):
                ws.dump_sets += dump_sets_under(run_dir / "dump", run_dir.name, ws.warnings)
    else:
        ws.dump_sets = dump_sets_under(root, "npu", ws.warnings)

    dump_problems = list(ws.warnings)
    if graph:
        ws.graph_files = [_check_file(graph, "graph file")]
    elif pd is not None:
        for run_dir in runs:
            if _exists(run_dir / "graph", ws.warnings, folder=True):
                ws.graph_files += find_graph_files(run_dir / "graph", ws.warnings)
                break  # one run's graphs describe the model; debug_1 is usually the same model

    if overflow:
        ws.overflow_dirs = [_check_dir(overflow, "overflow folder")]
    elif pd is not None and _exists(pd / "overflow", ws.warnings, folder=True):
        ws.overflow_dirs = [pd / "overflow"]

    if golden:
        ws.golden_dir = _check_dir(golden, "golden folder")
    elif pd is not None:
        ws.golden_dir = _first_existing(ws.warnings, pd / "tf" / "dump")

    if fusion:
        ws.fusion_file = _check_file(fusion, "fusion result file")
    else:
        candidates = [root / "fusion_result.json"]
        if pd is not None:
            candidates.insert(0, pd / "fusion" / "fusion_result.json")
        ws.fusion_file = _first_existing(ws.warnings, *candidates)

    if pd is not None:
        ws.compare_csvs = sorted((pd / "temp" / "vector_compare").glob("*/result_*.csv"))

    if output:
        ws.output_dir, ws.output_given = Path(output), True
    elif pd is not None:
        ws.output_dir = pd / "temp" / "pshell"
    else:
        # A raw dump folder: ./pshell_out, unless the current folder is inside the dumps (pshell
        # never writes there); then a sibling folder next to the dumps.
        ws.output_dir = Path.cwd() / "pshell_out"
        if ws.output_dir.resolve().is_relative_to(root.resolve()):
            ws.output_dir = root.resolve().parent / f"{root.resolve().name}_pshell"

    ws.missing = _missing_parts(ws, dump_problems)
    return ws


def _missing_parts(ws: Workspace, dump_problems: list[str]) -> list[str]:
    """What is absent, each with how to produce it (shown once at start-up)."""
    missing = []
    if not ws.dump_sets and dump_problems:
        n = len(dump_problems)
        missing.append(f"npu dumps: none in the folders that could be listed ({n} problem{'s' * (n != 1)}, "
                       f"first: {dump_problems[0]})")
    elif not ws.dump_sets:
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
