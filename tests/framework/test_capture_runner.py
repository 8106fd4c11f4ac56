"""The capture runner (``python -m precision_shell.capture``), bad input (one line each), and the
naming rules of the API recorder (operators, getters, nesting, modules without a model)."""

from __future__ import annotations

import errno
import json
import pkgutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

torch = pytest.importorskip("torch", reason="the capture needs torch (pip install '.[capture]')")

import precision_shell  # noqa: E402
from precision_shell.capture import CaptureError, capture  # noqa: E402
from precision_shell.capture.runner import main  # noqa: E402
from precision_shell.formats.msprobe.dump import read_msprobe_dump  # noqa: E402
from precision_shell.formats.torch_pt import load_pt_tensor  # noqa: E402

TRAIN = """
import sys
import torch
import torch.nn as nn
import torch.nn.functional as F

class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(8, 16)
        self.norm = nn.LayerNorm(16)
        self.fc2 = nn.Linear(16, 4)

    def forward(self, x):
        h = F.gelu(self.norm(self.fc1(x)))
        return self.fc2(h + 1.0)

net = Net()
x = torch.randn(3, 8)
loss = net(x).pow(2).mean()
loss.backward()
if "--fail" in sys.argv:
    raise ValueError("diverged at step 0")
"""


def _script(tmp_path: Path, text: str, name: str = "train.py") -> Path:
    path = tmp_path / name
    path.write_text(textwrap.dedent(text))
    return path


def _meta(rank_dir: Path) -> dict:
    return json.loads((rank_dir / "pshell_meta.json").read_text())


def _names(rank_dir: Path) -> list[str]:
    return list(json.loads((rank_dir / "dump.json").read_text())["data"])


def test_runner_captures_a_script_with_its_arguments(tmp_path, capsys):
    script = _script(tmp_path, TRAIN + "print('args', sys.argv[1:])\n")
    rc = main(["--out", str(tmp_path / "run"), "--", str(script), "a", "--b"])
    out, err = capsys.readouterr()
    rank_dir = tmp_path / "run" / "step0" / "rank0"
    names = _names(rank_dir)
    assert rc == 0 and err == ""
    assert "args ['a', '--b']" in out
    assert f"captured {len(names)} entries" in out
    # the root module (Net) is not an entry; its submodules are named from it
    assert {"Module.fc1.Linear.forward.0", "Module.norm.LayerNorm.forward.0",
            "Functional.gelu.0.forward", "Tensor.__add__.0.forward", "Tensor.pow.0.forward",
            "Tensor.mean.0.forward", "Module.fc1.Linear.parameters_grad.0"} <= set(names)
    assert not any(n.startswith("Module.Net") for n in names)
    assert _meta(rank_dir)["capture"]["seed"] == 0


def test_script_that_raises_keeps_a_partial_capture(tmp_path, capsys):
    script = _script(tmp_path, TRAIN)
    rc = main(["--out", str(tmp_path / "run"), "--mode", "statistics", "--", str(script), "--fail"])
    out, err = capsys.readouterr()
    rank_dir = tmp_path / "run" / "step0" / "rank0"
    meta = _meta(rank_dir)
    assert rc == 1
    assert err.splitlines() == [f"error: {script} raised ValueError: diverged at step 0; partial "
                                f"capture kept in {rank_dir} ({meta['entries']} entries, marked "
                                f"partial in pshell_meta.json)"]
    assert meta["partial"] is True and meta["error"] == "ValueError: diverged at step 0"
    assert "Functional.linear.1.backward" in _names(rank_dir)
    assert read_msprobe_dump(rank_dir).warnings == []


def test_unwritable_output_folder_is_one_line(tmp_path, capsys):
    script = _script(tmp_path, TRAIN)
    blocker = tmp_path / "file"
    blocker.write_text("x")
    rc = main(["--out", str(blocker / "run"), "--", str(script)])
    out, err = capsys.readouterr()
    assert rc == 1 and out == ""
    assert err.splitlines() == [f"error: {blocker / 'run'}: cannot write the capture: Not a directory"]


def test_existing_capture_is_never_overwritten(tmp_path, capsys):
    script = _script(tmp_path, TRAIN)
    assert main(["--out", str(tmp_path / "run"), "--", str(script)]) == 0
    before = (tmp_path / "run/step0/rank0/dump.json").read_bytes()
    capsys.readouterr()
    assert main(["--out", str(tmp_path / "run"), "--", str(script)]) == 1
    err = capsys.readouterr().err
    assert err.splitlines() == [f"error: {tmp_path / 'run/step0/rank0'}: already holds a capture "
                                f"(dump.json); choose another output folder"]
    assert (tmp_path / "run/step0/rank0/dump.json").read_bytes() == before


def test_script_without_tensors_is_one_line(tmp_path, capsys):
    script = _script(tmp_path, "print('no torch here')\n")
    rc = main(["--out", str(tmp_path / "run"), "--", str(script)])
    err = capsys.readouterr().err
    assert rc == 1
    assert err.splitlines() == [f"error: {script}: nothing captured: no torch call on a tensor ran "
                                f"under the capture ({tmp_path / 'run/step0/rank0'})"]


def test_max_bytes_stops_tensor_files_and_keeps_statistics(tmp_path, capsys):
    script = _script(tmp_path, TRAIN)
    rc = main(["--out", str(tmp_path / "run"), "--max-bytes", "600", "--", str(script)])
    err = capsys.readouterr().err
    rank_dir = tmp_path / "run" / "step0" / "rank0"
    meta = _meta(rank_dir)
    files = list((rank_dir / "dump_tensor_data").iterdir())
    assert rc == 0
    assert sum(f.stat().st_size for f in files) > 0
    assert meta["tensor_bytes"] <= 600 and meta["tensor_files"] == len(files)
    assert err.splitlines() == [f"warning: tensor files stopped: {meta['tensors_stopped']}; "
                                f"statistics kept for every entry"]
    assert meta["tensors_stopped"].startswith("--max-bytes 600 reached after")
    leaves = [leaf for e in read_msprobe_dump(rank_dir).ranks[0].entries for leaf in e.leaves
              if leaf.is_tensor]
    assert all(leaf.max is not None for leaf in leaves if leaf.shape != (0,))
    assert sum(1 for leaf in leaves if leaf.file) == len(files) < len(leaves)


def test_disk_full_stops_tensor_files_with_one_line(tmp_path, capsys, monkeypatch):
    script = _script(tmp_path, TRAIN)
    real_save, calls = torch.save, []

    def save(obj, path, *a, **k):
        calls.append(path)
        if len(calls) > 3:
            raise OSError(errno.ENOSPC, "No space left on device")
        return real_save(obj, path, *a, **k)
    monkeypatch.setattr(torch, "save", save)
    rc = main(["--out", str(tmp_path / "run"), "--", str(script)])
    err = capsys.readouterr().err
    meta = _meta(tmp_path / "run" / "step0" / "rank0")
    assert rc == 0 and meta["tensor_files"] == 3 and len(calls) == 4
    assert meta["tensors_stopped"] == f"writing {calls[3]} failed: disk full"
    assert err.splitlines() == [f"warning: tensor files stopped: {meta['tensors_stopped']}; "
                                f"statistics kept for every entry"]


def test_pair_runs_fp32_and_bf16_and_prints_the_pshell_command(tmp_path):
    script = _script(tmp_path, TRAIN)
    done = subprocess.run([sys.executable, "-m", "precision_shell.capture", "--out",
                           str(tmp_path / "pair"), "--pair", "--mode", "statistics", "--", str(script)],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    target, golden = tmp_path / "pair" / "bf16", tmp_path / "pair" / "fp32"
    assert done.stdout.splitlines()[-1] == f"pshell {target} --golden {golden}"
    assert _names(target / "step0/rank0") == _names(golden / "step0/rank0")
    autocast = [_meta(d / "step0/rank0")["capture"]["autocast"] for d in (golden, target)]
    assert autocast == [None, {"device": "cpu", "dtype": "torch.bfloat16"}]
    dtypes = [json.loads((d / "step0/rank0/dump.json").read_text())["data"]
              ["Functional.linear.0.forward"]["output"][0]["dtype"] for d in (golden, target)]
    assert dtypes == ["torch.float32", "torch.bfloat16"]


# --- naming rules --------------------------------------------------------------------------------

def test_uninitialised_memory_is_not_recorded(tmp_path):
    """A script captured whole builds its model under the capture: the torch.empty behind
    nn.Linear's weights (and any empty buffer) holds garbage that would compare as a root."""
    with capture(tmp_path, mode="statistics", level="api") as cap:
        layer = torch.nn.Linear(4, 3)
        buffer = torch.empty(2, 4).new_empty(2, 4)
        buffer.copy_(torch.ones(2, 4))
        layer(buffer).sum().backward()
    names = _names(Path(cap.written[0]))
    assert not [n for n in names if "empty" in n]
    assert "Functional.linear.0.forward" in names and "Tensor.copy_.0.forward" in names


def test_operators_getters_and_nesting_are_named_as_msprobe_does(tmp_path):
    a = torch.randn(2, 3, requires_grad=True)
    b = torch.randn(2, 3)
    with capture(tmp_path, mode="statistics", level="api") as cap:
        c = a * b
        d = 2 + c
        e = d.mul(b)
        f = torch.nn.functional.softmax(e.T, dim=-1)   # .T: a getter; softmax: no inner entries
        _ = (f.shape, f.size(0), f.dtype, f.requires_grad)
        f.sum().backward()
    rank_dir = Path(cap.written[0])
    names = _names(rank_dir)
    assert [n for n in names if n.endswith("forward")] == [
        "Tensor.__mul__.0.forward", "Tensor.__radd__.0.forward", "Tensor.mul.0.forward",
        "Functional.softmax.0.forward", "Tensor.sum.0.forward"]
    edges = _meta(rank_dir)["edges"]
    # e.T is a view that no recorded call returned: resolved to its base, e
    assert edges["Functional.softmax.0.forward.input.0"] == "Tensor.mul.0.forward.output.0"
    assert edges["Tensor.__radd__.0.forward.input.0"] == "Tensor.__mul__.0.forward.output.0"
    assert json.loads((rank_dir / "construct.json").read_text()) == {}     # L1: no modules
    assert "Tensor.__mul__" not in torch.Tensor.__dict__ or \
        torch.Tensor.__dict__["__mul__"].__name__ != "operator"     # patch removed on exit


def test_steps_write_one_folder_each(tmp_path):
    lin = torch.nn.Linear(4, 4)
    with capture(tmp_path, model=torch.nn.Sequential(lin), mode="statistics") as cap:
        for _ in range(2):
            lin(torch.randn(2, 4)).sum().backward()
            cap.step()
    assert [Path(p).relative_to(tmp_path).as_posix() for p in cap.written] == [
        "step0/rank0", "step1/rank0", "step2/rank0"]
    for step in (0, 1):
        names = _names(tmp_path / f"step{step}/rank0")
        assert "Module.0.Linear.forward.0" in names and "Module.0.Linear.parameters_grad.0" in names
        assert _meta(tmp_path / f"step{step}/rank0")["step"] == step


def test_compiled_module_is_reported(tmp_path):
    model = torch.nn.Sequential(torch.nn.Linear(4, 4))
    with capture(tmp_path, mode="statistics") as cap:
        torch.compile(model)
    assert _meta(Path(cap.written[0]))["not_eager"] == ["torch.compile called"]


def test_bad_mode_and_level_are_one_line():
    with pytest.raises(CaptureError, match="^mode 'tensors': expected one of tensor, statistics$"):
        capture("x", mode="tensors")
    with pytest.raises(CaptureError, match="^level 'L2': expected one of api, module, mix$"):
        capture("x", level="L2")


def test_nothing_outside_the_capture_package_imports_torch():
    modules = [m.name for m in pkgutil.walk_packages(precision_shell.__path__, "precision_shell.")
               if not m.name.startswith("precision_shell.capture") and not m.name.endswith("__main__")]
    code = ("import importlib, sys\n"
            f"for m in {modules!r}: importlib.import_module(m)\n"
            "print(sorted(m for m in sys.modules if m == 'torch' or m.startswith('torch.')))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert len(modules) > 40 and done.stdout.strip() == "[]"


def test_same_tensor_saved_twice_is_one_file_linked_until_it_changes(tmp_path):
    w = torch.ones(3)
    with capture(tmp_path, mode="tensor", level="api") as cap:
        w * 2
        w * 3
        w.add_(1)
        w * 4
    folder = Path(cap.written[0]) / "dump_tensor_data"

    def inode(name):
        return (folder / f"{name}.pt").stat().st_ino
    assert inode("Tensor.__mul__.0.forward.input.0") == inode("Tensor.__mul__.1.forward.input.0") \
        == inode("Tensor.add_.0.forward.input.0")
    assert inode("Tensor.__mul__.2.forward.input.0") == inode("Tensor.add_.0.forward.output.0") \
        != inode("Tensor.__mul__.0.forward.input.0")
    assert load_pt_tensor(folder / "Tensor.__mul__.0.forward.input.0.pt").tolist() == [1.0] * 3
    assert load_pt_tensor(folder / "Tensor.__mul__.2.forward.input.0.pt").tolist() == [2.0] * 3
    assert _meta(Path(cap.written[0]))["tensor_files_linked"] == 3


def test_in_place_ops_after_recorded_calls_work_and_gradients_are_unchanged(tmp_path):
    """Outputs are never wrapped (a later in-place op on them is allowed) and inputs are not
    tapped for calls that write them: the step computes what it computes without the capture."""
    def step(capture_to=None):
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(inplace=True),
                                    torch.nn.Identity(), torch.nn.Linear(8, 2))
        x = torch.randn(3, 4, requires_grad=True)

        def run():
            y = model(x)
            y = torch.nn.functional.relu(y, inplace=True)    # in place on linear's output
            y = y * 2
            y.add_(1)                                         # in place on __mul__'s output
            y.sum().backward()
        if capture_to is None:
            run()
        else:
            with capture(capture_to, model=model, mode="statistics") as cap:
                run()
            return model, x, Path(cap.written[0])
        return model, x, None
    plain, x_plain, _ = step()
    captured, x_captured, rank_dir = step(tmp_path)
    assert torch.equal(x_plain.grad, x_captured.grad)
    for (name, p), q in zip(plain.named_parameters(), captured.parameters()):
        assert torch.equal(p.grad, q.grad), name
    data = json.loads((rank_dir / "dump.json").read_text())["data"]
    # F.relu's backward input is the gradient of its own output: 2, from y * 2
    relu_grad = data["Functional.relu.1.backward"]["input"][0]
    assert (relu_grad["Max"], relu_grad["Min"]) == (2.0, 2.0)
    assert {"Module.2.Identity.forward.0", "Module.0.Linear.backward.0",
            "Functional.linear.0.backward", "Tensor.add_.0.forward"} <= set(data)


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the message of a CPU-only torch")
def test_cuda_without_a_device_is_one_line(tmp_path, capsys):
    script = _script(tmp_path, TRAIN)
    rc = main(["--out", str(tmp_path / "run"), "--device", "cuda", "--autocast", "fp16", "--", str(script)])
    err = capsys.readouterr().err
    assert rc == 2 and not (tmp_path / "run").exists()
    assert err.splitlines() == [f"error: --device cuda: this torch ({torch.__version__}) sees no CUDA device"]


def test_module_level_records_modules_only_and_rank_comes_from_torch_distributed(tmp_path, monkeypatch):
    import torch.distributed as dist
    monkeypatch.setattr(dist, "get_rank", lambda group=None: 3)    # as process 3 of a job would see
    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'rendezvous'}", rank=0,
                            world_size=1)
    try:
        model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.GELU())
        with capture(tmp_path / "out", model=model, mode="statistics", level="module") as cap:
            model(torch.randn(2, 4)).sum().backward()
    finally:
        dist.destroy_process_group()
    rank_dir = Path(cap.written[0])
    assert rank_dir == tmp_path / "out" / "step0" / "rank3"
    names = _names(rank_dir)
    assert names and all(n.startswith("Module.") for n in names)
    assert json.loads((rank_dir / "dump.json").read_text())["level"] == "L0"
    assert {"Module.0.Linear.forward.0", "Module.1.GELU.forward.0", "Module.1.GELU.backward.0",
            "Module.0.Linear.parameters_grad.0"} <= set(names)
    # modules only: the GELU's input comes straight from the Linear module's output
    assert _meta(rank_dir)["edges"]["Module.1.GELU.forward.0.input.0"] == \
        "Module.0.Linear.forward.0.output.0"
