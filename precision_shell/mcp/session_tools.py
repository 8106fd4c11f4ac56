"""The server's one workspace and the tools run on it, with the shell's session semantics: one
session at a time (``open`` replaces it), loaded lazily with the start-up cache, every command
through the registry and the runner as in batch mode (``--format json``), writes only through
the output guard. Runs on the command thread (see :mod:`.command_thread`)."""

from __future__ import annotations

import argparse
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from precision_shell.commands import REGISTRY
from precision_shell.commands.registry import Command
from precision_shell.commands.runner import Statement, execute
from precision_shell.errors import CommandError, PshellError, UsageError
from precision_shell.logfile import log_internal_error
from precision_shell.mcp.answers import AnswerLimits, answer_of
from precision_shell.mcp.command_thread import Job, JobProgressBar
from precision_shell.mcp.tools import ToolSpec, capped_limit, command_text, command_words, present_tools

OPEN_TOOL = "open"
OPEN_SCHEMA = {
    "type": "object",
    "properties": {
        "workspace": {"type": "string", "description": (
            "a training folder holding precision_data/, precision_data/ itself, a raw NPU dump folder, "
            "or an msprobe dump (root, step or rank folder, dump.json) of a PyTorch/MindSpore run")},
        "golden": {"type": "string", "description": (
            "golden .npy folder; with an msprobe dump as workspace, the golden msprobe dump")},
        "output": {"type": "string", "description": "output folder (default: precision_data/temp/pshell, "
                                                    "or ./pshell_out beside an msprobe dump)"},
    },
    "required": ["workspace"],
    "additionalProperties": False,
}
OPEN_DESCRIPTION = ("Open the workspace the other tools work on (replaces the open one; the server "
                    "holds one at a time). Returns the `info` summary; load problems are warnings.")


@dataclass
class ServerOptions:
    workspace: str | None = None
    golden: str | None = None
    output: str | None = None
    allow_bisect: bool = False
    limits: AnswerLimits = field(default_factory=AnswerLimits)
    log_path: Path | None = None


def open_session(workspace: str, golden: str | None, output: str | None):
    """A framework session for an msprobe dump, else the graph-mode workspace (as ``pshell``)."""
    from precision_shell.config import default_config_path
    from precision_shell.formats.msprobe.layout import is_msprobe_dump

    if is_msprobe_dump(workspace):
        from precision_shell.model.framework_session import FrameworkSession

        session = FrameworkSession.open(workspace, golden=golden, output=output)
    else:
        from precision_shell.model.session import Session

        session = Session.open(workspace, golden=golden, output=output)
    session.add_input_file(default_config_path(), "the config file")
    return session


class ToolRunner:
    def __init__(self, options: ServerOptions):
        self.options = options
        self.session: Any = None
        self.open_problem: str | None = None   # why the workspace given at start did not open
        self._warned = 0                       # session.load_warnings already reported
        self._pending_warnings: list[str] = []  # load errors of an open no answer carried yet
        self.listed_kind = "graph"             # the session kind of the tool list clients have

    # -- the tool list ---------------------------------------------------------------------------
    def commands(self) -> list[tuple[ToolSpec, Command]]:
        """Each present tool with the command it runs on the open session (a framework variant
        has its own arguments); the graph-mode command before anything is open."""
        out = []
        self.listed_kind = self.kind()
        for spec in present_tools():
            base = REGISTRY.get(spec.command)
            cmd = REGISTRY.available(base, self.session) if self.session is not None else base
            out.append((spec, cmd or base))
        return out

    def kind(self) -> str:
        return getattr(self.session, "kind", "graph") if self.session is not None else "graph"

    def kind_changed(self) -> bool:
        """True when the session kind differs from the one the clients' tool list was made for."""
        return self.kind() != self.listed_kind

    # -- opening ---------------------------------------------------------------------------------
    def open_at_start(self, job: Job) -> None:
        """The workspace named on the command line, opened before the first call needs it."""
        try:
            self._open(self.options.workspace, self.options.golden, self.options.output)
        except PshellError as exc:
            self.open_problem = str(exc)
        except Exception as exc:   # a bug: said by every tool until `open`, the traceback in the log
            log_internal_error(f"pshell mcp {self.options.workspace}")
            self.open_problem = f"internal error: {type(exc).__name__}: {exc}"

    def _open(self, workspace: str, golden: str | None, output: str | None) -> None:
        try:
            session = open_session(workspace, golden, output)
        except OSError as exc:
            raise PshellError(f"{workspace}: cannot open ({exc.strerror or exc})") from None
        self.session, self.open_problem, self._warned = session, None, 0
        self._pending_warnings = list(session.load_errors)

    def open(self, arguments: Any, job: Job) -> dict:
        arguments = {} if arguments is None else arguments
        if not isinstance(arguments, dict):
            raise UsageError("open: arguments must be an object")
        unknown = sorted(set(arguments) - set(OPEN_SCHEMA["properties"]))
        if unknown:
            raise UsageError(f"open: unknown argument {unknown[0]!r} (arguments: workspace, golden, output)")
        values = {}
        for name in OPEN_SCHEMA["properties"]:
            value = arguments.get(name)
            if value is not None and not isinstance(value, str):
                raise UsageError(f"open: argument {name!r} must be a string, not {type(value).__name__}")
            values[name] = value
        if not values["workspace"]:
            raise UsageError("open: missing required argument 'workspace'")
        self._open(values["workspace"], values["golden"], values["output"])
        return self._run(OPEN_TOOL, REGISTRY.get("info"), [], job)

    def require_session(self) -> Any:
        if self.session is not None:
            return self.session
        if self.open_problem is not None:
            raise CommandError(f"the workspace did not open: {self.open_problem} (call `open` with "
                               "another path)")
        raise CommandError("no workspace open: call the `open` tool with a workspace path first")

    # -- running a tool --------------------------------------------------------------------------
    def call(self, name: str, arguments: Any, job: Job) -> dict:
        if name == OPEN_TOOL:
            return self.open(arguments, job)
        specs = {spec.name: spec for spec in present_tools()}
        spec = specs.get(name)
        if spec is None:
            raise UsageError(f"unknown tool {name!r} (tools: {', '.join([OPEN_TOOL, *specs])})")
        base = REGISTRY.get(spec.command)
        # `curve` works without a workspace (needs_session=False); the others need one open
        session = self.require_session() if base.needs_session else self.session
        cmd = REGISTRY.for_session(base, session) if session is not None else base
        if spec.runs_user_commands and not self.options.allow_bisect:
            raise CommandError(f"{spec.name} runs the user's own command for each trial: refused unless "
                               "the server was started with `pshell mcp --allow-bisect`")
        arguments, capped = capped_limit(spec, arguments, self.options.limits.max_items)
        return self._run(spec.name, cmd, command_words(spec, cmd, arguments), job, (capped,) if capped else ())

    def _run(self, tool: str, cmd: Command, words: list[str], job: Job, notes: tuple[str, ...] = ()) -> dict:
        session = self.session
        text = command_text(cmd, words)
        statement = Statement([cmd.name, *words], text=text, fmt="json")
        if session is not None:
            session.progress = lambda label, total: _progress(job, label, total)
        try:
            outcome = execute(session, statement, REGISTRY)
        except (KeyboardInterrupt, PshellError):
            raise
        except Exception as exc:   # a bug: one line, the traceback in the log, the server goes on
            log_internal_error(text)
            where = f" (details in {self.options.log_path})" if self.options.log_path else ""
            raise PshellError(f"internal error in `{text}`: {type(exc).__name__}: {exc}{where}") from None
        if outcome.error is not None:
            raise outcome.error
        result = outcome.result
        totals, page_notes = None, []
        if outcome.help_text is not None:
            document: Any = {"help": outcome.help_text}
        elif getattr(result, "shown", None) is not None:
            document, totals, page_notes = _page(result, self.options.limits.max_items)
        else:
            document = result.to_json() if hasattr(result, "to_json") else {"message": str(result)}
        warnings = self._pending_warnings + list(getattr(result, "warnings", ()))
        self._pending_warnings = []
        new = getattr(session, "load_warnings", None) or []
        warnings += new[self._warned:]
        self._warned = len(new)
        unjudged = getattr(result, "unjudged", None)
        if unjudged:
            warnings.append(f"could not judge: {unjudged}")
        written = frozenset({"file"}) if cmd.name == "export" else frozenset()
        output_dir = Path(session.workspace.output_dir) if session is not None else None
        return answer_of(tool, text, document, output_dir=output_dir,
                         warnings=warnings, notes=[*notes, *getattr(result, "notes", ()), *page_notes],
                         interrupted=bool(getattr(result, "interrupted", False)),
                         limits=self.options.limits, written_keys=written,
                         extra_evidence=_judged_from(session, cmd), totals=totals)


def _page(table: Any, max_rows: int) -> tuple[list[dict], dict, list[str]]:
    """A finding list cut by ``-l`` (``vcs``): the JSON rows of the rows it shows, at most
    ``max_rows`` (the answer cap's), only those made (a 100k-entry statistics pair has ~99k
    failing entries; ``--format json`` writes them all, an agent reads a page), and the list's
    totals: its rows (after role/type filters) and every failing op."""
    rows = table.shown_json(max_rows)
    totals = {"rows": table.total, "findings": table.findings}
    notes = []
    if len(rows) < table.total:
        if len(rows) < len(table.shown):
            notes.append(f"result: the first {len(rows)} of {table.total} rows (answer cap, pshell mcp "
                         "--max-items): narrow the list with `role`/`type`/`sort` for others")
        else:
            notes.append(f"result: {len(rows)} of {table.total} rows (`limit`, default the `config` limit, 20 "
                         "unless set; roots are never cut): a larger `limit` (up to the answer cap) or "
                         "`role`/`type`/`sort` for others")
    return rows, totals, notes


def _judged_from(session: Any, cmd: Command) -> dict:
    """``vcs`` judges the kept compare result: its CSV is the evidence behind every row."""
    if cmd.name != "vcs":
        return {}
    csv = getattr(getattr(session, "results", {}).get("compare"), "csv_path", None)
    return {"compare_csv": str(Path(csv).resolve())} if csv else {}


class _progress:
    """``session.progress(label, total)`` for one job: its bar feeds ``job.progress``."""

    def __init__(self, job: Job, label: str, total: int | None):
        self.bar = JobProgressBar(job, label, total)

    def __enter__(self) -> JobProgressBar:
        return self.bar

    def __exit__(self, *exc: Any) -> None:
        return None


def server_options(opts: argparse.Namespace, log_path: Path) -> ServerOptions:
    return ServerOptions(opts.workspace, opts.golden, opts.output, opts.allow_bisect,
                         AnswerLimits(opts.max_items, opts.max_chars), log_path)
