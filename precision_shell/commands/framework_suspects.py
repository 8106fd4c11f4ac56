"""Judging one framework compare for ``vcs`` (one rank, or each of ``--ranks/--steps``): on the
statistics columns' run model when the compare was made on columns and the dump allows it
(:mod:`precision_shell.model.runs.stats_run`: no Leaf or Edge object per tensor), else on the
rank's :class:`~precision_shell.model.framework_run.FrameworkRun`. Both give the same suspects."""

from __future__ import annotations

from typing import Any, Callable

STATS_RUN = "vcs_stats_run"      # session.results: the columns' run model of the last statistics vcs


def judge_compare(session: Any, rank: Any, found: Any, threshold: float, backward: bool, tolerance: float,
                  unjudged: list[str] | None = None) -> tuple[list, Callable[[str], str]]:
    """(suspects, printed): ``printed(name)`` gives a suspect's tensor name as tables print it."""
    if found.mode == "statistics" and found.columns is not None:
        run = _stats_run(session, rank, found.columns.target)
        if run is not None:
            from precision_shell.analysis.root_cause.run_columns import find_suspects_on_columns

            suspects = find_suspects_on_columns(run, found.columns, backward, tolerance=tolerance, unjudged=unjudged)
            return suspects, run.printed
    from precision_shell.analysis.root_cause.run import find_framework_suspects

    model = session.run_of(rank)
    suspects = find_framework_suspects(model, threshold=threshold, backward=backward, mode=found.mode,
                                       tolerance=tolerance, unjudged=unjudged, **found.judge_source())
    return suspects, lambda name: model.tensor(name).printed()


def _stats_run(session: Any, rank: Any, columns: Any):
    """The run model on ``columns``, kept for the next ``vcs`` of the same compare (None: use
    the FrameworkRun, see StatsRun.of)."""
    from precision_shell.gc_pause import gc_paused
    from precision_shell.model.runs.stats_run import StatsRun

    kept = session.results.get(STATS_RUN)
    if isinstance(kept, StatsRun) and kept.columns is columns and kept.entries is rank.entries:
        return kept
    with gc_paused():
        run = StatsRun.of(rank, columns)
    if run is not None:
        session.results[STATS_RUN] = run
    return run
