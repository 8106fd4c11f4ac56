"""`vc`, `vcs` and `ac` give byte-identical output whichever way the data goes: the C kernel or
the numpy path (``PSHELL_NO_EXT=1``), in-process or over workers, on the sample workspaces (the
default convnet, the bf16 AMP one, and a ``--scale`` one large enough to run in parallel, with
NC1HWC0, FRACTAL_Z and FRACTAL_NZ dumps, and a ``--small-tensors`` one: many small ops whose
outputs take those three layouts in turn, several ops to a task)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from precision_shell.analysis.compare import fused_metrics as fm
from precision_shell.analysis.compare.engine import INLINE_BELOW_BYTES
from precision_shell.samples.writer import SampleOptions, write_workspace

# the only fields allowed to differ between two runs: timings and the output file's name
TIMING_KEYS = ("seconds", "mb_per_s", "csv", "workers")


@pytest.fixture(scope="module")
def workspaces(sample_ws, tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("paths")
    amp, scale, small = root / "amp", root / "scale", root / "small"
    write_workspace(amp, SampleOptions(seed=1, variant="bf16-amp"))
    manifest = write_workspace(scale, SampleOptions(seed=2, scale_mb=12))
    totals = manifest["totals"]
    assert totals["npu_dump_bytes"] + totals["golden_bytes"] > INLINE_BELOW_BYTES   # runs on workers
    formats = {t["format"] for op in manifest["ops"] for t in op.get("inputs", []) + op.get("outputs", [])}
    assert {"NC1HWC0", "FRACTAL_Z", "FRACTAL_NZ"} <= formats
    manifest = write_workspace(small, SampleOptions(seed=3, scale_mb=9, small_tensors=True))
    totals = manifest["totals"]
    assert totals["npu_dump_bytes"] + totals["golden_bytes"] > INLINE_BELOW_BYTES
    blocks = [op for op in manifest["ops"] if op.get("tower_block") is not None]
    assert len(blocks) >= 9   # ~0.8 MB an op: several ops to each task of >= 4 MB
    return {"convnet": sample_ws[0], "bf16-amp": amp, "scale": scale, "small": small}


def _run(ws: Path, out: Path, commands: str, numpy_path: bool) -> tuple[list, list[bytes]]:
    """The JSON documents (timings dropped) and the bytes of every CSV written, in order."""
    env = {k: v for k, v in os.environ.items() if k != fm.DISABLE_VARIABLE}
    if numpy_path:
        env[fm.DISABLE_VARIABLE] = "1"
    run = subprocess.run([sys.executable, "-m", "precision_shell", str(ws), "-o", str(out), "-c", commands,
                          "--format", "json"], capture_output=True, text=True, env=env, timeout=300)
    assert run.returncode == 0, run.stderr
    docs = [json.loads(line) for line in run.stdout.splitlines() if line.strip()]
    csvs = [Path(d["csv"]).read_bytes() for d in docs if isinstance(d, dict) and d.get("csv")]
    docs = [{k: v for k, v in d.items() if k not in TIMING_KEYS} if isinstance(d, dict) else d for d in docs]
    return docs, csvs


@pytest.mark.parametrize("name", ["convnet", "bf16-amp", "scale", "small"])
def test_vc_vcs_ac_are_byte_identical_across_paths(workspaces, tmp_path, name):
    ws = workspaces[name]
    commands = "vc -j 2; vcs; ac -l 0"
    runs = {"C -j 2": _run(ws, tmp_path / "c2", commands, False),
            "numpy -j 2": _run(ws, tmp_path / "n2", commands, True),
            "C -j 1": _run(ws, tmp_path / "c1", commands.replace("-j 2", "-j 1"), False)}
    (docs, csvs), *others = runs.values()
    assert len(docs) == 3 and docs[0]["compared"] > 0, docs
    assert bool(docs[2]) == (name != "bf16-amp")    # ac: the convnet samples overflow in fp16
    assert len(csvs) == 1 and csvs[0].count(b"\n") > docs[0]["compared"]
    for label, (other_docs, other_csvs) in list(runs.items())[1:]:
        assert other_docs == docs, label
        assert other_csvs == csvs, label


@pytest.mark.skipif(not fm.built(), reason="the C kernel is not built")
def test_the_c_path_is_what_runs_by_default(workspaces, tmp_path):
    """So that the comparison above is between two paths, not the numpy path twice."""
    for numpy_path, label in ((False, "c-extension"), (True, "numpy (PSHELL_NO_EXT=1)")):
        docs, _ = _run(workspaces["convnet"], tmp_path / label.split()[0], "info", numpy_path)
        assert docs[0]["metrics_kernel"] == label
