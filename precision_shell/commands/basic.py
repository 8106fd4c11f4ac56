"""``help``, ``quit``/``exit`` and ``use``: commands about the shell itself."""

from __future__ import annotations

import re

from precision_shell.commands.registry import REGISTRY, arg, command
from precision_shell.commands.results import Message, Table
from precision_shell.commands.runner import ClearRequest, QuitRequest, SourceRequest
from precision_shell.model.session import Session


def _first_sentence(summary: str) -> str:
    """The overview's line of a command: its summary's first sentence (a JSON schema or the
    details after it are for `help CMD`)."""
    m = re.search(r"\.\s+(?=[A-Z])", summary)
    return summary[:m.start() + 1] if m else summary


@command("help", summary="List the commands, or show one command's flags and an example.",
         example="help\nhelp vcs", needs_session=False,
         args=[arg("topic", nargs="?", complete="command", help="a command name or alias")])
def help_(session: Session | None, args) -> Table | Message:
    # on a framework session: the framework variants' help; graph-only commands say so
    if args.topic:
        cmd = REGISTRY.lookup(args.topic)
        cmd = REGISTRY.available(cmd, session) or REGISTRY.for_session(cmd, session)
        from precision_shell.commands.help_examples import localised_help

        text = localised_help(cmd.help_text(), session)
        return Message(text.rstrip("\n").split("\n"),
                       data={"command": cmd.name, "aliases": list(cmd.aliases), "help": text})
    # from the command table: listing the commands imports none of them
    overview = REGISTRY.overview(session)
    rows = [[info.name, ", ".join(info.aliases), _first_sentence(summary) if summary else "(graph mode only)"]
            for info, summary in overview]
    json_rows = [{"command": info.name, "aliases": list(info.aliases), "summary": row[2]}
                 for (info, _), row in zip(overview, rows)]
    return Table(["command", "alias", "what it does"], rows, json_rows=json_rows,
                 notes=["`help CMD` or `CMD -h` shows a command's flags and an example."])


@command("quit", aliases=("exit",), summary="Leave pshell (Ctrl-D does the same).",
         example="quit", needs_session=False)
def quit_(session, args) -> QuitRequest:
    return QuitRequest()


@command("clear", summary="Clear the terminal screen (Ctrl-L does the same); nothing in batch mode.",
         example="clear", needs_session=False)
def clear(session, args) -> ClearRequest:
    return ClearRequest()


@command("source", summary="Run the commands of a script file, one line at a time, as `pshell -f "
                           "FILE` does (`!CMD` runs a shell command; `CMD | PIPELINE` pipes output).",
         example="source checks.pshell", needs_session=False,
         args=[arg("file", complete="path", help="script: pshell command lines, # comments")])
def source(session, args) -> SourceRequest:
    return SourceRequest(args.file)


@command("use", summary="Switch the active dump set: run (debug_N), device, step, time folder.",
         example="use --device 1 --step 5\nuse --run debug_1",
         args=[arg("--run", complete="run", help="NPU run folder, e.g. debug_1"),
               arg("--device", complete="device", help="device/rank id folder"),
               arg("--step", complete="step", help="step (data index) folder"),
               arg("--time", complete="time", help="dump time folder (default: the newest)")])
def use(session: Session, args) -> Message:
    chosen = session.use(run=args.run, device=args.device, step=args.step, time=args.time)
    if chosen is None:
        return Message(["no NPU dumps in this workspace"], data={"active": None})
    lines = [f"active: {chosen.label}: {session.dumps.op_file_count:,} dump files", f"  {chosen.path}"]
    return Message(lines, data={"active": {"run": chosen.run, "time": chosen.time, "device": chosen.device,
                                           "model": chosen.model, "step": chosen.step,
                                           "path": str(chosen.path),
                                           "npu_dump_files": session.dumps.op_file_count}})
