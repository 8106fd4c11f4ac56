"""Where pshell may write: the one check every writer goes through (product.md: pshell writes only
in its output folder, never inside an input folder, never over an input file).

Rules, on paths with symlinks and ``..`` resolved first (a path that does not exist yet resolves
through its existing part, so a link anywhere on the way into an input folder is seen):

- nothing inside ``precision_data/`` except under ``precision_data/temp/pshell`` or pshell's own
  output folder when that lies under ``precision_data/temp/`` (the vendor's
  ``temp/vector_compare`` CSVs are inputs);
- nothing inside an input tree (dump roots and leaves, ``npu/debug_N`` with its ``dump`` and
  ``graph``, golden, overflow, vendor CSV folders, ``--npu/--golden/--overflow`` folders);
- never over an input file (graph files, fusion report, vendor CSVs, the script given with ``-f``,
  the config file);
- not through the default ``precision_data/temp/pshell`` when it (or ``temp``) is a symbolic link
  resolving outside ``precision_data``: a shared workspace could send outputs anywhere; a folder
  the user gives with ``-o`` is followed.

Everything here is path logic; the caller creates folders and writes.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from precision_shell.errors import CommandError, FormatError
from precision_shell.model.workspace import Workspace

TREE, FILE = "tree", "file"


def resolved(path: str | os.PathLike) -> Path:
    """``path`` with ``~``, symlinks and ``..`` resolved, relative to the current folder."""
    return Path(os.path.realpath(Path(path).expanduser()))


@dataclass(frozen=True)
class InputPlace:
    """Something the session reads: a folder tree or one file."""

    path: Path        # as the workspace names it (shown in messages)
    real: Path        # resolved (compared)
    kind: str         # TREE or FILE
    what: str         # "golden .npy folder", ...

    @classmethod
    def of(cls, path: Path, kind: str, what: str) -> "InputPlace":
        return cls(path, resolved(path), kind, what)


class OutputGuard:
    def __init__(self, places: list[InputPlace], precision_data: Path | None, output_dir: Path,
                 output_given: bool = True):
        self.places = places
        self.output_dir = output_dir
        self.precision_data = resolved(precision_data) if precision_data is not None else None
        self.allowed: list[Path] = []   # the folders inside precision_data that take outputs
        self.planted_link: tuple[Path, Path] | None = None   # (default folder, where it leads)
        if self.precision_data is not None:
            own = resolved(output_dir)
            self.allowed = [self.precision_data / "temp" / "pshell"]
            if own.is_relative_to(self.precision_data / "temp"):
                self.allowed.append(own)
            default = Path(precision_data) / "temp" / "pshell"
            if not output_given and Path(output_dir) == default and not own.is_relative_to(self.precision_data):
                self.planted_link = (default, own)

    def link_problem(self) -> str | None:
        """The line for a default output folder that a symbolic link takes outside the workspace."""
        if self.planted_link is None:
            return None
        default, target = self.planted_link
        return (f"{default}: a symbolic link to {target}, outside the workspace; pshell does not write "
                f"there unless given with -o DIR")

    def check(self, path: str | os.PathLike, *, folder: bool = False) -> None:
        """Raise CommandError when writing the file ``path`` (or files inside the folder
        ``path``, with ``folder``) would touch the user's inputs."""
        problem = self.problem(resolved(path), folder)
        if problem is None:
            return
        if resolved(self.output_dir) == resolved(path) or self.problem(resolved(self.output_dir), True):
            where = "choose another output folder (-o DIR or `config set output DIR`)"
        else:
            where = f"outputs go to {self.output_dir}"
        raise CommandError(f"{path}: refusing to write {problem}; {where}")

    def problem(self, real: Path, folder: bool) -> str | None:
        """Why writing at the resolved path ``real`` is refused, or None."""
        if self.planted_link is not None and real.is_relative_to(self.planted_link[1]):
            return (f"through {self.planted_link[0]}, a symbolic link to {self.planted_link[1]} outside "
                    f"the workspace")
        for place in self.places:
            if place.kind == FILE and real == place.real:
                return f"over the input file {place.path} ({place.what})"
        where = real if folder else real.parent   # the folder that gets the new file
        inside = [p for p in self.places if p.kind == TREE and real.is_relative_to(p.real)]
        if inside:
            place = max(inside, key=lambda p: len(p.real.parts))   # the most specific one
            return f"inside the input folder {place.path} ({place.what})"
        pd = self.precision_data
        if pd is not None and where.is_relative_to(pd) and not any(where.is_relative_to(a) for a in self.allowed):
            return (f"inside the input folder {pd} (precision_data: pshell writes there only "
                    f"under temp/pshell)")
        return None


def workspace_inputs(ws: Workspace, npu_root: Path | None) -> list[InputPlace]:
    """What a session on ``ws`` reads (formats.md §5); ``npu_root``: the ``--npu`` folder."""
    places = []

    def add(path: Path | None, kind: str, what: str) -> None:
        if path is not None:
            places.append(InputPlace.of(path, kind, what))

    pd = ws.precision_data
    if pd is not None:
        for run_dir in sorted(pd.glob("npu/debug_*")):
            add(run_dir, TREE, "NPU run folder")
            add(run_dir / "dump", TREE, "NPU dump tree")
            add(run_dir / "graph", TREE, "GE graph folder")
        add(pd / "temp" / "vector_compare", TREE, "vendor compare CSV folder")
    if npu_root is not None:
        add(npu_root, TREE, "NPU dump folder (--npu)")
    elif pd is None and ws.dump_sets:
        add(ws.root, TREE, "NPU dump folder")
    for dump_set in ws.dump_sets:
        add(dump_set.path, TREE, f"dump folder of {dump_set.label}")
    for folder in ws.overflow_dirs:
        add(folder, TREE, "overflow dump folder")
    add(ws.golden_dir, TREE, "golden .npy folder")
    for graph_file in ws.graph_files:
        add(graph_file, FILE, "GE graph file")
    if ws.fusion_file is not None:
        add(ws.fusion_file, FILE, "fusion report")
    for csv_file in ws.compare_csvs:
        add(csv_file, FILE, "vendor compare CSV")
    return places


def require_parent(path: Path) -> None:
    """An explicit output file goes into a folder that exists: pshell does not create it."""
    parent = path.parent
    if not parent.exists():
        raise FormatError(path, f"folder {parent} does not exist")
    if not parent.is_dir():
        raise FormatError(path, f"{parent} is not a folder")
