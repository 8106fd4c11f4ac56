"""Issue 17, lists: `#` is the position `goto` takes and execution order is its own `order`
column; `--sort KEY` / `-KEY`, `--type`, `--role`; `-l` never cuts a root or producer and the
footer counts the hidden rows by role; the cursor follows the newest list and says so; CSV rows
carry values only (graph and framework sessions)."""

from __future__ import annotations

import csv
import io
import math
import shutil

import pytest

from precision_shell.commands.finding_list import cut
from precision_shell.commands.runner import execute, split_statements
from precision_shell.errors import UsageError
from precision_shell.model.framework_session import FrameworkSession
from precision_shell.model.session import Session
from precision_shell.render.text import render

from framework_dumps import SAMPLE


def run(session, line: str):
    results = []
    for statement in split_statements(line):
        outcome = execute(session, statement)
        if outcome.error is not None:
            raise outcome.error
        results.append(outcome.result)
    return results[-1]


@pytest.fixture(scope="module")
def graph(sample_ws, tmp_path_factory):
    root, manifest = sample_ws
    return Session.open(root, output=tmp_path_factory.mktemp("lists_out")), manifest


def _cosine(row: dict) -> float:
    return math.nan if row["cosine"] is None else row["cosine"]


def test_hash_is_the_goto_position_and_order_is_its_own_column(graph):
    session, manifest = graph
    table = run(session, "vcs -l 0 --sort cosine")
    assert table.headers[:3] == ["#", "order", "op"]
    assert [row[0] for row in table.rows] == list(range(1, len(table.rows) + 1))
    for row in (table.rows[0], table.rows[-1]):
        panel = run(session, f"goto {row[0]}")
        assert panel.title.startswith(f"[{row[0]}/{len(table.rows)}] {row[2]} ")
    # sorted by cosine, lowest first; NaN (no number to sort by) last
    cosines = [_cosine(r) for r in table.json_rows]
    numbers = [c for c in cosines if not math.isnan(c)]
    assert numbers == sorted(numbers) and cosines[:len(numbers)] == numbers
    assert [r["order"] for r in table.json_rows] == [row[1] for row in table.rows]


def test_descending_sort_filters_and_bad_keys(graph):
    session, manifest = graph
    errors = [r["max_abs_error"] for r in run(session, "vcs -l 0 --sort -max_abs_error").json_rows]
    assert errors == sorted(errors, key=lambda e: -math.inf if e is None else e, reverse=True)
    roots = run(session, "vcs -l 0 --role root").json_rows
    assert {r["op"] for r in roots} == {manifest["lossy"]["op"], manifest["overflow"]["op"]}
    assert all(r["role"] == "root" for r in roots)
    cast = run(session, "vcs -l 0 --type /^Cast$/").json_rows
    assert cast and all(r["type"] == "Cast" for r in cast)
    every = run(session, "vcs -l 0").json_rows
    assert len(cast) == sum(r["type"] == "Cast" for r in every)
    with pytest.raises(UsageError, match="keys: order, cosine"):
        run(session, "vcs --sort cosinus")


def test_cut_keeps_every_root_and_counts_the_hidden_by_role(graph):
    session, manifest = graph
    table = run(session, "vcs -l 1")
    every = run(session, "vcs -l 0").json_rows
    roots = [r["op"] for r in every if r["role"] == "root"]
    assert [row[2] for row in table.rows] == roots           # -l 1, but both roots
    hidden = len(every) - len(roots)
    assert table.more == (f"... {hidden} more not shown: {hidden} propagated (roots and producers are "
                          f"never cut; -l 0 shows all)")
    assert table.more in render(table).splitlines()


def test_cut_fills_the_room_in_list_order():
    class F:
        def __init__(self, role):
            self.role = role
    items = [F("propagated"), F("root"), F("propagated"), F("producer"), F("propagated")]
    shown, more = cut(items, 3)
    assert shown == [0, 1, 3]
    assert more.startswith("... 2 more not shown: 2 propagated")
    assert cut(items, 0) == ([0, 1, 2, 3, 4], None)


def test_overflow_list_sorts_filters_and_keeps_producers(graph):
    session, manifest = graph
    table = run(session, "ac -l 1 --sort -inf")
    assert [row[2] for row in table.rows if "producer" in row[6]] == [manifest["overflow"]["op"]]
    assert table.more and "propagated" in table.more
    counts = [sum(t["pos_inf"] + t["neg_inf"] for t in r["outputs"]) for r in table.json_rows]
    assert counts == sorted(counts, reverse=True) and counts[0] > 0
    producers = run(session, "ac -l 0 --role producer")
    assert [row[2] for row in producers.rows] == [manifest["overflow"]["op"]]


def test_the_cursor_follows_the_newest_list_and_says_so(graph):
    session, manifest = graph
    run(session, "ac")
    assert session.results["cursor"].kind == "overflow"
    table = run(session, "vcs --role root")
    assert any(n.startswith("finding list replaced: `next` now walks this list (2; was overflow")
               for n in table.notes)
    assert session.results["cursor"].position_text == "compare -/2"
    again = run(session, "vcs --role root")
    assert not any(n.startswith("finding list replaced") for n in again.notes)   # the same list


def test_vc_against_another_run_with_no_findings_keeps_the_cursor(sample_ws, tmp_path):
    root = tmp_path / "ws"
    shutil.copytree(sample_ws[0] / "precision_data", root / "precision_data")
    npu = root / "precision_data" / "npu"
    shutil.copytree(npu / "debug_0" / "dump", npu / "debug_1" / "dump")
    session = Session.open(root, output=tmp_path / "out")
    run(session, "use --run debug_0; vcs")
    before = len(session.results["cursor"].items)
    assert before > 0
    message = run(session, "vc --against debug_1")      # identical runs: nothing fails
    # an empty list never replaces one with findings (issue 30): `next` keeps walking, and says so
    assert session.results["cursor"].position_text == f"compare -/{before}"
    assert f"`next` still walks the compare list (compare -/{before}): this list is empty" in message.lines


def test_csv_rows_carry_values_only(graph):
    session, manifest = graph
    table = run(session, "vcs -l 0 --sort -cosine")
    rows = list(csv.reader(io.StringIO(render(table, "csv"))))
    header = rows[0]
    assert header[:7] == ["#", "order", "op", "type", "role", "first", "output"]
    body = [dict(zip(header, r)) for r in rows[1:]]
    assert {r["role"] for r in body} == {"root", "propagated"}
    assert [r["first"] for r in body].count("true") == 1
    assert all("◀" not in cell for r in rows for cell in r)
    assert [int(r["#"]) for r in body] == list(range(1, len(body) + 1))


@pytest.fixture(scope="module")
def framework():
    return FrameworkSession.open(SAMPLE / "target_bf16", golden=SAMPLE / "golden_fp32")


def test_framework_vcs_lists_sort_filter_cut_and_go_to_by_position(framework):
    table = run(framework, "vcs -l 0 --sort -cosine")
    assert table.headers[:3] == ["#", "order", "entry"]
    cos = [r["cosine"] for r in table.json_rows]
    assert cos == sorted(cos, reverse=True)
    panel = run(framework, "goto 2")
    assert panel.title.startswith(f"[2/{len(table.rows)}] {table.rows[1][2]} ")
    roots = run(framework, "vcs --role root").json_rows
    assert [r["op"] for r in roots] == ["Functional.softmax.0.forward", "Module.attn.SelfAttention.forward.0"]
    cut_table = run(framework, "vcs -l 1")
    assert [row[2] for row in cut_table.rows] == [r["op"] for r in roots]
    assert cut_table.more.startswith(f"... {len(table.rows) - 2} more not shown: {len(table.rows) - 2} propagated")
    linear = run(framework, "vcs -l 0 --type linear").json_rows
    assert linear and all(".linear." in r["op"].lower() or "Linear" in r["op"] for r in linear)
    rows = list(csv.reader(io.StringIO(render(cut_table, "csv"))))
    assert rows[0][4:6] == ["role", "first"] and rows[1][4:6] == ["root", "true"]
    # failing tensors by their printed names
    assert cut_table.rows[0][6] == "Functional.softmax.0.forward:0"


def test_framework_vc_moves_the_cursor_and_ac_lists_overflow_producers(framework):
    run(framework, "ac")
    message = run(framework, "vc")
    assert framework.results["cursor"].kind == "framework compare"
    assert any(line.startswith("finding list replaced") for line in message.lines)
    fp16 = FrameworkSession.open(SAMPLE / "overflow_fp16")
    table = run(fp16, "ac -l 1 --sort -nan")
    every = run(fp16, "ac -l 0").json_rows
    producers = [r["op"] for r in every if r["role"] == "producer"]
    assert [row[2] for row in table.rows if row[4].startswith("producer")] == \
        [r["op"] for r in table.json_rows if r["role"] == "producer"]       # -l 1, every producer
    assert sorted(row[2] for row in table.rows) == sorted(producers)
    assert [row[2] for row in table.rows if "first producer" in row[4]] == ["Tensor.__mul__.1.forward"]
    assert "propagated" in table.more
    assert table.rows[0][5].startswith(table.rows[0][2] + ":")     # outputs column: ENTRY:N first


def test_the_suspects_csv_export_names_tensors_as_tables_do(graph, tmp_path):
    session, manifest = graph
    from precision_shell.model.tensor_resolve import resolve_tensor

    path = tmp_path / "suspects.csv"
    run(session, f"vcs; export suspects -o {path}")
    rows = list(csv.DictReader(path.open()))
    lossy = next(r for r in rows if r["op"] == manifest["lossy"]["op"])
    assert lossy["tensor"] == f"{manifest['lossy']['op']}:0" and lossy["failed_outputs"].startswith(lossy["tensor"])
    assert lossy["inputs"].startswith(f"{manifest['lossy']['op']}:in0 ")
    for name in (lossy["tensor"], lossy["golden_tensor"]):
        assert resolve_tensor(session, name).label == name       # each pastes into pt
