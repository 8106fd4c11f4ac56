"""Issue 17: a tensor name copied from what `ni`, `li`, `vcs` and `ac` print, pasted into `pt`
in the real shell (a pty), gives that tensor: its values equal numpy's reading of the same data
(graph mode: the generator's arrays and the golden .npy file; framework mode: the .pt file)."""

from __future__ import annotations

import os
import re
import sys

import numpy as np
import pytest

from precision_shell.samples.network import run_network

from framework_dumps import SAMPLE as FRAMEWORK
from tests.shell.test_terminal import ANSI, REPO, SAMPLE, expect_prompt, spawn

pexpect = pytest.importorskip("pexpect")

pytestmark = [pytest.mark.terminal,
              pytest.mark.skipif(sys.platform == "win32", reason="needs a POSIX pty")]


def _screen(child, command: str) -> str:
    """The text a command printed, without colours: up to a marker a shell escape prints after
    it (typed as __EN''D__, so the echoed line does not match)."""
    child.sendline(f"{command}; !echo __EN''D__")
    child.expect("__END__")
    text = child.before
    expect_prompt(child)
    return re.sub(ANSI, "", text).replace("\r", "")


def _paste(child, name: str, out) -> np.ndarray:
    """`pt NAME -s -w FILE`: the values pshell read for the pasted name."""
    target = out / f"pasted_{abs(hash(name))}.npy"
    text = _screen(child, f"pt {name} -s -w {target}")
    assert "error" not in text and "logical shape" in text, text
    assert re.search(r"tensor\s+" + re.escape(name), text), text      # pt prints the name it was given
    return np.load(target)


def _names(text: str, pattern: str) -> list[str]:
    return re.findall(pattern, text)


def test_graph_names_on_screen_paste_into_pt(tmp_path):
    net = run_network(0)
    child = spawn(tmp_path, "-o", str(tmp_path))
    child.setwinsize(50, 200)
    try:
        expect_prompt(child)
        op = net.lossy_op
        ni = _screen(child, f"ni {op}")
        consumer = _names(ni, r"(\S+:in\d+)\s*\n")[0]                   # the consumers column
        golden = _names(ni, r"(golden:\S+:\d+)")[0]                     # the golden name column
        li = _screen(child, f"li {op}")
        producer = _names(li, r"<- (\S+:\d+)")[0]
        vcs = _screen(child, "vcs -l 0")
        failing = _names(vcs, r"\s(\S+:\d+)\s+(?:nan|\d\.\d{6})\s")    # the output column
        ac = _screen(child, "ac")
        overflowing = _names(ac, r"(\S+:\d+)  \d+ [+-]?(?:inf|nan)")   # the outputs column
        assert consumer and golden and producer and failing and overflowing

        def expected(name: str) -> np.ndarray:
            op_name, _, which = name.rpartition(":")
            if which.startswith("in"):
                return net.op(op_name).inputs[int(which[2:])].tensor.npu
            return net.op(op_name).outputs[int(which)].npu

        for name in [consumer, producer, failing[0], failing[-1], overflowing[0]]:
            np.testing.assert_array_equal(_paste(child, name, tmp_path), expected(name).astype(np.float32))
        escaped, index = golden[len("golden:"):].rsplit(":", 1)
        files = sorted((SAMPLE / "precision_data" / "tf" / "dump").glob(f"{escaped}.{index}.*.npy"))
        np.testing.assert_array_equal(_paste(child, golden, tmp_path), np.load(files[-1]))
        child.sendline("quit")
        child.expect(pexpect.EOF)
    finally:
        child.close(force=True)


def _torch_values(path) -> np.ndarray:
    torch = pytest.importorskip("torch")
    return torch.load(path, weights_only=True).float().numpy()


def _pasted_file(child, name: str) -> str:
    text = _screen(child, f"pt {name} -s")
    return re.search(r"file\s+(\S+\.pt)", text).group(1)


@pytest.mark.parametrize("target, commands", [
    ("target_bf16", ["ni Functional.softmax.0.forward", "li Torch.matmul.1.forward", "vcs -l 0"]),
    ("overflow_fp16", ["ac -l 0"]),
])
def test_framework_names_on_screen_paste_into_pt(tmp_path, target, commands):
    env = {k: v for k, v in os.environ.items() if k != "NO_COLOR"} | {
        "HOME": str(tmp_path), "XDG_CONFIG_HOME": str(tmp_path / "c"), "XDG_DATA_HOME": str(tmp_path / "d"),
        "XDG_STATE_HOME": str(tmp_path / "s"), "TERM": "xterm-256color", "PAGER": "cat"}
    child = pexpect.spawn(sys.executable, ["-m", "precision_shell", str(FRAMEWORK / target), "--golden",
                                           str(FRAMEWORK / "golden_fp32"), "-o", str(tmp_path)],
                          cwd=str(REPO), env=env, encoding="utf-8", dimensions=(50, 220), timeout=30)
    try:
        expect_prompt(child)
        names: list[str] = []
        for command in commands:
            text = _screen(child, command)
            found = _names(text, r"((?:golden:)?[A-Z][\w.]+\.(?:forward|backward)(?:\.\d+)?:(?:in)?\d+)")
            assert found, text
            names += found[:3]
        for name in dict.fromkeys(names):
            path = _pasted_file(child, name)
            expected = _torch_values(REPO / path)
            np.testing.assert_array_equal(_paste(child, name, tmp_path), expected)
        child.sendline("quit")
        child.expect(pexpect.EOF)
    finally:
        child.close(force=True)
