"""Judging one framework compare for ``vcs`` (one rank, or each of ``--ranks/--steps``) and its
panels: on the run model :func:`~precision_shell.model.runs.msprobe.judged_run` picks for the
compare (the statistics columns' StatsRun, no Leaf or Edge object per tensor, else the rank's
FrameworkRun), kept for the next ``vcs`` and ``next`` of the same compare."""

from __future__ import annotations

from typing import Any, Sequence

JUDGED_RUN = "vcs_judged_run"    # session.results: (columns, rank, run) of the last compare judged on columns


def judge_compare(session: Any, rank: Any, found: Any, threshold: float, backward: bool, tolerance: float,
                  unjudged: list[str] | None = None) -> tuple[Sequence, Any]:
    """(suspects, run): ``run.tensor(name).printed()`` gives a suspect's tensor as tables print it."""
    from precision_shell.analysis.root_cause.framework_judge import find_suspects
    from precision_shell.gc_pause import gc_paused

    run = judged_run_of(session, rank, found)
    with gc_paused():        # one suspect per failing entry (99k on a 100k-entry pair), no cycles
        suspects = find_suspects(run, threshold, backward, mode=found.mode, tolerance=tolerance, unjudged=unjudged,
                                 **found.judge_source())
    return suspects, run


def judged_run_of(session: Any, rank: Any, found: Any):
    """The run model ``found`` (a FrameworkCompare of ``rank``) is judged on; one made on the
    compare's columns is kept while that compare is (the FrameworkRun is kept by the session)."""
    from precision_shell.gc_pause import gc_paused
    from precision_shell.model.runs.msprobe import judged_run

    columns = found.columns.target if found.columns is not None else None
    kept = session.results.get(JUDGED_RUN)
    if columns is not None and kept is not None and kept[0] is columns and kept[1] is rank:
        return kept[2]
    with gc_paused():
        run = judged_run(rank, columns, lambda: session.run_of(rank))
    if columns is not None:
        session.results[JUDGED_RUN] = (columns, rank, run)
    return run
