"""Run command lines and show their results: shared by batch mode and the REPL.

Rendering and redirects happen here, so a command's handler only returns data. User errors are one
``error: ...`` line; internal errors are one line pointing at the log file, with the traceback in
the log. Nothing here ever lets an exception escape for a single bad command.
"""

from __future__ import annotations

import os
import shutil
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, TextIO

from precision_shell.atomic_write import write_atomic
from precision_shell.commands import REGISTRY
from precision_shell.commands.process_policy import running_script
from precision_shell.commands.runner import (ClearRequest, Outcome, SourceRequest, Statement, execute,
                                             split_statements)
from precision_shell.errors import FormatError, PshellError, UsageError
from precision_shell.formats.input_files import read_text_input
from precision_shell.logfile import log_internal_error
from precision_shell.model.output_guard import require_parent
from precision_shell.render.style import PLAIN, Style
from precision_shell.render.text import Layout, render
from precision_shell.safe_text import escape_controls

EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_FINDINGS, EXIT_INTERRUPTED = 0, 1, 2, 3, 130
_MAX_SOURCE_DEPTH = 20
SCRIPT_CAP = 4 << 20     # a script is pshell command lines: a few KB


def read_script(path: str) -> list[str]:
    """The lines of a script, read only from a regular file of at most SCRIPT_CAP bytes (a FIFO,
    /dev/zero or a folder given to `source`/`-f` is one line, never a hang)."""
    return read_text_input(path, "script", SCRIPT_CAP).splitlines()


def terminal_width(stream: Any = None) -> int | None:
    """Columns to fit text to: the terminal's width when ``stream`` is a terminal, else an
    explicit ``COLUMNS``; ``None`` (never cut) for pipes and files."""
    stream = stream or sys.stdout
    if getattr(stream, "isatty", lambda: False)():
        return shutil.get_terminal_size().columns
    columns = os.environ.get("COLUMNS", "")
    return int(columns) if columns.isdigit() and int(columns) > 0 else None


def stopped_by_ctrl_c(outcome: Outcome) -> bool:
    """A command that Ctrl-C stopped early (its results are partial): what follows it in a line
    or a script does not run."""
    return bool(getattr(outcome.result, "interrupted", False))


@dataclass
class Frontend:
    session: Any
    fmt: str = "table"
    style: Style = PLAIN
    out: TextIO = field(default_factory=lambda: sys.stdout)
    err: TextIO = field(default_factory=lambda: sys.stderr)
    log_path: Path | None = None
    failed: bool = False
    usage_failed: bool = False
    findings: bool = False
    fail_on_findings: bool = False   # CI gate: findings exit 3; a command that could not judge, 1
    interrupted: bool = False   # a command stopped early on Ctrl-C and returned partial results
    quit: bool = False
    warned: int = 0  # session.load_warnings already shown
    width: Callable[[], int | None] = field(default=lambda: None)   # terminal columns, read per command
    expanded: str = "auto"      # `config set expanded`: one field per line when a table does not fit
    hints: bool = True          # REPL hints (`next` steps through...); batch output has none
    timing: bool = False        # `config set timing on`: each statement's run time on stderr
    sourcing: int = 0           # depth of nested `source FILE` scripts
    allow_shell: bool = False   # --allow-shell: scripts may run `!CMD` and `| PIPELINE` too
    script_line: str | None = None   # "FILE:LINE" of the script line running now

    def _refuse_in_script(self, statement: Statement) -> PshellError | None:
        """Scripts are data: a line of a `source`d or `-f` script never starts a process
        (``!CMD``, ``| PIPELINE``) unless --allow-shell was given; typed lines may."""
        if self.script_line is None or self.allow_shell:
            return None
        if statement.shell is None and not statement.pipe:
            return None
        what = "a shell command (`!`)" if statement.shell is not None else "a pipeline (`|`)"
        return UsageError(f"{self.script_line}: refusing to run {what} from a script; scripts "
                          f"never start processes unless pshell is started with --allow-shell")

    def error(self, message: str, lines: bool = False) -> None:
        # one line; red on a colour terminal (the style is plain in batch, pipes and NO_COLOR);
        # names from data in it are escaped, so it stays one line and drives nothing. ``lines``:
        # an error laid out on lines of its own (eval's caret under the expression)
        shown = ("\n".join(map(escape_controls, str(message).split("\n"))) if lines
                 else escape_controls(message))
        print(self.style(f"error: {shown}", "red"), file=self.err, flush=True)

    def warn(self, message: str) -> None:
        print(f"warning: {escape_controls(message)}", file=self.err, flush=True)

    def show_warnings(self) -> None:
        """The session's new load warnings (problems that lose nothing: no failed exit)."""
        warnings = getattr(self.session, "load_warnings", [])
        for message in warnings[self.warned:]:
            self.warn(message)
        self.warned = len(warnings)

    def run_line(self, line: str) -> list[Outcome]:
        """Run every statement of ``line``; stop early only on quit."""
        try:
            statements = split_statements(line)
        except PshellError as exc:
            self._record_error(exc)
            return []
        outcomes = []
        for statement in statements:
            outcome = self.run_statement(statement)
            outcomes.append(outcome)
            if outcome.quit:
                self.quit = True
                break
            if stopped_by_ctrl_c(outcome):   # Ctrl-C stops the rest of the line as well
                break
        return outcomes

    def run_statement(self, statement: Statement) -> Outcome:
        started = time.perf_counter()
        try:
            return self._run_statement(statement)
        finally:
            if self.timing:
                print(f"time: {time.perf_counter() - started:.3f} s", file=self.err, flush=True)

    def follow_config(self) -> None:
        """Take the display settings of `config set` (expanded tables, timing)."""
        from precision_shell.config import current_config

        config = current_config()
        self.expanded, self.timing = config.expanded, config.timing

    def _run_statement(self, statement: Statement) -> Outcome:
        refused = self._refuse_in_script(statement)
        if refused is not None:
            self._record_error(refused)
            return Outcome(statement, error=refused)
        if statement.shell is not None:
            try:
                self._run_shell(statement.shell, None)
            except PshellError as exc:
                self._record_error(exc)
                return Outcome(statement, error=exc)
            return Outcome(statement)
        try:
            outcome = execute(self.session, statement, REGISTRY)
        except KeyboardInterrupt:
            raise
        except Exception as exc:  # a bug: keep the shell alive, keep the traceback in the log
            log_internal_error(statement.text)
            where = f" (details in {self.log_path})" if self.log_path else ""
            self.error(f"internal error in `{statement.text}`: {type(exc).__name__}: {exc}{where}")
            self.failed = True
            return Outcome(statement, error=PshellError(str(exc)))
        self.show_warnings()  # e.g. a cache entry the command ignored
        try:
            if outcome.error is not None:
                self._record_error(outcome.error)
            elif outcome.help_text is not None:
                self.emit(outcome.help_text.rstrip("\n"), statement)
            elif isinstance(outcome.result, SourceRequest):
                self.run_script(outcome.result.path)
            elif isinstance(outcome.result, ClearRequest):
                self.clear_screen()
            elif outcome.result is not None and not outcome.quit:
                result = outcome.result
                if getattr(result, "findings", 0):
                    self.findings = True
                if getattr(result, "interrupted", False):
                    self.interrupted = True
                plain = bool(statement.redirect or statement.pipe)
                style = PLAIN if plain else self.style
                fmt = statement.fmt or self.fmt
                layout = Layout(None if plain else self.width(), self.expanded, self.hints)
                self.emit(render(result, fmt, style, layout), statement)
                if fmt != "table":   # the document keeps its shape; its warnings go beside it
                    for warning in getattr(result, "warnings", ()):
                        self.warn(warning)
                self._gate(statement, getattr(result, "unjudged", None))
        except PshellError as exc:
            self._record_error(exc)
        if outcome.command is not None and outcome.command.name == "config":
            self.follow_config()
        return outcome

    def run_script(self, path: str) -> None:
        """``source FILE``: its lines run as if typed, like ``pshell -f FILE``."""
        if self.sourcing >= _MAX_SOURCE_DEPTH:
            raise UsageError(f"{path}: `source` nested more than {_MAX_SOURCE_DEPTH} deep")
        lines = read_script(path)
        if self.session is not None and hasattr(self.session, "add_input_file"):
            self.session.add_input_file(path, "a script run with `source`")   # never written over
        self.run_script_lines(path, lines)

    def run_script_lines(self, path: str, lines: list[str]) -> None:
        """The lines of the script ``path`` (``source FILE``, ``pshell -f FILE``), each known by
        its FILE:LINE; stops on quit and on Ctrl-C."""
        outer = self.script_line
        self.sourcing += 1
        try:
            with running_script():      # commands that start processes ask it (process_policy)
                for number, line in enumerate(lines, 1):
                    self.script_line = f"{path}:{number}"
                    outcomes = self.run_line(line)
                    if self.quit or any(stopped_by_ctrl_c(o) for o in outcomes):
                        break
        finally:
            self.sourcing -= 1
            self.script_line = outer

    def _run_shell(self, command: str, text: str | None) -> None:
        """``!COMMAND`` (no input) or ``CMD | PIPELINE`` (``text`` on its stdin) through
        ``/bin/sh``; its output goes where pshell's own output goes."""
        if self.script_line is not None and not self.allow_shell:   # the last guard (see above)
            raise UsageError(f"{self.script_line}: refusing to start `{command}` from a script "
                             f"(--allow-shell)")
        import subprocess   # (`!`/pipes only: not a one-shot command's start)

        try:
            done = subprocess.run(command, shell=True, input=text, capture_output=True,
                                  text=True, errors="replace")
        except OSError as exc:
            raise PshellError(f"cannot run `{command}`: {exc.strerror or exc}") from None
        if done.stdout:
            self.out.write(done.stdout if done.stdout.endswith("\n") else done.stdout + "\n")
            self.out.flush()
        if done.stderr:
            self.err.write(done.stderr if done.stderr.endswith("\n") else done.stderr + "\n")
            self.err.flush()
        if done.returncode != 0:
            raise PshellError(f"`{command}` exited with status {done.returncode}")

    def _gate(self, statement, unjudged: str | None) -> None:
        """A gated run fails (exit 1) when a command could not judge what it was asked to."""
        if unjudged and self.fail_on_findings:
            self.error(f"`{statement.text.strip()}` could not judge: {unjudged} (--fail-on-findings)")
            self.failed = True

    def _record_error(self, exc: PshellError) -> None:
        self.error(str(exc), lines=getattr(exc, "laid_out", False))
        if isinstance(exc, UsageError):
            self.usage_failed = True
        else:
            self.failed = True

    def clear_screen(self) -> None:
        """``clear``: home the cursor and erase a terminal's screen; a pipe or file gets nothing
        (the sequence is written here, not rendered: rendered text never carries controls)."""
        if getattr(self.out, "isatty", lambda: False)():
            self.out.write("\x1b[H\x1b[2J")
            self.out.flush()

    def emit(self, text: str, statement=None) -> None:
        if statement is not None and statement.pipe:
            self._run_shell(statement.pipe, text + "\n")
            return
        if statement is not None and statement.redirect:
            self._write_redirect(text, statement.redirect, statement.append)
            return
        self.out.write(text)        # (not text + "\n": a 150 MB JSON document copied once more)
        self.out.write("\n")
        self.out.flush()

    def _write_redirect(self, text: str, given: str, append: bool) -> None:
        """``> FILE`` / ``>> FILE``: checked by the output guard (never into an input folder, over
        an input file, or into a folder that does not exist), then written or appended."""
        if self.session is not None:
            target = self.session.output_path(given)
        else:
            target = Path(given).expanduser()
            require_parent(target)
        if not append:
            write_atomic(target, lambda fh: fh.write(text + "\n"))
            return
        try:
            with open(target, "a", encoding="utf-8") as fh:
                fh.write(text + "\n")
        except OSError as exc:
            raise FormatError(target, f"cannot append ({exc.strerror or exc})") from None

    def exit_code(self) -> int:
        if self.usage_failed:
            return EXIT_USAGE
        if self.failed:
            return EXIT_FAILED
        if self.fail_on_findings and self.findings:
            return EXIT_FINDINGS
        return EXIT_OK
