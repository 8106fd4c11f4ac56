"""Command-line splitting, the registry's parser behaviour and unknown-command suggestions."""

import pytest

from precision_shell.commands import REGISTRY
from precision_shell.commands.registry import HelpRequested, Registry, arg
from precision_shell.commands.runner import execute, split_statements
from precision_shell.errors import UsageError


def test_statements_split_on_semicolons_and_keep_slices_whole():
    stmts = split_statements('ac; pt fc1/MatMul:output:0[0, :8] ; vcs -c 0.95 > low.txt')
    assert [s.argv for s in stmts] == [["ac"], ["pt", "fc1/MatMul:output:0[0, :8]"], ["vcs", "-c", "0.95"]]
    assert stmts[2].redirect == "low.txt" and not stmts[2].append
    assert stmts[0].redirect is None


def test_quotes_append_redirect_and_comments():
    stmts = split_statements('ls -n "a b;c" >> out.txt')
    assert stmts[0].argv == ["ls", "-n", "a b;c"]
    assert stmts[0].redirect == "out.txt" and stmts[0].append
    assert split_statements("   # a comment") == []
    assert split_statements(";;") == []


@pytest.mark.parametrize("line", ['ls "abc', "vcs >", "vcs > a b"])
def test_bad_lines_raise_usage_error(line):
    with pytest.raises(UsageError):
        split_statements(line)


def test_unknown_command_suggests_close_names():
    out = execute(None, split_statements("hlep")[0])
    assert isinstance(out.error, UsageError)
    assert "help" in str(out.error)


def test_bad_flag_is_a_usage_error_not_an_exit():
    out = execute(None, split_statements("help --bogus")[0])
    assert isinstance(out.error, UsageError)
    assert "unrecognized arguments: --bogus" in str(out.error)


def test_dash_h_returns_help_with_example():
    out = execute(None, split_statements("help -h")[0])
    assert out.error is None
    assert "usage: help" in out.help_text and "example:" in out.help_text


def test_every_command_has_summary_example_and_parses_help():
    for cmd in REGISTRY.commands():
        assert cmd.summary and cmd.example, cmd.name
        with pytest.raises(HelpRequested) as info:
            cmd.parse(["-h"])
        assert "example:" in info.value.text


def test_duplicate_names_are_rejected():
    reg = Registry()
    reg.command("a", summary="s", example="a", aliases=("b",))(lambda s, a: None)
    with pytest.raises(ValueError):
        reg.command("b", summary="s", example="b")(lambda s, a: None)


def test_completer_kinds_by_flag_and_position():
    reg = Registry()
    reg.command("x", summary="s", example="x", args=[
        arg("op", complete="op"), arg("-o", "--out", complete="path")])(lambda s, a: None)
    cmd = reg.get("x")
    assert cmd.completer_for(0) == "op"
    assert cmd.completer_for("--out") == "path"
    assert cmd.completer_for(1) is None
    assert "--out" in cmd.flags()


def test_unbalanced_bracket_does_not_swallow_the_next_statement():
    stmts = split_statements("ls -n /[a/; info")
    assert [s.argv for s in stmts] == [["ls", "-n", "/[a/"], ["info"]]
    stmts = split_statements("ls -t /(/; info")
    assert [s.argv for s in stmts] == [["ls", "-t", "/(/"], ["info"]]


def test_per_statement_format_is_taken_by_the_shell():
    from precision_shell.commands.runner import take_format_option
    assert take_format_option(["-c", "0.9", "--format", "csv"]) == (["-c", "0.9"], "csv")
    assert take_format_option(["--format=json"]) == ([], "json")
    assert take_format_option(["--format", "xml"]) == (["--format", "xml"], None)
