"""Charts as terminal text, drawn by plotext (a kept, pure-Python terminal plotting library).

The chart takes the terminal's width and a height that leaves the prompt and a few lines of the
previous output on screen; without a terminal (``> file``, pipes) it is 100 x 25. Without colour
(NO_COLOR, ``--no-color``, pipes, files) it is plain characters: plotext's colour codes are
removed, and marks are told apart by their symbols, which the legend under the chart names.
"""

from __future__ import annotations

import math
import re
import shutil

from precision_shell.commands.results import Chart
from precision_shell.render.style import PLAIN, Style
from precision_shell.safe_text import escape_controls

FILE_SIZE = (100, 25)
MIN_HEIGHT, MAX_HEIGHT = 12, 40
# each mark's symbol and colour; the legend names them
MARKERS = {"root": ("◆", "red"), "first divergence": ("▼", "magenta"), "producer": ("▼", "magenta"),
           # curve events
           "skipped": ("◆", "red"), "scale drop": ("▼", "magenta"), "divergence": ("▲", "red"),
           "spike": ("●", "yellow")}
EDGE = ("✕", "red")     # a NaN or infinite value: drawn on the chart's bottom (NaN, -inf) or top edge
_ANSI = re.compile(r"\x1b\[[0-9;]*m")


def chart_size(width: int | None) -> tuple[int, int]:
    if width is None:
        return FILE_SIZE
    lines = shutil.get_terminal_size((width, FILE_SIZE[1] + 8)).lines
    return width, max(MIN_HEIGHT, min(MAX_HEIGHT, lines - 8))


def chart_text(chart: Chart, style: Style = PLAIN, width: int | None = None) -> str:
    import plotext as plt

    names = [escape_controls(n) for n in chart.names]   # op names from data label the ticks
    plt.clear_figure()
    cols, rows = chart_size(width)
    plt.plotsize(cols, rows)
    plt.theme("pro" if style.color else "clear")
    xs, ys = _finite(chart.x, chart.y)
    if chart.kind == "bar":
        if xs:
            plt.bar(xs, ys, color="orange" if style.color else None, width=0.2)
    elif xs:
        plt.plot(xs, ys, marker="braille", color="cyan" if style.color else None,
                 label=chart.ylabel if chart.overlay else None)
    for (name, values), colour in zip(chart.overlay.items(), ("green", "orange", "blue")):
        ox, oy = _finite(chart.x, values)
        if ox:
            plt.plot(ox, oy, marker="braille" if style.color else "dot",
                     color=colour if style.color else None, label=name)
            ys = ys + oy
    if chart.hline is not None:
        plt.hline(chart.hline, "gray" if style.color else None)
    legend = []
    low, high = (min(ys), max(ys)) if ys else (0.0, 1.0)
    if chart.kind == "bar":
        low = 0.0

    def drawn_at(y: float) -> float:
        return y if math.isfinite(y) else (high if y > 0 else low)

    values = dict(zip(chart.x, chart.y))
    for label, positions in chart.marks.items():
        symbol, colour = MARKERS.get(label, ("●", "yellow"))
        shown = [x for x in positions if x in values]
        if shown:
            plt.scatter(shown, [drawn_at(values[x]) for x in shown], marker=symbol,
                        color=colour if style.color else None)
        legend.append(f"{symbol} {escape_controls(label)}")
    edge = [x for x, y in zip(chart.x, chart.y) if not math.isfinite(y)]
    if edge:
        plt.scatter(edge, [drawn_at(values[x]) for x in edge], marker=EDGE[0],
                    color=EDGE[1] if style.color else None)
        legend.append(f"{EDGE[0]} nan/inf ({len(edge)}, on the edge)")
    if len(chart.x) <= 12 and sum(len(n) + 2 for n in names) < cols - 10:
        plt.xticks(chart.x, names)     # few points: name them
    if chart.kind == "bar" and xs:
        plt.ylim(0, max(ys) * 1.1 or 1)
    plt.xlabel(escape_controls(chart.xlabel))
    plt.ylabel(escape_controls(chart.ylabel))
    text = plt.build()
    plt.clear_figure()
    if not style.color:
        text = _ANSI.sub("", text)
    lines = [style(escape_controls(chart.title), "bold")] + [line.rstrip() for line in text.split("\n")]
    if legend:
        lines.append("  " + "   ".join(legend))
    lines += [f"  {escape_controls(note)}" for note in chart.notes]
    lines += [f"warning: {escape_controls(w)}" for w in chart.warnings]
    return "\n".join(lines)


def _finite(xs: list[int], ys: list[float]) -> tuple[list[int], list[float]]:
    kept = [(x, y) for x, y in zip(xs, ys) if math.isfinite(y)]
    return [x for x, _ in kept], [y for _, y in kept]
