"""``config show`` / ``config set KEY VALUE [--save]``: settings for this session, and with
``--save`` for the next ones too (INI file)."""

from __future__ import annotations

from precision_shell.commands.registry import arg, command
from precision_shell.commands.results import Message, Table
from precision_shell.config import KEYS, current_config, format_value, load_config, save_config
from precision_shell.errors import FormatError, UsageError


@command("config", summary="Show or change settings: threshold, limit, pager, output folder, "
                           "editing mode, colour, expanded tables, timing. `config set` changes "
                           "this session only; `config set KEY VALUE --save` also writes the config file.",
         example="config show\nconfig set threshold 0.95\nconfig set expanded on\n"
                 "config set editing_mode vi --save",
         needs_session=False,
         args=[arg("action", nargs="?", default="show", choices=("show", "set"),
                   help="show (default) or set"),
               arg("key", nargs="?", choices=tuple(KEYS), metavar="KEY",
                   help="one of: " + ", ".join(KEYS)),
               arg("value", nargs="?", metavar="VALUE",
                   help="new value (on/off for pager, color and timing; vi/emacs for "
                        "editing_mode; auto/on/off for expanded)"),
               arg("--save", action="store_true",
                   help="also write the setting to the config file (default: this session only)")])
def config(session, args) -> Table | Message:
    cfg = current_config()
    if args.action == "show":
        if args.value is not None:
            raise UsageError("config show takes at most one KEY")
        names = [args.key] if args.key else list(KEYS)
        values = cfg.values()
        rows = [[name, format_value(values[name]), KEYS[name].help] for name in names]
        notes = [f"config file: {cfg.path}"] + list(cfg.warnings)
        return Table(["setting", "value", "meaning"], rows, notes=notes,
                     json_rows=[{"setting": name, "value": values[name]} for name in names])
    if args.key is None or args.value is None:
        raise UsageError("config set needs KEY VALUE, e.g. `config set limit 50` "
                         f"(settings: {', '.join(KEYS)})")
    # Only the key set here: `-o DIR` from the command line stays until `output` itself is set.
    key, value = cfg.set_and_apply(session, args.key, args.value)
    lines = [f"{key} = {format_value(value)}"]
    saved = False
    if not args.save:
        lines.append(f"for this session only (`config set {key} {args.value} --save` keeps it)")
        return Message(lines, data={"setting": key, "value": value, "saved": saved,
                                    "config_file": str(cfg.path)})
    try:
        _check_config_place(session, cfg.path)
        # only this key changes in the file: other session-only settings stay unsaved
        on_file = load_config(cfg.path)
        on_file.set(key, args.value)
        where = save_config(on_file)
        lines.append(f"saved to {where}")
        saved = True
    except FormatError as exc:
        lines.append(f"applied for this session only: {exc}")
    return Message(lines, data={"setting": key, "value": value, "saved": saved,
                                "config_file": str(cfg.path)})


def _check_config_place(session, path) -> None:
    """The config file is pshell's to write, but like every file pshell writes it goes through
    the output guard: never over another input, never inside an input tree or precision_data."""
    if session is None or path is None or not hasattr(session, "output_guard"):
        return
    from precision_shell.model.output_guard import FILE, resolved

    guard = session.output_guard()
    real = resolved(path)
    guard.places = [p for p in guard.places if not (p.kind == FILE and p.real == real
                                                    and p.what == "the config file")]
    problem = guard.problem(real, False)
    if problem is not None:
        raise FormatError(path, f"refusing to write {problem}")
