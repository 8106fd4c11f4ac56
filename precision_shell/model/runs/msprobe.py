"""msprobe dumps (PyTorch, MindSpore) and pshell captures as a :class:`~.base.Run`; which run
model a compare is judged on (:func:`judged_run`: the statistics columns' :class:`.stats_run.
StatsRun` or the whole FrameworkRun).

The run itself is :class:`~precision_shell.model.framework_run.FrameworkRun` (one ``dump.json``:
entries in dump order, leaves as tensors, edges from the capture sidecar or inferred from
statistics). msprobe's pairing rules (exact with backward renumbering, fuzzy, data_mapping) are
in ``analysis/framework_pairing``; :class:`MsprobePairing` answers ``golden_for`` from the row
names that pairing joined.
"""

from __future__ import annotations

from typing import Callable

from ..framework_run import FrameworkRun, FrameworkTensor
from .stats_run import StatsRun

MsprobeRun = FrameworkRun

__all__ = ["MsprobePairing", "MsprobeRun", "judged_run"]


def judged_run(rank, columns, full_run: Callable[[], FrameworkRun]) -> StatsRun | FrameworkRun:
    """The run model a compare of ``rank`` is judged on (``vcs``, its panels): the statistics
    compare's own columns (``columns``: the target's :class:`~...formats.msprobe.columns.
    StatsColumns`, None when the compare was not made on columns) when they can stand for the
    dump (:meth:`StatsRun.of`), else the whole :class:`FrameworkRun` (``full_run()``). Both
    give ``op(name)``, ``tensor(name)`` and ``module_path``; the analysis that judges picks its
    algorithm by which it got."""
    if columns is not None:
        run = StatsRun.of(rank, columns)
        if run is not None:
            return run
    return full_run()


class MsprobePairing:
    """``golden_for`` over a pairing's ``{target compare name: golden compare name}``."""

    def __init__(self, target: FrameworkRun, golden: FrameworkRun, names: dict[str, str]):
        self.target, self.golden, self.names = target, golden, names

    @classmethod
    def of(cls, target: FrameworkRun, golden: FrameworkRun, pairing) -> "MsprobePairing":
        """From ``analysis.compare.msprobe.pairing.Pairing`` (its ``pairs``: target row, golden row or
        None), the rows msprobe's rules joined."""
        return cls(target, golden, {p.target.name: p.golden.name for p in pairing.pairs if p.golden is not None})

    def golden_for(self, tensor: FrameworkTensor) -> FrameworkTensor | None:
        name = self.names.get(tensor.compare_name)
        if name is None:
            return None
        try:
            return self.golden.tensor(name)
        except Exception:        # a row msprobe pairs with no golden leaf of that name
            return None
