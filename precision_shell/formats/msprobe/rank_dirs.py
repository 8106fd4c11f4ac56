"""Where msprobe puts a dump (framework-dumps.md A1): its rank folders, and whether a path is one.

A dump is ``[pynative/|graph/]step{N}/{rank|rank{N}|proc{pid}}/`` holding ``dump.json``,
``stack.json``, ``construct.json`` and ``dump_tensor_data/``. :func:`find_rank_dirs` accepts any
level of that tree (or a ``dump.json`` path) and lists the rank folders under it, descending only
into folders whose names fit the scheme, so pointing it at a big unrelated tree costs little.
A module of its own so that asking whether a path is an msprobe dump (every pshell start does)
imports nothing of the names' and dtypes' part (:mod:`.layout`).
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass

from ...errors import FormatError

TENSOR_DIR = "dump_tensor_data"
_STEP = re.compile(r"step(\d+)\Z")
_RANK = re.compile(r"(?:rank(\d*)|proc(\d+))\Z")
_MODE_DIRS = ("pynative", "graph")     # MindSpore jit / PYNATIVE_GRAPH add these above step*
_MAX_DIRS = 100_000


@dataclass(frozen=True)
class RankDir:
    """One folder that holds (or should hold) a ``dump.json``."""
    path: str
    step: int | None     # N of the enclosing step{N}, None when the folder is not under one
    rank: str            # the folder's name: "rank", "rank3", "proc22569" (or any name given directly)
    rank_id: int | None  # N of rank{N}; None for "rank" and proc{pid}
    mode: str | None = None   # "pynative" / "graph" when the tree has that level


def _rank_dir(path: str, mode: str | None = None) -> RankDir:
    name = os.path.basename(os.path.normpath(path))
    parent = os.path.basename(os.path.dirname(os.path.normpath(path)))
    step = _STEP.match(parent)
    rank = _RANK.match(name)
    if mode is None:
        grand = os.path.basename(os.path.dirname(os.path.dirname(os.path.normpath(path))))
        mode = grand if step and grand in _MODE_DIRS else None
    return RankDir(path, int(step.group(1)) if step else None, name,
                   int(rank.group(1)) if rank and rank.group(1) else None, mode)


def _is_rank_dir(path: str) -> bool:
    return os.path.isfile(os.path.join(path, "dump.json")) or os.path.isdir(os.path.join(path, TENSOR_DIR))


def _subdirs(path: str, pattern) -> list[str]:
    try:
        with os.scandir(path) as it:
            names = [e.name for e in it if e.is_dir() and pattern(e.name)]
    except OSError as e:
        raise FormatError(path, f"cannot list: {e.strerror or e}") from None
    return sorted(names, key=_natural_key)


def _natural_key(name: str):
    return [int(p) if p.isdigit() else p for p in re.split(r"(\d+)", name)]


def find_rank_dirs(path: str | os.PathLike) -> list[RankDir]:
    """The rank folders of a dump root, a ``step*`` folder, a rank folder or a ``dump.json`` path,
    in step then rank order. FormatError when there is none."""
    path = os.fspath(path)
    if os.path.isfile(path):
        if os.path.basename(path) != "dump.json":
            raise FormatError(path, "not a dump.json nor a dump folder")
        return [_rank_dir(os.path.dirname(os.path.abspath(path)))]
    if not os.path.isdir(path):
        raise FormatError(path, "no such file or folder")
    if _is_rank_dir(path):
        return [_rank_dir(path)]
    found: list[RankDir] = []

    def steps_under(root: str, mode: str | None):
        for step in _subdirs(root, lambda n: _STEP.match(n)):
            step_dir = os.path.join(root, step)
            for rank in _subdirs(step_dir, lambda n: _RANK.match(n)):
                if len(found) >= _MAX_DIRS:
                    raise FormatError(path, f"more than {_MAX_DIRS} rank folders")
                found.append(_rank_dir(os.path.join(step_dir, rank), mode))

    name = os.path.basename(os.path.normpath(path))
    if _STEP.match(name):       # a step folder: its rank folders
        for rank in _subdirs(path, lambda n: _RANK.match(n)):
            found.append(_rank_dir(os.path.join(path, rank)))
    else:
        steps_under(path, name if name in _MODE_DIRS else None)
        for mode in _subdirs(path, lambda n: n in _MODE_DIRS):
            steps_under(os.path.join(path, mode), mode)
    if not found:
        raise FormatError(path, "no msprobe dump here (no dump.json, step*/ or rank*/proc*/ folder)")
    return found


def is_msprobe_dump(path: str | os.PathLike | None) -> bool:
    """True when ``path`` is an msprobe dump root, ``step*`` or rank folder, or a ``dump.json``."""
    if path is None:
        return False
    try:
        find_rank_dirs(path)
    except FormatError:
        return False
    return True
