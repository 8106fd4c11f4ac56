"""``pshell mcp``: the tool table from the registry, arguments to argv, the answer cap, the
main-thread job loop (cancel = Ctrl-C), and the server itself driven over stdio by the SDK's own
client on the sample workspace (expected values from the sample manifest)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time

import pytest

from precision_shell.commands import REGISTRY
from precision_shell.commands.registry import Registry, arg
from precision_shell.errors import PshellError, UsageError
from precision_shell.mcp.answers import AnswerLimits, answer_of
from precision_shell.mcp.command_thread import CommandThread, JobProgressBar
from precision_shell.mcp.tools import TOOL_TABLE, command_words, input_schema, present_tools, tool_arguments
from precision_shell.samples.writer import SampleOptions, write_workspace


def _spec(name):
    return next(s for s in TOOL_TABLE if s.name == name)


def _order_of(manifest) -> dict[str, int]:
    return {op["name"]: op["order"] for op in manifest["ops"] if op.get("order") is not None}


# -- the tool table ------------------------------------------------------------------------------

def test_a_tool_exists_only_for_a_registered_command_and_each_has_a_schema():
    reg = Registry()
    for cmd in REGISTRY.commands():
        if cmd.name not in ("replay", "impact"):     # impact: registered below as the stand-in
            reg.add(cmd)
    names = [s.name for s in present_tools(reg)]
    assert "replay" not in names and {"info", "failing_ops", "node", "tensor_stats"} <= set(names)
    assert "impact" not in names   # not registered here: no tool, nothing to fail on

    @reg.command("impact", summary="how much each root matters", example="impact",
                 args=[arg("op", nargs="*", help="roots"), arg("--to", metavar="OP", help="stop at OP")])
    def impact(session, args):   # a stand-in registered the way the real command will be
        return None

    tools = {s.name: s for s in present_tools(reg)}
    assert "impact" in tools
    schema = input_schema(tools["impact"], reg.get("impact"))
    assert schema["properties"]["op"] == {"type": "array", "items": {"type": "string"}, "description": "roots"}
    assert schema["properties"]["to"]["type"] == "string" and "required" not in schema

    for spec in present_tools():   # the real registry: every present tool's schema matches its parser
        cmd = REGISTRY.get(spec.command)
        schema = input_schema(spec, cmd)
        assert schema["type"] == "object" and schema["additionalProperties"] is False
        dests = {a.dest for a in cmd.parser._actions}
        for targ in tool_arguments(spec, cmd):
            assert targ.action.dest in dests and targ.name in schema["properties"]


def test_schemas_name_arguments_as_the_commands_do():
    def schema(tool):
        spec = _spec(tool)
        return input_schema(spec, REGISTRY.get(spec.command))

    vcs = schema("failing_ops")
    assert vcs["properties"]["threshold"]["type"] == "number"
    assert vcs["properties"]["limit"]["type"] == "integer"
    assert not {"cosine", "plot", "format", "help"} & set(vcs["properties"])
    assert "required" not in vcs
    assert schema("node")["required"] == ["op"] and schema("replay")["required"] == ["op"]
    assert schema("replay")["properties"]["profile"]["type"] == "array"
    pt = schema("tensor_stats")
    assert pt["required"] == ["tensor"] and pt["properties"]["values"]["type"] == "boolean"
    assert not {"all", "write", "lines", "stats"} & set(pt["properties"])
    export = schema("export")    # export's own --format is an argument; the runner's is not
    assert "fusion-switch" in export["properties"]["format"]["enum"]
    assert export["properties"]["what"]["enum"] == ["suspects", "overflow", "compare"]


def test_arguments_become_words_the_command_parses_back():
    vcs = REGISTRY.get("vcs")
    words = command_words(_spec("failing_ops"), vcs, {"threshold": 0.5, "limit": 0, "sort": "-excess",
                                                      "metric": ["max_abs_error>0.1", "rmse>2"]})
    ns = vcs.parse(words)
    assert (ns.cosine, ns.limit, ns.sort, ns.metric) == (0.5, 0, "-excess", ["max_abs_error>0.1", "rmse>2"])
    ni = REGISTRY.get("node_info")
    ns = ni.parse(command_words(_spec("node"), ni, {"op": "-odd/name", "attrs": True}))
    assert (ns.op, ns.attrs) == ("-odd/name", True)
    pt = REGISTRY.get("print_tensor")
    assert pt.parse(command_words(_spec("tensor_stats"), pt, {"tensor": "a:0[0, :8]"})).stats is True
    ns = pt.parse(command_words(_spec("tensor_stats"), pt, {"tensor": "a:0", "values": True}))
    assert (ns.tensor, ns.stats) == ("a:0", False)


@pytest.mark.parametrize("tool, arguments, says", [
    ("failing_ops", {"limit": "3"}, "'limit' must be an integer"),
    ("failing_ops", {"limit": True}, "'limit' must be an integer"),
    ("failing_ops", {"threshold": "high"}, "'threshold' must be a number"),
    ("failing_ops", {"cosine": 0.9}, "unknown argument 'cosine'"),
    ("node", {}, "missing required argument 'op'"),
    ("node", {"op": "x", "attrs": "yes"}, "'attrs' must be a boolean"),
    ("replay", {"op": "x", "profile": "fp16"}, "'profile' must be an array"),
    ("export", {"what": "everything"}, "'what' must be one of suspects, overflow, compare"),
    ("info", ["not", "an", "object"], "arguments must be an object"),
])
def test_bad_arguments_are_one_line_usage_errors(tool, arguments, says):
    spec = _spec(tool)
    with pytest.raises(UsageError) as exc:
        command_words(spec, REGISTRY.get(spec.command), arguments)
    assert says in str(exc.value) and "\n" not in str(exc.value)


def test_answer_cap_cuts_rows_first_and_says_so(tmp_path):
    rows = [{"op": f"op{i}", "tensor": f"op{i}:output:0", "values": list(range(200))} for i in range(500)]
    limits = AnswerLimits(max_items=40, max_chars=6000)
    answer = answer_of("failing_ops", "vcs", rows, output_dir=tmp_path, warnings=[], notes=[],
                       interrupted=False, limits=limits)
    text = json.dumps(answer)
    assert len(text) <= limits.max_chars
    shown = answer["result"]
    assert 1 <= len(shown) < 40 and [r["op"] for r in shown] == [f"op{i}" for i in range(len(shown))]
    assert all(r["values"] == list(range(40)) for r in shown)          # inner lists: max_items
    assert any(f"first {len(shown)} of 500 items" in n for n in answer["notes"])
    assert any("result[].values: first 40 of 200 items" in n for n in answer["notes"])
    assert answer["evidence"]["tensors"] == [r["tensor"] for r in shown]
    small = answer_of("info", "info", {"ops": 3}, output_dir=tmp_path, warnings=[], notes=[],
                      interrupted=False, limits=limits)
    assert small["result"] == {"ops": 3} and small["notes"] == []


# -- the main-thread job loop --------------------------------------------------------------------

def test_cancel_stops_a_running_job_as_ctrl_c_and_the_next_job_runs():
    commands = CommandThread()
    started = threading.Event()

    def long_job(job):
        bar = JobProgressBar(job, "counting", None)
        done = 0
        try:
            while True:
                time.sleep(0.001)
                done += 1
                bar.advance()
                started.set()
        except KeyboardInterrupt:   # what pshell's analyses do: keep what is done
            return {"partial": done}

    def drive():
        first = commands.submit(long_job)
        started.wait(10)
        commands.cancel(first)
        later = commands.submit(lambda job: "second ran")
        queued = commands.submit(lambda job: "never")
        commands.cancel(queued)
        out.extend([first, later, queued])
        commands.stop()

    out = []
    helper = threading.Thread(target=drive)
    helper.start()
    commands.serve(alive=lambda: True)   # the pytest main thread is the command thread here
    helper.join(10)
    first, later, queued = out
    assert first.interrupt_sent and first.error is None and first.result["partial"] >= 1
    assert first.progress.done == first.result["partial"]
    assert later.result == "second ran" and later.error is None
    assert queued.result is None and str(queued.error) == "cancelled before it started"


def test_a_cancels_sigint_landing_after_its_job_ended_hits_nothing():
    """A loaded machine may deliver a cancel's SIGINT after its job returned: it must not
    interrupt the next job (nor drop it while the loop takes it from the queue). Here the first
    job keeps SIGINT blocked, so the cancel's signal stays pending until the second job unblocks it."""
    commands = CommandThread()
    running, cancelled = threading.Event(), threading.Event()

    def first_job(job):
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
        running.set()
        cancelled.wait(10)
        return "first done"

    def second_job(job):
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})   # the late SIGINT lands here
        time.sleep(0.05)
        return "second done"

    def drive():
        first = commands.submit(first_job)
        second = commands.submit(second_job)
        running.wait(10)
        commands.cancel(first)
        cancelled.set()
        out.extend([first, second])
        commands.stop()

    out = []
    helper = threading.Thread(target=drive)
    helper.start()
    try:
        commands.serve(alive=lambda: True)
    finally:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
    helper.join(10)
    first, second = out
    assert first.interrupt_sent and first.result == "first done" and first.error is None
    assert second.result == "second done" and second.error is None


def test_a_failing_job_is_one_line_and_the_loop_goes_on():
    commands = CommandThread()

    def bad(job):
        raise ZeroDivisionError("boom")

    jobs = [commands.submit(bad), commands.submit(lambda job: 1 / 0 if False else "ok")]
    commands.stop()
    commands.serve(alive=lambda: True)
    assert isinstance(jobs[0].error, PshellError) and "ZeroDivisionError: boom" in str(jobs[0].error)
    assert jobs[1].result == "ok"


# -- the server over stdio -----------------------------------------------------------------------

def _server_env() -> dict:
    keep = ("XDG_STATE_HOME", "XDG_DATA_HOME", "XDG_CONFIG_HOME", "XDG_CACHE_HOME", "PSHELL_NO_EXT", "PYTHONPATH")
    return {k: os.environ[k] for k in keep if k in os.environ}


def _talk(args: list[str], conversation, cwd) -> None:
    """Start ``pshell mcp ARGS`` and run ``conversation(session)`` with the SDK's stdio client."""
    anyio = pytest.importorskip("anyio")
    mcp = pytest.importorskip("mcp")
    from mcp.client.stdio import stdio_client

    params = mcp.StdioServerParameters(command=sys.executable, args=["-m", "precision_shell", "mcp", *args],
                                       env=_server_env(), cwd=str(cwd))

    async def main():
        with open(os.path.join(cwd, "server_stderr.txt"), "w") as errlog:
            async with stdio_client(params, errlog=errlog) as (read, write):
                async with mcp.ClientSession(read, write) as session:
                    await session.initialize()
                    await conversation(session)

    anyio.run(main)


def _answer(result) -> dict:
    assert not result.is_error, result.content[0].text
    answer = json.loads(result.content[0].text)
    assert answer == result.structured_content
    return answer


def _error_text(result) -> str:
    assert result.is_error
    text = result.content[0].text
    assert "\n" not in text and "Traceback" not in text
    return text


def test_server_lists_every_present_tool_with_its_schema(sample_ws, tmp_path):
    root, _ = sample_ws

    async def conversation(session):
        tools = {t.name: t for t in (await session.list_tools()).tools}
        assert set(tools) == {"open", *(s.name for s in present_tools())}
        for tool in tools.values():
            assert tool.input_schema["type"] == "object" and tool.description
        assert {"threshold", "limit"} <= set(tools["failing_ops"].input_schema["properties"])
        assert tools["node"].input_schema["required"] == ["op"]
        assert tools["tensor_stats"].input_schema["required"] == ["tensor"]

    _talk([str(root), "-o", str(tmp_path / "out")], conversation, tmp_path)


def test_failing_ops_and_overflow_name_the_samples_roots_and_producer(sample_ws, tmp_path):
    root, manifest = sample_ws
    lossy, overflow = manifest["lossy"], manifest["overflow"]
    order = _order_of(manifest)
    out = tmp_path / "out"

    async def conversation(session):
        answer = _answer(await session.call_tool("failing_ops", {"threshold": 0.98, "limit": 0}))
        rows = answer["result"]
        roots = [r["op"] for r in rows if r["role"] == "root"]
        assert set(roots) == {lossy["op"], overflow["op"]}
        assert [r["op"] for r in rows if r["first"]] == [min(roots, key=order.get)]
        assert answer["command"] == "vcs --cosine=0.98 --limit=50"     # 0 (all): the answer cap's 50 rows
        assert any("limit 0 (all) held to the answer cap of 50 rows" in n for n in answer["notes"])
        assert answer["totals"] == {"rows": len(rows), "findings": len(rows)}   # the sample fails < 50 ops
        assert lossy["tensor"] in answer["evidence"]["tensors"]
        csv = answer["evidence"]["compare_csv"]
        assert os.path.isfile(csv) and os.path.dirname(csv).startswith(str(out.resolve()))
        propagated = {r["op"] for r in rows if r["role"] == "propagated"}
        assert propagated == set(lossy["downstream_below_threshold"]) | set(overflow["downstream_non_finite"])

        answer = _answer(await session.call_tool("overflow", {"limit": 0}))
        producers = [r["op"] for r in answer["result"] if r["role"] == "producer"]
        assert producers[0] == overflow["op"]
        row = answer["result"][0]
        assert row["outputs"][0]["pos_inf"] == overflow["pos_inf"]
        dump = next(op["dump_file"] for op in manifest["ops"] if op["name"] == overflow["op"])
        assert str((root / dump).resolve()) in answer["evidence"]["files_read"]

    _talk([str(root), "-o", str(out)], conversation, tmp_path)


def test_bad_calls_are_tool_errors_and_the_server_keeps_serving(sample_ws, tmp_path):
    root, manifest = sample_ws
    lossy = manifest["lossy"]

    async def conversation(session):
        assert "no workspace open" in _error_text(await session.call_tool("info", {}))
        assert "nowhere" in _error_text(await session.call_tool("open", {"workspace": str(tmp_path / "nowhere")}))
        opened = _answer(await session.call_tool("open", {"workspace": str(root), "output": str(tmp_path / "o")}))
        assert opened["result"]["ops"] == len(manifest["ops"]) + len(manifest["graph_only_ops"])
        assert "no op matches 'no/such/op'" in _error_text(await session.call_tool("node", {"op": "no/such/op"}))
        node = _answer(await session.call_tool("node", {"op": lossy["op"]}))
        assert node["result"]["op"] == lossy["op"] and node["result"]["type"] == lossy["type"]
        assert "unknown tool 'nope'" in _error_text(await session.call_tool("nope", {}))
        assert "'limit' must be an integer" in _error_text(await session.call_tool("failing_ops", {"limit": "x"}))
        stats = _answer(await session.call_tool("tensor_stats", {"tensor": lossy["tensor"]}))
        assert stats["result"]["values"] is None and stats["result"]["stats"]["count"] > 0
        if "bisect" in {s.name for s in present_tools()}:
            assert "--allow-bisect" in _error_text(await session.call_tool("bisect", {}))
        again = _answer(await session.call_tool("info", {}))
        assert again["result"]["ops"] == opened["result"]["ops"]

    _talk([], conversation, tmp_path)
    assert "Traceback" not in (tmp_path / "server_stderr.txt").read_text()


def test_a_workspace_that_fails_to_open_is_said_by_every_tool_until_open(sample_ws, tmp_path):
    root, manifest = sample_ws

    async def conversation(session):
        text = _error_text(await session.call_tool("overflow", {}))
        assert text.startswith("the workspace did not open: ") and "does not exist" in text
        opened = _answer(await session.call_tool("open", {"workspace": str(root), "output": str(tmp_path / "o")}))
        assert opened["result"]["npu_dump_files"] == manifest["totals"]["npu_dump_files"]

    _talk([str(tmp_path / "missing")], conversation, tmp_path)


def test_an_answer_stays_within_the_size_cap(sample_ws, tmp_path):
    root, manifest = sample_ws
    lossy = manifest["lossy"]

    async def conversation(session):
        result = await session.call_tool("failing_ops", {"limit": 0})
        answer = _answer(result)
        assert len(result.content[0].text) <= 4000
        assert len(answer["result"]) <= 3 and answer["result"][0]["op"] == min(
            (r["op"] for r in answer["result"] if r["role"] == "root"), key=_order_of(manifest).get)
        assert any("items (answer cap" in note for note in answer["notes"])
        values = _answer(await session.call_tool("tensor_stats", {"tensor": lossy["tensor"], "values": True}))
        rows = values["result"]["values"]
        assert len(rows) <= 3 and all(len(r) <= 3 for r in rows)

    _talk([str(root), "-o", str(tmp_path / "out"), "--max-items", "3", "--max-chars", "4000"],
          conversation, tmp_path)


def test_stdout_carries_only_protocol_messages(sample_ws, tmp_path):
    """Raw JSON-RPC over the pipe: every line the server writes is a JSON-RPC message, errors too."""
    root, _ = sample_ws
    messages = [
        {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "0"}}},
        {"jsonrpc": "2.0", "method": "notifications/initialized"},
        {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "node", "arguments": {"op": "zz"}}},
        {"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {"name": "compare", "arguments": {}}},
        {"jsonrpc": "2.0", "id": 4, "method": "tools/call", "params": {"name": "info", "arguments": {"x": 1}}},
    ]
    server = subprocess.Popen([sys.executable, "-m", "precision_shell", "mcp", str(root), "-o", str(tmp_path / "o")],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                              cwd=tmp_path, env={**os.environ, **_server_env()})
    watchdog = threading.Timer(120, server.kill)   # a hung server fails the test instead of hanging it
    watchdog.start()
    try:
        server.stdin.write("".join(json.dumps(m) + "\n" for m in messages))
        server.stdin.flush()
        replies = []
        while not {1, 2, 3, 4} <= {r.get("id") for r in replies}:
            line = server.stdout.readline()
            assert line, server.stderr.read()
            replies.append(json.loads(line))   # anything else on stdout fails here
        rest, errors = server.communicate()    # closes stdin: end of input, the server exits
    finally:
        watchdog.cancel()
    assert server.returncode == 0, errors
    assert rest == "" and "Traceback" not in errors
    by_id = {r["id"]: r for r in replies if "id" in r}
    assert all(r["jsonrpc"] == "2.0" for r in replies)
    assert by_id[2]["result"]["isError"] is True
    assert by_id[3]["result"]["structuredContent"]["result"]["compared"] > 0
    assert "unknown argument 'x'" in by_id[4]["result"]["content"][0]["text"]


@pytest.mark.slow
def test_cancelling_a_compare_stops_it_as_ctrl_c_does(tmp_path):
    """A compare long enough to report progress; cancelled at its first progress notification, it
    keeps what it compared (a partial result, as Ctrl-C leaves), and the server goes on. On a
    starved machine the compare may end before the cancel arrives: then it is tried again."""
    anyio = pytest.importorskip("anyio")
    # 4000 files: a compare of ~1 s (1500 took 0.37 s since planning got faster, about the time a
    # progress notification takes to come, the server polls every 0.25 s, so the cancel often came late)
    write_workspace(tmp_path / "ws", SampleOptions(seed=0, files=4000))
    seen = []

    async def cancelled_compare(session) -> bool:
        first_progress = anyio.Event()

        async def on_progress(progress, total, message):
            seen.append((progress, total, message))
            first_progress.set()

        async with anyio.create_task_group() as tg:
            async def cancel_at_first_progress():
                await first_progress.wait()
                tg.cancel_scope.cancel()

            tg.start_soon(cancel_at_first_progress)
            await session.call_tool("compare", {"jobs": 1}, progress_callback=on_progress)
        after = _answer(await session.call_tool("failing_ops", {"limit": 1}))
        return any("the result is partial" in w for w in after["warnings"])

    async def conversation(session):
        for _ in range(3):
            seen.clear()
            if await cancelled_compare(session):
                break
        else:
            pytest.fail("every compare ended before its cancel arrived")
        progress, total, message = seen[0]
        assert message == "comparing" and 0 <= progress < total
        later = []

        async def follow(progress, total, message):
            later.append(progress)

        full = _answer(await session.call_tool("compare", {"jobs": 1}, progress_callback=follow))
        assert full["result"]["compared"] == full["result"]["tensors"] and not full["interrupted"]
        assert later == sorted(set(later))   # MCP progress only grows

    _talk([str(tmp_path / "ws"), "-o", str(tmp_path / "out")], conversation, tmp_path)


def test_opening_a_framework_dump_lists_its_commands_arguments(tmp_path):
    """The tools follow the open session's kind: a framework dump's `vcs` variant has its own
    arguments; overflow names the producer the committed msprobe sample's truth names."""
    from tests.framework_dumps import sample

    root = sample()
    truth = json.loads((root / "truth.json").read_text())["overflow"]
    graph_vcs = {t.name for t in tool_arguments(_spec("failing_ops"), REGISTRY.get("vcs"))}

    async def conversation(session):
        before = {t.name: t for t in (await session.list_tools()).tools}
        assert set(before["failing_ops"].input_schema["properties"]) == graph_vcs
        _answer(await session.call_tool("open", {"workspace": str(root / truth["run"]),
                                                 "output": str(tmp_path / "out")}))
        after = {t.name: t for t in (await session.list_tools()).tools}
        framework_vcs = REGISTRY.available(REGISTRY.get("vcs"), _FrameworkKind())
        assert set(after["failing_ops"].input_schema["properties"]) == {
            t.name for t in tool_arguments(_spec("failing_ops"), framework_vcs)} != graph_vcs
        answer = _answer(await session.call_tool("overflow", {"limit": 0}))
        assert [r["op"] for r in answer["result"] if r["role"] == "producer"][0] == truth["producer"]

    _talk([], conversation, tmp_path)


class _FrameworkKind:
    kind = "framework"


def test_a_command_that_needs_no_workspace_runs_before_open(monkeypatch, tmp_path):
    """`curve` reads logs without a workspace (needs_session=False): its tool runs before `open`;
    the others say a workspace is needed. A stand-in registry, as curve lives on another branch."""
    from precision_shell.commands.results import Message
    from precision_shell.errors import CommandError
    from precision_shell.mcp import session_tools
    from precision_shell.mcp.command_thread import Job

    reg = Registry()
    for cmd in REGISTRY.commands():
        if cmd.name != "curve":
            reg.add(cmd)

    @reg.command("curve", summary="judge a loss curve", example="curve a.log", needs_session=False,
                 args=[arg("target", help="the log"), arg("--window", type=lambda t: int(t), default=10)])
    def curve(session, args):
        return Message([f"{args.target}"], data={"target": args.target, "window": args.window,
                                                 "had_session": session is not None})

    monkeypatch.setattr(session_tools, "REGISTRY", reg)
    monkeypatch.setattr(session_tools, "present_tools", lambda: present_tools(reg))
    runner = session_tools.ToolRunner(session_tools.ServerOptions())
    schema = dict((spec.name, input_schema(spec, cmd)) for spec, cmd in runner.commands())["curve"]
    assert schema["properties"]["window"]["type"] == "integer"   # a checking type, an int default
    log = tmp_path / "npu.log"
    log.write_text("iteration 1/ 2 | lm loss: 1.0 |\n")
    answer = runner.call("curve", {"target": str(log), "window": 5}, Job(lambda job: None))
    assert answer["result"] == {"target": str(log), "window": 5, "had_session": False}
    assert answer["command"] == f"curve --window=5 {log}"
    assert answer["evidence"]["files_read"] == [str(log.resolve())]   # the log it judged
    with pytest.raises(CommandError, match="no workspace open"):
        runner.call("info", {}, Job(lambda job: None))
