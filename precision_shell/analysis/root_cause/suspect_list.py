"""The suspects of a ``vcs`` judged on columns (:mod:`.run_columns`) as a list whose items are
made when read: the columns hold per suspect its entry, role, worst failing output and its
verdict, and the failing outputs and inputs as index ranges into row arrays; a
:class:`~.run.FrameworkSuspect` is built only for a position asked for (the <= 20 rows a table
shows, the one ``next`` shows). A 100k-entry statistics pair has ~99k failing entries: their
objects and JSON dicts cost seconds and ~500 MB (issue 31), so the JSON document is written
straight from the columns (:meth:`SuspectList.json_text`), the same text as the objects' rows
encoded one by one (tests hold the two to it).
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from precision_shell.analysis.root_cause.run import FrameworkSuspect
from precision_shell.analysis.root_cause.schema import framework_row

ROLES = ("root", "propagated", "param_grad")       # role codes


@dataclass
class SuspectColumns:
    """Per suspect (in dump order): ``entry`` (its index), ``role`` (a :data:`ROLES` code),
    ``worst`` (the row of its worst failing output), its failing output and input rows
    (``out_rows[out_start[i]:out_start[i + 1]]``, ``in_rows`` likewise); per row: its own
    verdict, the failing statistics' text and the largest relative error; per entry: the failing
    entries downstream (entry indexes)."""
    entry: np.ndarray
    role: np.ndarray
    worst: np.ndarray
    out_rows: np.ndarray
    out_start: np.ndarray
    in_rows: np.ndarray
    in_start: np.ndarray
    state: list[int]                 # per row: 1 fails, 0 passes, -1 not judged by its own statistics
    statistic: list[str]
    error: list[float]
    downstream: list[list[int]]
    first: int                       # the position of the first root, -1 none


class SuspectList(Sequence):
    """:class:`SuspectColumns` read as a list of :class:`~.run.FrameworkSuspect` (made on first
    read of a position and kept). ``roles``/``ops`` give a column without making objects;
    ``in_order``: the list is in dump order (a sort on ``order`` leaves it as it is)."""
    in_order = True

    def __init__(self, run, columns: SuspectColumns):
        self.run, self.columns = run, columns
        self._made: dict[int, FrameworkSuspect] = {}

    def __len__(self) -> int:
        return len(self.columns.entry)

    def __getitem__(self, pos):
        if isinstance(pos, slice):
            return [self[i] for i in range(*pos.indices(len(self)))]
        if pos < 0:
            pos += len(self)
        if not 0 <= pos < len(self):
            raise IndexError(pos)
        found = self._made.get(pos)
        if found is None:
            found = self._made[pos] = self._make(pos)
        return found

    def __iter__(self):
        return (self[i] for i in range(len(self)))

    def __eq__(self, other) -> bool:
        return isinstance(other, Sequence) and list(self) == list(other)

    @property
    def roles(self) -> list[str]:
        return [ROLES[code] for code in self.columns.role.tolist()]

    @property
    def ops(self) -> list[str]:
        names = self.run.columns.entry_names
        return [names[at] for at in self.columns.entry.tolist()]

    def _make(self, pos: int) -> FrameworkSuspect:
        c, run = self.columns, self.run
        at = int(c.entry[pos])
        e = run.entries[at]
        outs = c.out_rows[c.out_start[pos]:c.out_start[pos + 1]].tolist()
        failed = run.tensor_names(outs)
        inputs = run.tensor_names(c.in_rows[c.in_start[pos]:c.in_start[pos + 1]].tolist())
        w = int(c.worst[pos])
        names = run.columns.entry_names
        judged = c.state[w] >= 0
        return FrameworkSuspect(at, e.name, e.kind, ROLES[c.role[pos]], failed, inputs, None, run.module_path(at),
                                downstream=[names[i] for i in c.downstream[at]], first=pos == c.first,
                                tensor=failed[outs.index(w)], statistic=c.statistic[w] if judged else "",
                                stat_error=c.error[w] if judged else None, type=f"{e.prefix}.{e.op}")

    def json_text(self) -> str:
        """The JSON list of every suspect's ``to_json`` row, as ``jsonable.to_json_text`` encodes
        the rows of the objects (without making them)."""
        from precision_shell.jsonable import escape_high_controls

        if not len(self):
            return "[]"
        pieces = _row_pieces()
        p1, p2, p3, p4, p5, p6, p7, p8, p9, p10, p11, p12 = pieces[1:-1]
        between = pieces[-1] + ", " + pieces[0]       # one row's end, the next one's start
        # the document as one list of pieces, joined once (not a string per row, then those
        # joined: a second copy of ~150 MB and twice the time)
        out = ["[" + pieces[0]]
        add = out.extend
        for v0, v1, v2, v3, v4, v5, v6, v7, v8, v9, v10, v11, v12 in zip(*self._field_texts()):
            add((v0, p1, v1, p2, v2, p3, v3, p4, v4, p5, v5, p6, v6, p7, v7, p8, v8, p9, v9, p10, v10, p11, v11,
                 p12, v12, between))
        out[-1] = pieces[-1] + "]"
        text = "".join(out)
        del out
        return escape_high_controls(text)

    def _field_texts(self) -> tuple[list[str], ...]:
        """The JSON text of each field of :data:`_FIELDS` for every suspect, a column per field
        (a name quoted once)."""
        c, run = self.columns, self.run
        quote = json.encoder.encode_basestring       # what json.dumps(ensure_ascii=False) uses
        entries, entry_names = run.entries, run.columns.entry_names
        quoted = [quote(n) for n in entry_names]
        at_list, worst = c.entry.tolist(), c.worst.tolist()
        out_names = self._quoted_names(c.out_rows.tolist(), quoted)
        in_names = self._quoted_names(c.in_rows.tolist(), quoted)
        worst_names = self._quoted_names(worst, quoted)
        out_start, in_start = c.out_start.tolist(), c.in_start.tolist()
        texts: dict[str, str] = {}

        def once(text: str) -> str:
            found = texts.get(text)
            if found is None:
                found = texts[text] = quote(text)
            return found
        kept = [entries[at] for at in at_list]
        state, statistic, error, downstream = c.state, c.statistic, c.error, c.downstream
        judged = [state[w] >= 0 for w in worst]
        roles = [once(r) for r in ROLES]
        first = ["false"] * len(at_list)
        if c.first >= 0:
            first[c.first] = "true"
        columns = (
            [str(at) for at in at_list], [quoted[at] for at in at_list],
            [once(f"{e.prefix}.{e.op}") for e in kept], worst_names, [roles[r] for r in c.role.tolist()], first,
            [", ".join(out_names[a:b]) for a, b in zip(out_start, out_start[1:])],
            [", ".join(in_names[a:b]) for a, b in zip(in_start, in_start[1:])],
            [once(e.kind) for e in kept],
            [", ".join([once(m) for m in run.module_path(at)]) for at in at_list],
            [", ".join([quoted[i] for i in downstream[at]]) for at in at_list],
            [once(statistic[w]) if ok and statistic[w] else "null" for w, ok in zip(worst, judged)],
            [_number_text(error[w]) if ok else "null" for w, ok in zip(worst, judged)])
        return columns

    def _quoted_names(self, rows: list[int], quoted_entries: list[str]) -> list[str]:
        """JSON strings of the tensor names of ``rows`` (:meth:`StatsRun.tensor_names`): the
        entry's quoted name without its closing quote, then the path's part (quoted once)."""
        run = self.run
        row_entry, path_code = run.row_lists
        quote = json.encoder.encode_basestring
        tails = {code: quote(run.tails[code])[1:] for code in {path_code[row] for row in rows}}
        return [quoted_entries[row_entry[row]][:-1] + tails[path_code[row]] for row in rows]


def _number_text(value: float) -> str:
    """A relative error as the JSON row has it (``schema._number``: finite floats, else null)."""
    return float.__repr__(value) if isinstance(value, float) and math.isfinite(value) else "null"


_FIELDS = ("index", "op", "type", "tensor", "role", "first", "failed_outputs", "failed_inputs", "kind",
           "modules", "downstream", "statistic", "stat_error")
_PIECES: list[tuple[str, ...]] = []


def _row_pieces() -> tuple[str, ...]:
    """:func:`.schema.framework_row` of a statistics suspect encoded as ``json.dumps`` does, cut
    into the 14 constant texts around the 13 fields of :data:`_FIELDS` (found by encoding a row
    of marker values), so a key the schema gains is in these rows too."""
    if _PIECES:
        return _PIECES[0]
    marks = {name: f"\x01{i}\x01" for i, name in enumerate(_FIELDS)}
    s = FrameworkSuspect(marks["index"], marks["op"], marks["kind"], marks["role"], [marks["failed_outputs"]],
                         [marks["failed_inputs"]], None, [marks["modules"]], [marks["downstream"]],
                         tensor=marks["tensor"], statistic=marks["statistic"], type=marks["type"],
                         stat_error=1.0)
    row = framework_row(s)
    row["first"], row["stat_error"] = marks["first"], marks["stat_error"]
    rest = json.dumps(row, ensure_ascii=False, allow_nan=False)
    pieces = []
    for name in _FIELDS:       # in the schema's key order (a marker found twice or out of order: no)
        before, found, rest = rest.partition(json.dumps(marks[name]))
        assert found and json.dumps(marks[name]) not in rest, name
        pieces.append(before)
    pieces.append(rest)
    _PIECES.append(tuple(pieces))
    return _PIECES[0]
