"""``config show`` / ``config set KEY VALUE``: settings that outlive the session (INI file)."""

from __future__ import annotations

from precision_shell.commands.registry import arg, command
from precision_shell.commands.results import Message, Table
from precision_shell.config import KEYS, current_config, format_value, save_config
from precision_shell.errors import FormatError, UsageError


@command("config", summary="Show or change settings: threshold, limit, pager, output folder, "
                           "editing mode, colour (saved to the config file).",
         example="config show\nconfig set threshold 0.95\nconfig set pager off\n"
                 "config set editing_mode vi",
         needs_session=False,
         args=[arg("action", nargs="?", default="show", choices=("show", "set"),
                   help="show (default) or set"),
               arg("key", nargs="?", choices=tuple(KEYS), metavar="KEY",
                   help="one of: " + ", ".join(KEYS)),
               arg("value", nargs="?", metavar="VALUE",
                   help="new value (on/off for pager and color; vi/emacs for editing_mode)")])
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
    try:
        where = save_config(cfg)
        lines.append(f"saved to {where}")
        saved = True
    except FormatError as exc:
        lines.append(f"applied for this session only: {exc}")
        saved = False
    return Message(lines, data={"setting": key, "value": value, "saved": saved,
                                "config_file": str(cfg.path)})
