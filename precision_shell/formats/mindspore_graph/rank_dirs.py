"""Whether a path is (a level of) a MindSpore graph-mode dump: ``rank_{R}`` folders holding
``.dump_metadata``, ``graphs`` or ``execution_order`` (:mod:`.layout` has the whole tree). A module
of its own so that the question, asked at every pshell start, imports nothing else of the reader."""

from __future__ import annotations

import os
import re

from ...errors import FormatError

RANK_NAME = re.compile(r"rank_(\d+)\Z")
SPECIAL_DIRS = {".dump_metadata", "graphs", "execution_order"}


def sub_dirs(path: str) -> list[str]:
    try:
        with os.scandir(path) as it:
            return sorted(e.name for e in it if e.is_dir())
    except OSError as e:
        raise FormatError(path, f"cannot list: {e.strerror or e}") from None


def looks_like_rank(path: str) -> bool:
    if not RANK_NAME.match(os.path.basename(os.path.normpath(path))) or not os.path.isdir(path):
        return False
    try:
        names = set(os.listdir(path))
    except OSError:
        return False
    return bool(names & SPECIAL_DIRS)


def is_mindspore_graph_dump(path: str | os.PathLike | None) -> bool:
    """Whether ``path`` is (a level of) a MindSpore graph-mode dump: cheap, looks at names only."""
    if path is None or not os.path.isdir(path):
        return False
    path = os.path.normpath(os.path.abspath(os.fspath(path)))
    up = path
    for _ in range(4):      # the folder itself, or a net, graph or iteration folder under a rank
        if looks_like_rank(up):
            return True
        up = os.path.dirname(up)
    try:
        return bool(ranks_under(path))
    except FormatError:
        return False


def ranks_under(path: str) -> list[str]:
    return [os.path.join(path, n) for n in sub_dirs(path) if looks_like_rank(os.path.join(path, n))]
