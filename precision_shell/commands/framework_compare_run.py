"""``vc`` of one msprobe dump folder pair: msprobe's pairing, the compare and the CSV in msprobe's
layout (:func:`run_compare`), used by the ``vc``/``vcs`` variants and by their ``--ranks/--steps``
form (:mod:`.framework_sets`)."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Sequence

from precision_shell.gc_pause import gc_paused

if TYPE_CHECKING:      # numpy: imported by the first compare, not at start-up
    from precision_shell.analysis.compare.msprobe.engine import RowResult
    from precision_shell.analysis.compare.msprobe.pairing import Pairing


@dataclass
class FrameworkCompare:
    mode: str                     # tensor | statistics | md5
    pairing: Pairing
    rows: Sequence[RowResult]     # statistics mode: StatisticsRows, each built when read
    csv_path: Path
    seconds: float
    problems: list[str] = field(default_factory=list)

    @cached_property
    def coverage(self):
        """Compared and skipped rows by reason (``analysis/framework_coverage``), counted once."""
        from precision_shell.analysis.compare.msprobe.coverage import framework_coverage

        return framework_coverage(self.rows, self.mode)

    @property
    def compared(self) -> int:
        return self.coverage.compared


def compare_mode(session, target=None) -> str:
    """tensor when both sides dumped tensors, md5 when both dumped CRCs, else statistics."""
    target = target or session.selected
    tasks = {target.task, session.require_golden(target).task}
    return tasks.pop() if len(tasks) == 1 and tasks <= {"tensor", "md5"} else "statistics"


def run_compare(session, target=None) -> FrameworkCompare:
    """``vc`` of the selection, or of another target rank (``--ranks``: then the session's
    ``compare`` result, which ``vcs``/``next``/``export`` read, is left as it was)."""
    from precision_shell.analysis.compare.msprobe.engine import compare_pairs
    from precision_shell.analysis.compare.msprobe.csv_layout import iter_table_rows, write_compare_csv
    from precision_shell.analysis.compare.msprobe.pairing import pair_dumps
    from precision_shell.analysis.compare.msprobe.stats_table import StatisticsRows, write_statistics_csv

    selected = target is None or target is session.selected
    target = target or session.selected
    mode = compare_mode(session, target)
    started = time.perf_counter()
    rows: list[RowResult] = []
    with gc_paused(freeze=True):     # ~10 objects per row, no cycles; the pairing lives as long as the result
        pairing = pair_dumps(target, session.require_golden(target), fuzzy=session.fuzzy,
                             mapping=session.mapping)
        loc = target.location
        steps = session.target.steps
        name = f"compare_result_{'' if len(steps) < 2 else f'step{loc.step}_'}{loc.rank}.csv"
        path = session.output_path(None, name)
        with session.progress("comparing", len(pairing.pairs)) as bar:
            if mode == "statistics":     # column-wise, in chunks: no row kept (compare/msprobe/stats_table)
                write_statistics_csv(path, pairing, target.stack, advance=bar.advance)
                rows = StatisticsRows(pairing)
            else:
                for result in compare_pairs(pairing, mode):
                    rows.append(result)
                    bar.advance()
        if mode != "statistics":
            write_compare_csv(path, iter_table_rows(rows, mode, target.stack), mode)
    problems = [] if mode == "statistics" else [e for r in rows for e in r.errors]
    found = FrameworkCompare(mode, pairing, rows, path, time.perf_counter() - started, problems)
    if selected:
        session.results["compare"] = found
    return found
