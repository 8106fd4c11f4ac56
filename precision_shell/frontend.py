"""Run command lines and show their results: shared by batch mode and the REPL.

Rendering and redirects happen here, so a command's handler only returns data. User errors are one
``error: ...`` line; internal errors are one line pointing at the log file, with the traceback in
the log. Nothing here ever lets an exception escape for a single bad command.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

from precision_shell.atomic_write import write_atomic
from precision_shell.commands import REGISTRY
from precision_shell.commands.runner import Outcome, execute, split_statements
from precision_shell.errors import FormatError, PshellError, UsageError
from precision_shell.logfile import log_internal_error
from precision_shell.model.output_guard import require_parent
from precision_shell.render.style import PLAIN, Style
from precision_shell.render.text import render

EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_FINDINGS, EXIT_INTERRUPTED = 0, 1, 2, 3, 130


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

    def error(self, message: str) -> None:
        print(f"error: {message}", file=self.err, flush=True)

    def show_warnings(self) -> None:
        """The session's new load warnings (problems that lose nothing: no failed exit)."""
        warnings = getattr(self.session, "load_warnings", [])
        for message in warnings[self.warned:]:
            print(f"warning: {message}", file=self.err, flush=True)
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
        return outcomes

    def run_statement(self, statement) -> Outcome:
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
            elif outcome.result is not None and not outcome.quit:
                result = outcome.result
                if getattr(result, "findings", 0):
                    self.findings = True
                if getattr(result, "interrupted", False):
                    self.interrupted = True
                style = PLAIN if statement.redirect else self.style
                fmt = statement.fmt or self.fmt
                self.emit(render(result, fmt, style), statement)
                if fmt != "table":   # the document keeps its shape; its warnings go beside it
                    for warning in getattr(result, "warnings", ()):
                        print(f"warning: {warning}", file=self.err, flush=True)
                self._gate(statement, getattr(result, "unjudged", None))
        except PshellError as exc:
            self._record_error(exc)
        return outcome

    def _gate(self, statement, unjudged: str | None) -> None:
        """A gated run fails (exit 1) when a command could not judge what it was asked to."""
        if unjudged and self.fail_on_findings:
            self.error(f"`{statement.text.strip()}` could not judge: {unjudged} (--fail-on-findings)")
            self.failed = True

    def _record_error(self, exc: PshellError) -> None:
        self.error(str(exc))
        if isinstance(exc, UsageError):
            self.usage_failed = True
        else:
            self.failed = True

    def emit(self, text: str, statement=None) -> None:
        if statement is not None and statement.redirect:
            self._write_redirect(text, statement.redirect, statement.append)
            return
        self.out.write(text + "\n")
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
