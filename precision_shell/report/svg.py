"""Inline SVG: the metric chart along execution order, neighbourhood graphs, value histograms.

Hand-written SVG rather than a plotting library: the pictures are a few lines and rectangles,
hover text is SVG's own ``<title>`` (no script needed), and a 2,000-op chart stays ~150 bytes a
point. Every text is escaped; numbers are rounded to what a picture can show.
"""

from __future__ import annotations

import math
from html import escape as _html_escape

from precision_shell.analysis.inspect.neighbourhood import _LOW_COSINE_FILL, _ROLE_FILL
from precision_shell.report.layout import NODE_H, NODE_W, GraphPicture
from precision_shell.safe_text import escape_lines


def escape(text) -> str:
    """HTML-escaped, terminal controls but line breaks too (op names from data label the pictures)."""
    return _html_escape(escape_lines(str(text)))

CHART_W = 1100
PAD_L, PAD_R, PAD_T = 64, 16, 24
COS_H, ERR_H, GAP = 210, 130, 34
ERR_FLOOR = 1e-12       # max_abs_error 0 drawn here on the log scale


def _num(v: float) -> str:
    if v != v:
        return "nan"
    if math.isinf(v):
        return "inf" if v > 0 else "-inf"
    return f"{v:.6g}"


def _fmt(v: float) -> str:
    return f"{v:.1f}".rstrip("0").rstrip(".")


def _title(text: str) -> str:
    return f"<title>{escape(text)}</title>"


# ------------------------------------------------------------------------------------------------
# the chart of output cosine and max_abs_error along execution order

def metric_chart(points: list, threshold: float | None, labelled_roots: int) -> str:
    """Two panels sharing the x axis (execution order): the lowest output cosine, and the
    largest output max_abs_error on a log scale. Roots are vertical lines, the first divergence
    red and labelled; the first ``labelled_roots`` roots carry their op name."""
    if not points:
        return ""
    orders = [p.order for p in points]
    lo, hi = min(orders), max(orders)
    span = max(hi - lo, 1)
    plot_w = CHART_W - PAD_L - PAD_R

    def x(order: int) -> float:
        return PAD_L + (order - lo) / span * plot_w

    finite_cos = [p.cosine for p in points if p.cosine == p.cosine]
    cos_lo = min([0.0] + finite_cos)
    cos_top, cos_bottom = PAD_T, PAD_T + COS_H

    def y_cos(c: float) -> float:
        c = cos_lo if c != c else c
        return cos_bottom - (c - cos_lo) / (1.0 - cos_lo) * COS_H

    logs = [math.log10(max(p.max_abs_error, ERR_FLOOR)) for p in points
            if p.max_abs_error == p.max_abs_error and not math.isinf(p.max_abs_error)]
    log_lo = math.floor(min(logs)) if logs else -12
    log_hi = max(math.ceil(max(logs)) if logs else 0, log_lo + 1)
    err_top = cos_bottom + GAP
    err_bottom = err_top + ERR_H

    def y_err(e: float) -> float:
        if e != e or math.isinf(e):
            return err_top
        v = math.log10(max(e, ERR_FLOOR))
        return err_bottom - (v - log_lo) / (log_hi - log_lo) * ERR_H

    height = err_bottom + 34
    out = [f'<svg class="chart" id="metric-chart" xmlns="http://www.w3.org/2000/svg" '
           f'viewBox="0 0 {CHART_W} {height}" width="{CHART_W}" height="{height}">']
    # axes, grid and labels
    for c in sorted({cos_lo, (cos_lo + 1) / 2, 1.0}):
        yy = _fmt(y_cos(c))
        out.append(f'<line class="grid" x1="{PAD_L}" y1="{yy}" x2="{CHART_W - PAD_R}" y2="{yy}"/>'
                   f'<text class="tick" x="{PAD_L - 6}" y="{yy}" text-anchor="end" dy="4">{c:g}</text>')
    for v in range(log_lo, log_hi + 1, max(1, (log_hi - log_lo) // 4)):
        yy = _fmt(err_bottom - (v - log_lo) / (log_hi - log_lo) * ERR_H)
        out.append(f'<line class="grid" x1="{PAD_L}" y1="{yy}" x2="{CHART_W - PAD_R}" y2="{yy}"/>'
                   f'<text class="tick" x="{PAD_L - 6}" y="{yy}" text-anchor="end" dy="4">1e{v}</text>')
    out.append(f'<text class="axis" x="12" y="{cos_top + COS_H / 2}" transform="rotate(-90 12 '
               f'{cos_top + COS_H / 2})" text-anchor="middle">output cosine</text>'
               f'<text class="axis" x="12" y="{err_top + ERR_H / 2}" transform="rotate(-90 12 '
               f'{err_top + ERR_H / 2})" text-anchor="middle">max_abs_error</text>'
               f'<text class="axis" x="{PAD_L + plot_w / 2}" y="{height - 6}" text-anchor="middle">'
               f'execution order (#{lo} … #{hi}, {len(points)} compared ops)</text>')
    if threshold is not None and cos_lo <= threshold <= 1:
        yy = _fmt(y_cos(threshold))
        out.append(f'<line class="threshold" x1="{PAD_L}" y1="{yy}" x2="{CHART_W - PAD_R}" y2="{yy}">'
                   f'{_title(f"threshold {threshold:g}")}</line>')
    # roots under the data, so the points stay hoverable
    roots = [p for p in points if p.role == "root"]
    for k, p in enumerate(roots):
        xx = _fmt(x(p.order))
        kind = "root-marker first-divergence" if p.first else "root-marker"
        label = ""
        if p.first or k < labelled_roots:
            text = ("first divergence: " if p.first else "root: ") + p.op
            right = x(p.order) > PAD_L + plot_w * 0.6    # keep a label inside the chart
            label = (f'<text class="root-label" x="{_fmt(x(p.order) + (-4 if right else 4))}" '
                     f'y="{cos_top + 12 + 14 * min(k, 8)}" text-anchor="{"end" if right else "start"}">'
                     f'{escape(text)}</text>')
        out.append(f'<g class="{kind}" data-op="{escape(p.op)}" data-order="{p.order}">'
                   f'<line x1="{xx}" y1="{cos_top}" x2="{xx}" y2="{err_bottom}">'
                   f'{_title(f"#{p.order} {p.op} ({p.type}): root")}</line>{label}</g>')
    # the cosine line joins finite points only: a NaN cosine is no value, not a 0 (as the
    # terminal chart does, it is marked with an x on the panel's bottom edge, with a legend)
    cos_path = " ".join(f"{_fmt(x(p.order))},{_fmt(y_cos(p.cosine))}" for p in points if p.cosine == p.cosine)
    err_path = " ".join(f"{_fmt(x(p.order))},{_fmt(y_err(p.max_abs_error))}" for p in points)
    out.append(f'<polyline class="series cos" points="{cos_path}"/>'
               f'<polyline class="series err" points="{err_path}"/>')
    for p in points:
        tip = _title(f"#{p.order} {p.op} ({p.type})\ncosine {_num(p.cosine)}\n"
                     f"max_abs_error {_num(p.max_abs_error)}" + (f"\n{p.role}" if p.role else ""))
        bad = " bad" if p.role else ""
        xx = _fmt(x(p.order))
        if p.cosine == p.cosine:
            out.append(f'<circle class="pt cos{bad}" cx="{xx}" cy="{_fmt(y_cos(p.cosine))}" r="2.5">{tip}</circle>')
        else:
            x0, y0 = x(p.order), cos_bottom
            out.append(f'<path class="nan-mark" data-order="{p.order}" d="M{_fmt(x0 - 3.5)},{_fmt(y0 - 3.5)}'
                       f'L{_fmt(x0 + 3.5)},{_fmt(y0 + 3.5)}M{_fmt(x0 - 3.5)},{_fmt(y0 + 3.5)}'
                       f'L{_fmt(x0 + 3.5)},{_fmt(y0 - 3.5)}">{tip}</path>')
        out.append(f'<circle class="pt err{bad}" cx="{xx}" cy="{_fmt(y_err(p.max_abs_error))}" r="2">{tip}</circle>')
    nan_count = sum(1 for p in points if p.cosine != p.cosine)
    if nan_count:
        out.append(f'<text class="nan-legend" x="{CHART_W - PAD_R}" y="{cos_bottom - 6}" text-anchor="end">'
                   f'× NaN cosine ({nan_count} op{"s" if nan_count != 1 else ""}), on the edge</text>')
    out.append("</svg>")
    return "".join(out)


# ------------------------------------------------------------------------------------------------
# a neighbourhood graph

def _short(text: str, keep: int = 28) -> str:
    return text if len(text) <= keep else "…" + text[-(keep - 1):]


def _node_fill(node) -> str:
    # the colours of the DOT files `ni -s N` writes, so both pictures agree
    fill = _ROLE_FILL.get(node.role or "")
    if fill is None and node.failing:
        fill = _LOW_COSINE_FILL
    return fill or ("#e6f4ea" if node.cosine is not None else "#ffffff")


def graph_svg(picture: GraphPicture) -> str:
    out = [f'<svg class="hood" data-center="{escape(picture.center)}" xmlns="http://www.w3.org/2000/svg" '
           f'viewBox="0 0 {_fmt(picture.width)} {_fmt(picture.height)}" width="{_fmt(picture.width)}" '
           f'height="{_fmt(picture.height)}"><defs><marker id="arrow" viewBox="0 0 10 10" refX="10" '
           f'refY="5" markerWidth="7" markerHeight="7" orient="auto-start-reverse">'
           f'<path d="M0,0 L10,5 L0,10 z" fill="#555"/></marker></defs>']
    at = {n.key: n for n in picture.nodes}
    for e in picture.edges:
        a, b = at[e.src], at[e.dst]
        x1, y1 = a.x + NODE_W / 2, a.y + NODE_H
        x2, y2 = b.x + NODE_W / 2, b.y
        if b.y <= a.y:     # same or earlier layer: leave from the side
            y1, y2 = a.y + NODE_H / 2, b.y + NODE_H / 2
        cls = "edge ctrl" if e.kind == "control" else "edge"
        tip = "control" if e.kind == "control" else f"out {e.src_output} → in {e.dst_input}"
        out.append(f'<line class="{cls}" x1="{_fmt(x1)}" y1="{_fmt(y1)}" x2="{_fmt(x2)}" y2="{_fmt(y2)}" '
                   f'marker-end="url(#arrow)">{_title(f"{a.name} → {b.name}: {tip}")}</line>')
    for n in picture.nodes:
        center = n.key == picture.center
        detail = n.type + ("" if n.cosine is None else f"  cos {_num(n.cosine)[:8]}")
        if n.hidden:
            detail += f"  +{n.hidden}"
        tip = f"{n.name} ({n.type})\ncosine {'-' if n.cosine is None else _num(n.cosine)}" + \
              (f"\n{n.role}" if n.role else "") + (f"\n{n.hidden} more neighbours not shown" if n.hidden else "")
        out.append(f'<g class="node{" center" if center else ""}" data-op="{escape(n.name)}" '
                   f'data-role="{escape(n.role or "")}">{_title(tip)}'
                   f'<rect x="{_fmt(n.x)}" y="{_fmt(n.y)}" width="{NODE_W}" height="{NODE_H}" rx="8" '
                   f'fill="{_node_fill(n)}"/>'
                   f'<text x="{_fmt(n.x + 8)}" y="{_fmt(n.y + 20)}">{escape(_short(n.name))}</text>'
                   f'<text class="sub" x="{_fmt(n.x + 8)}" y="{_fmt(n.y + 38)}">{escape(_short(detail, 32))}</text></g>')
    out.append("</svg>")
    return "".join(out)


# ------------------------------------------------------------------------------------------------
# value histograms

HIST_W, HIST_H, HIST_TOP, HIST_PAD = 460, 190, 56, 28


def _bars(hist, x0: float, x1: float, peak: float, cls: str, left: float, width: float) -> list[str]:
    out = []
    for i, count in enumerate(hist.counts):
        if not count:
            continue
        lo, hi = hist.edges[i], hist.edges[i + 1]
        density = count / (hi - lo)
        bx = left + (lo - x0) / (x1 - x0) * width
        bw = max((hi - lo) / (x1 - x0) * width, 1.0)
        bh = density / peak * (HIST_H - HIST_TOP - HIST_PAD)
        out.append(f'<rect class="{cls}" x="{_fmt(bx)}" y="{_fmt(HIST_H - HIST_PAD - bh)}" '
                   f'width="{_fmt(bw)}" height="{_fmt(bh)}">{_title(f"[{lo:.4g}, {hi:.4g}): {count}")}</rect>')
    return out


def histogram_svg(series: list[tuple[str, str, object]], caption: str) -> str:
    """Histograms drawn over one value axis, as densities (count / bin width) so bins of
    different widths compare; ``series`` is (css class, legend, Histogram)."""
    shown = [(cls, name, h) for cls, name, h in series if h is not None and h.counts]
    out = [f'<svg class="hist" xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {HIST_W} {HIST_H}" '
           f'width="{HIST_W}" height="{HIST_H}"><text class="axis" x="{HIST_W / 2}" y="14" '
           f'text-anchor="middle">{escape(caption)}</text>']
    if shown:
        x0 = min(h.edges[0] for _, _, h in shown)
        x1 = max(h.edges[-1] for _, _, h in shown)
        peak = max(c / (h.edges[i + 1] - h.edges[i]) for _, _, h in shown for i, c in enumerate(h.counts))
        left, width = 12, HIST_W - 24
        for cls, _, h in shown:
            out += _bars(h, x0, x1, peak, cls, left, width)
        out.append(f'<line class="grid" x1="{left}" y1="{HIST_H - HIST_PAD}" x2="{left + width}" '
                   f'y2="{HIST_H - HIST_PAD}"/><text class="tick" x="{left}" y="{HIST_H - 10}">{x0:.4g}</text>'
                   f'<text class="tick" x="{left + width}" y="{HIST_H - 10}" text-anchor="end">{x1:.4g}</text>')
    legend = []
    for cls, name, h in series:
        extra = ""
        if h is not None:
            bad = [f"{n} {w}" for n, w in ((h.nan, "nan"), (h.pos_inf, "+inf"), (h.neg_inf, "-inf")) if n]
            extra = f" ({', '.join(bad)} not binned)" if bad else ""
            if not h.counts:
                extra = " (no finite values)" + extra
        legend.append(f'<text class="legend {cls}-text" x="12" y="{30 + 14 * len(legend)}">'
                      f'■ {escape(_short(name + extra, 70))}{_title(name + extra)}</text>')
    out += legend
    out.append("</svg>")
    return "".join(out)
