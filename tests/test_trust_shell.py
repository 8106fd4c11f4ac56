"""Issue 22 (Trust II), part B: scripts are data, every write goes through the output guard,
text inputs are bounded reads, eval cannot take the machine, names from data are shown escaped."""

from __future__ import annotations

import logging
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from conftest import run_cli

REPO = Path(__file__).resolve().parent.parent


def child_env(tmp_path: Path) -> dict:
    env = dict(os.environ)
    env.update(HOME=str(tmp_path), XDG_CONFIG_HOME=str(tmp_path / "config"),
               XDG_DATA_HOME=str(tmp_path / "data"), XDG_STATE_HOME=str(tmp_path / "state"),
               XDG_CACHE_HOME=str(tmp_path / "cache"), PAGER="cat")
    env.pop("NO_COLOR", None)
    return env


def pshell_child(tmp_path: Path, *args, timeout: float = 60) -> subprocess.CompletedProcess:
    """pshell in a child process: a hang is a TimeoutExpired (the test fails), not a stuck suite."""
    return subprocess.run([sys.executable, "-m", "precision_shell", *map(str, args)],
                          capture_output=True, text=True, timeout=timeout, cwd=str(tmp_path),
                          env=child_env(tmp_path), stdin=subprocess.DEVNULL)


# -- 1. scripts are data ------------------------------------------------------------------

HOSTILE_SCRIPT = "info\n!touch {bang}\ninfo | sh -c 'touch {piped}'\nls -l 1\n"


def test_sourced_and_f_scripts_start_no_process(sample_ws, capsys, tmp_path):
    root, _ = sample_ws
    bang, piped = tmp_path / "bang", tmp_path / "piped"
    script = tmp_path / "evil.pshell"
    script.write_text(HOSTILE_SCRIPT.format(bang=bang, piped=piped))
    for how in (("-f", script), ("-c", f"source {script}")):
        rc, out, err = run_cli(capsys, root, "-o", tmp_path / "out", *how)
        assert not bang.exists() and not piped.exists()
        refused = [line for line in err.splitlines() if "refusing" in line]
        assert [line.split(": refusing")[0] for line in refused] == [
            f"error: {script}:2", f"error: {script}:3"], err
        assert all("--allow-shell" in line for line in refused)
        assert rc == 2 and out.startswith("precision-shell") and "more (use -l 0)" in out   # info, ls ran
    # a script sourced from a script is a script too
    outer = tmp_path / "outer.pshell"
    outer.write_text(f"source {script}\n")
    rc, out, err = run_cli(capsys, root, "-o", tmp_path / "out", "-f", outer)
    assert not bang.exists() and not piped.exists() and f"{script}:2: refusing" in err


def test_allow_shell_and_typed_lines_keep_shell_commands(sample_ws, capsys, tmp_path):
    root, _ = sample_ws
    bang, piped = tmp_path / "bang", tmp_path / "piped"
    script = tmp_path / "evil.pshell"
    script.write_text(HOSTILE_SCRIPT.format(bang=bang, piped=piped))
    rc, out, err = run_cli(capsys, root, "-o", tmp_path / "out", "--allow-shell", "-f", script)
    assert rc == 0 and bang.exists() and piped.exists(), err
    bang.unlink()
    rc, out, err = run_cli(capsys, root, "-o", tmp_path / "out", "-c", f"!touch {bang}")
    assert rc == 0 and bang.exists()      # typed: the user's own command


# -- 2. every file pshell writes goes through the output guard -----------------------------

def test_log_file_inside_inputs_is_refused_and_input_unchanged(sample_ws, capsys, tmp_path):
    root, _ = sample_ws
    fusion = root / "precision_data" / "fusion" / "fusion_result.json"
    before = fusion.read_bytes()
    rc, out, err = run_cli(capsys, root, "-o", tmp_path / "out", "--log-file", fusion, "-c", "info")
    lines = [line for line in err.splitlines() if line.startswith("error:")]
    assert len(lines) == 1 and "--log-file" in lines[0] and "fusion report" in lines[0], err
    assert rc == 1
    logging.getLogger("precision_shell").warning("a warning after the run")   # must not land there
    for handler in logging.getLogger("precision_shell").handlers:
        handler.flush()
    assert fusion.read_bytes() == before
    # a file inside an input tree: the dump folder
    dump = next((root / "precision_data" / "npu").rglob("TransData.*"))
    rc, out, err = run_cli(capsys, root, "-o", tmp_path / "out", "--log-file",
                           dump.parent / "pshell.log", "-c", "info")
    assert rc == 1 and "inside the input folder" in err and not (dump.parent / "pshell.log").exists()
    # an ordinary place works
    rc, out, err = run_cli(capsys, root, "-o", tmp_path / "out", "--log-file", tmp_path / "my.log",
                           "-c", "info")
    assert rc == 0 and err == ""


def test_config_save_never_lands_in_an_input_tree(sample_ws, capsys, tmp_path):
    root, _ = sample_ws
    graph_dir = next((root / "precision_data" / "npu").glob("debug_*/graph"))
    config = graph_dir / "pshell.ini"
    rc, out, err = run_cli(capsys, root, "-o", tmp_path / "out", "--config", config,
                           "-c", "config set limit 7 --save")
    assert not config.exists() and "refusing to write inside the input folder" in out


# -- 3. bounded reads ------------------------------------------------------------------------

def _specials(tmp_path: Path) -> dict[str, Path]:
    fifo = tmp_path / "fifo.pshell"
    os.mkfifo(fifo)
    huge = tmp_path / "huge.pshell"
    with open(huge, "wb") as fh:     # sparse: 5 GB of size, no disk
        fh.truncate(5 << 30)
    folder = tmp_path / "folder.pshell"
    folder.mkdir()
    return {"fifo": fifo, "zero": Path("/dev/zero"), "folder": folder, "huge": huge}


@pytest.mark.parametrize("how", ["-f", "source", "--config"])
def test_script_and_config_from_fifo_device_folder_huge_file_are_one_line(sample_ws, tmp_path, how):
    root, _ = sample_ws
    for kind, path in _specials(tmp_path).items():
        args = {"-f": ["-f", path], "source": ["-c", f"source {path}"],
                "--config": ["--config", path, "-c", "info"]}[how]
        done = pshell_child(tmp_path, root, "-o", tmp_path / "out", *args, timeout=60)
        errors = [line for line in done.stderr.splitlines() if line.startswith("error:")]
        assert len(errors) == 1 and str(path) in errors[0], (kind, done.stderr)
        assert done.returncode in (1, 2) and "Traceback" not in done.stderr
        reason = {"fifo": "not a regular file", "zero": "not a regular file",
                  "folder": "Is a directory", "huge": "more than"}[kind]
        assert reason in errors[0], (kind, errors[0])


def test_mapping_from_fifo_and_device_is_one_line(tmp_path):
    from framework_dumps import write_dump

    target = write_dump(tmp_path / "t" / "step0" / "rank0",
                        {"Functional.relu.0.forward": {"input": [np.ones(4, np.float32)]}})
    golden = write_dump(tmp_path / "g" / "step0" / "rank0",
                        {"Functional.relu.0.forward": {"input": [np.ones(4, np.float32)]}})
    specials = _specials(tmp_path)
    for kind in ("fifo", "zero", "folder", "huge"):
        done = pshell_child(tmp_path, target, "--golden", golden, "--mapping", specials[kind],
                            "-o", tmp_path / "out", "-c", "info", timeout=60)
        errors = [line for line in done.stderr.splitlines() if line.startswith("error:")]
        assert len(errors) == 1 and str(specials[kind]) in errors[0], (kind, done.stderr)
        assert "Traceback" not in done.stderr and "Functional.relu.0.forward" not in errors[0]
