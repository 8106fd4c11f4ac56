"""A one-shot ``pshell`` ends without the interpreter's teardown (``one_shot_exit.end_batch_process``)
only when nothing is lost: exit handlers run, stdout/stderr flushed, the exit code kept; and not
while a file is open for writing or another thread runs."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from conftest import run_cli

TEARDOWN = "# cleanup["      # what `python -v` prints while the interpreter frees its modules


def _pshell(code: str, *args, stdout=subprocess.PIPE) -> subprocess.CompletedProcess:
    # buffered stdout, as a user's shell has it (this machine's test runs set PYTHONUNBUFFERED)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}
    return subprocess.run([sys.executable, "-v", "-c", code, *map(str, args)], stdout=stdout,
                          stderr=subprocess.PIPE, text=True, timeout=300, env=env)


RUN_MAIN = ("import sys; from precision_shell.cli import main; sys.argv = ['pshell', *sys.argv[1:]]; "
            "sys.exit(main())")


def test_batch_vc_skips_the_teardown_and_loses_no_output(sample_ws, tmp_path, capsys):
    ws, _ = sample_ws
    args = [ws, "-o", tmp_path / "out", "--format", "json", "--fail-on-findings", "-c", "vc; vcs -l 0"]
    with open(tmp_path / "stdout.txt", "w") as fh:     # a file: block-buffered, flushed at the end only
        run = _pshell(RUN_MAIN, *args, stdout=fh)
    assert TEARDOWN not in run.stderr
    docs = [json.loads(line) for line in (tmp_path / "stdout.txt").read_text().splitlines() if line.strip()]
    rc, out, err = run_cli(capsys, *args[:2], tmp_path / "in_process", *args[3:])
    expected = [json.loads(line) for line in out.splitlines() if line.strip()]
    assert run.returncode == rc == 3        # the sample has failing ops: --fail-on-findings says 3
    assert len(docs) == len(expected) == 2
    assert docs[1] == expected[1]           # the vcs list, every row
    assert (tmp_path / "out" / "compare").is_dir()
    csv = next((tmp_path / "out" / "compare").glob("*.csv")).read_text()
    assert csv.count("\n") == docs[0]["tensors"] + 1 == expected[0]["tensors"] + 1


def test_exit_handlers_run_before_the_fast_exit(sample_ws, tmp_path):
    ws, _ = sample_ws
    marker = tmp_path / "handler_ran"
    # a handler's print into a file stdout stays in its buffer until the flush before the exit
    code = (f"import atexit, pathlib; atexit.register(pathlib.Path({str(marker)!r}).write_text, 'yes'); "
            "atexit.register(print, 'handler printed', end=''); " + RUN_MAIN)
    with open(tmp_path / "stdout.txt", "w") as fh:
        run = _pshell(code, ws, "-o", tmp_path / "out", "-c", "info", stdout=fh)
    assert run.returncode == 0, run.stderr
    assert TEARDOWN not in run.stderr
    assert marker.read_text() == "yes"
    out = (tmp_path / "stdout.txt").read_text()
    assert "workspace" in out and out.endswith("\nhandler printed")


def test_a_file_open_for_writing_or_a_thread_keeps_the_teardown(sample_ws, tmp_path):
    ws, _ = sample_ws
    check = ("from precision_shell.one_shot_exit import written_files_open as w; import sys; "
             f"a = w(); f = open({str(tmp_path / 'w.txt')!r}, 'w'); b = w(); f.close(); "
             f"r = open({str(tmp_path / 'w.txt')!r}); print(a, b, w())")
    run = subprocess.run([sys.executable, "-c", check], capture_output=True, text=True, timeout=60)
    assert run.stdout.split() == ["False", "True", "False"], run.stderr
    for setup in (f"f = open({str(tmp_path / 'held.txt')!r}, 'w'); f.write('kept'); ",
                  # (long enough to outlive `info` on a loaded machine: then the fast exit would be right)
                  "import threading, time; threading.Thread(target=time.sleep, args=(3,)).start(); "):
        run = _pshell(setup + RUN_MAIN, ws, "-o", tmp_path / "out", "-c", "info")
        assert run.returncode == 0, run.stderr
        assert TEARDOWN in run.stderr
    assert (tmp_path / "held.txt").read_text() == "kept"     # flushed by the teardown, as always


def test_a_reader_that_goes_away_ends_pshell_quietly(tmp_path):
    """`pshell ... | head -1`: no BrokenPipeError traceback; the status a SIGPIPE would give."""
    convnet = Path(__file__).resolve().parents[2] / "sample_data" / "convnet"
    script = "; ".join(["ls -l 0"] * 300)          # far more than a pipe's buffer
    proc = subprocess.Popen([sys.executable, "-m", "precision_shell", str(convnet), "-o", str(tmp_path / "out"),
                             "-c", script], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    first = proc.stdout.readline()
    proc.stdout.close()
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=120) == 141, err
    assert first.startswith(b"35 ops") and "Traceback" not in err and "BrokenPipe" not in err


def test_a_ctrl_c_landing_in_the_exit_of_an_interrupted_batch_keeps_status_130(sample_ws, tmp_path):
    """The batch is interrupted (Ctrl-C in its line: 130); another SIGINT arrives while the run is
    ending (a second Ctrl-C, or one still in flight: here an exit handler sends it). Python's
    handler would raise KeyboardInterrupt in the exit path, where nothing catches it, and the
    interpreter then kills itself with SIGINT (status -2, what the flaky pty test saw)."""
    ws, _ = sample_ws
    code = ("import atexit, os, signal, time; "
            "from precision_shell.frontend import Frontend; "
            "Frontend.run_line = lambda self, line: (_ for _ in ()).throw(KeyboardInterrupt()); "
            "atexit.register(lambda: (os.kill(os.getpid(), signal.SIGINT), time.sleep(0.5))); " + RUN_MAIN)
    run = _pshell(code, ws, "-o", tmp_path / "out", "-c", "info")
    assert run.returncode == 130, run.stderr[-2000:]
    errors = [line for line in run.stderr.splitlines() if line.startswith("error:")]
    assert errors == ["error: interrupted"]
    assert "Traceback" not in run.stderr


def test_ctrl_c_during_start_up_exits_130_without_a_traceback(sample_ws, tmp_path):
    ws, _ = sample_ws
    code = ("from precision_shell import cli; "
            "cli._open_session = lambda opts: (_ for _ in ()).throw(KeyboardInterrupt()); " + RUN_MAIN)
    run = _pshell(code, ws, "-o", tmp_path / "out", "-c", "info")
    assert run.returncode == 130, run.stderr[-2000:]
    assert "Traceback" not in run.stderr and "error: interrupted" in run.stderr
