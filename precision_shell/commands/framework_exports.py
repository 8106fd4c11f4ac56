"""The framework-dump variant of ``export``: the finding lists and the compare as CSV/JSON, and the
keep-fp32 list (root API/module names, as the framework's precision lists take them)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

from precision_shell.atomic_write import write_atomic
from precision_shell.commands.export import _default_name, ensure_prerequisite, write_rows
from precision_shell.commands.framework_inspect import FRAMEWORK, variant
from precision_shell.commands.results import Message
from precision_shell.errors import CommandError
from precision_shell.formats.msprobe.layout import parse_entry_name


def _need(session, key: str, command: str):
    found = session.results.get(key)
    if found is None:
        raise CommandError(f"no {key} result yet: run `{command}` first")
    return found


def keep_fp32_names(suspects, name_of=None) -> list[str]:
    """Root entries as the framework's precision lists name them: API ``Functional.softmax``,
    module ``Module.attn.SelfAttention`` (no call counter, no direction), each once; ``name_of``
    (a session's own rule, e.g. MindSpore graph mode's kernel types) names an entry instead."""
    names = []
    for s in suspects:
        if s.role == "root":
            if name_of is not None:
                names.append(name_of(s.op))
                continue
            e = parse_entry_name(s.op)
            names.append(f"{e.prefix}.{e.op}")
    return list(dict.fromkeys(names))


def _write_keep_fp32(session, path: Path) -> int:
    names = keep_fp32_names(_need(session, "vcs", "vcs"), getattr(session, "keep_fp32_name", None))
    if not names:
        raise CommandError("no root entry in the suspect list: nothing to keep in fp32")
    write_atomic(path, lambda fh: fh.write("".join(n + "\n" for n in names)))
    return len(names)


def _write_compare_csv(session, path: Path) -> int:
    from precision_shell.analysis.compare.msprobe.csv_layout import iter_table_rows, write_compare_csv

    found = _need(session, "compare", "vc")
    write_compare_csv(path, iter_table_rows(found.rows, found.mode, session.selected.stack), found.mode)
    return len(found.rows)


def _write_compare_json(session, path: Path) -> int:
    from precision_shell.analysis.compare.msprobe.csv_layout import table_rows

    found = _need(session, "compare", "vc")
    return write_rows(path, table_rows(found.rows, found.mode, session.selected.stack), "json")


EXPORTERS: dict[tuple[str, str], Callable[[Any, Path], int]] = {
    ("suspects", "csv"): lambda s, p: write_rows(p, [x.to_flat_json() for x in _need(s, "vcs", "vcs")], "csv"),
    ("suspects", "json"): lambda s, p: write_rows(p, [x.to_json() for x in _need(s, "vcs", "vcs")], "json"),
    ("suspects", "keep-fp32"): _write_keep_fp32,
    ("overflow", "csv"): lambda s, p: write_rows(p, [f.to_json() for f in _need(s, "overflow", "ac").findings],
                                                 "csv"),
    ("overflow", "json"): lambda s, p: write_rows(p, [f.to_json() for f in _need(s, "overflow", "ac").findings],
                                                  "json"),
    ("compare", "csv"): _write_compare_csv,
    ("compare", "json"): lambda s, p: _write_compare_json(s, p),
}


@variant(FRAMEWORK, "export", summary="Write the current finding list (suspects, overflow, compare) "
                                      "to a file; keep-fp32: root API/module names for the precision list.",
         example="vcs; export suspects --format keep-fp32\nac; export overflow -o overflow.json\n"
                 "vc; export compare -o compare.csv")
def export(session, args) -> Message:
    fmt = args.format or (Path(args.output).suffix.lstrip(".") if args.output else "") or "csv"
    writer = EXPORTERS.get((args.what, fmt))
    if writer is None:
        ok = sorted(f for w, f in EXPORTERS if w == args.what)
        raise CommandError(f"export {args.what} does not support --format {fmt} on framework dumps "
                           f"(supported: {', '.join(ok)})")
    path = session.output_path(args.output, _default_name(args.what, fmt))
    ran = ensure_prerequisite(session, args.what)
    count = writer(session, path)
    return Message(([ran] if ran else []) + [f"wrote {count} {args.what} row{'s' * (count != 1)} to {path}"],
                   data={"what": args.what, "format": fmt, "rows": count, "file": str(path)})

