"""The report as one HTML page: jinja2 fills ``templates/report.html.j2`` (autoescaped), the
pictures come from :mod:`.svg`, the exports are embedded gzip-packed and
unpacked into download links by the page's script. Nothing is fetched when the
page opens: styles, script and images are all inline."""

from __future__ import annotations

import base64
import gzip
import math
from typing import Any

from precision_shell.commands.results import Table
from precision_shell.render.text import _cell
from precision_shell.report.gather import ExportFile, ReportData
from precision_shell.report.svg import histogram_svg, graph_svg, metric_chart
from precision_shell.safe_text import escape_lines

from precision_shell.errors import install_hint

INSTALL_HINT = install_hint("report")


def _sort_key(value: Any) -> str:
    """What a numeric cell sorts by: the number, '' (last) for NaN, +/-1e308 for infinities."""
    if isinstance(value, float):
        if value != value:
            return ""
        if math.isinf(value):
            return "1e308" if value > 0 else "-1e308"
    return repr(value)


def packed(f: ExportFile) -> str:
    """An export as base64 of its gzip: the page's script unpacks it into a ``blob:`` download
    link. Plain base64 ``data:`` links made 7.5 MB of a 9 MB report for 2,000 failing ops, and
    Chromium does not download ``data:`` URLs over 2 MB."""
    return base64.b64encode(gzip.compress(f.text.encode("utf-8"), mtime=0)).decode("ascii")


def _histograms(h) -> str:
    values = histogram_svg([("npu", f"NPU {h.npu_tensor}", h.npu), ("golden", f"golden {h.golden_tensor}", h.golden)],
                           "NPU vs golden values (density)")
    error = histogram_svg([("error", "NPU − golden", h.error)], "error NPU − golden") \
        if h.error is not None else ""
    return values + error


def render_html(data: ReportData) -> str:
    import jinja2
    from markupsafe import Markup

    # autoescape makes names from data HTML-safe; finalize also escapes the terminal controls in
    # them (a saved page is read with `less` and `cat` too)
    env = jinja2.Environment(loader=jinja2.PackageLoader("precision_shell.report", "templates"),
                             autoescape=True, undefined=jinja2.StrictUndefined,
                             finalize=lambda v: escape_lines(v) if type(v) is str else v)
    env.tests["table"] = lambda v: isinstance(v, Table)
    env.tests["pair"] = lambda v: isinstance(v, tuple) and len(v) == 2
    env.globals.update(fmt=_cell, sort_key=_sort_key, packed=packed)
    template = env.get_template("report.html.j2")
    labelled = max(len(data.roots), 1)
    return template.render(
        data=data,
        chart=Markup(metric_chart(data.points, data.threshold, labelled)),
        graphs=[Markup(graph_svg(r.graph)) if r.graph is not None else "" for r in data.roots],
        hists=[Markup(_histograms(r.histograms)) if r.histograms is not None else "" for r in data.roots])
