"""The real shell in a pseudo-terminal (pexpect): prompt, Tab completion, a command, exit status."""

from __future__ import annotations

import json
import os
import re
import sys
import time
from pathlib import Path

import pytest

from precision_shell.model.session import Settings

pexpect = pytest.importorskip("pexpect")

REPO = Path(__file__).resolve().parents[2]
SAMPLE = REPO / "sample_data" / "convnet"
PROMPT = "pshell>"          # the trailing space is drawn as a cursor move, not a character
ANSI = r"(?:\x1b\[[0-9;?]*[A-Za-z])*"

pytestmark = [
    pytest.mark.terminal,
    pytest.mark.skipif(not (SAMPLE / "precision_data").is_dir(),
                       reason="sample_data/convnet/precision_data is not generated yet "
                              "(python -m precision_shell.samples sample_data/convnet)"),
    pytest.mark.skipif(sys.platform == "win32", reason="needs a POSIX pty"),
]


def spawn(tmp_path: Path, *args: str):
    env = dict(os.environ)
    env.pop("NO_COLOR", None)
    env.update(HOME=str(tmp_path), XDG_CONFIG_HOME=str(tmp_path / "config"),
               XDG_DATA_HOME=str(tmp_path / "data"), XDG_STATE_HOME=str(tmp_path / "state"),
               TERM="xterm-256color", PAGER="cat")
    return pexpect.spawn(sys.executable, ["-m", "precision_shell", str(SAMPLE), *args], cwd=str(REPO),
                         env=env, encoding="utf-8", dimensions=(50, 160), timeout=20)


def expect_prompt(child) -> None:
    """Wait for the prompt, answering the cursor-position query a real terminal answers (without
    the answer prompt_toolkit cannot tell the screen height and hides the bottom toolbar)."""
    while child.expect([re.escape("\x1b[6n"), PROMPT]) == 0:
        child.send("\x1b[1;1R")


def test_prompt_tab_completion_info_and_quit(tmp_path):
    manifest = json.loads((SAMPLE / "pshell_sample_manifest.json").read_text(encoding="utf-8"))
    op = manifest["lossy"]["op"]                    # e.g. ln1/add_1/LayerNorm
    child = spawn(tmp_path)
    try:
        start = time.monotonic()
        expect_prompt(child)
        startup = time.monotonic() - start
        assert startup < 10, f"{startup:.1f} s to the prompt"
        # the bottom toolbar: active dump set and threshold
        child.expect(r"run" + ANSI + r"\s*" + ANSI + "debug_0 dev 0 step 0")
        child.expect(r"cos" + ANSI + r"\s*" + ANSI + re.escape(f"{Settings().threshold:g}"))
        # Tab on the start of an op name inserts the whole tensor reference
        child.send(f"pt {op[:-3]}")
        child.send("\t")
        child.expect(re.escape(op[-3:]) + ANSI + ":0")     # the rest of the name, then its output 0
        child.send("\r")                 # Enter on a highlighted candidate only takes it ...
        child.send("\r")                 # ... the next one runs the line
        child.expect("logical shape")
        expect_prompt(child)
        assert "is not a tensor" not in child.before
        child.send("info\r")
        child.expect("golden" + ANSI + r"\s+\S*\s*" + str(manifest["totals"]["golden_files"]))
        expect_prompt(child)
        child.send("quit\r")
        child.expect(pexpect.EOF)
    finally:
        child.close()
    assert child.exitstatus == 0


def test_ctrl_c_clears_and_ctrl_d_leaves(tmp_path):
    child = spawn(tmp_path, "--no-color")
    try:
        expect_prompt(child)
        child.send("quit")
        child.sendcontrol("c")         # the half-typed quit is dropped ...
        expect_prompt(child)
        child.send("help\r")           # ... so this runs as `help`, not `quithelp`
        child.expect("what it does")
        expect_prompt(child)
        child.sendcontrol("d")
        child.expect(pexpect.EOF)
    finally:
        child.close()
    assert child.exitstatus == 0
    history = (tmp_path / "data" / "pshell" / "history").read_text(encoding="utf-8")
    assert "+help" in history and "quit" not in history
