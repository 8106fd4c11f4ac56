"""Results as terminal text (tables via tabulate), CSV and one-line JSON."""

from __future__ import annotations

import csv
import io
import math
from dataclasses import replace
from functools import singledispatch
from typing import Any

from tabulate import tabulate

from precision_shell.commands.results import Message, Sections, Table
from precision_shell.jsonable import to_json_text
from precision_shell.render.style import PLAIN, Style


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
    return str(value)


def table_text(table: Table, style: Style = PLAIN) -> str:
    lines = []
    if table.title:
        lines.append(style(table.title, "bold"))
    if table.rows:
        rows = [[_cell(v) for v in row] for row in table.rows]
        body = tabulate(rows, headers=table.headers, tablefmt="simple", disable_numparse=True)
        body_lines = body.split("\n")
        # two header lines (names, rule) precede the rows
        for pos in table.highlight:
            if 0 <= pos < len(rows):
                body_lines[pos + 2] = style(body_lines[pos + 2], "bold_yellow")
        lines += body_lines
    else:
        lines.append("(no rows)")
    if table.total is not None and table.total > len(table.rows):
        lines.append(style(f"... {table.total - len(table.rows)} more (use -l 0)", "dim"))
    lines += table.notes
    lines += warning_lines(table)
    return "\n".join(lines)


def warning_lines(result: Any) -> list[str]:
    return [f"warning: {w}" for w in getattr(result, "warnings", ())]


@singledispatch
def render_text(result: Any, style: Style = PLAIN) -> str:
    return str(result)


@render_text.register
def _(result: Table, style: Style = PLAIN) -> str:
    return table_text(result, style)


@render_text.register
def _(result: Message, style: Style = PLAIN) -> str:
    return "\n".join(result.lines + warning_lines(result))


@render_text.register
def _(result: Sections, style: Style = PLAIN) -> str:
    lines = [style(result.title, "bold")] if result.title else []
    for heading, block in result.blocks:
        if isinstance(block, Table):
            if heading:
                lines.append(style(heading, "bold"))
            lines.append(table_text(block, style))
        elif block and isinstance(block[0], tuple):
            width = max(len(k) for k, _ in block) if block else 0
            if heading:
                lines.append(style(heading, "bold"))
            for key, value in block:
                lines.append(f"  {style(key.ljust(width), 'cyan')}  {value}")
        else:
            lines.append(f"  {style(heading, 'bold_yellow' if heading == 'errors' else 'bold')}")
            lines += [f"    {item}" for item in block]
    return "\n".join(lines)


def render_json(result: Any) -> str:
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
    writer.writerow(result.headers)
    for row in result.rows:
        writer.writerow([_cell(v) for v in row])
    return buf.getvalue().rstrip("\n")


def render(result: Any, fmt: str = "table", style: Style = PLAIN) -> str:
    # A result may restyle itself for a colour terminal (e.g. `pt -r` colours in-range values).
    if fmt == "table" and style.color and hasattr(result, "styled"):
        result = result.styled(style)
    if fmt == "json":
        return render_json(result)
    if fmt == "csv":
        return render_csv(result)
    return render_text(result, style)
