"""``vcs`` on an msprobe dump, one entry point whichever run model stands for the dump
(:func:`~precision_shell.model.runs.msprobe.judged_run`): over index arrays on a statistics
compare's :class:`~precision_shell.model.runs.stats_run.StatsRun` (:mod:`.run_columns`), else
over the FrameworkRun's objects (:mod:`.run`). Both give the same suspects (tests hold them to it).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from precision_shell.analysis.root_cause.run import FrameworkSuspect, find_framework_suspects
from precision_shell.analysis.root_cause.run_columns import find_suspects_on_columns
from precision_shell.analysis.root_cause.stat_verdict import DEFAULT_TOLERANCE
from precision_shell.model.runs.stats_run import StatsRun


def find_suspects(run: Any, threshold: float, backward: bool = False, *, mode: str,
                  tolerance: float = DEFAULT_TOLERANCE, unjudged: list[str] | None = None,
                  results: Iterable = (), columns: Any = None) -> Sequence[FrameworkSuspect]:
    """The failing entries of a compare of ``run`` (``results``: its compared rows; ``columns``:
    its ColumnPairing when made on columns), roots, propagated and the first divergence."""
    if isinstance(run, StatsRun):
        return find_suspects_on_columns(run, columns, backward, tolerance=tolerance, unjudged=unjudged)
    return find_framework_suspects(run, results, threshold, backward, mode=mode, tolerance=tolerance,
                                   unjudged=unjudged, columns=columns)
