"""`CMD | PIPELINE`, `!COMMAND`, `source FILE` and `config set timing on`."""

from __future__ import annotations

import io
import re

import pytest

from precision_shell.config import use_config
from precision_shell.errors import UsageError
from precision_shell.commands.runner import split_statements
from precision_shell.frontend import Frontend
from precision_shell.model.session import Session

from conftest import run_cli


@pytest.fixture(autouse=True)
def _fresh_config():
    """`config set` in one test must not leak into the next (the settings are per process)."""
    use_config(None)
    yield
    use_config(None)


def test_pipe_parsed_outside_quotes_brackets_and_regexes():
    [s] = split_statements("vcs -l 0 | grep MatMul | wc -l")
    assert s.argv == ["vcs", "-l", "0"] and s.pipe == "grep MatMul | wc -l" and s.redirect is None
    [s] = split_statements('ls "a|b"')
    assert s.argv == ["ls", "a|b"] and s.pipe is None
    [s] = split_statements("pt X[0, :2] | head -1")
    assert s.argv == ["pt", "X[0, :2]"] and s.pipe == "head -1"
    [s] = split_statements("ls /MatMul|Conv/")          # regex alternation, not a pipe
    assert s.argv == ["ls", "/MatMul|Conv/"] and s.pipe is None
    first, second = split_statements("vcs | grep out0; ac > o.txt")
    assert first.pipe == "grep out0" and second.redirect == "o.txt" and second.pipe is None
    [s] = split_statements("vcs | sort > sorted.txt")   # the redirect belongs to the pipeline
    assert s.pipe == "sort > sorted.txt" and s.redirect is None


@pytest.mark.parametrize("line", ["vcs |", "| wc -l", "vcs > f.txt | wc", "!"])
def test_bad_pipes_are_usage_errors(line):
    with pytest.raises(UsageError):
        split_statements(line)


def test_bang_takes_the_rest_of_the_line():
    first, second = split_statements("info; !echo a; echo b")
    assert first.argv == ["info"] and second.shell == "echo a; echo b" and second.argv == ["!"]


def frontend_for(root) -> tuple[Frontend, io.StringIO, io.StringIO]:
    out, err = io.StringIO(), io.StringIO()
    return Frontend(Session.open(root), out=out, err=err), out, err


def test_pipe_gets_the_plain_output(sample_ws):
    root, manifest = sample_ws
    frontend, out, err = frontend_for(root)
    frontend.run_line("ls -l 0")
    listing = out.getvalue()
    out.seek(0), out.truncate()
    frontend.run_line("ls -l 0 | wc -l")
    assert int(out.getvalue()) == len(listing.splitlines())
    out.seek(0), out.truncate()
    op = manifest["lossy"]["op"]
    frontend.run_line(f"vcs -l 0 | grep -E '^[0-9]+ +[0-9]+ +{op} '")   # its table row (# order op), on one line
    lines = out.getvalue().splitlines()
    assert len(lines) == 1 and lines[0].split()[2] == op and "\x1b[" not in lines[0]
    assert err.getvalue() == "" and frontend.exit_code() == 0


def test_shell_escape_and_its_failures(sample_ws, capsys, tmp_path):
    root, _ = sample_ws
    rc, out, err = run_cli(capsys, root, "-o", tmp_path, "-c", "!echo one; echo two")
    assert rc == 0 and out.splitlines() == ["one", "two"]
    rc, out, err = run_cli(capsys, root, "-o", tmp_path, "-c", "!exit 3")
    assert rc == 1 and "exited with status 3" in err
    rc, out, err = run_cli(capsys, root, "-o", tmp_path, "-c", "info | exit 4", "-c", "!echo after")
    assert rc == 1 and "status 4" in err and out.strip().endswith("after")   # the script goes on


def test_source_runs_a_script_and_refuses_missing_ones(sample_ws, capsys, tmp_path):
    root, manifest = sample_ws
    script = tmp_path / "checks.pshell"
    script.write_text("# a comment\nac -l 0 | grep -c propagated\n!echo done\n")
    rc, out, err = run_cli(capsys, root, "-o", tmp_path, "--allow-shell", "-c", f"source {script}")
    propagated = len(manifest["overflow"]["downstream_non_finite"])
    assert rc == 0 and out.splitlines() == [str(propagated), "done"], err
    # without --allow-shell a script starts no process: one line per refused line, FILE:LINE
    rc, out, err = run_cli(capsys, root, "-o", tmp_path, "-c", f"source {script}")
    assert rc == 2 and out == ""
    assert [line.split(": refusing")[0] for line in err.splitlines()] == [
        f"error: {script}:2", f"error: {script}:3"]
    rc, out, err = run_cli(capsys, root, "-o", tmp_path, "-c", f"source {tmp_path / 'nope'}")
    assert rc == 1 and re.search(r"^error: .*nope.*cannot read script", err, re.M)
    # a redirect may not write over the script being sourced
    script.write_text("info > " + str(script) + "\n")
    rc, out, err = run_cli(capsys, root, "-o", tmp_path, "-c", f"source {script}")
    assert rc != 0 and script.read_text().startswith("info >")


def test_timing_prints_each_statements_time(sample_ws, capsys, tmp_path):
    root, _ = sample_ws
    rc, out, err = run_cli(capsys, root, "-o", tmp_path, "-c", "config set timing on; info; ls")
    times = re.findall(r"^time: (\d+\.\d{3}) s$", err, re.M)
    assert rc == 0 and len(times) == 3          # the `config set` itself, info, ls
    rc, out, err = run_cli(capsys, root, "-o", tmp_path, "-c", "info; ls")
    assert "time:" not in err
