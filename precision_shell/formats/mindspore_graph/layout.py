"""Where a MindSpore graph-mode dump puts things (framework-dumps.md "MindSpore graph-mode dumps").

    DUMP/rank_{R}/.dump_metadata/{config.json, data_dump.json}
    DUMP/rank_{R}/{net_name}/{graph_id}/{iteration_id}/   kernel files
    DUMP/rank_{R}/graphs/ms_output_trace_code_graph_{G}.{pb,ir}
    DUMP/rank_{R}/execution_order/ms_execution_order_graph_{G}.csv

:func:`find_iterations` takes a dump root, a ``rank_R`` folder, a net or graph folder or one
iteration folder and lists the iteration folders under it; problems of the tree (a folder that
is not a number where an iteration or graph id belongs, several graphs in a rank) are one line
each in ``warnings`` and the rest is read.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, field

from ...errors import FormatError
from ..input_files import read_regular
from .rank_dirs import RANK_NAME, SPECIAL_DIRS, is_mindspore_graph_dump, looks_like_rank, ranks_under, sub_dirs

__all__ = ["MsIteration", "MsRank", "find_iterations", "is_mindspore_graph_dump"]

_NUMBER = re.compile(r"\d+\Z")


@dataclass
class MsRank:
    path: str
    rank_id: int
    metadata: dict = field(default_factory=dict)     # config.json: device_target, ms_version

    @property
    def name(self) -> str:
        return f"rank_{self.rank_id}"

    def graph_file(self, graph_id: int, suffix: str) -> str:
        return os.path.join(self.path, "graphs", f"ms_output_trace_code_graph_{graph_id}.{suffix}")

    def order_file(self, graph_id: int) -> str:
        return os.path.join(self.path, "execution_order", f"ms_execution_order_graph_{graph_id}.csv")


@dataclass(frozen=True)
class MsIteration:
    """One ``{net}/{graph}/{iteration}`` folder of a rank."""
    rank: MsRank
    net: str
    graph_id: int
    iteration: int

    @property
    def path(self) -> str:
        return os.path.join(self.rank.path, self.net, str(self.graph_id), str(self.iteration))


def _read_metadata(rank_path: str, warnings: list[str]) -> dict:
    path = os.path.join(rank_path, ".dump_metadata", "config.json")
    if not os.path.exists(path):
        return {}
    try:
        doc = json.loads(read_regular(path))
    except (OSError, ValueError) as exc:
        warnings.append(f"{path}: cannot read ({getattr(exc, 'strerror', None) or exc}); ignored")
        return {}
    return doc if isinstance(doc, dict) else {}


def find_iterations(path: str | os.PathLike, warnings: list[str]) -> list[MsIteration]:
    """The iteration folders at or under ``path``, in rank, graph, iteration order; FormatError
    when there is none."""
    path = os.path.normpath(os.path.abspath(os.fspath(path)))
    if not os.path.isdir(path):
        raise FormatError(path, "no such folder")
    # how far below its rank folder is path? (0 rank, 1 net, 2 graph, 3 iteration)
    rank_path, depth = path, 0
    while depth < 4 and not looks_like_rank(rank_path):
        rank_path, depth = os.path.dirname(rank_path), depth + 1
    if depth == 4:
        ranks = ranks_under(path)
        if not ranks:
            raise FormatError(path, "no rank_{R} folder of a MindSpore graph-mode dump under it")
        return [it for r in ranks for it in _rank_iterations(r, None, warnings)]
    within = os.path.relpath(path, rank_path).split(os.sep) if depth else []
    return _rank_iterations(rank_path, within, warnings)


def _rank_iterations(rank_path: str, within: list[str] | None, warnings: list[str]) -> list[MsIteration]:
    rank = MsRank(rank_path, int(RANK_NAME.match(os.path.basename(rank_path)).group(1)),
                  _read_metadata(rank_path, warnings))
    nets = [n for n in sub_dirs(rank_path) if n not in SPECIAL_DIRS] if not within else [within[0]]
    found: list[MsIteration] = []
    graphs_seen: dict[int, int] = {}
    for net in nets:
        net_path = os.path.join(rank_path, net)
        graph_ids = sub_dirs(net_path) if not within or len(within) < 2 else [within[1]]
        for gid in graph_ids:
            if not _NUMBER.match(gid):
                warnings.append(f"{os.path.join(net_path, gid)}: not a graph id folder (a number), skipped")
                continue
            graph_path = os.path.join(net_path, gid)
            iters = sub_dirs(graph_path) if not within or len(within) < 3 else [within[2]]
            for it in iters:
                if not _NUMBER.match(it):
                    warnings.append(f"{os.path.join(graph_path, it)}: not an iteration folder (a number), skipped")
                    continue
                found.append(MsIteration(rank, net, int(gid), int(it)))
                graphs_seen[int(gid)] = graphs_seen.get(int(gid), 0) + 1
    if len(graphs_seen) > 1:
        kept = _main_graph(rank, found)
        others = ", ".join(str(g) for g in sorted(graphs_seen) if g != kept)
        warnings.append(f"{rank_path}: {len(graphs_seen)} graphs; graph {kept} opened (most kernel files), "
                        f"graph {others} not")
        found = [it for it in found if it.graph_id == kept]
    return sorted(found, key=lambda it: (it.graph_id, it.iteration))


def _main_graph(rank: MsRank, iterations: list[MsIteration]) -> int:
    counts: dict[int, int] = {}
    for it in iterations:
        try:
            counts[it.graph_id] = counts.get(it.graph_id, 0) + len(os.listdir(it.path))
        except OSError:
            pass
    return max(counts, key=lambda g: (counts[g], -g)) if counts else iterations[0].graph_id
