"""``pshell mcp [WORKSPACE | TARGET --golden GOLDEN]``: pshell as a Model Context Protocol server
over stdio (product.md §19). The only module that imports the ``mcp`` SDK.

Threads: the protocol loop (anyio) runs in a thread of its own; tools run on the main thread
(:mod:`.command_thread`), one at a time. Before anything runs, stdout is taken for the protocol
alone: fd 1 is pointed at stderr (so prints, C code and child processes cannot corrupt the
channel) and ``sys.stdout`` is ``sys.stderr``.
"""

from __future__ import annotations

import argparse
import asyncio
import io
import json
import os
import sys
import threading
from typing import Any

import anyio
import mcp.types as types
from mcp.server.lowlevel import NotificationOptions, Server
from mcp.server.stdio import stdio_server

from precision_shell import __version__
from precision_shell.errors import PshellError
from precision_shell.logfile import setup_logging
from precision_shell.mcp.answers import DEFAULT_MAX_CHARS, DEFAULT_MAX_ITEMS
from precision_shell.mcp.command_thread import DONE, CommandThread, Job
from precision_shell.mcp.session_tools import (OPEN_DESCRIPTION, OPEN_SCHEMA, OPEN_TOOL, ToolRunner,
                                               server_options)
from precision_shell.mcp.tools import input_schema, tool_description

_POLL_SECONDS = 0.25      # how often a running tool's progress is looked at


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="pshell mcp",
        description="Serve pshell's analyses as MCP tools over stdio (for agents): open, info, "
                    "overflow, compare, failing_ops, node, tensor_stats, replay, export, and impact, "
                    "curve, bisect where available. Each answers the command's JSON plus evidence.",
        epilog='client config: {"command": "pshell", "args": ["mcp", "/path/to/training_job"]}',
    )
    p.add_argument("workspace", nargs="?", default=None,
                   help="the workspace to open at start (as `pshell PATH`); without it, agents call "
                        "the `open` tool first")
    p.add_argument("--golden", metavar="DIR", help="golden folder, or the golden msprobe dump")
    p.add_argument("-o", "--output", metavar="DIR", help="output folder (as `pshell -o`)")
    p.add_argument("--allow-bisect", action="store_true",
                   help="let the bisect tool run the user's check command (refused otherwise)")
    p.add_argument("--max-items", type=int, default=DEFAULT_MAX_ITEMS, metavar="N",
                   help=f"longest list in an answer; longer ones are cut with a note (default {DEFAULT_MAX_ITEMS})")
    p.add_argument("--max-chars", type=int, default=DEFAULT_MAX_CHARS, metavar="N",
                   help=f"largest answer in characters of JSON (default {DEFAULT_MAX_CHARS})")
    p.add_argument("--log-file", metavar="FILE", help="log file for internal errors")
    p.add_argument("--version", action="version", version=f"precision-shell {__version__}")
    return p


def _error(message: str) -> types.CallToolResult:
    line = " ".join(part.strip() for part in message.splitlines() if part.strip())   # one line, always
    return types.CallToolResult(content=[types.TextContent(type="text", text=line)], is_error=True)


def _answer(answer: dict) -> types.CallToolResult:
    text = json.dumps(answer, ensure_ascii=False, allow_nan=False)
    return types.CallToolResult(content=[types.TextContent(type="text", text=text)],
                                structured_content=answer)


def build_server(runner: ToolRunner, commands: CommandThread, starting: Job | None = None) -> Server:
    async def list_tools(ctx: Any, params: Any) -> types.ListToolsResult:
        while starting is not None and starting.state != DONE:   # the workspace given at start
            await anyio.sleep(0.05)                               # decides the commands' variants
        tools = [types.Tool(name=OPEN_TOOL, description=OPEN_DESCRIPTION, input_schema=OPEN_SCHEMA)]
        for spec, cmd in runner.commands():
            tools.append(types.Tool(name=spec.name, description=tool_description(spec, cmd),
                                    input_schema=input_schema(spec, cmd)))
        return types.ListToolsResult(tools=tools)

    async def call_tool(ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
        loop = asyncio.get_running_loop()
        finished = anyio.Event()

        def wake() -> None:
            loop.call_soon_threadsafe(finished.set)

        name, arguments = params.name, params.arguments
        job = commands.submit(lambda job: runner.call(name, arguments, job), on_done=wake)
        try:
            await _follow(ctx, job, finished)
        except anyio.get_cancelled_exc_class():
            commands.cancel(job)     # Ctrl-C for the command; the SDK answers nothing for it
            raise
        if job.error is not None:
            return _error(str(job.error))
        if name == OPEN_TOOL and runner.kind_changed():   # a framework dump's commands differ
            await ctx.session.send_tool_list_changed()
        return _answer(job.result)

    return Server("pshell", version=__version__, instructions=_INSTRUCTIONS,
                  on_list_tools=list_tools, on_call_tool=call_tool)


async def _follow(ctx: Any, job: Job, finished: anyio.Event) -> None:
    """Wait for ``job``, sending progress notifications as its progress bars advance. MCP wants
    progress to grow: a job's later bar counts on from where the earlier one stopped."""
    seen, bar, offset, sent = 0, 0, 0.0, None
    while not finished.is_set():
        with anyio.move_on_after(_POLL_SECONDS):
            await finished.wait()
        if job.progress_seen == seen or finished.is_set():
            continue
        seen, progress = job.progress_seen, job.progress
        if job.bars != bar:
            bar, offset = job.bars, sent or 0.0
        value = offset + progress.done
        if sent is not None and value <= sent:
            continue
        try:
            await ctx.session.report_progress(value, offset + progress.total if progress.total else None,
                                              progress.label or None)
            sent = value
        except Exception:   # a client that went away: the answer will not arrive either
            pass


_INSTRUCTIONS = ("pshell finds where an NPU training run loses precision. Workflow (curve, impact and "
                 "bisect where listed): curve (is the run off, from which step) -> open the dumped step -> overflow / failing_ops (producer, "
                 "roots, first divergence) -> node, tensor_stats, replay (why), impact (which root "
                 "matters) -> export / bisect (the fix). Cite each answer's `command` and `evidence`.")


def _take_stdio() -> tuple[io.TextIOWrapper, io.TextIOWrapper]:
    """The protocol's own copies of fd 0/1; fd 1 then goes to stderr and fd 0 to /dev/null."""
    wire_in = os.fdopen(os.dup(0), "rb", buffering=0)
    wire_out = os.fdopen(os.dup(1), "wb", buffering=0)
    os.dup2(2, 1)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    sys.stdout = sys.stderr
    return (io.TextIOWrapper(wire_in, encoding="utf-8", errors="replace"),
            io.TextIOWrapper(wire_out, encoding="utf-8", write_through=True))


def _serve_protocol(server: Server, wire_in: io.TextIOWrapper, wire_out: io.TextIOWrapper,
                    commands: CommandThread) -> None:
    async def serve() -> None:
        async with stdio_server(anyio.wrap_file(wire_in), anyio.wrap_file(wire_out)) as (read, write):
            options = server.create_initialization_options(NotificationOptions(tools_changed=True))
            await server.run(read, write, options)

    try:
        anyio.run(serve)
    except BaseException as exc:   # the channel broke: say so on stderr, stop the command loop
        print(f"pshell mcp: protocol loop ended: {type(exc).__name__}: {exc}", file=sys.stderr)
    finally:
        commands.stop()


def main(argv: list[str]) -> int:
    opts = build_parser().parse_args(argv)
    if opts.max_items < 1 or opts.max_chars < 1000:
        print("error: --max-items must be at least 1 and --max-chars at least 1000", file=sys.stderr)
        return 2
    log_path = setup_logging(opts.log_file)
    wire_in, wire_out = _take_stdio()
    runner = ToolRunner(server_options(opts, log_path))
    commands = CommandThread()
    starting = commands.submit(runner.open_at_start) if opts.workspace is not None else None
    server = build_server(runner, commands, starting)
    protocol = threading.Thread(target=_serve_protocol, args=(server, wire_in, wire_out, commands),
                                name="mcp-protocol", daemon=True)
    protocol.start()
    try:
        commands.serve(alive=protocol.is_alive)
    except KeyboardInterrupt:
        print("pshell mcp: interrupted", file=sys.stderr)
        return 130
    except PshellError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0
