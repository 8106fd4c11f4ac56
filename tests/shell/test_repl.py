"""The REPL driven through prompt_toolkit's pipe input and dummy output, on a generated workspace;
plus the pieces it is made of (lexer, toolbar, pager) and the prompt_toolkit import guard."""

from __future__ import annotations

import _thread
import ast
import io
import os
import sys
import threading
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from prompt_toolkit.enums import EditingMode
from prompt_toolkit.history import FileHistory, InMemoryHistory
from prompt_toolkit.input import create_pipe_input
from prompt_toolkit.output import DummyOutput

import precision_shell
import precision_shell.frontend as frontend_module
from precision_shell.commands import REGISTRY
from precision_shell.commands.registry import Registry
from precision_shell.commands.results import Message
from precision_shell.commands.runner import Statement, execute
from precision_shell.config import Config, use_config
from precision_shell.logfile import setup_logging
from precision_shell.model.findings import FindingCursor
from precision_shell.model.session import Session
from precision_shell.render.text import Layout, render
from precision_shell.shell import pager as pager_module
from precision_shell.shell.lexer import ShellLexer
from precision_shell.shell.pager import PagingWriter, needs_paging, run_pager, screen_lines
from precision_shell.shell.repl import _follow_settings, make_prompt_session, open_history, run_repl
from precision_shell.shell.toolbar import describe_cursor, toolbar_text

WATCHDOG_S = 30


class TtyStringIO(io.StringIO):
    """Captured output that claims to be a terminal (colour and paging decisions)."""

    def isatty(self) -> bool:
        return True


@pytest.fixture(autouse=True)
def _fresh_config():
    use_config(None)
    yield
    use_config(None)


@pytest.fixture(scope="module")
def session(sample_ws):
    return Session.open(sample_ws[0])


def make_opts(tmp_path: Path, **overrides) -> SimpleNamespace:
    config = tmp_path / "config.ini"      # this test's own settings, never the user's
    if not config.exists():
        config.write_text("[pshell]\n", encoding="utf-8")
    opts = dict(no_pager=True, no_color=False, history_file=str(tmp_path / "history"),
                config=str(tmp_path / "config.ini"), format="table", output=None)
    opts.update(overrides)
    return SimpleNamespace(**opts)


def drive(session, keys: str, opts, *, out=None, on_start=None,
          later: list[tuple[float, str]] = ()) -> tuple[int, str, str, bool]:
    """Run the REPL on ``keys`` (and on each ``(delay, keys)`` of ``later``, typed ``delay``
    seconds after the start); returns (status, stdout, stderr, watchdog_fired).

    A watchdog closes the input if the REPL is still reading after WATCHDOG_S (a hang becomes a
    failure, not a stuck test run)."""
    out = out if out is not None else io.StringIO()
    err = io.StringIO()
    fired = threading.Event()
    with create_pipe_input() as inp:
        inp.send_text(keys)

        def close():
            fired.set()
            inp.close()

        watchdog = threading.Timer(WATCHDOG_S, close)
        watchdog.start()
        for delay, text in later:
            threading.Timer(delay, inp.send_text, args=(text,)).start()
        try:
            if on_start:
                on_start()
            rc = run_repl(session, opts, Path(opts.history_file).parent / "pshell.log",
                          input=inp, output=DummyOutput(), out=out, err=err)
        finally:
            watchdog.cancel()
    return rc, out.getvalue(), err.getvalue(), fired.is_set()


def rendered(session, line: str, width: int | None = None) -> str:
    outcome = execute(session, Statement(line.split(), text=line), REGISTRY)
    assert outcome.error is None
    return render(outcome.result, layout=Layout(width))


def with_extra_commands(monkeypatch, *commands) -> Registry:
    """The front end's registry plus test-only commands (the real REGISTRY is left alone)."""
    reg = Registry()
    for cmd in REGISTRY.commands():
        reg.add(cmd)
    for name, handler in commands:
        reg.command(name, summary=f"test-only {name}", example=name, needs_session=False)(handler)
    monkeypatch.setattr(frontend_module, "REGISTRY", reg)
    return reg


# -- the loop ---------------------------------------------------------------------------------

def test_banner_and_a_command_output(session, tmp_path):
    rc, out, err, fired = drive(session, "info\r\x04", make_opts(tmp_path))
    assert rc == 0 and not fired
    info = rendered(session, "info")
    assert out.count(info) == 2          # the banner, then the command
    assert out.index(info) == 0
    assert "Ctrl-D to quit" in out
    assert err == ""


def test_ctrl_d_on_an_empty_line_exits_0(session, tmp_path):
    start = time.monotonic()
    rc, out, _, fired = drive(session, "\x04", make_opts(tmp_path))
    assert rc == 0 and not fired
    assert time.monotonic() - start < WATCHDOG_S
    assert out.count(rendered(session, "info")) == 1


@pytest.mark.parametrize("word", ["quit", "exit"])
def test_quit_stops_reading(session, tmp_path, word):
    rc, out, _, fired = drive(session, f"{word}\rinfo\r", make_opts(tmp_path))
    assert rc == 0 and not fired
    assert out.count(rendered(session, "info")) == 1   # the info after quit never ran


def test_ctrl_c_clears_the_line(session, tmp_path):
    # Without the clear, the second line would read "quithelp" (an unknown command).
    rc, out, err, fired = drive(session, "quit\x03help\r\x04", make_opts(tmp_path))
    assert rc == 0 and not fired
    assert rendered(session, "help") in out
    assert "error" not in err


def test_ctrl_c_during_a_slow_command_returns_to_the_prompt(session, tmp_path, monkeypatch):
    started = threading.Event()
    finished = []

    def slow(_session, _args):
        started.set()
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:   # a long analysis; Ctrl-C arrives meanwhile
            time.sleep(0.01)
        finished.append(True)
        return Message(["slow finished"])

    with_extra_commands(monkeypatch, ("pshell_test_slow", slow))

    def press_ctrl_c_once_running():
        def waiter():
            if started.wait(WATCHDOG_S):
                _thread.interrupt_main()     # what SIGINT from the terminal does
        threading.Thread(target=waiter, daemon=True).start()

    rc, out, err, fired = drive(session, "pshell_test_slow\rhelp\r\x04", make_opts(tmp_path),
                                on_start=press_ctrl_c_once_running)
    assert rc == 0 and not fired
    assert started.is_set() and not finished
    assert "interrupted" in err
    assert "slow finished" not in out
    assert rendered(session, "help") in out        # the next command works


def test_enter_on_a_highlighted_candidate_runs_a_complete_line(session, tmp_path):
    # Tab highlights "help"; Enter takes it and, the line being complete, runs it.
    rc, out, err, fired = drive(session, "hel", make_opts(tmp_path),
                                later=[(0.7, "\t"), (1.4, "\r\x04")])
    assert rc == 0 and not fired and err == ""
    assert "what it does" in out


def test_enter_on_a_candidate_of_a_half_typed_line_only_takes_it(session, tmp_path):
    # `cp A` needs a second tensor: Enter takes the candidate and waits; Ctrl-C drops the line.
    rc, out, err, fired = drive(session, "cp ", make_opts(tmp_path),
                                later=[(0.7, "\t"), (1.4, "\r\x03\x04")])
    assert rc == 0 and not fired
    assert err == "" and "cosine" not in out


def test_errors_never_end_the_shell(session, tmp_path, monkeypatch):
    def boom(_session, _args):
        raise RuntimeError("kaboom")

    with_extra_commands(monkeypatch, ("pshell_test_boom", boom))
    log = setup_logging(str(tmp_path / "pshell.log"))
    rc, out, err, fired = drive(session, "hlep\rhelp --nope\rpshell_test_boom\rhelp\r\x04",
                                make_opts(tmp_path))
    assert rc == 0 and not fired
    lines = err.strip().splitlines()
    assert len(lines) == 3
    assert "unknown command 'hlep'" in lines[0] and "help" in lines[0]
    assert "unrecognized arguments: --nope" in lines[1]
    assert "internal error" in lines[2] and "kaboom" in lines[2] and str(log) in lines[2]
    assert "Traceback" in log.read_text(encoding="utf-8")
    assert rendered(session, "help") in out


def test_redirect_into_a_missing_folder_is_one_line(session, tmp_path):
    missing = tmp_path / "missing" / "dir"
    rc, out, err, fired = drive(session, f"info > {missing}/x.txt\rinfo\r\x04", make_opts(tmp_path))
    assert rc == 0 and not fired
    assert err.splitlines() == [f"error: {missing}/x.txt: folder {missing} does not exist"]
    assert out.count(rendered(session, "info")) == 2      # the banner, then the second `info`
    assert not (tmp_path / "missing").exists()


def test_history_is_written_and_reloaded(session, tmp_path):
    opts = make_opts(tmp_path)
    drive(session, "config show\r\x04", opts)
    assert "config show" in Path(opts.history_file).read_text(encoding="utf-8")
    # a new shell: Up recalls the line of the previous one
    rc, out, err, fired = drive(session, "\x1b[A\r\x04", opts)
    assert rc == 0 and not fired
    assert rendered(session, "config show") in out and err == ""
    table = rendered(session, "config show")
    drive(session, "help\r\x04", opts)
    # Ctrl-R searches backwards (Enter ends the search, the next Enter runs the line) ...
    _, out, err, _ = drive(session, "\x12fig s\r\r\x04", opts)
    assert out.count(table) == 1 and err == ""
    # ... and typing the start of an old line suggests the rest (computed in the background,
    # so the Right arrow that takes it comes a moment later, as from a person)
    _, out, err, _ = drive(session, "conf", opts, later=[(1.0, "\x1b[C\r\x04")])
    assert out.count(table) == 1 and err == ""


def test_unwritable_history_falls_back_to_memory(session, tmp_path):
    blocker = tmp_path / "not_a_dir"
    blocker.write_text("")
    opts = make_opts(tmp_path, history_file=str(blocker / "history"))
    rc, out, err, fired = drive(session, "help\r\x04", opts)
    assert rc == 0 and not fired
    assert "history not saved" in err and str(blocker) in err
    assert rendered(session, "help") in out
    history, warning = open_history(blocker / "history")
    assert isinstance(history, InMemoryHistory) and warning
    history, warning = open_history(tmp_path / "h" / "history")
    assert isinstance(history, FileHistory) and warning is None


def test_banner_lists_what_is_missing(tmp_path):
    (tmp_path / "ws").mkdir()
    empty = Session.open(tmp_path / "ws")
    rc, out, _, _ = drive(empty, "\x04", make_opts(tmp_path))
    assert rc == 0
    assert empty.workspace.missing
    for line in empty.workspace.missing:
        assert line in out


# -- colour, pager, settings ---------------------------------------------------------------

def has_ansi(text: str) -> bool:
    return "\x1b[" in text


def test_colour_only_on_a_terminal_without_no_color(session, tmp_path, monkeypatch):
    _, out, _, _ = drive(session, "\x04", make_opts(tmp_path), out=TtyStringIO())
    assert has_ansi(out)
    _, out, _, _ = drive(session, "\x04", make_opts(tmp_path))            # not a terminal
    assert not has_ansi(out)
    _, out, _, _ = drive(session, "\x04", make_opts(tmp_path, no_color=True), out=TtyStringIO())
    assert not has_ansi(out)
    monkeypatch.setenv("NO_COLOR", "1")
    _, out, _, _ = drive(session, "\x04", make_opts(tmp_path), out=TtyStringIO())
    assert not has_ansi(out)


@pytest.fixture
def recording_pager(tmp_path, monkeypatch):
    """$PAGER = a script that saves what it is given; the terminal is 10 rows high."""
    saved = tmp_path / "paged.txt"
    script = tmp_path / "pager.py"
    script.write_text("import os, sys\nopen(sys.argv[1], 'a').write(sys.stdin.read())\n"
                      "open(sys.argv[1] + '.less', 'w').write(os.environ.get('LESS', '-'))\n")
    monkeypatch.setenv("PAGER", f"{sys.executable} {script} {saved}")
    monkeypatch.delenv("LESS", raising=False)
    monkeypatch.setattr(pager_module.shutil, "get_terminal_size",
                        lambda *a: os.terminal_size((100, 10)))
    return saved


def test_tall_output_goes_through_the_pager_until_pager_off(session, tmp_path, recording_pager):
    help_text = rendered(session, "help", width=100)   # the terminal below is 100 columns wide
    assert screen_lines(help_text, 100) > 10
    opts = make_opts(tmp_path, no_pager=False, no_color=True)
    rc, out, _, _ = drive(session, "help\rconfig set pager off\rhelp\r\x04", opts, out=TtyStringIO())
    assert rc == 0
    assert recording_pager.read_text() == help_text + "\n"   # the first help, paged
    assert Path(f"{recording_pager}.less").read_text() == "-SRXF"
    assert out.count(help_text) == 1                         # the second, printed
    assert "pager = off" in out


def test_no_pager_flag_and_short_output(session, tmp_path, recording_pager):
    opts = make_opts(tmp_path, no_pager=True, no_color=True)
    _, out, _, _ = drive(session, "help\r\x04", opts, out=TtyStringIO())
    assert not recording_pager.exists() and rendered(session, "help", width=100) in out
    opts = make_opts(tmp_path, no_pager=False, no_color=True)
    _, out, _, _ = drive(session, "config show limit\r\x04", opts, out=TtyStringIO())
    assert not recording_pager.exists() and "limit" in out


def test_pager_helpers():
    assert screen_lines("\x1b[1mabc\x1b[0m", 3) == 1         # colour codes take no room
    assert screen_lines("a" * 7, 3) == 3 and screen_lines("a\n\nb", 80) == 3
    assert needs_paging("x\n" * 9, rows=10, columns=80) is False
    assert needs_paging("x\n" * 10, rows=10, columns=80) is True
    assert run_pager("text", ["/nonexistent/pager-binary"]) is False
    out = io.StringIO()
    writer = PagingWriter(out, enabled=lambda: True, size=lambda: os.terminal_size((80, 3)),
                          pager=lambda text: False)          # no pager could run: print
    writer.write("1\n2\n3\n4\n")
    assert out.getvalue() == ""
    writer.flush()
    assert out.getvalue() == "1\n2\n3\n4\n"


def test_editing_mode_follows_config(session, tmp_path):
    config = Config(editing_mode="vi")
    prompt = make_prompt_session(session, config, InMemoryHistory(), False,
                                 input=None, output=DummyOutput())
    assert prompt.editing_mode == EditingMode.VI
    config.editing_mode = "emacs"
    _follow_settings(prompt, frontend_module.Frontend(session), config, False)
    assert prompt.editing_mode == EditingMode.EMACS
    (tmp_path / "config.ini").write_text("[pshell]\nlimit = 3\nthreshold = 0.9\n")  # before make_opts
    drive(session, "\x04", make_opts(tmp_path))
    assert session.settings.limit == 3 and session.settings.threshold == 0.9
    session.settings.limit, session.settings.threshold = 20, 0.98


# -- lexer and toolbar ------------------------------------------------------------------------

def test_lexer_classes(session):
    lexer = ShellLexer(session)
    line = 'vcs -c 0.95 > low.txt; ni fc1/MatMul "a b"; bogus fc1/MatMul:output:0[0, :8]'
    tokens = lexer.lex_line(line)
    assert "".join(text for _, text in tokens) == line
    by_text = {}
    for style, text in tokens:
        by_text.setdefault(text, style)
    assert by_text["vcs"] == by_text["ni"] == "class:command"
    assert by_text["bogus"] == "class:unknown-command"
    assert by_text["-c"] == "class:flag" and by_text["0.95"] == "class:number"
    assert by_text["fc1/MatMul"] == "class:op"                # a known op, also inside a ref
    assert by_text[":output:0[0, :8]"] == ""
    assert by_text['"a b"'] == "class:string"
    assert by_text[">"] == by_text[";"] == "class:operator"
    assert by_text["low.txt"] == ""                           # a file, not a command
    assert ("class:op", "no/such/op") not in lexer.lex_line("ni no/such/op")


@settings(max_examples=200, deadline=None)
@given(line=st.text(alphabet=st.sampled_from(list("ab -1.;>\"'[]:/\t")) | st.characters(),
                    max_size=40))
def test_lexer_keeps_every_character(session, line):
    assert "".join(text for _, text in ShellLexer(session).lex_line(line)) == line


def test_toolbar_shows_workspace_run_threshold_and_cursor(session):
    text = toolbar_text(session)
    active = session.active
    assert str(session.workspace.precision_data.name) in text
    assert f"{active.run} dev {active.device} step {active.step}" in text
    assert f"cos {session.settings.threshold:g}" in text
    assert "finding" not in text
    cursor = FindingCursor("overflow", ["a", "b", "c"], pos=1)
    session.results["cursor"] = cursor
    try:
        assert f"finding {cursor.position_text}" in toolbar_text(session)
    finally:
        del session.results["cursor"]
    assert describe_cursor((0, 4)) == "1/4"
    assert describe_cursor({"kind": "compare", "position": 2, "total": 9}) == "compare 2/9"


# -- layering ---------------------------------------------------------------------------------

def test_only_the_shell_package_imports_prompt_toolkit():
    root = Path(precision_shell.__file__).parent
    offenders = []
    for path in root.rglob("*.py"):
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        for node in ast.walk(tree):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module]
            if any(n == "prompt_toolkit" or n.startswith("prompt_toolkit.") for n in names):
                rel = path.relative_to(root)
                if rel.parts[0] != "shell":
                    offenders.append(str(rel))
    assert offenders == []
    assert (root / "shell" / "repl.py").is_file()    # the walk did see the package
