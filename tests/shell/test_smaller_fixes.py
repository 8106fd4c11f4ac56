"""Issue 17's "Smaller" list, one test each: healed ops in `ac`, thousands separators in `pt`'s
counts, `--format` in every usage line, `-r`'s help on colour terminals, help examples in the loaded
workspace's names, one interrupt notice, no REPL hints in batch output."""

from __future__ import annotations

import io
import re
from pathlib import Path

import numpy as np
import pytest

from precision_shell.analysis.overflow.scan import OverflowFinding, OverflowScan
from precision_shell.analysis.compare.tensor import tensor_stats
from precision_shell.analysis.overflow.values import TensorOverflow
from precision_shell.cli import main
from precision_shell.commands import REGISTRY
from precision_shell.commands.overflow_cmd import scan_table
from precision_shell.frontend import Frontend
from precision_shell.model.framework_session import FrameworkSession
from precision_shell.model.session import Session
from precision_shell.samples.__main__ import main as generate
from tests.conftest import InterruptAfter

FRAMEWORK = Path(__file__).resolve().parents[2] / "sample_data" / "framework"


def _tensor(kind: str, values: np.ndarray) -> TensorOverflow:
    return TensorOverflow(kind, 0, "DT_FLOAT", values.shape, tensor_stats(values))


def test_an_op_whose_nan_inf_inputs_give_finite_outputs_is_healed_not_overflowing():
    inf = np.array([1.0, np.inf], np.float32)
    sigmoid = OverflowFinding("act/Sigmoid", "Sigmoid", 2, 2, None,
                              inputs=[_tensor("input", inf)],
                              outputs=[_tensor("output", 1 / (1 + np.exp(-inf)))])
    producer = OverflowFinding("mul/Mul", "Mul", 1, 1, None, inputs=[_tensor("input", np.ones(2, np.float32))],
                               outputs=[_tensor("output", inf)])
    findings = [producer, sigmoid]
    for pos, f in enumerate(findings, 1):
        f.order = pos
        f.decide_role()
    assert [f.role for f in findings] == ["producer", "healed"]
    table = scan_table(OverflowScan(findings, [], 2, 0, True), 0)
    assert table.title.startswith("1 overflowing op and 1 healing one (nan/inf inputs, finite outputs)")
    healed_row = table.rows[1]
    assert table.headers[6] == "role" and table.headers[7] == "outputs"
    assert healed_row[6] == "healed" and "finite" in healed_row[7]


def test_pt_counts_all_have_thousands_separators(sample_ws, tmp_path, capsys):
    values = np.ones(406_272, np.float16)
    values[:203_077] = 0
    values[-1200:] = np.inf
    np.save(tmp_path / "z.npy", values)
    rc = main([str(sample_ws[0]), "-c", f"pt {tmp_path / 'z.npy'} -s"])
    out = capsys.readouterr().out
    assert rc == 0
    assert re.search(r"count\s+406,272\n", out) and re.search(r"zero\s+203,077\n", out)
    assert re.search(r"nan / \+inf / -inf\s+0 / 1,200 / 0\n", out)


def test_every_usage_line_shows_format_which_every_command_takes(sample_ws, capsys):
    for cmd in REGISTRY.commands():
        text = cmd.help_text()
        usage = text.split("\n\n")[0]
        # decode and export have a --format of their own (shown under their options)
        assert "--format" in (text if "--format" in cmd.flags() else usage), cmd.name
    rc = main([str(sample_ws[0]), "-c", "help fusion"])
    out = capsys.readouterr().out
    usage = out.split("\n\n")[0]
    assert rc == 0 and "--format {table,csv,json}" in usage and "fusion --format json" in out


def test_ranges_help_says_marks_are_coloured_on_a_colour_terminal():
    text = REGISTRY.lookup("pt").help_text()
    assert "coloured on a colour terminal" in " ".join(text.split())


def _example_ops(text: str) -> list[str]:
    """The OP of each NPU tensor name (``OP:N``, ``OP:inN``; not ``golden:X:N``) in an example section."""
    examples = text.split("example:", 1)[1]
    return re.findall(r"(?<![\w./:])([\w./]+):(?:output:|input:|in)?\d", examples)


def test_help_examples_name_ops_of_the_loaded_workspace(sample_ws, tmp_path):
    graph = Session.open(sample_ws[0])
    for name in ("pt", "cp", "eval"):
        shown = REGISTRY.lookup("help").handler(graph, REGISTRY.lookup("help").parse([name])).data["help"]
        assert shown == REGISTRY.lookup(name).help_text()      # the sample's own names stay
    root = tmp_path / "rs"
    assert generate([str(root), "--variant", "replay"]) == 0
    other = Session.open(root)
    ops = set(other.graph.ops)
    for name in ("pt", "cp", "eval", "ni"):
        text = REGISTRY.lookup("help").handler(other, REGISTRY.lookup("help").parse([name])).data["help"]
        named = _example_ops(text) + re.findall(r"\n  ni ([\w.]+/[\w./]+)", text)
        assert named and all(op in ops for op in named), (name, named)
    if (FRAMEWORK / "target_bf16").is_dir():
        fw = FrameworkSession.open(FRAMEWORK / "target_bf16", golden=FRAMEWORK / "golden_fp32")
        entries = {op.name for op in fw.run.ops}
        text = REGISTRY.lookup("help").handler(fw, REGISTRY.lookup("help").parse(["pt"])).data["help"]
        named = _example_ops(text)
        assert named and all(op in entries for op in named)


def test_an_interrupted_command_says_so_once(sample_ws, tmp_path):
    session = Session.open(sample_ws[0], output=str(tmp_path / "out"))
    session.progress = InterruptAfter(5)
    out, err = io.StringIO(), io.StringIO()
    frontend = Frontend(session, out=out, err=err)
    frontend.run_line("vc -j 1")
    assert frontend.interrupted
    text = out.getvalue() + err.getvalue()
    notices = [line for line in text.splitlines() if "interrupted:" in line]
    assert len(notices) == 1 and "5 of 60 tensors compared" in notices[0], text


def test_batch_output_carries_no_repl_hints(sample_ws, capsys):
    rc = main([str(sample_ws[0]), "-c", "ac; vcs"])
    out = capsys.readouterr().out
    assert rc == 0 and "failing op" in out and "overflowing op" in out
    assert "`next` steps through" not in out


@pytest.mark.skipif(not (FRAMEWORK / "target_bf16").is_dir(), reason="framework sample not present")
def test_framework_batch_output_carries_no_repl_hints(capsys):
    rc = main([str(FRAMEWORK / "target_bf16"), "--golden", str(FRAMEWORK / "golden_fp32"), "-c", "vcs; ac"])
    out = capsys.readouterr().out
    assert rc == 0 and "failing entr" in out and "overflowing entr" in out
    assert "`next` steps through" not in out
    session = FrameworkSession.open(FRAMEWORK / "target_bf16", golden=FRAMEWORK / "golden_fp32")
    vcs = REGISTRY.for_session(REGISTRY.lookup("vcs"), session)
    table = vcs.handler(session, vcs.parse([]))
    assert table.hints == ["`next`/`goto #` step through the list with each entry's metric panel"]
