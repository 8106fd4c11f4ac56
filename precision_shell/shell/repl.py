"""The interactive shell: prompt_toolkit over the same registry and front end as batch mode.

``run_repl`` reads lines, hands each to :class:`Frontend` (which runs, renders, redirects and
turns errors into one line), and keeps going whatever happens: Ctrl-C on a line clears it,
Ctrl-C while a command runs stops the command and returns to the prompt, Ctrl-D, ``quit`` and
``exit`` leave with status 0.
"""

from __future__ import annotations

import asyncio
import os
import sys
import threading
from pathlib import Path
from typing import Any, TextIO

from prompt_toolkit import PromptSession
from prompt_toolkit.application import get_app_or_none
from prompt_toolkit.auto_suggest import AutoSuggestFromHistory
from prompt_toolkit.completion import ThreadedCompleter
from prompt_toolkit.enums import EditingMode
from prompt_toolkit.filters import completion_is_selected, has_completions, to_filter
from prompt_toolkit.history import FileHistory, History, InMemoryHistory
from prompt_toolkit.key_binding import KeyBindings
from prompt_toolkit.output import ColorDepth
from prompt_toolkit.styles import Style as PromptStyle

from precision_shell import __version__
from precision_shell.commands import REGISTRY
from precision_shell.commands.registry import HelpRequested
from precision_shell.commands.runner import Statement, execute, split_statements
from precision_shell.shell.progress import progress_factory
from precision_shell.config import Config, current_config, load_config, use_config
from precision_shell.errors import FormatError, PshellError
from precision_shell.frontend import Frontend, terminal_width
from precision_shell.logfile import log_internal_error
from precision_shell.render.style import Style, color_wanted
from precision_shell.render.layout import wrap
from precision_shell.render.text import Layout, render
from precision_shell.safe_text import escape_controls
from precision_shell.shell.completer import ShellCompleter
from precision_shell.shell.lexer import STYLE_RULES, ShellLexer
from precision_shell.shell.pager import PagingWriter, pager_wanted
from precision_shell.shell.toolbar import toolbar_fragments

PROMPT = "pshell> "
HINT = "Type `help` for commands, Tab to complete, Ctrl-R to search history, Ctrl-D to quit."


def default_history_path() -> Path:
    base = os.environ.get("XDG_DATA_HOME") or os.path.join(os.path.expanduser("~"), ".local", "share")
    return Path(base) / "pshell" / "history"


def open_history(path: str | os.PathLike | None) -> tuple[History, str | None]:
    """A FileHistory, or an in-memory one plus a warning when the file cannot be written."""
    target = Path(path).expanduser() if path else default_history_path()
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        with open(target, "a", encoding="utf-8"):
            pass  # proves we may append before the first command is lost
    except OSError as exc:
        reason = exc.strerror or str(exc)
        return InMemoryHistory(), f"history not saved: cannot write {target} ({reason})"
    history = FileHistory(str(target))
    _preload(history)
    return history, None


def _preload(history: History) -> None:
    """Read the history file now: prompt_toolkit would load it in the background, and keys typed
    at once (Up, Ctrl-R, a pasted line) would miss it."""
    async def consume() -> None:
        async for _ in history.load():
            pass

    try:
        asyncio.run(consume())
    except (OSError, UnicodeDecodeError, RuntimeError):
        pass  # unreadable now: prompt_toolkit retries, and the shell works without it


def load_repl_config(path: str | None) -> tuple[Config, list[str]]:
    try:
        config = load_config(path)
    except FormatError as exc:
        return Config(path=Path(path).expanduser() if path else None), [f"{exc} (using defaults)"]
    return config, list(config.warnings)


def banner_text(session: Any, style: Style, width: int | None = None) -> str:
    """The ``info`` panel (what is loaded, what is missing) and a hint line, fitted to ``width``
    as ``info`` is (the terminal would otherwise break paths and words mid-way)."""
    title = f"precision-shell {__version__}"
    try:
        outcome = execute(session, Statement(["info"], text="info"), REGISTRY)
        if outcome.error is not None:
            body = f"{title}\nerror: {escape_controls(outcome.error)}"
        else:
            body = render(outcome.result, "table", style, Layout(width))
    except Exception as exc:  # the banner must never stop the shell from starting
        log_internal_error("banner (info)")
        body = f"{title}\nerror: info failed: {type(exc).__name__}: {escape_controls(exc)}"
    return body + "\n" + "\n".join(style(line, "dim") for line in wrap(HINT, width or 0))


def line_is_complete(text: str) -> bool:
    """Whether every statement of ``text`` names a command and parses (nothing runs)."""
    try:
        statements = split_statements(text)
        for statement in statements:
            if statement.shell is None:
                REGISTRY.lookup(statement.argv[0]).parse(statement.argv[1:])
    except (PshellError, HelpRequested):
        return False
    return bool(statements)


def _prefix_history(buffer, backward: bool, count: int) -> None:
    """fish/IPython Up/Down: only history lines starting with what is typed before the cursor."""
    buffer.complete_state = None
    searching = buffer.enable_history_search
    buffer.enable_history_search = to_filter(True)
    try:
        (buffer.history_backward if backward else buffer.history_forward)(count=count)
    finally:
        buffer.enable_history_search = searching


def key_bindings() -> KeyBindings:
    kb = KeyBindings()

    @kb.add("enter", filter=completion_is_selected)
    def _accept_completion(event) -> None:
        # Enter on a highlighted candidate takes it; the line runs when it is complete, else the
        # cursor stays for the rest of it.
        buffer = event.current_buffer
        buffer.complete_state = None
        if line_is_complete(buffer.text):
            buffer.validate_and_handle()

    # Up/Down walk the completion menu once a candidate is highlighted; otherwise the history,
    # matching the typed prefix.
    @kb.add("up", filter=~completion_is_selected)
    def _history_up(event) -> None:
        _prefix_history(event.current_buffer, True, event.arg)

    @kb.add("down", filter=~has_completions)
    def _history_down(event) -> None:
        _prefix_history(event.current_buffer, False, event.arg)

    return kb


def prompt_style(color: bool = True) -> PromptStyle:
    rules = {name: rule for name, rule in STYLE_RULES.items()}
    if color:
        rules.update({"bottom-toolbar": "bg:#303030 #d0d0d0 noreverse",
                      "bottom-toolbar.label": "bg:#303030 #87afd7 bold noreverse"})
    else:   # no colour: the toolbar stands out in reverse video, suggestions are dimmed
        rules.update({"bottom-toolbar": "reverse", "bottom-toolbar.label": "reverse bold",
                      "auto-suggestion": "underline"})
    return PromptStyle.from_dict(rules)


def _columns() -> int | None:
    app = get_app_or_none()
    try:
        return app.output.get_size().columns if app is not None else None
    except Exception:   # no size known (a pipe in tests): the toolbar is not fitted
        return None


def make_prompt_session(session: Any, config: Config, history: History, color: bool,
                        input: Any = None, output: Any = None) -> PromptSession:
    completer = ShellCompleter(session)
    # Op names are indexed in the background so the prompt appears before the index is ready.
    threading.Thread(target=_warm_up, args=(completer,), daemon=True).start()
    return PromptSession(
        PROMPT,
        history=history,
        auto_suggest=AutoSuggestFromHistory(),
        completer=ThreadedCompleter(completer),
        complete_while_typing=True,
        lexer=ShellLexer(session),
        bottom_toolbar=lambda: toolbar_fragments(session, _columns()),
        style=prompt_style(color),
        include_default_pygments_style=False,
        key_bindings=key_bindings(),
        editing_mode=EditingMode.VI if config.editing_mode == "vi" else EditingMode.EMACS,
        color_depth=None if color else ColorDepth.MONOCHROME,
        input=input,
        output=output,
    )


def _warm_up(completer: ShellCompleter) -> None:
    try:
        completer.warm_up()
    except Exception:
        log_internal_error("building the completion index")


def run_repl(session: Any, opts: Any, log_path: Path | None, *, input: Any = None,
             output: Any = None, out: TextIO | None = None, err: TextIO | None = None) -> int:
    """Read-eval-print until Ctrl-D/quit/exit; returns the exit status (always 0).

    ``input``/``output`` are prompt_toolkit Input/Output objects (tests pass a pipe input and
    ``DummyOutput``); ``out``/``err`` are where command output and errors go.
    """
    out = out or sys.stdout
    err = err or sys.stderr
    config, warnings = load_repl_config(getattr(opts, "config", None))
    use_config(config)
    config.apply_to(session, output_overridden=getattr(opts, "output", None) is not None)
    no_color = bool(getattr(opts, "no_color", False))
    no_pager = bool(getattr(opts, "no_pager", False))

    def color_now() -> bool:
        return color_wanted(out, requested=not no_color and current_config().color)

    frontend = Frontend(session, fmt=getattr(opts, "format", None) or "table",
                        style=Style(color_now()), err=err, log_path=log_path,
                        width=lambda: terminal_width(out),
                        allow_shell=bool(getattr(opts, "allow_shell", False)))
    frontend.follow_config()
    pager = PagingWriter(out, enabled=lambda: pager_wanted(no_pager, session.settings.pager, out))
    frontend.out = pager
    history, history_warning = open_history(getattr(opts, "history_file", None))
    warnings += [history_warning] if history_warning else []

    print(banner_text(session, frontend.style, frontend.width()), file=out, flush=True)
    for warning in warnings:
        frontend.warn(warning)
    frontend.show_warnings()

    prompt = make_prompt_session(session, config, history, color_now(), input, output)
    if output is None:  # a real terminal: long analyses draw a progress bar
        session.progress = progress_factory()
    while True:
        try:
            line = prompt.prompt()
        except KeyboardInterrupt:
            continue            # Ctrl-C on a line: drop it, fresh prompt
        except EOFError:
            break               # Ctrl-D
        if not line.strip():
            continue
        try:
            frontend.run_line(line)
        except KeyboardInterrupt:
            pager.discard()
            print("interrupted", file=err, flush=True)
        except Exception as exc:  # a bug outside any command (rendering, redirects): one line
            log_internal_error(line)
            where = f" (details in {log_path})" if log_path else ""
            frontend.error(f"internal error in `{line.strip()}`: {type(exc).__name__}: {exc}{where}")
        if frontend.quit:
            break
        _follow_settings(prompt, frontend, current_config(), color_now())
    return 0


def _follow_settings(prompt: PromptSession, frontend: Frontend, config: Config, color: bool) -> None:
    """`config set` may have changed the colour or the editing keys: take effect at once."""
    frontend.style = Style(color)
    frontend.follow_config()
    prompt.style = prompt_style(color)
    prompt.color_depth = None if color else ColorDepth.MONOCHROME
    prompt.editing_mode = EditingMode.VI if config.editing_mode == "vi" else EditingMode.EMACS
