"""A session on MindSpore graph-mode dumps (``pshell TARGET [--golden GOLDEN]``, product.md §16).

A :class:`~.framework_session.FrameworkSession` whose dumps are read by
:mod:`..formats.mindspore_graph` and whose runs are :class:`~.mindspore_graph_run.MsRun`: the
framework commands run on it unchanged (``kind`` "mindspore-graph" inherits the "framework"
variants, :meth:`..commands.registry.Registry.inherit`), ``info`` and ``ni`` have their own.
Ranks are the ``rank_{R}`` folders, steps the iteration folders; a golden iteration pairs with
the target's of the same rank and number (or the golden's only one).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import FormatError
from ..formats.mindspore_graph.dump import GraphCache, read_iteration
from ..formats.mindspore_graph.layout import find_iterations
from ..formats.msprobe.dump import MsprobeDump, RankDump
from ..gc_pause import gc_paused
from ..model.output_guard import TREE, InputPlace
from .framework_session import FrameworkPlace, FrameworkSession
from .runs.mindspore_graph import MsRun, rank_dump_of

__all__ = ["MindsporeGraphSession", "read_mindspore_graph_dump"]

KIND = "mindspore-graph"


def read_mindspore_graph_dump(path: str | os.PathLike) -> MsprobeDump:
    """Every iteration folder at or under ``path`` as rank dumps (FormatError when none)."""
    warnings: list[str] = []
    iterations = find_iterations(path, warnings)
    if not iterations:
        raise FormatError(os.fspath(path), "no iteration folder ({net}/{graph}/{iteration}) under it")
    cache = GraphCache()
    ranks: list[RankDump] = []
    said: set[str] = set()
    for it in iterations:
        try:
            dump = read_iteration(it, cache)
        except FormatError as exc:
            warnings.append(str(exc))
            continue
        rank = rank_dump_of(dump)
        # a rank's graph problems hold for each of its iterations: said once
        fresh = [w for w in rank.warnings if w not in said]
        said.update(fresh)
        warnings += fresh
        ranks.append(rank)
    if not ranks:
        raise FormatError(os.fspath(path), "no readable iteration folder")
    return MsprobeDump(os.fspath(path), ranks, "mindspore", "tensor", "kernel", warnings=warnings)


@dataclass
class MindsporeGraphSession(FrameworkSession):
    kind = KIND
    _ms_runs: dict[int, MsRun] = field(default_factory=dict)

    @classmethod
    def open(cls, target, *, golden=None, mapping=None, mapping_file=None, output=None):
        with gc_paused(freeze=True):
            dump = read_mindspore_graph_dump(target)
            errors = list(dump.warnings)
            golden_dump = None
            if golden is not None:
                try:
                    golden_dump = read_mindspore_graph_dump(golden)
                    errors += [f"golden: {w}" for w in golden_dump.warnings]
                except FormatError as exc:
                    errors.append(f"golden: {exc}")
        place = FrameworkPlace(Path(target), Path(output) if output else Path("pshell_out"))
        session = cls(dump, golden_dump, place, mapping, Path(mapping_file) if mapping_file else None,
                      load_errors=errors)
        if not output:
            place.output_dir = session._default_output()
        session.selected = dump.ranks[0]
        if golden_dump is not None:
            errors += session._unpaired_steps()
        return session

    def _unpaired_steps(self) -> list[str]:
        """One line for target iterations with no golden iteration (mixed iterations)."""
        missing = [r.location for r in self.target.ranks if self.golden_for(r) is None]
        if not missing:
            return []
        shown = ", ".join(f"{loc.rank} iteration {loc.step}" for loc in missing[:3])
        return [f"golden: no iteration for {shown}{', ...' if len(missing) > 3 else ''} "
                f"(golden iterations: {', '.join(map(str, self.golden_dump.steps))})"]

    def golden_for(self, target: RankDump) -> RankDump | None:
        """Same rank and iteration; else the golden's only iteration of that rank (a golden given
        as one iteration folder), else its only iteration at all."""
        if self.golden_dump is None:
            return None
        loc, ranks = target.location, self.golden_dump.ranks
        for match in (lambda r: (r.location.step, r.location.rank) == (loc.step, loc.rank),):
            found = [r for r in ranks if match(r)]
            if found:
                return found[0]
        same_rank = [r for r in ranks if r.location.rank == loc.rank]
        if len(same_rank) == 1 and len({r.location.step for r in self.target.ranks}) == 1:
            return same_rank[0]
        return ranks[0] if len(ranks) == 1 and len(self.target.ranks) == 1 else None

    def run_of(self, rank: RankDump) -> MsRun:
        """The run of an iteration, built on first use; what building its tensors found (a file
        header that could not be read) is shown after the command, once."""
        with self._runs_lock:
            if id(rank) not in self._runs:
                known = len(rank.warnings)
                with gc_paused(freeze=True):
                    self._runs[id(rank)] = MsRun(rank)
                side = "golden: " if self.golden_dump is not None and any(r is rank for r in self.golden_dump.ranks) else ""
                self.load_warnings += [side + w for w in rank.warnings[known:]]
            return self._runs[id(rank)]

    def use(self, step=None, rank=None):
        if rank is not None and str(rank).isdigit():
            rank = f"rank_{rank}"
        return super().use(step, rank)

    def input_places(self) -> list[InputPlace]:
        places = [InputPlace.of(Path(self.target.root), TREE, "target MindSpore dump")]
        places += [InputPlace.of(Path(r.location.path), TREE, "target iteration folder") for r in self.target.ranks]
        if self.golden_dump is not None:
            places.append(InputPlace.of(Path(self.golden_dump.root), TREE, "golden MindSpore dump"))
            places += [InputPlace.of(Path(r.location.path), TREE, "golden iteration folder")
                       for r in self.golden_dump.ranks]
        return places + self.extra_inputs

    def keep_fp32_name(self, op: str) -> str:
        """A root kernel as MindSpore's mixed-precision lists take it (``amp.custom_mixed_precision``
        black_list, ``ops.Softmax``): its kernel type."""
        return f"ops.{self.run.op(op).entry.op}"
