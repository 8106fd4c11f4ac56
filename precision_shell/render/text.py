"""Results as terminal text (fitted to the terminal by ``render.layout``), CSV and one-line JSON."""

from __future__ import annotations

import csv
import io
import math
from dataclasses import dataclass, replace
from functools import singledispatch
from typing import Any

from precision_shell.commands.results import Chain, Chart, Marked, Message, Sections, Table
from precision_shell.jsonable import to_json_text
from precision_shell.render.layout import expanded_records, fit_table, wrap, wrap_lines
from precision_shell.render.style import PLAIN, Style
from precision_shell.safe_text import csv_row, escape_controls, escape_styled


def _cell(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, float):
        if math.isnan(value):
            return "nan"
        if math.isinf(value):
            return "inf" if value > 0 else "-inf"
        return f"{value:.6g}"
    if isinstance(value, (list, tuple)):
        return ", ".join(_cell(v) for v in value)
    return escape_controls(value)   # a name from data never breaks the row or drives the terminal


_MIN_VALUE = 20     # narrower than this, a panel value is left unwrapped


@dataclass(frozen=True)
class Layout:
    """How text output is fitted: terminal ``width`` (None: never cut, as for pipes and files),
    ``expanded`` (auto|on|off, psql's \\x) and whether REPL ``hints`` are shown."""

    width: int | None = None
    expanded: str = "auto"
    hints: bool = True


def table_text(table: Table, style: Style = PLAIN, layout: Layout = Layout()) -> str:
    width = layout.width
    lines = []
    if table.title:
        lines += [style(line, "bold") for line in wrap(escape_controls(table.title), width or 0)]
    if table.rows:
        rows = [[_cell(v) for v in row] for row in table.rows]
        fitted = fit_table(table.headers, rows, width, layout.expanded)
        if fitted is None:
            for pos, record in enumerate(expanded_records(table.headers, rows, width)):
                bold = pos in table.highlight
                lines += [style(line, "bold_yellow") if bold else line for line in record]
        else:
            lines += fitted.header + [fitted.rule]
            for pos, row_lines in enumerate(fitted.rows):
                bold = pos in table.highlight
                lines += [style(line, "bold_yellow") if bold else line for line in row_lines]
            if fitted.hidden:
                note = (f"columns not shown at this width: {', '.join(fitted.hidden)} "
                        "(`config set expanded on` or --format csv shows them)")
                lines += [style(line, "dim") for line in wrap(note, width or 0, "  ")]
    else:
        lines.append("(no rows)")
    if table.total is not None and table.total > len(table.rows):
        more = table.more or f"... {table.total - len(table.rows)} more (use -l 0)"
        lines += [style(line, "dim") for line in wrap(more, width or 0, "  ")]
    notes = table.notes + (table.hints if layout.hints else [])
    lines += [wrapped for note in notes + warning_lines(table)
              for wrapped in wrap(escape_controls(note), width or 0, "  ")]
    return "\n".join(lines)


def warning_lines(result: Any) -> list[str]:
    return [f"warning: {escape_controls(w)}" for w in getattr(result, "warnings", ())]


@singledispatch
def render_text(result: Any, style: Style = PLAIN, layout: Layout = Layout()) -> str:
    return wrap_lines(str(result), layout.width)


@render_text.register
def _(result: Table, style: Style = PLAIN, layout: Layout = Layout()) -> str:
    return table_text(result, style, layout)


@render_text.register
def _(result: Message, style: Style = PLAIN, layout: Layout = Layout()) -> str:
    lines = [escape_controls(line) for line in result.lines]
    return wrap_lines("\n".join(lines + warning_lines(result)), layout.width)


@render_text.register
def _(result: Sections, style: Style = PLAIN, layout: Layout = Layout()) -> str:
    lines = [style(escape_controls(result.title), "bold")] if result.title else []
    for heading, block in result.blocks:
        if isinstance(block, Table):
            if heading:
                lines.append(style(heading, "bold"))
            lines.append(table_text(block, style, layout))
        elif block and isinstance(block[0], tuple):
            width = max(len(k) for k, _ in block) if block else 0
            if heading:
                lines.append(style(heading, "bold"))
            hang = " " * (width + 4)
            room = (layout.width or 0) - len(hang)
            for key, value in block:
                key, value = escape_controls(key), escape_controls(value)
                first, *rest = wrap(str(value), room) if room > _MIN_VALUE else [str(value)]
                lines.append(f"  {style(key.ljust(width), 'cyan')}  {first}")
                lines += [hang + line for line in rest]
        else:
            lines.append(f"  {style(heading, 'bold_yellow' if heading == 'errors' else 'bold')}")
            lines += [w for item in block for w in wrap(f"    {escape_controls(item)}", layout.width or 0, " " * 6)]
    return "\n".join(lines)


@render_text.register
def _(result: Chart, style: Style = PLAIN, layout: Layout = Layout()) -> str:
    from precision_shell.render.plot import chart_text   # plotext: on first chart

    return chart_text(result, style, layout.width)


def render_json(result: Any) -> str:
    if hasattr(result, "json_text"):      # a result that writes its own document (framework vcs)
        return result.json_text()
    return to_json_text(result.to_json() if hasattr(result, "to_json") else {"message": str(result)})


def render_csv(result: Any) -> str:
    """Tables as CSV (header row first); other results fall back to plain text."""
    if not isinstance(result, Table):
        table = getattr(result, "to_table", None)
        if table is None:   # warnings go to stderr in csv format (frontend), not into the text
            return render_text(replace(result, warnings=[]) if getattr(result, "warnings", None) else result)
        result = table()
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    # a Marked cell is two fields: its value, and its mark as true/false in a column of its own
    marked = {i: cell.field for row in result.rows for i, cell in enumerate(row) if isinstance(cell, Marked)}
    header: list[str] = []
    for i, name in enumerate(result.headers):
        header += [name, marked[i]] if i in marked else [name]
    writer.writerow(header)
    for row in result.rows:
        cells: list[str] = []
        for i, value in enumerate(row):
            if i not in marked:
                cells.append(_cell(value))
            elif isinstance(value, Marked):
                cells += [_cell(value.value), "true" if value.mark else "false"]
            else:
                cells += [_cell(value), "false"]
        writer.writerow(csv_row(cells))    # a cell from data is never a spreadsheet formula
    return buf.getvalue().rstrip("\n")


def render(result: Any, fmt: str = "table", style: Style = PLAIN, layout: Layout = Layout()) -> str:
    if isinstance(result, Chain):   # `curve --then ac`: each part as it renders alone
        return "\n".join(render(part, fmt, style, layout) for i, part in enumerate(result.parts)
                         if fmt == "table" or result.documents is None or i in result.documents)
    # A result may restyle itself for a colour terminal (e.g. `pt -r` colours in-range values).
    if fmt == "table" and style.color and hasattr(result, "styled"):
        result = result.styled(style)
    if fmt == "json":
        return render_json(result)
    if fmt == "csv":
        return render_csv(result)
    # the last guard: only pshell's own colour codes and line breaks reach the terminal raw
    return escape_styled(render_text(result, style, layout), any_colour=isinstance(result, Chart))
