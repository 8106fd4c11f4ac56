"""Tables and panels fitted to the terminal: no line wider than it, no number split across lines,
columns dropped by priority (and named), the expanded (one field per line) form, plain CSV."""

from __future__ import annotations

import csv
import io
import re

import pytest

from precision_shell.commands.results import Table
from precision_shell.config import use_config
from precision_shell.frontend import Frontend
from precision_shell.model.session import Session
from precision_shell.render.layout import is_number, wrap
from precision_shell.render.text import Layout, render

from conftest import run_cli

TAIL = re.compile(r"[\d.]*\d[\d.]*$")          # digits (and points) ending a line
HEAD = re.compile(r"^\s+([\d.]+)")               # digits starting an indented continuation line
RECORD = re.compile(r"-\[ RECORD \d+ \]")     # the expanded form's record titles
TOKEN = re.compile(r"[^\s;()\[\]]+")
RUN_TIME = re.compile(r"\d+(\.\d+)? s\b")      # how long `vc` took differs between two runs
# a tensor name as printed (OP:N, OP:inN, golden:OP:N), standing alone between spaces
TENSOR_NAME = re.compile(r"(?<![^\s(\[,])(?:golden:)?[\w./-]+:(?:in)?\d+(?![\w.:/])")


def split_numbers(text: str) -> list[tuple[str, str]]:
    """Pairs (end of line, start of the next) that read as one number cut in two: a line ending
    in digits and a continuation line (indented: a wrapped cell or prose) going on with digits."""
    lines = text.split("\n")
    bad = []
    for line, after in zip(lines, lines[1:]):
        tail, head = TAIL.search(line.rstrip()), HEAD.match(after)
        if tail and head and line == line.rstrip() and is_number(tail.group() + head.group(1)):
            bad.append((line, after))
    return bad


def numbers(text: str) -> set[str]:
    text = RECORD.sub("", RUN_TIME.sub("", text))
    return {t.strip(",:") for t in TOKEN.findall(text) if is_number(t)}


def run_lines(session, lines: list[str], width: int | None, expanded: str = "auto") -> str:
    out, err = io.StringIO(), io.StringIO()
    frontend = Frontend(session, out=out, err=err, width=lambda: width, expanded=expanded)
    for line in lines:
        frontend.run_line(line)
    assert err.getvalue() == ""
    return out.getvalue()


@pytest.fixture(autouse=True)
def _fresh_config():
    """`config set expanded` in one test must not leak into the next (settings are per process)."""
    use_config(None)
    yield
    use_config(None)


SCREENS = {"vcs": ["vcs -l 0"], "ac": ["ac -l 0"], "ni": ["ni {root}"], "next": ["vcs", "next"],
           "help": ["help"]}


@pytest.mark.parametrize("width", [80, 160])
@pytest.mark.parametrize("screen", sorted(SCREENS))
def test_screens_fit_the_terminal_and_keep_numbers_whole(sample_ws, screen, width):
    root, manifest = sample_ws
    lines = [line.format(root=manifest["lossy"]["op"]) for line in SCREENS[screen]]
    wide = run_lines(Session.open(root), lines, None, "off")
    fitted = run_lines(Session.open(root), lines, width)
    too_wide = [line for line in fitted.split("\n") if len(line) > width]
    assert too_wide == []
    assert split_numbers(fitted) == []
    # every number shown is one the unfitted output shows whole (a cut piece would not be)
    assert numbers(fitted) <= numbers(wide)
    # every tensor name is whole, so it pastes into pt (a dropped column may hide some)
    assert set(TENSOR_NAME.findall(fitted)) <= set(TENSOR_NAME.findall(wide))
    assert [line for line in fitted.split("\n") if re.search(r"[\w/]+:$", line)] == []
    if screen == "ni":
        assert "zero" in fitted and "nan" in fitted   # the value counts survive at 80 columns


def test_split_number_check_catches_a_cut():
    assert split_numbers("total 6708\n  .42 more") != []
    assert split_numbers("row 1  0.5\nrow 2  0.7") == []        # a new row is not a continuation
    assert split_numbers("input 0\n  0 zeros") != []


def test_wrap_never_cuts_a_number_and_breaks_names_at_separators():
    text = "cosine 0.357198 max 69.046722 at ln1/add_1/LayerNorm:output:0 count 406,272"
    for width in range(12, 40):
        lines = wrap(text, width, "  ")
        assert all(len(line) <= width for line in lines), (width, lines)
        assert numbers("\n".join(lines)) >= {"0.357198", "69.046722", "406,272"}
    assert wrap("ln1/add_1/LayerNorm:output:0", 12)[0] == "ln1/add_1/"


def _table(rows: int = 3) -> Table:
    return Table(["#", "op", "cosine", "golden", "fusion passes"],
                 [[i, f"block{i}/very_long_op_name/MatMul", 0.5 + i / 10, f"golden/op_{i}:0",
                   "MatMulBiasAddFusionPass"] for i in range(1, rows + 1)], highlight={0})


def test_low_priority_columns_drop_first_and_are_named():
    text = render(_table(), layout=Layout(60, "off"))
    header = text.split("\n")[0].split()
    assert header[:3] == ["#", "op", "cosine"] and "passes" not in header
    assert "columns not shown at this width: " in text and "fusion passes" in text
    assert max(len(line) for line in text.split("\n")) <= 60


def _metrics_table() -> Table:
    """Ten number columns, none optional: at 60 columns only the expanded form shows them all."""
    names = ["cosine", "max_abs", "mean_abs", "rmse", "mean_rel", "kl", "std", "mean", "min", "max"]
    return Table(["tensor"] + names, [[f"op{i}:0"] + [1 / (i + k + 3) for k in range(len(names))]
                                      for i in range(3)])


@pytest.mark.parametrize("make,mode,width", [(_table, "on", None), (_table, "on", 200),
                                              (_metrics_table, "auto", 60)])
def test_expanded_form_one_field_per_line(make, mode, width):
    table = make()
    text = render(table, layout=Layout(width, mode))
    records = text.count("-[ RECORD ")
    assert records == len(table.rows)
    for row in table.rows:
        for head, value in zip(table.headers, row):
            cell = f"{value:.6g}" if isinstance(value, float) else str(value)
            if len(cell) < 20:
                assert re.search(rf"^{re.escape(head)}\s+{re.escape(cell)}$", text, re.M)
    if width:
        assert max(len(line) for line in text.split("\n")) <= width


def test_expanded_auto_keeps_columns_when_the_table_fits():
    text = render(_table(), layout=Layout(200, "auto"))
    assert "RECORD" not in text and text.split("\n")[0].split()[-2:] == ["fusion", "passes"]


def test_config_set_expanded_and_batch_csv_is_values_only(sample_ws, capsys, tmp_path):
    root, manifest = sample_ws
    rc, out, _ = run_cli(capsys, root, "-o", tmp_path, "-c", "config set expanded on; vcs -l 1")
    assert "-[ RECORD 1 ]" in out and re.search(r"^op\s+" + re.escape(manifest["lossy"]["op"]), out, re.M)
    rc, out, _ = run_cli(capsys, root, "-o", tmp_path, "-c", "vcs -l 0; ac -l 0", "--format", "csv")
    assert "◀" not in out
    docs = [list(csv.DictReader(io.StringIO(block))) for block in out.strip().split("\n#,")[0:1]]
    rows = docs[0]
    assert {"role", "first"} <= set(rows[0])
    firsts = [r for r in rows if r["first"] == "true"]
    assert [r["op"] for r in firsts] == [manifest["lossy"]["op"]]
    assert firsts[0]["role"] == "root" and {r["first"] for r in rows} == {"true", "false"}


def test_batch_has_no_repl_hints_the_repl_frontend_has(sample_ws, capsys, tmp_path):
    root, _ = sample_ws
    _, out, _ = run_cli(capsys, root, "-o", tmp_path, "-c", "vcs; ac")
    assert "steps through the list" not in out
    shown = run_lines(Session.open(root), ["vcs"], None)
    assert "`next`/`goto #` step through the list" in shown
