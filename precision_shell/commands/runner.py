"""Split a command line into statements and run each through the registry.

``vcs -c 0.95 > low.txt; pt fc1/MatMul:output:0[0, :8]``: statements end at ``;``, a trailing
``> FILE`` / ``>> FILE`` redirects, quotes group words, and brackets keep a numpy slice with spaces
in one word. ``CMD | PIPELINE`` hands the rest of the statement to the shell as a pipeline that
reads the command's plain output; a statement starting with ``!`` is a shell command taking the
rest of the line (``;`` included). Execution returns an :class:`Outcome` and never raises for
user errors; running pipelines and shell commands is the front end's job.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from precision_shell.commands.registry import OUTPUT_FORMATS, REGISTRY, Command, HelpRequested, Registry
from precision_shell.errors import PshellError, UsageError




@dataclass
class Statement:
    argv: list[str]
    redirect: str | None = None
    append: bool = False
    text: str = ""
    fmt: str | None = None      # a per-statement `--format table|csv|json`
    pipe: str | None = None     # `CMD | grep X`: a shell pipeline fed the command's output
    shell: str | None = None    # `!ls -l`: a shell command instead of a pshell command


def take_format_option(argv: list[str]) -> tuple[list[str], str | None]:
    """Remove a ``--format X`` that belongs to the shell, not to the command (any command whose
    parser has no ``--format`` of its own accepts it, e.g. ``vcs --format csv > low.csv``)."""
    out, fmt, i = [], None, 0
    while i < len(argv):
        word = argv[i]
        if word == "--format" and i + 1 < len(argv) and argv[i + 1] in OUTPUT_FORMATS:
            fmt, i = argv[i + 1], i + 2
            continue
        if word.startswith("--format=") and word.split("=", 1)[1] in OUTPUT_FORMATS:
            fmt, i = word.split("=", 1)[1], i + 1
            continue
        out.append(word)
        i += 1
    return out, fmt


@dataclass
class Outcome:
    statement: Statement
    command: Command | None = None
    result: Any = None
    error: PshellError | None = None
    help_text: str | None = None
    quit: bool = False

    @property
    def ok(self) -> bool:
        return self.error is None


class QuitRequest:
    """Returned by ``quit``/``exit``: the front end stops reading commands."""


class ClearRequest:
    """Returned by ``clear``: the front end clears a terminal screen (nothing in batch output)."""


@dataclass
class SourceRequest:
    """Returned by ``source FILE``: the front end runs the file's lines as a script."""

    path: str


@dataclass
class _Parsed:
    words: list[str]
    redirect: str | None = None
    append: bool = False
    pipe: str | None = None


def _in_regex(current: list[str]) -> bool:
    """Inside an unclosed ``/regex/`` word, where ``|`` is alternation, not a pipe."""
    return bool(current) and current[0] == "/" and current.count("/") == 1


def _words(text: str) -> _Parsed:
    words: list[str] = []
    current: list[str] = []
    quote: str | None = None
    depth = 0
    redirect_at: int | None = None
    append = False
    in_word = False
    pipe: str | None = None
    i = 0
    while i < len(text):
        ch = text[i]
        if quote:
            if ch == quote:
                quote = None
            elif ch == "\\" and quote == '"' and i + 1 < len(text) and text[i + 1] in '"\\':
                i += 1
                current.append(text[i])
            else:
                current.append(ch)
        elif ch in "'\"":
            quote, in_word = ch, True
        elif ch == "[":
            depth += 1
            current.append(ch)
            in_word = True
        elif ch == "]":
            depth = max(0, depth - 1)
            current.append(ch)
        elif ch.isspace() and depth == 0:
            if in_word:
                words.append("".join(current))
                current, in_word = [], False
        elif ch == ">" and depth == 0 and redirect_at is None:
            if in_word:
                words.append("".join(current))
                current, in_word = [], False
            append = text.startswith(">>", i)
            i += 2 if append else 1
            redirect_at = len(words)
            continue
        elif ch == "|" and depth == 0 and not _in_regex(current):
            pipe = text[i + 1:].strip()
            if not pipe:
                raise UsageError(f"'|' needs a shell command after it: {text.strip()}")
            break
        else:
            current.append(ch)
            in_word = True
        i += 1
    if quote:
        raise UsageError(f"unterminated {quote} quote in: {text.strip()}")
    if in_word:
        words.append("".join(current))
    if redirect_at is None:
        return _Parsed(words, pipe=pipe)
    if pipe is not None:
        raise UsageError(f"'>' before '|': put the redirect at the end of the pipeline: {text.strip()}")
    target = words[redirect_at:]
    if len(target) != 1:
        raise UsageError(f"redirect needs exactly one file name after '>': {text.strip()}")
    return _Parsed(words[:redirect_at], target[0], append)


def _split_parts(line: str, track_brackets: bool) -> tuple[list[str], int]:
    parts: list[str] = []
    current: list[str] = []
    quote: str | None = None
    depth = 0
    for pos, ch in enumerate(line):
        if ch == "!" and not quote and not "".join(current).strip():
            current.append(line[pos:])   # a shell command: the rest of the line is its own
            break
        if quote:
            quote = None if ch == quote else quote
        elif ch in "'\"":
            quote = ch
        elif ch == "[" and track_brackets:
            depth += 1
        elif ch == "]" and track_brackets:
            depth = max(0, depth - 1)
        elif ch == ";" and depth == 0:
            parts.append("".join(current))
            current = []
            continue
        elif ch == "#" and depth == 0 and not "".join(current).strip():
            break  # a comment line in a script
        current.append(ch)
    parts.append("".join(current))
    return parts, depth


def split_statements(line: str) -> list[Statement]:
    """Split at ``;`` outside quotes and numpy-slice brackets; drop empty statements and ``#``
    comments. An unbalanced ``[`` (a regex like ``/[a/``) does not swallow the rest of the line."""
    parts, open_brackets = _split_parts(line, track_brackets=True)
    if open_brackets:
        parts, _ = _split_parts(line, track_brackets=False)
    statements = []
    for part in parts:
        if not part.strip():
            continue
        if part.strip().startswith("!"):
            command_line = part.strip()[1:].strip()
            if not command_line:
                raise UsageError("'!' needs a shell command, e.g. `!ls -l`")
            statements.append(Statement(["!"], text=part.strip(), shell=command_line))
            continue
        parsed = _words(part)
        if parsed.words:
            statements.append(Statement(parsed.words, parsed.redirect, parsed.append, part.strip(),
                                        pipe=parsed.pipe))
        elif parsed.pipe is not None:
            raise UsageError(f"'|' needs a pshell command before it: {part.strip()}")
    return statements


def execute(session: Any, statement: Statement, registry: Registry = REGISTRY) -> Outcome:
    """Run one statement. User errors come back in ``Outcome.error``; bugs still raise."""
    outcome = Outcome(statement)
    try:
        cmd = registry.for_session(registry.lookup(statement.argv[0]), session)
        outcome.command = cmd
        argv = statement.argv[1:]
        if "--format" not in cmd.flags():
            argv, statement.fmt = take_format_option(argv)
        args = cmd.parse(argv)
        if cmd.needs_session and session is None:
            raise PshellError(f"{cmd.name}: no workspace loaded")
        # the commands that produced the session's results (the report lists them, itself too):
        # a command that failed produced nothing and is taken out again
        history = session.history if isinstance(getattr(session, "history", None), list) else []
        history.append(statement.text or " ".join(statement.argv))
        ran = False
        try:
            outcome.result = cmd.handler(session, args)
            ran = True
        finally:
            if not ran:
                history.pop()
            if session is not None and hasattr(session, "after_command"):
                session.after_command()
        outcome.quit = isinstance(outcome.result, QuitRequest)
    except HelpRequested as req:
        outcome.help_text = req.text
    except PshellError as exc:
        outcome.error = exc
    return outcome
