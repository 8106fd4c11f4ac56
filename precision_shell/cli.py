"""``pshell [PATH] [-c "cmd; cmd"] [-f script]``: batch mode, or the REPL on a terminal."""

from __future__ import annotations

import sys
from typing import Any

from precision_shell.gc_pause import gc_paused

# Start-up imports (~200 modules here, as many with the session and the command) make ~10^5
# objects that all stay: the cyclic collector's passes over them find nothing and took ~7% of
# the imports' CPU (~14 ms of a one-shot vc's 190 ms of imports, measured). Frozen after: the
# first pass after the pause walked them all once more (~1.3 ms).
with gc_paused(freeze=True):
    import argparse

    from precision_shell import __version__
    from precision_shell.blas_threads import load_numpy_with_one_blas_thread
    from precision_shell.commands.process_policy import allow_processes_in_scripts
    from precision_shell.errors import PshellError, UsageError
    from precision_shell.frontend import (EXIT_FAILED, EXIT_INTERRUPTED, EXIT_USAGE, Frontend, read_script,
                                          terminal_width)
    from precision_shell.safe_text import escape_controls
    from precision_shell.logfile import setup_logging


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="pshell",
        description="Interactive debugger shell for numerical-precision problems on Ascend NPUs.",
        epilog='examples:\n  pshell                          # REPL on ./precision_data\n'
               '  pshell WS -c "ac; vcs -c 0.98"  # batch\n'
               '  pshell WS -c info --format json\n'
               '  pshell mcp WS                   # MCP server over stdio (for agents)',
        formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("path", nargs="?", default=None,
                   help="training folder holding precision_data/, precision_data/ itself, "
                        "a raw NPU dump folder (default: the current folder), or an msprobe dump "
                        "(root, step, rank folder or dump.json) of a PyTorch/MindSpore run")
    p.add_argument("-c", "--command", action="append", metavar="CMDS",
                   help='commands to run, separated by ";" (batch mode)')
    p.add_argument("-f", "--file", metavar="SCRIPT", help="run the commands in SCRIPT (batch mode)")
    p.add_argument("--format", choices=("table", "csv", "json"), default="table",
                   help="output of list commands in batch mode (json: one document per command)")
    p.add_argument("--npu", metavar="DIR", help="NPU dump folder (overrides discovery)")
    p.add_argument("--golden", metavar="DIR",
                   help="golden .npy folder; with an msprobe dump as PATH, the golden msprobe dump")
    p.add_argument("--mapping", metavar="FILE",
                   help="msprobe data_mapping yaml (target name: golden name) for framework dumps")
    p.add_argument("--graph", metavar="FILE", help="GE graph file (ge_proto_*.txt or its JSON)")
    p.add_argument("--overflow", metavar="DIR", help="overflow dump folder (Opdebug files)")
    p.add_argument("--fusion", metavar="FILE", help="fusion_result.json")
    p.add_argument("-o", "--output", metavar="DIR",
                   help="output folder (default: precision_data/temp/pshell)")
    p.add_argument("--fail-on-findings", action="store_true",
                   help="CI gating: exit 3 when a command reports findings (overflow, failing ops); "
                        "exit 1 when vc/vcs/ac could not judge (no tensor pair compared, coverage "
                        "below --min-coverage, a dump file unreadable)")
    p.add_argument("--min-coverage", type=_percent, default=None, metavar="PCT",
                   help="with --fail-on-findings: the %% of NPU tensors with a golden counterpart "
                        "that vc/vcs must compare (default 90; `config set min_coverage`)")
    p.add_argument("--scheduler", metavar="ADDRESS",
                   help="run vc/ac work on a Dask cluster (e.g. tcp://10.0.0.1:8786; needs the "
                        "dask extra; workers must see the dumps at the same paths)")
    p.add_argument("--no-pager", action="store_true", help="never page long output")
    p.add_argument("--no-color", action="store_true", help="no colour (NO_COLOR is honoured too)")
    p.add_argument("--history-file", metavar="FILE", help="REPL history file")
    p.add_argument("--config", metavar="FILE", help="config file (INI)")
    p.add_argument("--log-file", metavar="FILE", help="log file for warnings and internal errors")
    p.add_argument("--allow-shell", action="store_true",
                   help="let scripts (-f FILE, `source FILE`) run `!CMD` and `| PIPELINE`; "
                        "without it a script never starts a process")
    p.add_argument("--version", action="version", version=f"precision-shell {__version__}")
    return p


def _serve_mcp(argv: list[str]) -> int:
    import importlib.util

    if importlib.util.find_spec("mcp") is None:
        print("error: pshell mcp needs the MCP SDK: pip install 'precision-shell[mcp]'", file=sys.stderr)
        return EXIT_FAILED
    from precision_shell.mcp.server import main as serve

    return serve(argv)


def _percent(text: str) -> float:
    from precision_shell.config import parse_min_coverage   # (here: a batch run needs no config module)

    try:
        return parse_min_coverage(text)
    except UsageError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _batch_lines(opts: argparse.Namespace) -> list[str] | None:
    if opts.command:
        return list(opts.command)
    if opts.file:   # a regular file of bounded size: a FIFO or /dev/zero is one line
        return read_script(opts.file)
    if not sys.stdin.isatty():
        return sys.stdin.read().splitlines()
    return None


def _read_mapping(path: str | None) -> tuple[dict[str, str] | None, list[str]]:
    """The --mapping file, or the one line saying why not (the dumps still open)."""
    if path is None:
        return None, []
    from precision_shell.analysis.compare.msprobe.pairing import read_data_mapping

    try:
        return read_data_mapping(path), []
    except PshellError as exc:
        return None, [str(exc)]


def _open_session(opts: argparse.Namespace):
    """A framework session when PATH is an msprobe dump, a MindSpore graph-mode session when it
    is MindSpore's own dump, else the graph-mode workspace."""
    from precision_shell.formats.mindspore_graph.rank_dirs import is_mindspore_graph_dump
    from precision_shell.formats.msprobe.rank_dirs import is_msprobe_dump

    # `pshell --npu ITERATION --golden ITERATION` as a GE user would try it: the same session
    ms_target = opts.path if is_mindspore_graph_dump(opts.path) else (
        opts.npu if opts.path is None and is_mindspore_graph_dump(opts.npu) else None)
    if ms_target is not None:
        from precision_shell.model.mindspore_graph_session import MindsporeGraphSession

        unused = [f"--{k}" for k in ("npu", "graph", "overflow", "fusion", "mapping")
                  if getattr(opts, k) and getattr(opts, k) != ms_target]
        if unused:
            raise UsageError(f"{', '.join(unused)}: not used with a MindSpore graph-mode dump")
        return MindsporeGraphSession.open(ms_target, golden=opts.golden, output=opts.output)
    if is_msprobe_dump(opts.path):
        from precision_shell.model.framework_session import FrameworkSession

        unused = [f"--{k}" for k in ("npu", "graph", "overflow", "fusion") if getattr(opts, k)]
        if unused:
            raise UsageError(f"{', '.join(unused)}: graph-mode options, not used with an msprobe dump")
        mapping, problem = _read_mapping(opts.mapping)
        session = FrameworkSession.open(opts.path, golden=opts.golden, mapping=mapping,
                                        mapping_file=opts.mapping, output=opts.output)
        session.load_errors += problem
        return session
    if opts.mapping:
        raise UsageError("--mapping: for msprobe dumps only (PATH is not one)")
    from precision_shell.model.session import Session

    return Session.open(opts.path, npu=opts.npu, golden=opts.golden, graph=opts.graph,
                        overflow=opts.overflow, fusion=opts.fusion, output=opts.output)


def _say_error(message: Any) -> None:
    print(f"error: {escape_controls(message)}", file=sys.stderr, flush=True)


def _guarded_files(session, opts: argparse.Namespace) -> list[str]:
    """--log-file and --history-file go through the output guard like every file pshell writes:
    never an input file, never inside an input tree. A refused one is a line, and the default
    (XDG) place is used instead."""
    problems = []
    for flag, attr in (("--log-file", "log_file"), ("--history-file", "history_file")):
        given = getattr(opts, attr)
        if not given:
            continue
        try:
            session.check_writable_location(given)
        except PshellError as exc:
            problems.append(f"{flag}: {exc} (using the default place)")
            setattr(opts, attr, None)
    return problems


def main(argv: list[str] | None = None) -> int:
    if argv is None:   # the program itself (`pshell`), not a caller of main()
        try:
            rc = _main(sys.argv[1:], program=True)
        except BrokenPipeError:     # `pshell ... | head`: the reader is gone
            return _stdout_gone()
        except KeyboardInterrupt:   # Ctrl-C before a batch's lines run (start-up): no traceback
            print("error: interrupted", file=sys.stderr)
            rc = EXIT_INTERRUPTED
        if rc == EXIT_INTERRUPTED:
            _exit_on_next_interrupt()
        if _BATCH_RUN:
            from precision_shell.one_shot_exit import end_batch_process

            return end_batch_process(rc)
        return rc
    return _main(argv)


_BATCH_RUN = False   # set once batch mode runs its lines: only then may main() skip the teardown


def _exit_on_next_interrupt() -> None:
    """An interrupted run is ending with status 130: another SIGINT from here on (a second Ctrl-C,
    or one still in flight) ends the process at once with that status. Python's own handler would
    raise KeyboardInterrupt wherever the exit has got to (in the exit handlers, or around
    ``sys.exit`` itself, where nothing catches it), and an uncaught KeyboardInterrupt makes the
    interpreter kill itself with SIGINT: a caller waiting for 130 saw a signal death instead."""
    import os
    import signal

    def end(signum, frame) -> None:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except (OSError, ValueError):
                pass
        os._exit(EXIT_INTERRUPTED)

    try:
        signal.signal(signal.SIGINT, end)
    except ValueError:   # not the main thread (main() called from elsewhere): nothing to guard
        pass


def _stdout_gone() -> int:
    """Stop quietly, as a program killed by SIGPIPE would (status 141), instead of a traceback;
    stdout (and stderr) point at /dev/null so the interpreter's last flush of what was buffered
    for the gone reader does not fail again. What the commands wrote to files is complete; the
    script's later lines do not run (as after SIGPIPE)."""
    import os

    devnull = os.open(os.devnull, os.O_WRONLY)
    for stream in (sys.stdout, sys.stderr):     # (`2>&1 | head`: stderr is that pipe too)
        try:
            os.dup2(devnull, stream.fileno())
        except (OSError, ValueError):
            pass
    os.close(devnull)
    return 141


def _no_cyclic_gc() -> None:
    """A one-shot `-c` run ends after its commands: the cyclic collector's passes over what the
    commands' imports, plans and results made (~8 ms of a vc on 1,000 ops, finding nothing: the
    big work pauses it anyway) are serial time for no memory the process would reuse. Reference
    counting still frees everything that is not a cycle. (Scripts, the REPL, MCP keep it.)"""
    import gc

    gc.disable()


def _main(argv: list[str], program: bool = False) -> int:
    global _BATCH_RUN
    load_numpy_with_one_blas_thread()
    if argv[:1] == ["mcp"]:   # `pshell mcp ...`: the MCP server (a folder named mcp: `pshell ./mcp`)
        return _serve_mcp(argv[1:])
    opts = build_parser().parse_args(argv)
    if opts.command and program:   # (a caller of main() keeps its collector)
        _no_cyclic_gc()
    log_path = setup_logging(None)    # the default place until --log-file passes the guard
    try:
        lines = _batch_lines(opts)
    except PshellError as exc:
        _say_error(exc)
        return EXIT_USAGE

    try:
        with gc_paused():   # the session's modules are imported here (the loading pauses it too)
            session = _open_session(opts)
    except UsageError as exc:
        _say_error(exc)
        return EXIT_USAGE
    except PshellError as exc:
        _say_error(exc)
        return EXIT_FAILED
    from precision_shell.config_path import default_config_path

    # inputs besides the workspace: no export or redirect may write over them
    if opts.file:
        session.add_input_file(opts.file, "the script given with -f")
    session.add_input_file(opts.config or default_config_path(), "the config file")
    refused_files = _guarded_files(session, opts)
    if opts.log_file:
        log_path = setup_logging(opts.log_file)
    for problem in refused_files:
        _say_error(problem)

    if opts.scheduler:
        session.settings.scheduler = opts.scheduler
    if lines is None:
        from precision_shell.shell.repl import run_repl

        return run_repl(session, opts, log_path)

    if opts.config:  # an explicit --config also sets batch defaults (threshold, limit, output)
        from precision_shell.config import load_config, use_config

        try:
            config = load_config(opts.config)
        except PshellError as exc:
            _say_error(exc)
            return EXIT_FAILED
        use_config(config)
        if config.path is not None and config.path.exists():   # (a new file is no problem)
            for line in config.warnings:   # a skipped setting is never silent
                print(f"warning: {line}", file=sys.stderr)
        config.apply_to(session, output_overridden=opts.output is not None)
    if opts.min_coverage is not None:
        session.settings.min_coverage = opts.min_coverage
    # Batch mode: no prompt, no colour, no pager (product.md §6).
    frontend = Frontend(session, fmt=opts.format, log_path=log_path,
                        fail_on_findings=opts.fail_on_findings, hints=False,
                        width=lambda: terminal_width(sys.stdout), allow_shell=opts.allow_shell)
    for message in session.load_errors:
        frontend.error(message)
    frontend.failed = bool(session.load_errors or refused_files)
    frontend.show_warnings()
    # a script's commands start no process (`!`, pipes, bisect) unless --allow-shell was given
    allow_processes_in_scripts(opts.allow_shell)
    _BATCH_RUN = True
    try:
        if opts.file and not opts.command:   # -f: a script, whose lines never start a process
            frontend.run_script_lines(opts.file, lines)
        else:
            for line in lines:
                frontend.run_line(line)
                if frontend.quit or frontend.interrupted:   # Ctrl-C stops the whole script
                    break
    except KeyboardInterrupt:
        frontend.error("interrupted")
        return EXIT_INTERRUPTED
    if frontend.interrupted:
        return EXIT_INTERRUPTED
    return frontend.exit_code()
