"""``export {suspects,overflow,compare} -o FILE``: write the current finding list for the team.

Each analysis registers its exporters in ``EXPORTERS[(what, format)] = write(session, path)``;
files are written atomically into the output folder (or where ``-o`` says).
"""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path
from typing import Any, Callable

from precision_shell.atomic_write import write_atomic
from precision_shell.commands.registry import arg, command
from precision_shell.commands.results import Message
from precision_shell.errors import CommandError
from precision_shell.jsonable import to_json_text
from precision_shell.model.session import Session

EXPORTERS: dict[tuple[str, str], Callable[[Session, Path], int]] = {}
FORMATS = ("csv", "json", "fusion-switch", "keep-fp32")


def rows_text(rows: list[dict], fmt: str) -> str:
    """Rows (dicts with the same keys) as CSV or a JSON array; nested values JSON-encoded in CSV."""
    if fmt == "json":
        return to_json_text(rows) + "\n"
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(list(rows[0]) if rows else [])
    for row in rows:
        writer.writerow([json.dumps(v) if isinstance(v, (list, dict)) else
                         ("" if v is None else v) for v in row.values()])
    return out.getvalue()


def write_rows(path: Path, rows: list[dict], fmt: str) -> int:
    """:func:`rows_text` written to ``path``; the number of rows."""
    text = rows_text(rows, fmt)
    write_atomic(path, lambda fh: fh.write(text))
    return len(rows)


def _export_overflow(fmt: str) -> Callable[[Session, Path], int]:
    def export(session: Session, path: Path) -> int:
        scan = session.results.get("overflow")
        if scan is None:
            raise CommandError("no overflow scan yet: run `ac` first")
        return write_rows(path, [f.to_json() for f in scan.findings], fmt)
    return export


EXPORTERS[("overflow", "csv")] = _export_overflow("csv")
EXPORTERS[("overflow", "json")] = _export_overflow("json")


# what each export writes comes from: (the session result it reads, the command that makes it)
PREREQUISITES = {"suspects": ("vcs", "vcs"), "overflow": ("overflow", "ac"), "compare": ("compare", "vc")}


def ensure_prerequisite(session: Any, what: str) -> str | None:
    """Run the command whose result ``export WHAT`` writes when it has not run (as ``vcs`` runs
    ``vc`` and ``report`` runs ``ac``/``vcs``); the note saying so. The finding cursor the user was
    stepping through stays where it was."""
    from precision_shell.commands.registry import REGISTRY

    key, name = PREREQUISITES[what]
    if key in session.results:
        return None
    cursor = session.results.get("cursor")
    cmd = REGISTRY.for_session(REGISTRY.lookup(name), session)
    cmd.handler(session, cmd.parse([]))
    if cursor is not None:
        session.results["cursor"] = cursor
    return f"`{name}` had not run, so export ran it first"


def _default_name(what: str, fmt: str) -> str:
    ext = {"csv": "csv", "json": "json", "fusion-switch": "cfg", "keep-fp32": "txt"}[fmt]
    return f"{what}.{ext}" if fmt in ("csv", "json") else f"{what}_{fmt.replace('-', '_')}.{ext}"


@command("export", summary="Write the current finding list (suspects, overflow, compare) to a file.",
         example="export overflow -o overflow.csv\nexport suspects --format fusion-switch",
         args=[arg("what", choices=("suspects", "overflow", "compare"), help="which list"),
               arg("-o", "--output", metavar="FILE", complete="path",
                   help="file to write (default: <output folder>/<what>.<ext>)"),
               arg("--format", choices=FORMATS, default=None,
                   help="csv (default), json, fusion-switch, keep-fp32 (suspects only)")])
def export(session: Session, args: Any) -> Message:
    fmt = args.format or (Path(args.output).suffix.lstrip(".") if args.output else "") or "csv"
    if fmt not in FORMATS:
        fmt = "csv"
    exporter = EXPORTERS.get((args.what, fmt))
    if exporter is None:
        ok = sorted(f for w, f in EXPORTERS if w == args.what)
        raise CommandError(f"export {args.what} does not support --format {fmt}"
                           + (f" (supported: {', '.join(ok)})" if ok else " (no exporter yet)"))
    path = session.output_path(args.output, _default_name(args.what, fmt))
    ran = ensure_prerequisite(session, args.what)
    count = exporter(session, path)
    return Message(([ran] if ran else []) + [f"wrote {count} {args.what} row{'s' * (count != 1)} to {path}"],
                   data={"what": args.what, "format": fmt, "rows": count, "file": str(path)})
