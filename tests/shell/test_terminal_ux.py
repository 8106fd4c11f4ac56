"""Ctrl-C in a batch script stops the whole script; the real shell in a pty (pexpect)."""

from __future__ import annotations

import io
import os
import re
import signal
import sys
from pathlib import Path

import pytest

from precision_shell.frontend import Frontend
from precision_shell.model.session import Session
from tests.conftest import InterruptAfter




def test_ctrl_c_in_vc_stops_the_line_and_names_the_csv_partial(sample_ws, tmp_path):
    root, _ = sample_ws
    session = Session.open(root, output=str(tmp_path / "out"))
    session.progress = InterruptAfter(5)
    out, err = io.StringIO(), io.StringIO()
    frontend = Frontend(session, out=out, err=err)
    outcomes = frontend.run_line("vc -j 1; vcs; info")
    assert [o.statement.argv[0] for o in outcomes] == ["vc"]      # vcs and info did not run
    assert frontend.interrupted
    written = sorted(p.name for p in (tmp_path / "out" / "compare").iterdir())
    assert len(written) == 1 and written[0].startswith("result_") and written[0].endswith("_partial.csv")
    assert "failing ops" not in out.getvalue()


# ------------------------------------------------------------------------------------------------
# in a pseudo-terminal

pexpect = pytest.importorskip("pexpect")


def _env(tmp_path: Path) -> dict:
    env = dict(os.environ)
    env.pop("NO_COLOR", None)
    env.update(HOME=str(tmp_path), XDG_CONFIG_HOME=str(tmp_path / "config"),
               XDG_DATA_HOME=str(tmp_path / "data"), XDG_STATE_HOME=str(tmp_path / "state"),
               XDG_CACHE_HOME=str(tmp_path / "cache"), TERM="xterm-256color", PAGER="cat",
               PYTHONPATH=str(Path(__file__).resolve().parents[2]))
    return env


@pytest.fixture(scope="module")
def big_ws(tmp_path_factory) -> Path:
    """A workspace with 2000 dump files: `vc` on it takes long enough to be interrupted."""
    root = tmp_path_factory.mktemp("big_ws")
    child = pexpect.spawn(sys.executable, ["-m", "precision_shell.samples", str(root), "--files", "2000"],
                          env=_env(root), encoding="utf-8", timeout=120)
    child.expect(pexpect.EOF)
    child.wait()
    child.close()
    assert child.exitstatus == 0
    return root


@pytest.mark.terminal
@pytest.mark.skipif(sys.platform == "win32", reason="needs a POSIX pty")
def test_ctrl_c_in_batch_stops_the_whole_script(big_ws, tmp_path):
    out_dir = tmp_path / "out"
    child = pexpect.spawn(sys.executable, ["-m", "precision_shell", str(big_ws), "-o", str(out_dir),
                                           "-c", "!echo started", "-c", "vc; vcs", "-c", "!echo after"],
                          env=_env(tmp_path), encoding="utf-8", timeout=60)
    child.expect("started")
    child.kill(signal.SIGINT)        # vc is reading 2000 dump headers now (about a second)
    child.expect(pexpect.EOF)
    child.wait()     # EOF comes when the pty's last writer closes it; close() alone would SIGHUP a
    child.close()    # pshell still tearing down (a loaded machine), and its status would be the signal's
    shown = child.before
    assert child.exitstatus == 130, (child.signalstatus, shown)
    assert "failing ops" not in shown and "after" not in shown     # neither vcs nor the rest ran
    compare = out_dir / "compare"
    written = sorted(p.name for p in compare.iterdir()) if compare.is_dir() else []
    assert all(name.endswith("_partial.csv") for name in written), written


def test_natural_order_and_folders_with_a_slash(tmp_path, monkeypatch):
    from prompt_toolkit.completion import CompleteEvent
    from prompt_toolkit.document import Document

    from precision_shell.shell.completer import ShellCompleter, natural_key, ranked

    names = ["op_10", "op_2", "op_1", "xop_3"]
    assert ranked(names, "op") == ["op_1", "op_2", "op_10", "xop_3"]
    assert sorted(["b10", "b9", "a"], key=natural_key) == ["a", "b9", "b10"]
    (tmp_path / "dir_10").mkdir()
    (tmp_path / "dir_9").mkdir()
    (tmp_path / "file_1.txt").write_text("x")
    monkeypatch.chdir(tmp_path)
    completer = ShellCompleter(None)
    line = "source "         # a relative path, no ./ needed
    got = [c.text for c in completer.get_completions(Document(line, len(line)), CompleteEvent())]
    assert got == ["dir_9/", "dir_10/", "file_1.txt"]


@pytest.mark.terminal
@pytest.mark.skipif(sys.platform == "win32", reason="needs a POSIX pty")
def test_up_searches_history_by_prefix_and_enter_runs_a_completed_line(tmp_path):
    from tests.shell.test_terminal import expect_prompt, spawn

    child = spawn(tmp_path)
    try:
        expect_prompt(child)
        child.sendline("ls -l 2")
        child.expect(r"more \(use -l 0\)")
        expect_prompt(child)
        child.sendline("config show limit")        # the newest line does not start with "ls"
        child.expect("rows shown by list commands")
        expect_prompt(child)
        child.send("ls")
        child.send("\x1b[A")                        # Up: the newest line starting with "ls"
        child.send("\r")
        child.expect(r"more \(use -l 0\)")
        expect_prompt(child)
        child.send("hel")
        child.send("\t")                            # highlights "help"
        child.expect("help")
        child.send("\r")                            # takes it, and the line is complete: runs
        child.expect("what it does")
        expect_prompt(child)
        child.sendline("quit")
        child.expect(pexpect.EOF)
    finally:
        child.close(force=True)
    assert child.exitstatus == 0


@pytest.mark.terminal
@pytest.mark.skipif(sys.platform == "win32", reason="needs a POSIX pty")
def test_toolbar_at_80_columns_keeps_the_finding_cursor_and_run(tmp_path):
    from tests.shell.test_terminal import ANSI, expect_prompt, spawn

    child = spawn(tmp_path, "-o", str(tmp_path / "out"))
    child.setwinsize(24, 80)
    try:
        expect_prompt(child)
        child.sendline("vcs -l 1")
        child.expect("failing ops")
        # the toolbar under the next prompt: the finding cursor first, then the run (the
        # workspace path gives way); drawn once, later prompts redraw only what changed
        toolbar = (r"finding" + ANSI + r"\s*" + ANSI + r"[^\r\n│]*/\d+" + ANSI + r"\s*│" + ANSI
                   + r"\s*" + ANSI + r"\s*run")
        while child.expect([re.escape("\x1b[6n"), toolbar]) == 0:
            child.send("\x1b[1;1R")      # the cursor-position answer a terminal gives
        child.sendline("quit")
        child.expect(pexpect.EOF)
    finally:
        child.close(force=True)


def test_toolbar_items_by_importance_when_narrow_and_reverse_video_without_colour():
    from precision_shell.shell.repl import prompt_style
    from precision_shell.shell.toolbar import fit_items

    items = [("ws", "~/work/" + "x" * 40), ("run", "debug_0 dev 0 step 0"), ("cos", "0.98"),
             ("finding", "compare 3/13")]
    assert fit_items(items, 200) == items
    assert [label for label, _ in fit_items(items, 80)] == ["finding", "run", "cos"]
    assert [label for label, _ in fit_items(items, 40)] == ["finding"]
    plain = dict(prompt_style(False).style_rules)
    coloured = dict(prompt_style(True).style_rules)
    assert "reverse" in plain["bottom-toolbar"] and "noreverse" in coloured["bottom-toolbar"]


def test_errors_are_red_on_a_colour_terminal_only():
    from precision_shell.render.style import Style

    err = io.StringIO()
    Frontend(None, style=Style(True), err=err).run_line("nosuchcommand")
    assert err.getvalue().startswith("\x1b[31merror: unknown command")
    err = io.StringIO()
    Frontend(None, err=err).run_line("nosuchcommand")
    assert err.getvalue().startswith("error: unknown command")


def test_tensor_completion_offers_relative_npy_paths(tmp_path, monkeypatch):
    from prompt_toolkit.completion import CompleteEvent
    from prompt_toolkit.document import Document

    from precision_shell.shell.completer import ShellCompleter

    (tmp_path / "saved_1.npy").write_bytes(b"")
    (tmp_path / "saved_1.txt").write_text("x")
    (tmp_path / "saved_dir").mkdir()
    monkeypatch.chdir(tmp_path)
    line = "pt sav"
    got = [c.text for c in ShellCompleter(None).get_completions(Document(line, len(line)), CompleteEvent())]
    assert got == ["ed_1.npy", "ed_dir/"]
