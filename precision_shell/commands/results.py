"""Result objects that commands return. Rendering lives in ``precision_shell.render``.

Every result can give a JSON form (``to_json``) for ``--format json``; list-like results also give
a :class:`Table` for text and CSV output. ``warnings`` are shown as ``warning: ...`` lines: below
the text on screen, on stderr with ``--format json|csv`` (the document on stdout keeps its shape).
``unjudged`` says why a command could not judge what it was asked to (nothing compared, files
unreadable): with ``--fail-on-findings`` that fails the run (exit 1).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class Table:
    """Rows for the terminal and CSV; ``json_rows`` keep the stable snake_case keys."""

    headers: list[str]
    rows: list[list[Any]]
    title: str = ""
    json_rows: list[dict] | None = None
    notes: list[str] = field(default_factory=list)
    total: int | None = None            # rows before a limit was applied
    highlight: set[int] = field(default_factory=set)   # row positions to emphasise
    findings: int = 0       # problems found (overflowing/failing ops): --fail-on-findings exits 3
    interrupted: bool = False   # stopped early by Ctrl-C: the rows are partial (batch exits 130)
    warnings: list[str] = field(default_factory=list)
    unjudged: str | None = None
    hints: list[str] = field(default_factory=list)   # how to go on: shown in the REPL only
    more: str | None = None     # the footer when a limit hid rows (default: "... N more (use -l 0)")
    shown: list[int] | None = None  # positions (in to_json's list) of the rows the -l cut kept; None: all

    def to_json(self) -> list[dict]:
        if self.json_rows is not None:
            return self.json_rows
        return [dict(zip(self.headers, row)) for row in self.rows]

    def shown_json(self, first: int | None = None) -> list[dict]:
        """The JSON rows of the rows shown (MCP answers a finding list with these), the
        ``first`` of them when given."""
        rows = self.to_json()
        shown = range(len(rows)) if self.shown is None else self.shown
        return [rows[pos] for pos in shown[:first]]


class Marked(str):
    """A cell with a decoration for the eye (``root  ◀ first divergence``): it reads as the
    decorated text; CSV gets ``value`` and the mark as a true/false column named ``field``."""

    def __new__(cls, value: Any, mark: str = "", field: str = "first") -> "Marked":
        cell = super().__new__(cls, f"{value}  {mark}" if mark else str(value))
        cell.value, cell.mark, cell.field = value, mark, field
        return cell


@dataclass
class Message:
    """Plain lines of text (status messages, panels without a table form)."""

    lines: list[str]
    data: Any = None   # JSON form when the message carries data
    interrupted: bool = False
    warnings: list[str] = field(default_factory=list)
    unjudged: str | None = None

    def to_json(self) -> Any:
        return self.data if self.data is not None else {"message": "\n".join(self.lines)}


@dataclass
class Sections:
    """A panel made of titled key/value blocks and tables (info, node panels)."""

    title: str
    blocks: list[tuple[str, Any]]        # (heading, list[tuple[str, str]] | Table | list[str])
    data: Any = None

    def to_json(self) -> Any:
        return self.data


@dataclass
class Chart:
    """A terminal chart (``plot``, ``vcs --plot``, ``ac --plot``): values along execution order.
    ``kind`` is ``line`` or ``bar``; ``marks`` name the points drawn on top (label -> x positions),
    ``hline`` a threshold. Text rendering fits it to the terminal (render.plot); CSV and JSON get
    the points."""

    title: str
    kind: str
    x: list[int]
    y: list[float]
    names: list[str]                     # what each point is (op names)
    ylabel: str
    xlabel: str = "execution order"
    marks: dict[str, list[int]] = field(default_factory=dict)
    hline: float | None = None
    notes: list[str] = field(default_factory=list)
    data: Any = None
    warnings: list[str] = field(default_factory=list)
    interrupted: bool = False
    overlay: dict[str, list[float]] = field(default_factory=dict)   # more lines over the same x

    def to_json(self) -> Any:
        return self.data

    def to_table(self) -> Table:
        """CSV: the points, each mark a true/false column of its own (a first divergence is a
        root too)."""
        marks = {label: set(xs) for label, xs in self.marks.items()}
        return Table(["order", "name", self.ylabel, *marks],
                     [[x, n, y, *("true" if x in xs else "false" for xs in marks.values())]
                      for x, y, n in zip(self.x, self.y, self.names)])


@dataclass
class Chain:
    """Results of one statement shown one after the other (``curve --then ac``): text joined,
    one JSON document each; findings, interruption and warnings are the parts' together."""

    parts: list
    documents: list[int] | None = None    # the parts that give a JSON document (None: all)

    @property
    def findings(self) -> int:
        return sum(getattr(p, "findings", 0) or 0 for p in self.parts)

    @property
    def interrupted(self) -> bool:
        return any(getattr(p, "interrupted", False) for p in self.parts)

    @property
    def warnings(self) -> list[str]:
        return [w for p in self.parts for w in getattr(p, "warnings", ())]

    @property
    def unjudged(self) -> str | None:
        return next((p.unjudged for p in self.parts if getattr(p, "unjudged", None)), None)

    def to_json(self) -> Any:
        return [p.to_json() for i, p in enumerate(self.parts) if self.documents is None or i in self.documents]
