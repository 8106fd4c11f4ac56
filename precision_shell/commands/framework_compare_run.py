"""``vc`` of one msprobe dump folder pair: msprobe's pairing, the compare and the CSV in msprobe's
layout (:func:`run_compare`), used by the ``vc``/``vcs`` variants and by their ``--ranks/--steps``
form (:mod:`.framework_sets`)."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Sequence

from precision_shell.gc_pause import gc_paused

if TYPE_CHECKING:      # numpy: imported by the first compare, not at start-up
    from precision_shell.analysis.compare.msprobe.engine import RowResult
    from precision_shell.analysis.compare.msprobe.column_pairing import ColumnPairing
    from precision_shell.analysis.compare.msprobe.pairing import Pairing


@dataclass
class FrameworkCompare:
    mode: str                     # tensor | statistics | md5
    csv_path: Path
    seconds: float
    problems: list[str] = field(default_factory=list)
    # statistics mode on columns: the pairing's counts; row objects made only when asked for
    columns: ColumnPairing | None = None
    _pairing: Pairing | None = None
    _rows: Sequence[RowResult] | None = None
    _make_pairing: Callable[[], Pairing] | None = field(default=None, repr=False)

    @property
    def pairing(self) -> Pairing:
        """The row-object pairing (built now, once, after a column-wise statistics compare)."""
        if self._pairing is None:
            with gc_paused(freeze=True):
                self._pairing = self._make_pairing()
        return self._pairing

    @property
    def rows(self) -> Sequence[RowResult]:
        """The compared rows (statistics mode: StatisticsRows, each built when read)."""
        if self._rows is None:
            from precision_shell.analysis.compare.msprobe.stats_table import StatisticsRows

            self._rows = StatisticsRows(self.pairing)
        return self._rows

    def judge_source(self) -> dict:
        """What :func:`.root_cause.run.find_framework_suspects` reads of this compare: its rows,
        or on columns the golden statistics by row name (no row objects built)."""
        if self.columns is not None:
            return {"results": (), "columns": self.columns}
        return {"results": self.rows}

    def golden_stats(self, name: str):
        """The statistics of the golden tensor paired with the target row ``name`` (msprobe's
        compare name) as a run model Stats, None when unpaired; on columns no row object is made."""
        from precision_shell.model.runs.base import Stats

        if self.columns is not None:
            found = self.columns.golden_statistics(name)
            return None if found is None else Stats(*found)
        from precision_shell.analysis.compare.msprobe.stats_table import rows_by_name

        r = rows_by_name(self.rows).get(name)      # statistics rows: an index built once, rows when looked up
        g = r.pair.golden.leaf if r is not None and r.pair.golden is not None else None
        return None if g is None else Stats(g.max, g.min, g.mean, g.norm)

    @property
    def row_count(self) -> int:
        return len(self.columns.golden_row) if self.columns is not None else len(self.rows)

    @cached_property
    def coverage(self):
        """Compared and skipped rows by reason (``analysis/framework_coverage``), counted once."""
        if self.columns is not None:
            return self.columns.coverage()
        from precision_shell.analysis.compare.msprobe.coverage import framework_coverage

        return framework_coverage(self.rows, self.mode)

    @property
    def compared(self) -> int:
        return self.coverage.compared


def compare_mode(session, target=None) -> str:
    """tensor when both sides dumped tensors, md5 when both dumped CRCs, else statistics (the
    golden's task as its summary says: its entries are not read for this)."""
    target = target or session.selected
    golden = session.golden_for(target) or session.require_golden(target)    # the latter raises
    tasks = {target.task, golden.task}
    return tasks.pop() if len(tasks) == 1 and tasks <= {"tensor", "md5"} else "statistics"


def run_compare(session, target=None) -> FrameworkCompare:
    """``vc`` of the selection, or of another target rank (``--ranks``: then the session's
    ``compare`` result, which ``vcs``/``next``/``export`` read, is left as it was)."""
    selected = target is None or target is session.selected
    target = target or session.selected
    mode = compare_mode(session, target)
    started = time.perf_counter()
    loc = target.location
    steps = session.target.steps
    name = f"compare_result_{'' if len(steps) < 2 else f'step{loc.step}_'}{loc.rank}.csv"
    path = session.output_path(None, name)
    if mode == "statistics" and not session.fuzzy:
        found = _statistics_on_columns(session, target, path)
    else:
        found = _compare_rows(session, target, mode, path)
    found.seconds = time.perf_counter() - started
    if selected:
        session.results["compare"] = found
    return found


def _pair(session, target) -> Pairing:
    return _pair_as(session, target, session.fuzzy, session.mapping)


def _statistics_on_columns(session, target, path: Path) -> FrameworkCompare:
    """Statistics mode as array work: both sides' columns (the golden's from the child that read
    it), paired on keys, the CSV written chunk by chunk from them (compare/msprobe/column_table)."""
    from precision_shell.analysis.compare.msprobe.column_pairing import pair_columns
    from precision_shell.analysis.compare.msprobe.column_table import write_column_csv
    from precision_shell.formats.msprobe.columns import rank_columns

    with gc_paused(freeze=True):
        # the target's first: the golden's are being made meanwhile by the child that read it
        mine = rank_columns(target)
        columns = pair_columns(mine, session.golden_columns(target), session.mapping)
    with session.progress("comparing", len(columns.golden_row)) as bar, gc_paused():
        write_column_csv(path, columns, target.stack, advance=bar.advance)    # chunk lists, no cycles
    fuzzy, mapping = session.fuzzy, session.mapping
    return FrameworkCompare("statistics", path, 0.0, columns=columns,
                            _make_pairing=lambda: _pair_as(session, target, fuzzy, mapping))


def _pair_as(session, target, fuzzy: bool, mapping) -> Pairing:
    from precision_shell.analysis.compare.msprobe.pairing import pair_dumps

    return pair_dumps(target, session.require_golden(target), fuzzy=fuzzy, mapping=mapping)


def _compare_rows(session, target, mode: str, path: Path) -> FrameworkCompare:
    from precision_shell.analysis.compare.msprobe.engine import compare_pairs
    from precision_shell.analysis.compare.msprobe.csv_layout import iter_table_rows, write_compare_csv
    from precision_shell.analysis.compare.msprobe.stats_table import StatisticsRows, write_statistics_csv

    rows: list[RowResult] = []
    with gc_paused(freeze=True):     # ~10 objects per row, no cycles; the pairing lives as long as the result
        pairing = _pair(session, target)
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
    return FrameworkCompare(mode, path, 0.0, problems, _pairing=pairing, _rows=rows)
