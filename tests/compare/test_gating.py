"""CI gating (``--fail-on-findings``) that cannot pass falsely, and the coverage summary of
vc/vcs/ac: every dump turned to random bytes, a few corrupt dumps, goldens of the wrong shape.

Workspaces are copies of the generated sample with their files damaged here; expected counts and
reasons come from the healthy compare and from the readers, never typed in.
"""

from __future__ import annotations

import json
import shutil
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from conftest import json_docs, run_cli
from precision_shell.analysis.compare.coverage import NO_GOLDEN, reason_kind
from precision_shell.errors import FormatError
from precision_shell.formats.dump_file import read_dump_header


def _copy(sample_ws, tmp_path: Path) -> Path:
    root = tmp_path / "ws"
    shutil.copytree(sample_ws[0] / "precision_data", root / "precision_data")
    return root


def _dump_files(root: Path) -> list[Path]:
    return sorted(p for p in (root / "precision_data" / "npu").rglob("*")
                  if p.is_file() and "dump" in p.parts)


def _op_dump(root: Path, manifest: dict, op: str) -> Path:
    return root / next(o["dump_file"] for o in manifest["ops"] if o["name"] == op)


def _reader_kind(path: Path) -> str:
    with pytest.raises(FormatError) as info:
        read_dump_header(str(path))
    return reason_kind(info.value.reason)


@pytest.fixture
def random_ws(sample_ws, tmp_path) -> Path:
    """Every NPU dump replaced by random bytes of the same size."""
    root = _copy(sample_ws, tmp_path)
    rng = np.random.default_rng(7)
    for path in _dump_files(root):
        path.write_bytes(rng.bytes(path.stat().st_size))
    return root


def test_random_dumps_fail_the_gate_with_the_reason(random_ws, capsys, tmp_path):
    files = _dump_files(random_ws)
    kinds = {_reader_kind(p) for p in files}
    rc, out, err = run_cli(capsys, random_ws, "-o", tmp_path / "o", "-c", "vcs", "--fail-on-findings")
    assert rc == 1, err
    reason = [line for line in err.splitlines() if "could not judge" in line]
    assert len(reason) == 1 and "no tensor pair compared" in reason[0]
    assert f"unreadable {len(files)} (" in reason[0] and all(k in reason[0] for k in kinds)
    # on screen: the summary line and the first files, each with the reader's reason
    assert f"warning: compared 0 of {len(files)} tensors; unreadable {len(files)}" in out
    named = [line for line in out.splitlines() if line.startswith("warning:   ") and "more" not in line]
    assert 3 <= len(named) <= 5
    assert all(any(str(p) in line for p in files) for line in named)
    # without the gate nothing fails: there is no failing op to report
    rc, _, _ = run_cli(capsys, random_ws, "-o", tmp_path / "o", "-c", "vcs")
    assert rc == 0


def test_ac_gate_fails_on_unreadable_dumps_and_json_users_see_why(random_ws, capsys, tmp_path):
    files = _dump_files(random_ws)
    rc, out, err = run_cli(capsys, random_ws, "-o", tmp_path / "o", "-c", "ac", "--format", "json",
                           "--fail-on-findings")
    assert rc == 1, err
    rows = json_docs(out)[0]          # stdout keeps its shape: one array of findings
    assert isinstance(rows, list)
    warnings = [line for line in err.splitlines() if line.startswith("warning: ")]
    assert warnings[0].startswith(f"warning: unreadable files: {len(files)} (")
    named = [w for w in warnings[1:] if any(str(p) in w for p in files)]
    assert 3 <= len(named) <= 5
    assert any("could not judge" in line and f"unreadable files: {len(files)}" in line
               for line in err.splitlines())


def test_a_few_corrupt_dumps_are_counted_per_reason_and_named(sample_ws, capsys, tmp_path):
    root = _copy(sample_ws, tmp_path)
    manifest = sample_ws[1]
    exported = tmp_path / "healthy.json"
    _, out, _ = run_cli(capsys, sample_ws[0], "-o", tmp_path / "h", "-c",
                        f"vc; export compare -o {exported} --format json", "--format", "json")
    healthy = json_docs(out)[0]
    truncated, garbage = _op_dump(root, manifest, "fc1/MatMul"), _op_dump(root, manifest, "conv1/Conv2D")
    truncated.write_bytes(truncated.read_bytes()[: truncated.stat().st_size // 2])
    garbage.write_bytes(np.random.default_rng(3).bytes(garbage.stat().st_size))
    kinds = sorted([_reader_kind(truncated), _reader_kind(garbage)])
    # rows of the two ops in the healthy compare: each now becomes one unreadable row
    broken = [r for r in json.loads(exported.read_text()) if r["op"] in ("fc1/MatMul", "conv1/Conv2D")]
    compared = healthy["compared"] - sum(r["compared"] for r in broken)
    total = healthy["tensors"] - len(broken) + 2

    rc, out, err = run_cli(capsys, root, "-o", tmp_path / "o", "-c", "vc", "--format", "json")
    assert rc == 0, err
    cov = json_docs(out)[0]["coverage"]
    assert (cov["compared"], cov["total"]) == (compared, total)
    assert cov["unreadable"] == {k: kinds.count(k) for k in kinds}
    assert cov["skipped"] == healthy["coverage"]["skipped"]
    where = [e["where"] for e in cov["examples"][:2]]
    assert sorted(where) == sorted([str(truncated), str(garbage)])
    assert all(e["reason"].startswith(e["where"] + ": ") for e in cov["examples"][:2])
    summary = next(line for line in err.splitlines() if line.startswith("warning: compared"))
    assert summary.startswith(f"warning: compared {compared} of {total} tensors")
    per_kind = ", ".join(f"{k}: {n}" for k, n in Counter(kinds).most_common())
    assert summary.endswith(f"unreadable 2 ({per_kind})")

    rc, out, err = run_cli(capsys, root, "-o", tmp_path / "o", "-c", "vc")
    lines = out.splitlines()
    at = next(i for i, line in enumerate(lines) if line.startswith("warning: compared"))
    assert str(truncated) in "\n".join(lines[at + 1:at + 3]) and str(garbage) in "\n".join(lines[at + 1:at + 3])


@pytest.fixture
def passing_ws(sample_ws, tmp_path) -> Path:
    """The sample without the dumps of the ops that fail at cosine 0 (the overflow branch): a
    golden compare in which no op fails."""
    root = _copy(sample_ws, tmp_path)
    manifest = sample_ws[1]
    overflow = manifest["overflow"]
    for op in [overflow["op"], *overflow["downstream_non_finite"]]:
        _op_dump(root, manifest, op).unlink()
    return root


def test_healthy_compare_without_failing_ops_passes_the_gate(passing_ws, capsys, tmp_path):
    rc, out, err = run_cli(capsys, passing_ws, "-o", tmp_path / "o", "-c", "vc; vcs -c 0.0",
                           "--format", "json", "--fail-on-findings")
    assert rc == 0, err
    summary, suspects = json_docs(out)
    assert suspects == [] and summary["unjudged"] is None
    cov = summary["coverage"]
    assert cov["compared"] == cov["eligible"] > 0 and not cov["unreadable"]
    assert set(cov["skipped"]) <= {NO_GOLDEN, "no dump"}


def test_failing_ops_still_exit_3(sample_ws, capsys, tmp_path):
    rc, _, err = run_cli(capsys, sample_ws[0], "-o", tmp_path, "-c", "vcs -c 0.98", "--fail-on-findings")
    assert rc == 3 and "could not judge" not in err


def test_coverage_below_the_minimum_fails_the_gate(passing_ws, capsys, tmp_path):
    manifest_goldens = sorted((passing_ws / "precision_data" / "tf" / "dump").glob("*.npy"))
    # goldens of another size: their pairs are skipped as "shape differs", against coverage
    for path in manifest_goldens[:6]:
        arr = np.load(path)
        np.save(path, np.concatenate([arr.reshape(-1), arr.reshape(-1)[:1]]))
    rc, out, err = run_cli(capsys, passing_ws, "-o", tmp_path / "o", "-c", "vc", "--format", "json")
    cov = json_docs(out)[0]["coverage"]
    assert cov["skipped"].get("shape differs", 0) > 0
    pct = 100.0 * cov["compared"] / cov["eligible"]
    assert cov["coverage_percent"] == pytest.approx(pct, abs=1e-3) and pct < 90

    rc, _, err = run_cli(capsys, passing_ws, "-o", tmp_path / "o", "-c", "vcs -c 0.0", "--fail-on-findings")
    assert rc == 1
    assert f"coverage {pct:.1f}%" in err and "below --min-coverage 90%" in err
    rc, _, err = run_cli(capsys, passing_ws, "-o", tmp_path / "o", "-c", "vcs -c 0.0", "--fail-on-findings",
                         "--min-coverage", f"{pct - 1:.0f}")
    assert rc == 0, err
    with pytest.raises(SystemExit) as exited:   # argparse: a bad flag is exit 2
        run_cli(capsys, passing_ws, "-c", "vcs", "--fail-on-findings", "--min-coverage", "101")
    assert exited.value.code == 2 and "percentage" in capsys.readouterr().err


@pytest.mark.parametrize("reason, kind", [
    ("header length 0", "header length 0"),
    ("header length 7809172459581498136 is larger than the file (9298 bytes)",
     "header length N is larger than the file"),
    ("truncated: 5 bytes, shorter than the 8-byte header length", "truncated"),
    ("cannot read: Permission denied", "cannot read: Permission denied"),
    ("output 1 shape [2, 3] of DT_FLOAT needs 24 bytes, has 12", "output N shape of DT_FLOAT needs N bytes"),
])
def test_reasons_are_counted_without_their_particulars(reason, kind):
    assert reason_kind(reason) == kind


def test_exit_code_precedence_usage_over_unjudged_over_findings(sample_ws, capsys, tmp_path):
    root = _copy(sample_ws, tmp_path)
    garbage = _op_dump(root, sample_ws[1], "fc1/MatMul")
    garbage.write_bytes(np.random.default_rng(9).bytes(garbage.stat().st_size))
    # failing ops remain (findings, 3) but a dump is unreadable (could not judge, 1): 1 wins
    rc, out, err = run_cli(capsys, root, "-o", tmp_path / "o", "-c", "vcs -c 0.98", "--format", "csv",
                           "--fail-on-findings")
    assert rc == 1 and "could not judge: unreadable 1 (" in err
    assert out.splitlines()[0].startswith("#,order,op,type") and "warning:" not in out   # csv stays csv
    assert any(line.startswith("warning: ") and str(garbage) in line for line in err.splitlines())
    rc, _, _ = run_cli(capsys, root, "-o", tmp_path / "o", "-c", "vcs -c 0.98; vcs -c 2", "--fail-on-findings")
    assert rc == 2


def test_vcs_on_the_csv_of_a_corrupt_compare_counts_the_same(random_ws, capsys, tmp_path):
    rc, out, err = run_cli(capsys, random_ws, "-o", tmp_path / "o", "-c", "vc", "--format", "json")
    summary = json_docs(out)[0]
    live = [line for line in err.splitlines() if line.startswith("warning: compared")]
    rc, out, err = run_cli(capsys, random_ws, "-o", tmp_path / "o", "-c", f"vcs -f {summary['csv']}",
                           "--fail-on-findings")
    assert rc == 1 and "no tensor pair compared" in err
    assert [line for line in out.splitlines() if line.startswith("warning: compared")] == live
