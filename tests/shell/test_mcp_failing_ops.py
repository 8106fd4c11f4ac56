"""MCP ``failing_ops`` on a statistics pair (``samples.statistics_pair``, issue 31's generator at
2k entries): the answer holds the rows ``vcs -l LIMIT`` shows (roots never cut), in the order
and with the values of ``vcs --format json``'s rows, the list's totals beside them, and only
those rows are made."""

from __future__ import annotations

import json

import pytest

from precision_shell.samples.statistics_pair import write_statistics_pair
from tests.conftest import json_docs, run_cli
from tests.shell.test_mcp import _answer, _talk

ENTRIES = 2000
ROOT_AT = (700, 1500)     # entries whose golden inputs are the target's own: roots far down the list


def _pair(tmp_path):
    """The generated pair, with the golden inputs of the entries at :data:`ROOT_AT` set to the
    target's (so those entries' inputs pass and their outputs fail: roots)."""
    target, golden = write_statistics_pair(tmp_path / "pair", ENTRIES)
    target_doc = json.loads((target / "rank0" / "dump.json").read_text())
    golden_file = golden / "rank0" / "dump.json"
    golden_doc = json.loads(golden_file.read_text())
    names = list(target_doc["data"])
    for at in ROOT_AT:
        golden_doc["data"][names[at]]["input_args"] = target_doc["data"][names[at]]["input_args"]
    golden_file.write_text(json.dumps(golden_doc, indent=1))
    return target, golden, [names[at] for at in ROOT_AT]


def _shown(rows: list[dict], limit: int) -> list[dict]:
    """The rows a ``-l limit`` cut keeps: every root, then the others in list order up to ``limit``."""
    roots = [i for i, r in enumerate(rows) if r["role"] == "root"]
    others = [i for i, r in enumerate(rows) if r["role"] != "root"][:max(0, limit - len(roots))]
    return [rows[i] for i in sorted(roots + others)]


@pytest.fixture(scope="module")
def statistics_pair(tmp_path_factory):
    return _pair(tmp_path_factory.mktemp("statistics_pair"))


def test_failing_ops_answers_a_page_of_vcs_json_with_its_totals(statistics_pair, capsys, tmp_path):
    target, golden, root_names = statistics_pair
    rc, out, err = run_cli(capsys, target, "--golden", golden, "-o", tmp_path / "cli", "-c", "vcs",
                           "--format", "json")
    assert rc == 0, err
    every = json_docs(out)[-1]
    assert [r["op"] for r in every if r["role"] == "root"] == root_names
    first_root = next(i for i, r in enumerate(every) if r["role"] == "root")
    assert first_root > 50 and len(every) > 1000   # roots beyond any page's plain prefix
    totals = {"rows": len(every), "findings": len(every)}

    async def conversation(session):
        answer = _answer(await session.call_tool("failing_ops", {}))      # the `config` limit: 20
        assert answer["command"] == "vcs"
        assert answer["result"] == _shown(every, 20) and len(answer["result"]) == 20
        assert answer["totals"] == totals
        assert any(f"20 of {len(every)} rows" in n for n in answer["notes"])

        answer = _answer(await session.call_tool("failing_ops", {"limit": 7}))
        assert answer["command"] == "vcs --limit=7"
        assert answer["result"] == _shown(every, 7) == every[:5] + [r for r in every if r["role"] == "root"]
        assert answer["totals"] == totals

        answer = _answer(await session.call_tool("failing_ops", {"limit": 0}))   # all: the cap's 40
        assert answer["command"] == "vcs --limit=40" and answer["result"] == _shown(every, 40)
        assert any("limit 0 (all) held to the answer cap of 40 rows" in n for n in answer["notes"])
        assert answer["totals"] == totals

        answer = _answer(await session.call_tool("failing_ops", {"role": "root"}))
        assert answer["result"] == [r for r in every if r["role"] == "root"]
        assert answer["totals"] == {"rows": len(root_names), "findings": len(every)}

    _talk([str(target), "--golden", str(golden), "-o", str(tmp_path / "mcp"), "--max-items", "40",
           "--max-chars", "1000000"], conversation, tmp_path)


def test_failing_ops_makes_only_the_rows_it_answers(statistics_pair, monkeypatch, tmp_path):
    """In process: of ~2k failing entries, the suspect objects made are the answer's rows."""
    from precision_shell.analysis.root_cause.suspect_list import SuspectList
    from precision_shell.mcp.answers import AnswerLimits
    from precision_shell.mcp.command_thread import Job
    from precision_shell.mcp.session_tools import ServerOptions, ToolRunner

    target, golden, root_names = statistics_pair
    made = []
    real_make = SuspectList._make

    def make(self, pos):
        made.append(pos)
        return real_make(self, pos)
    monkeypatch.setattr(SuspectList, "_make", make)
    runner = ToolRunner(ServerOptions(str(target), str(golden), str(tmp_path / "out"),
                                      limits=AnswerLimits(max_items=30, max_chars=10 ** 7)))
    job = Job(lambda job: None)
    runner.open_at_start(job)
    answer = runner.call("failing_ops", {"limit": 0}, job)
    ops = runner.session.results["vcs"].ops
    assert len(ops) > 1000 and answer["totals"] == {"rows": len(ops), "findings": len(ops)}
    assert [r["op"] for r in answer["result"]] == ops[:28] + root_names
    assert sorted(made) == sorted(ops.index(r["op"]) for r in answer["result"])
