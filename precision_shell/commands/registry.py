"""The one command registry: name, aliases, argparse parser, handler, help, example, completers.

The REPL, batch mode and the tests all go through it, so a command behaves the same everywhere.
Parsers raise instead of exiting (argparse's default would kill the shell on a typo).
"""

from __future__ import annotations

import argparse
import difflib
import re
from dataclasses import dataclass, field
from typing import Any, Callable

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
    command itself when it is shared with that kind or needs no session, and refuses it otherwise."""

    def __init__(self) -> None:
        self._commands: dict[str, Command] = {}
        self._by_alias: dict[str, Command] = {}
        self._variants: dict[tuple[str, str], Command] = {}
        self._shared: dict[str, set[str]] = {}
        self._bases: dict[str, str] = {}

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
        base = self._commands[name]

        def register(handler: Callable[..., Any]) -> Callable[..., Any]:
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

    def available(self, cmd: Command, session: Any) -> Command | None:
        """The command to run on ``session`` (see the class docstring); None when ``session``
        is of a kind the command does not support."""
        kind = getattr(session, "kind", "graph")
        while True:
            if kind == "graph" or not cmd.needs_session or cmd.name in self._shared.get(kind, ()):
                return cmd
            found = self._variants.get((kind, cmd.name))
            if found is not None or kind not in self._bases:
                return found
            kind = self._bases[kind]

    def for_session(self, cmd: Command, session: Any) -> Command:
        """:meth:`available`, or CommandError in one line saying why not."""
        found = self.available(cmd, session)
        if found is None:
            kind = getattr(session, "kind", "graph")
            raise CommandError(f"{cmd.name}: graph-mode only; not available on {kind} dumps")
        return found

    def get(self, name: str) -> Command | None:
        return self._by_alias.get(name)

    def lookup(self, name: str) -> Command:
        cmd = self.get(name)
        if cmd is None:
            close = difflib.get_close_matches(name, list(self._by_alias), n=3, cutoff=0.5)
            hint = f"; did you mean {' or '.join(close)}?" if close else "; type `help` for the list"
            raise UsageError(f"unknown command {name!r}{hint}")
        return cmd

    def commands(self) -> list[Command]:
        return sorted(self._commands.values(), key=lambda c: c.name)

    def all_names(self) -> list[str]:
        return sorted(self._by_alias)


REGISTRY = Registry()
command = REGISTRY.command
