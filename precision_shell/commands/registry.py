"""The one command registry: name, aliases, argparse parser, handler, help, example, completers.

The REPL, batch mode and the tests all go through it, so a command behaves the same everywhere.
Parsers raise instead of exiting (argparse's default would kill the shell on a typo).

The registry of the shell (``REGISTRY``) starts from a static table (:mod:`.table`): every
command's name, aliases, summary and module, which kinds of session share or vary it. Help,
completion and availability read the table; a command's module is imported on its first use, so
a one-shot ``pshell WS -c vc`` imports the compare's modules and no other command's.
"""

from __future__ import annotations

import argparse
import importlib
import re
from dataclasses import dataclass, field
from typing import Any, Callable

from precision_shell.commands.command_table import CommandInfo, CommandTable
from precision_shell.commands.table import TABLE
from precision_shell.errors import CommandError, UsageError

OUTPUT_FORMATS = ("table", "csv", "json")


class HelpRequested(Exception):
    """``CMD -h``: carries the parser's help text to whoever renders it."""

    def __init__(self, text: str):
        super().__init__(text)
        self.text = text


_INVALID_CHOICE = re.compile(r"invalid choice: '(?P<given>[^']*)' \(choose from (?P<choices>.*)\)$")


def _with_suggestion(message: str) -> str:
    """argparse's 'invalid choice' with a did-you-mean when a choice is close (`config set colour`
    -> color)."""
    m = _INVALID_CHOICE.search(message)
    if not m:
        return message
    import difflib   # (here: only a mistyped word needs it)

    choices = re.findall(r"'([^']*)'", m["choices"])
    close = difflib.get_close_matches(m["given"], choices, n=2, cutoff=0.6)
    return f"{message}; did you mean {' or '.join(close)}?" if close else message


class CommandArgumentParser(argparse.ArgumentParser):
    def error(self, message: str):
        raise UsageError(f"{self.prog}: {_with_suggestion(message)} (see `help {self.prog}`)")

    def exit(self, status: int = 0, message: str | None = None):
        if status:
            raise UsageError(message.strip() if message else f"{self.prog}: bad arguments")
        raise HelpRequested(self.format_help())

    def print_help(self, file=None):
        raise HelpRequested(self.format_help())


@dataclass(frozen=True)
class Arg:
    """One argparse argument plus what the REPL should complete for it."""

    flags: tuple[str, ...]
    kwargs: dict[str, Any]
    # "op" | "tensor" | "golden" | "path" | "command" | "dump", or a kind of value the session has
    # (shell.completer.VALUE_KINDS: "run" | "device" | "step" | "time" | "optype" | "metric")
    complete: str | None = None
    signed: bool = False         # its value may start with "-" (``--sort -cosine``)


def arg(*flags: str, complete: str | None = None, signed: bool = False, **kwargs: Any) -> Arg:
    return Arg(flags, kwargs, complete, signed)


@dataclass
class Command:
    name: str
    handler: Callable[..., Any]
    summary: str
    example: str
    aliases: tuple[str, ...] = ()
    args: tuple[Arg, ...] = ()
    needs_session: bool = True
    _parser: CommandArgumentParser | None = field(default=None, repr=False)

    @property
    def parser(self) -> CommandArgumentParser:
        if self._parser is None:
            alias_text = f" (alias: {', '.join(self.aliases)})" if self.aliases else ""
            parser = CommandArgumentParser(
                prog=self.name, description=self.summary + alias_text,
                epilog="example:\n  " + self.example.replace("\n", "\n  "),
                formatter_class=argparse.RawDescriptionHelpFormatter, allow_abbrev=False,
            )
            for a in self.args:
                parser.add_argument(*a.flags, **a.kwargs)
            if "--format" not in self.flags():
                # the runner takes a statement's own --format (commands/runner.py) before the
                # parser sees it: shown here so usage, options and examples agree
                parser.add_argument_group("output").add_argument(
                    "--format", choices=OUTPUT_FORMATS, help="this statement's output format "
                                                             "(default: pshell's --format, table)")
            self._parser = parser
        return self._parser

    def parse(self, argv: list[str]) -> argparse.Namespace:
        # argparse reads a value starting with "-" as a flag: glue it to its option first
        signed = {f for a in self.args if a.signed for f in a.flags}
        glued: list[str] = []
        for word in argv:
            if glued and glued[-1] in signed and word.startswith("-"):
                glued[-1] = f"{glued[-1]}={word}"
            else:
                glued.append(word)
        return self.parser.parse_args(glued)

    def help_text(self) -> str:
        return self.parser.format_help()

    def flags(self) -> list[str]:
        out = ["-h", "--help"]
        for a in self.args:
            out += [f for f in a.flags if f.startswith("-")]
        return out

    def completer_for(self, flag_or_position: str | int) -> str | None:
        """Completion kind of an option (by flag) or of the N-th positional argument."""
        positionals = [a for a in self.args if not a.flags[0].startswith("-")]
        if isinstance(flag_or_position, int):
            if flag_or_position < len(positionals):
                return positionals[flag_or_position].complete
            if positionals and positionals[-1].kwargs.get("nargs") in ("*", "+"):
                return positionals[-1].complete
            return None
        for a in self.args:
            if flag_or_position in a.flags:
                return a.complete
        return None


class Registry:
    """Commands by name and alias. A session of another kind than graph mode (``session.kind``,
    e.g. ``"framework"``) runs a command's *variant* for that kind when one is registered, the
    command itself when it is shared with that kind or needs no session, and refuses it otherwise.
    With a ``table``, the table's commands and variants are known before their modules are
    imported, and a module is imported when its command is first looked up."""

    def __init__(self, table: CommandTable | None = None) -> None:
        self._commands: dict[str, Command] = {}
        self._by_alias: dict[str, Command] = {}
        self._variants: dict[tuple[str, str], Command] = {}
        self._shared: dict[str, set[str]] = {}
        self._bases: dict[str, str] = {}
        # the table's entries (by name and alias) whose module has not been imported yet
        self._unloaded: dict[str, CommandInfo] = {}
        self._unloaded_variants: dict[tuple[str, str], CommandInfo] = {}
        if table is not None:
            for info in table.commands:
                for name in (info.name, *info.aliases):
                    self._unloaded[name] = info
            self._unloaded_variants.update(table.variants)
        # the table's shares and bases, apart from what the modules declare (which the table's
        # test compares with the table)
        self._table_shared = {k: set(v) for k, v in table.shared.items()} if table else {}
        self._table_bases = dict(table.bases) if table else {}

    def _load(self, info: CommandInfo, key: str | tuple[str, str]) -> None:
        """Import the module of ``info``, which registers command ``key`` (a name, or a
        variant's (kind, name)) and whatever else it has."""
        importlib.import_module(info.module)
        self._unloaded = {n: i for n, i in self._unloaded.items() if n not in self._by_alias}
        self._unloaded_variants = {k: i for k, i in self._unloaded_variants.items() if k not in self._variants}
        if key in self._unloaded or key in self._unloaded_variants:   # the table is wrong: a bug
            raise RuntimeError(f"command table: importing {info.module} did not register {key!r}")

    def add(self, cmd: Command) -> Command:
        for name in (cmd.name, *cmd.aliases):
            if name in self._by_alias:
                raise ValueError(f"command name {name!r} registered twice")
            self._by_alias[name] = cmd
        self._commands[cmd.name] = cmd
        return cmd

    def command(self, name: str, *, summary: str, example: str, aliases: tuple[str, ...] = (),
                args: tuple[Arg, ...] | list[Arg] = (), needs_session: bool = True):
        """Decorator registering ``handler(session, args) -> result``."""

        def register(handler: Callable[..., Any]) -> Callable[..., Any]:
            self.add(Command(name, handler, summary, example, tuple(aliases), tuple(args),
                             needs_session))
            return handler

        return register

    def variant(self, kind: str, name: str, *, summary: str | None = None, example: str | None = None,
                args: tuple[Arg, ...] | list[Arg] | None = None):
        """Decorator registering ``handler(session, args)`` as command ``name`` on ``kind``
        sessions; summary, example and arguments default to the command's own."""
        base = self.get(name)
        if base is None:
            raise ValueError(f"variant of {name!r}: no such command")

        def register(handler: Callable[..., Any]) -> Callable[..., Any]:
            if (kind, name) in self._variants:
                raise ValueError(f"{kind} variant of {name!r} registered twice")
            self._variants[(kind, name)] = Command(
                name, handler, summary or base.summary, example or base.example, base.aliases,
                tuple(base.args if args is None else args), base.needs_session)
            return handler

        return register

    def share(self, kind: str, *names: str) -> None:
        """Commands whose own handler works on ``kind`` sessions too (next/prev/goto, pt, cp)."""
        self._shared.setdefault(kind, set()).update(names)

    def inherit(self, kind: str, base: str) -> None:
        """``kind`` sessions run ``base``'s variants and shared commands where ``kind`` has no
        variant of its own (MindSpore graph-mode dumps open as framework runs)."""
        self._bases[kind] = base

    def _runs_on(self, kind: str, name: str, needs_session: bool) -> str | None:
        """Whose registration of ``name`` runs on ``kind`` sessions: "graph" for the command
        itself, a kind for that kind's variant, None when none does."""
        while True:
            if (kind == "graph" or not needs_session or name in self._shared.get(kind, ())
                    or name in self._table_shared.get(kind, ())):
                return "graph"
            if (kind, name) in self._variants or (kind, name) in self._unloaded_variants:
                return kind
            kind = self._bases.get(kind) or self._table_bases.get(kind)
            if kind is None:
                return None

    def available(self, cmd: Command, session: Any) -> Command | None:
        """The command to run on ``session`` (see the class docstring); None when ``session``
        is of a kind the command does not support."""
        owner = self._runs_on(getattr(session, "kind", "graph"), cmd.name, cmd.needs_session)
        if owner is None or owner == "graph":
            return cmd if owner else None
        key = (owner, cmd.name)
        if key not in self._variants:
            self._load(self._unloaded_variants[key], key)
        return self._variants[key]

    def for_session(self, cmd: Command, session: Any) -> Command:
        """:meth:`available`, or CommandError in one line saying why not."""
        found = self.available(cmd, session)
        if found is None:
            kind = getattr(session, "kind", "graph")
            raise CommandError(f"{cmd.name}: graph-mode only; not available on {kind} dumps")
        return found

    def get(self, name: str) -> Command | None:
        """The command named or aliased ``name`` (its module imported on first use), or None."""
        cmd = self._by_alias.get(name)
        if cmd is None and name in self._unloaded:
            self._load(self._unloaded[name], name)
            cmd = self._by_alias.get(name)
        return cmd

    def lookup(self, name: str) -> Command:
        cmd = self.get(name)
        if cmd is None:
            import difflib   # (here: only a mistyped command needs it)

            close = difflib.get_close_matches(name, self.all_names(), n=3, cutoff=0.5)
            hint = f"; did you mean {' or '.join(close)}?" if close else "; type `help` for the list"
            raise UsageError(f"unknown command {name!r}{hint}")
        return cmd

    def info(self, name: str) -> CommandInfo | None:
        """Name, aliases and summary of the command named or aliased ``name``, importing nothing."""
        cmd = self._by_alias.get(name)
        if cmd is not None:
            return CommandInfo(cmd.name, cmd.handler.__module__, cmd.summary, cmd.aliases, cmd.needs_session)
        return self._unloaded.get(name)

    def overview(self, session: Any) -> list[tuple[CommandInfo, str | None]]:
        """Every command by name with the summary it has on ``session`` (its variant's on
        another kind of session), None where it does not run there; importing nothing."""
        kind = getattr(session, "kind", "graph")
        out = []
        for name in sorted(set(self._commands) | {i.name for i in self._unloaded.values()}):
            info = self.info(name)
            owner = self._runs_on(kind, name, info.needs_session)
            if owner is None or owner == "graph":
                out.append((info, info.summary if owner else None))
                continue
            variant = self._variants.get((owner, name))
            out.append((info, variant.summary if variant else self._unloaded_variants[(owner, name)].summary))
        return out

    def load_all(self) -> None:
        """Import every module of the table (`commands()`, `variants()`: the MCP tests, table_make)."""
        while self._unloaded:
            name, info = next(iter(self._unloaded.items()))
            self._load(info, name)
        while self._unloaded_variants:
            key, info = next(iter(self._unloaded_variants.items()))
            self._load(info, key)

    def commands(self) -> list[Command]:
        """Every command, each module imported."""
        self.load_all()
        return sorted(self._commands.values(), key=lambda c: c.name)

    def variants(self) -> dict[tuple[str, str], Command]:
        """Every kind's variants by (kind, name), each module imported."""
        self.load_all()
        return dict(self._variants)

    def imported(self) -> tuple[set[str], set[tuple[str, str]]]:
        """Names and variant keys the modules imported so far registered."""
        return set(self._commands), set(self._variants)

    def declared(self) -> tuple[dict[str, set[str]], dict[str, str]]:
        """The shares and bases the imported modules declared (not the table's)."""
        return {kind: set(names) for kind, names in self._shared.items()}, dict(self._bases)

    def all_names(self) -> list[str]:
        return sorted(set(self._by_alias) | set(self._unloaded))


REGISTRY = Registry(TABLE)
command = REGISTRY.command
