"""The run model: one interface over every kind of dump (product.md §15, architecture.md).

A :class:`Run` is one dump set -- one (kind, rank, step) of one side: its ops in execution order
(:class:`Op`: name, type, kind, order, kernel_key, input and output :class:`Tensor` s with dtype,
shape, statistics and whether values can be loaded), dataflow :class:`Edge` s (``exact`` when the
dump recorded them, inferred otherwise), a lazy ``load`` of a tensor's values and optional
``extras`` (fusion, Opdebug records, module tree, source lines, ...) present only when the data
has them. A :class:`Pairing` gives each target tensor its golden counterpart. Analyses are written
against these and nothing else; only what truly differs per family (CSV layouts, ``fusion``,
``dc``) looks further.

Adapters today:

- ``ge``: :mod:`.ge` (``GeRun`` over a graph-mode session's graph and active dump set,
  ``GePairing`` over its golden ``.npy`` index);
- ``msprobe`` / ``capture``: :mod:`.msprobe` (``FrameworkRun``, one ``dump.json``; pairing rows
  from ``analysis/framework_pairing``).
- ``mindspore-graph``: :mod:`.mindspore_graph` (``MsRun``, one iteration folder of MindSpore's own
  graph-mode dump; edges from its ANF graph; ``MsPairing`` by full name, input|output, slot).

Writing an adapter for a new family (e.g. ``mindspore-graph``):

1. Parse files in ``formats/<family>/`` (no knowledge of runs there): one line per bad file via
   ``FormatError(path, reason)``, never an exception that stops the rest.
2. Add ``model/runs/<family>.py`` with a class that has the :class:`Run` members: ``kind`` (one
   of :data:`KINDS`), ``path``, ``warnings``, ``ops`` (execution order; ``op.order`` is the
   position), ``op(name)`` (exact, else the unique op containing the text; ``CommandError``
   listing candidates otherwise), ``find(text)``, ``tensor(name)``, ``load(name)`` (reads on
   call, never at construction), ``producer``/``producers``/``consumers`` returning
   :class:`Edge` s, ``downstream`` (:func:`downstream_of` does it from ``consumers``),
   ``module_path`` and ``extras``. Tensor names are unique within the run: ``OP:output:N``,
   ``OP:input:N`` (``printed()`` gives the short ``OP:N`` / ``OP:inN`` users type).
   ``kernel_key`` names the op for replay's kernel table (a GE op type, a torch/MindSpore API).
3. Give a :class:`Pairing` (``golden_for(tensor) -> Tensor | None``) from the family's rules.
4. The session of that family exposes ``run`` (the selected Run), and the analyses work.

The protocols are structural (``isinstance(x, Run)`` checks members only): an adapter needs no
base class. Keep each adapter a thin layer over its reader: no analysis in here.
"""

from .base import KINDS, Edge, Op, Pairing, Run, Stats, Tensor, TensorInfo, downstream_of

__all__ = ["KINDS", "Edge", "Op", "Pairing", "Run", "Stats", "Tensor", "TensorInfo", "downstream_of"]
