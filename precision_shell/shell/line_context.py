"""Where the cursor is in a command line, for completion: which command, which argument.

Tolerant of half-typed input (open quotes, open brackets) because it runs on every keystroke; the
real parser in :mod:`precision_shell.commands.runner` runs only when the line is submitted.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

_NUMBER = re.compile(r"^-?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?$")
# argparse actions that take no value after the flag
_NO_VALUE_ACTIONS = {"store_true", "store_false", "store_const", "append_const", "count",
                     "help", "version"}


@dataclass
class LineContext:
    words: list[str]                 # finished words of the statement under the cursor
    word: str                        # the word being typed ("" right after a space)
    redirect: bool = False           # the word is the file after ``>``
    in_brackets: bool = False        # inside a numpy slice: nothing to complete


def parse_line(text: str) -> LineContext:
    """Split the text before the cursor the way the runner will, stopping at the cursor."""
    words: list[str] = []
    current: list[str] = []
    quote: str | None = None
    depth = 0
    redirect = False
    for ch in text:
        if quote:
            if ch == quote:
                quote = None
            else:
                current.append(ch)
        elif ch in "'\"":
            quote = ch
        elif ch in "[(":
            depth += 1
            current.append(ch)
        elif ch in "])":
            depth = max(0, depth - 1)
            current.append(ch)
        elif depth:
            current.append(ch)
        elif ch == ";":
            words, current, redirect = [], [], False
        elif ch == ">":
            if current:
                words.append("".join(current))
            current, redirect = [], True
        elif ch.isspace():
            if current:
                words.append("".join(current))
                current = []
        else:
            current.append(ch)
    return LineContext(words, "".join(current), redirect, in_brackets=depth > 0)


def is_flag(word: str) -> bool:
    return word.startswith("-") and len(word) > 1 and not _NUMBER.match(word)


def takes_value(arg: Any) -> bool:
    return arg.kwargs.get("action") not in _NO_VALUE_ACTIONS and arg.kwargs.get("nargs") != 0


def arg_for_flag(command: Any, flag: str) -> Any | None:
    for a in command.args:
        if flag in a.flags:
            return a
    return None


@dataclass
class ArgumentSlot:
    """What the word at the cursor is: a flag, a flag's value or the N-th positional."""

    kind: str                        # "flag" | "value" | "positional"
    arg: Any = None                  # the registry Arg, when known
    position: int = 0
    used_flags: set[str] = field(default_factory=set)


def argument_slot(command: Any, words: list[str], word: str) -> ArgumentSlot:
    """Walk the finished words like argparse would, to place the word being typed."""
    positional = 0
    expecting = None
    used: set[str] = set()
    for w in words:
        if expecting is not None:
            expecting = None
            continue
        if is_flag(w):
            flag, has_value = w.split("=", 1)[0], "=" in w
            a = arg_for_flag(command, flag)
            used.update(a.flags if a is not None else (flag,))   # `-c` also uses `--cosine`
            if a is not None and takes_value(a) and not has_value:
                expecting = a
        else:
            positional += 1
    if expecting is not None:
        return ArgumentSlot("value", expecting, used_flags=used)
    if is_flag(word) or word == "-":
        return ArgumentSlot("flag", used_flags=used)
    positionals = [a for a in command.args if not a.flags[0].startswith("-")]
    arg = None
    if positional < len(positionals):
        arg = positionals[positional]
    elif positionals and positionals[-1].kwargs.get("nargs") in ("*", "+"):
        arg = positionals[-1]
    return ArgumentSlot("positional", arg, positional, used)
