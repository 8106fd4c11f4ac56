"""``report -o FILE.html``: the session's findings as one self-contained HTML page (precision_shell.report).

Runs ``ac`` and ``vcs`` first when they have not run; needs the optional ``report`` extra (jinja2).
"""

from __future__ import annotations

from typing import Any

from precision_shell.atomic_write import write_atomic
from precision_shell.commands.registry import REGISTRY, arg, command
from precision_shell.commands.results import Message
from precision_shell.errors import CommandError, UsageError
from precision_shell.model.session import Session


@command("report",
         summary="Write a self-contained HTML report (open it in any browser, no server): workspace "
                 "summary, cosine/max_abs_error chart along execution order, suspect and overflow "
                 "tables, each root's neighbourhood, metrics, value histograms and fusion blame, the "
                 "fusion report, the exports, and the commands that produced it. Runs `ac`/`vcs` "
                 "first when needed.",
         example='report -o r.html\nvcs -c 0.95; report -o low.html --roots 3\n'
                 '(batch: pshell WS -c "report -o r.html")',
         args=[arg("-o", "--output", metavar="FILE", complete="path",
                   help="HTML file to write (default: <output folder>/report.html)"),
               arg("--roots", type=int, default=10, metavar="N",
                   help="root ops shown in detail, first N in execution order (default 10)")])
def report(session: Session, args: Any) -> Message:
    from precision_shell.report.html import INSTALL_HINT

    if args.roots < 0:
        raise UsageError("--roots must be 0 or more")
    try:
        import jinja2  # noqa: F401  (the optional extra)
    except ImportError:
        raise CommandError(f"report needs the optional extra: {INSTALL_HINT}") from None
    path = session.output_path(args.output, "report.html")    # refused before any long work
    from precision_shell.report.gather import ensure_results, gather
    from precision_shell.report.html import render_html

    notes = ensure_results(session)
    if getattr(session, "kind", "graph") != "graph":    # msprobe, capture, MindSpore graph-mode runs
        from precision_shell.report.framework import gather_framework as gather
    data = gather(session, roots=args.roots, notes=notes)
    text = render_html(data)
    write_atomic(path, lambda fh: fh.write(text))
    size = len(text.encode("utf-8"))
    lines = [f"wrote {path} ({size / 1024:.0f} KB): {len(data.suspect_rows)} failing ops, "
             f"{len(data.roots)} of {data.roots_total} roots in detail"
             + (f", {len(data.overflow.rows)} overflowing ops" if data.overflow is not None else "")]
    lines += [f"note: {n}" for n in notes]
    return Message(lines, data={"file": str(path), "bytes": size, "failing_ops": len(data.suspect_rows),
                                "roots": data.roots_total, "roots_shown": len(data.roots),
                                "notes": data.notes})


REGISTRY.share("framework", "report")     # the same page from the framework commands' results
