"""A machine without a C compiler: the install still succeeds (the kernels are optional, with a
warning) and pshell runs on the numpy path with the same results."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import precision_shell

ROOT = Path(precision_shell.__file__).resolve().parent.parent
EXTENSIONS = ("precision_shell.analysis.compare._fused_metrics", "precision_shell.analysis.compare._framework_metrics",
              "precision_shell.formats.logs._tfrecord", "precision_shell.formats.graph._graph_scan",
              "precision_shell.formats.msprobe._stats_scan", "precision_shell.analysis.compare.msprobe._stats_cells",
              "precision_shell.formats._file_heads")


def test_build_without_a_compiler_warns_and_succeeds(tmp_path):
    # CC/LDSHARED that always fail stand in for a missing compiler; the build goes to tmp_path only
    env = dict(os.environ, CC="/bin/false", LDSHARED="/bin/false", CXX="/bin/false")
    done = subprocess.run([sys.executable, "setup.py", "-q", "build_ext", "--build-lib", str(tmp_path / "lib"),
                           "--build-temp", str(tmp_path / "tmp")],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    for name in EXTENSIONS:
        assert f"the optional C kernel {name} was not built" in done.stderr
    assert list((tmp_path / "lib").rglob("*.so")) == []


def _run(ws: Path, out: Path, hide_extensions: bool) -> dict:
    """`info; vc; vcs` in a child; hide_extensions: the kernels cannot be imported (not built)."""
    hide = "".join(f"sys.modules[{name!r}] = None; " for name in EXTENSIONS) if hide_extensions else ""
    code = (f"import sys; {hide}from precision_shell.cli import main; "
            f"sys.exit(main([{str(ws)!r}, '-o', {str(out)!r}, '-c', 'info; vc; vcs -l 0', '--format', 'json']))")
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    env.pop("PSHELL_NO_EXT", None)
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode in (0, 1), done.stderr
    info, vc, vcs = (json.loads(line) for line in done.stdout.splitlines() if line.strip())
    return {"info": info, "vc": vc, "vcs": vcs}


def test_pshell_without_the_kernels_uses_numpy_with_the_same_results(sample_ws, tmp_path):
    ws = sample_ws[0]
    without = _run(ws, tmp_path / "numpy", hide_extensions=True)
    with_kernels = _run(ws, tmp_path / "c", hide_extensions=False)
    assert without["info"]["metrics_kernel"].startswith("numpy (the C kernel was not built")
    assert with_kernels["info"]["metrics_kernel"] == ("c-extension" if _built() else "numpy")
    assert without["vcs"] == with_kernels["vcs"]
    csv_numpy, csv_c = (Path(run["vc"]["csv"]).read_bytes() for run in (without, with_kernels))
    assert csv_numpy == csv_c and csv_numpy.count(b"\n") > 10


def _built() -> bool:
    from precision_shell.analysis.compare import fused_metrics

    return fused_metrics.built()
