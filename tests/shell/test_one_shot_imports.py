"""A one-shot `pshell WS -c "vc"` / `-c "ac -l 0"` imports what the command uses and nothing else
(issue 31: ~0.14 s of a 0.8 s vc was imports). Each run is a fresh interpreter that lists the
modules it imported beyond its own start; an eager import that comes back fails here."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

# Prints the command's output, then [exit code, modules imported by pshell] as the last line.
_RUN_AND_LIST_MODULES = r"""
import json, sys
before = set(sys.modules)
from precision_shell.cli import main
rc = main(sys.argv[1:])
sys.stdout.flush()
print(json.dumps([rc, sorted(set(sys.modules) - before)]))
"""

# Needed by no batch vc/ac on a GE workspace: the REPL and MCP layers, the msprobe and MindSpore
# readers (only their rank_dirs answer "is PATH such a dump?"), the INI reader (no --config),
# OpenSSL's hashlib (the cache's SHA-1 is CPython's own), did-you-mean's difflib, subprocess
# (`!`, pipes, `dot`).
NEVER = ["prompt_toolkit", "precision_shell.shell.repl", "precision_shell.mcp.server",
         "precision_shell.formats.msprobe.layout", "precision_shell.formats.mindspore_graph.layout",
         "precision_shell.formats.msprobe.dump", "precision_shell.formats.mindspore_graph.dump",
         "precision_shell.analysis.compare.msprobe.engine", "precision_shell.formats.torch_tensor",
         "precision_shell.config", "configparser", "hashlib", "_hashlib", "difflib", "subprocess"]


def _run(*argv: str, cwd: Path) -> tuple[int, list[str], str]:
    out = subprocess.run([sys.executable, "-c", _RUN_AND_LIST_MODULES, *argv], cwd=cwd,
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    rc, modules = json.loads(lines[-1])
    return rc, modules, "\n".join(lines[:-1])


def _warm(root: Path, out: Path, cwd: Path) -> None:
    """A first start parses the graph and fills the start-up cache: the runs below are the
    cached starts the issue measures. (The graph's entry is written by a detached grandchild:
    waited for, else the next run could parse the graph again.)"""
    rc, _, _ = _run(str(root), "-o", str(out), "-c", "info", cwd=cwd)
    assert rc == 0
    for _ in range(400):
        if list((out / "cache").glob("graph-*.json")):
            break
        time.sleep(0.025)
    else:
        raise AssertionError("no graph entry in the start-up cache after 10 s")


def test_one_shot_vc_imports_only_what_the_compare_uses(sample_ws, tmp_path):
    root, _ = sample_ws
    out = tmp_path / "out"
    _warm(root, out, tmp_path)
    rc, modules, text = _run(str(root), "-o", str(out), "-c", "vc -j 2", "--format", "json", cwd=tmp_path)
    assert rc == 0
    summary = json.loads(text)
    csv_rows = Path(summary["csv"]).read_text(encoding="utf-8").splitlines()
    assert len(csv_rows) > 10      # the compare ran and wrote its rows
    assert "precision_shell.analysis.compare.engine" in modules   # (the listing sees the imports)
    unexpected = sorted(set(modules) & set(NEVER + ["precision_shell.formats.lowbit"]))
    assert unexpected == [], f"a one-shot vc imported {unexpected}"


def test_one_shot_ac_imports_only_what_the_scan_uses(sample_ws, tmp_path):
    root, _ = sample_ws
    out = tmp_path / "out"
    _warm(root, out, tmp_path)
    rc, modules, text = _run(str(root), "-o", str(out), "-c", "ac -l 0", "--format", "json", cwd=tmp_path)
    assert rc == 0
    json.loads(text)
    assert "precision_shell.analysis.overflow.scan" in modules
    # no op text is parsed: the graph comes from the start-up cache, and ac reads no op's details
    unexpected = sorted(set(modules) & set(NEVER + ["precision_shell.formats.text_wire"]))
    assert unexpected == [], f"a one-shot ac imported {unexpected}"


_DTYPES = r"""
import sys
import numpy as np
from precision_shell.formats import dtypes
from precision_shell.analysis.compare import fused_metrics
from precision_shell.formats.lowbit import by_name, decode_codes
loaded = ["ml_dtypes" in sys.modules]
assert dtypes.numpy_dtype(dtypes.DT_FLOAT16) == np.dtype("<f2") and dtypes.is_supported_dtype(dtypes.DT_BF16)
fused_metrics.kind_of(np.dtype(np.float64))
loaded.append("ml_dtypes" in sys.modules)
bf16 = dtypes.numpy_dtype(dtypes.DT_BF16)
loaded.append("ml_dtypes" in sys.modules)
import ml_dtypes
codes = np.arange(256, dtype=np.uint8)
e5m2 = decode_codes(by_name("float8_e5m2"), codes, 256)
same = np.array_equal(e5m2, codes.view(ml_dtypes.float8_e5m2).astype(np.float32), equal_nan=True)
print(loaded, bf16 == np.dtype(ml_dtypes.bfloat16), dtypes.numpy_dtype(dtypes.DT_FLOAT8_E4M3FN) == np.dtype(ml_dtypes.float8_e4m3fn), same)
"""


def test_ml_dtypes_is_loaded_by_the_first_tensor_that_needs_it(tmp_path):
    out = subprocess.run([sys.executable, "-c", _DTYPES], cwd=tmp_path, capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    # not by importing the readers, nor by asking about float16/float64; then bfloat16 and the
    # fp8 types are ml_dtypes' own, and the fp8 decoding table is built from them
    assert out.stdout.split() == ["[False,", "False,", "True]", "True", "True", "True"]
