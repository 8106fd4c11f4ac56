"""``bisect``: ddmin over real reruns of the sample generator (its --fusion-switch / --keep-fp32
knobs), the journal, --resume, bad checks, timeouts and Ctrl-C."""

from __future__ import annotations

import itertools
import json
import os
import random
import shlex
import sys
from pathlib import Path

import pytest

from conftest import json_docs, run_cli
from precision_shell.analysis.bisect import ddmin
from precision_shell.samples.network import KEEP_FP32_OVERFLOW_FIX, PASS_LAYERNORM
from precision_shell.samples.writer import SampleOptions, write_workspace

PY = shlex.quote(sys.executable)
GENERATE = f"{PY} -m precision_shell.samples {{trial}}/ws"
PSHELL = f"{PY} -m precision_shell {{trial}}/ws"


def worst_case(n: int) -> int:
    """Zeller & Hildebrandt's ddmin bound, n^2 + 3n tests, plus the two sanity trials and the
    verification trial bisect adds."""
    return n * n + 3 * n + 3


def journal(folder: Path) -> tuple[dict, list[dict]]:
    lines = (folder / "bisect.jsonl").read_text(encoding="utf-8").splitlines()
    return json.loads(lines[0]), [json.loads(line) for line in lines[1:]]


@pytest.fixture(scope="module")
def keep_list(tmp_path_factory) -> Path:
    """The keep-fp32 list that removes the sample's overflow, so vcs judges only the LayerNorm root."""
    path = tmp_path_factory.mktemp("keep") / "keep.txt"
    path.write_text("".join(n + "\n" for n in KEEP_FP32_OVERFLOW_FIX), encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def fused_ws(tmp_path_factory, keep_list) -> Path:
    root = tmp_path_factory.mktemp("fused_ws")
    write_workspace(root, SampleOptions(keep_fp32=KEEP_FP32_OVERFLOW_FIX))
    return root


def effective_passes(ws: Path) -> list[str]:
    doc = json.loads((ws / "precision_data/fusion/fusion_result.json").read_text(encoding="utf-8"))
    return [name for kind in ("graph_fusion", "ub_fusion") for name, counts in doc[kind].items()
            if int(counts["effect_times"]) > 0]


# ---- ddmin itself -----------------------------------------------------------------------------------

def run_ddmin(order: list[str], fixes) -> tuple[list[str], set[frozenset]]:
    tested: set[frozenset] = set()
    steps = ddmin(order)
    try:
        sets = next(steps)
        while True:
            found = []
            for s in sets:                      # one at a time, stopping at the first fixing set
                tested.add(s)
                found.append(fixes(s))
                if found[-1]:
                    break
            sets = steps.send(found)
    except StopIteration as done:
        return done.value, tested


@pytest.mark.parametrize("n", [1, 2, 5, 8, 13])
def test_ddmin_finds_every_conjunctive_culprit_set_within_the_bound(n):
    order = [f"c{i}" for i in range(n)]
    rng = random.Random(n)
    sizes = range(1, min(n, 3) + 1)
    cases = [set(c) for k in sizes for c in itertools.combinations(order, k)]
    for culprits in rng.sample(cases, min(len(cases), 40)):
        found, tested = run_ddmin(order, lambda s, c=culprits: c <= s)
        assert set(found) == culprits
        assert found == [c for c in order if c in culprits]          # ranking order kept
        assert len(tested) <= n * n + 3 * n


def test_ddmin_result_is_one_minimal_for_either_of_two_fixes():
    order = [f"c{i}" for i in range(10)]
    fixes = lambda s: {"c2", "c7"} <= s or "c5" in s  # noqa: E731
    found, _ = run_ddmin(order, fixes)
    assert fixes(frozenset(found))
    assert all(not fixes(frozenset(found) - {c}) for c in found)


# ---- the real loop --------------------------------------------------------------------------------

def test_fusion_finds_exactly_the_pass_behind_the_fused_root(fused_ws, keep_list, capsys):
    check = (f"{GENERATE} --keep-fp32 {shlex.quote(str(keep_list))} --fusion-switch {{switch}} >/dev/null "
             f"&& {PSHELL} -c 'vcs -c 0.98' --fail-on-findings")
    out = fused_ws / "search"
    rc, stdout, err = run_cli(capsys, fused_ws, "--format", "json", "-c",
                              f"vcs; bisect fusion --out {out} --check {shlex.quote(check)}; next")
    assert rc == 0, err
    _, result, panel = json_docs(stdout)
    passes = effective_passes(fused_ws)
    assert PASS_LAYERNORM in passes and len(passes) >= 3
    assert result["culprits"] == [PASS_LAYERNORM] and result["verified"] is True
    assert result["candidates"][0] == PASS_LAYERNORM            # the blamed pass ranks first
    assert sorted(result["candidates"]) == sorted(passes)
    assert result["trials"] <= worst_case(len(passes))
    config = json.loads(Path(result["config"]).read_text(encoding="utf-8"))
    assert config == {"Switch": {"GraphFusion": {PASS_LAYERNORM: "off"}, "UBFusion": {}}}
    header, trials = journal(out)
    assert header["knob"] == "fusion" and len(trials) == result["trials"]
    assert [t["phase"] for t in trials[:2]] == ["all", "none"] and trials[-1]["phase"] == "verify"
    for t in trials:                       # each trial kept whole in its own folder
        folder = out / t["folder"]
        record = json.loads((folder / "trial.json").read_text(encoding="utf-8"))
        assert record["exit_code"] == (0 if t["passed"] else 3)
        switched = json.loads((folder / "fusion_switch.json").read_text(encoding="utf-8"))["Switch"]
        assert sorted(switched["GraphFusion"]) + sorted(switched["UBFusion"]) == sorted(t["set"])
        assert (folder / "stdout.txt").is_file() and (folder / "stderr.txt").is_file()
        # the regenerated workspace really has the passes off: their fused ops are gone
        manifest = json.loads((folder / "ws/pshell_sample_manifest.json").read_text(encoding="utf-8"))
        assert not set(t["set"]) & set(manifest["passes"])
    assert "bisect: trial 1 [all] " in err and f"{len(passes)} of {len(passes)} off: pass" in err
    assert panel["culprit"] == PASS_LAYERNORM and panel["evidence"]

    # --resume on the finished search: the same answer, nothing rerun
    rc, stdout, err = run_cli(capsys, fused_ws, "--format", "json", "-c",
                              f"vcs; bisect fusion --out {out} --resume --check {shlex.quote(check)}")
    assert rc == 0, err
    again = json_docs(stdout)[1]
    assert again["new_trials"] == 0 and again["culprits"] == [PASS_LAYERNORM]
    assert len(journal(out)[1]) == result["trials"]

    # the same folder for another search: refused with one line, the journal kept
    rc, _, err = run_cli(capsys, fused_ws, "-c", f"bisect fusion --out {out} --resume --check 'exit 1'")
    assert rc == 1 and err.count("\n") == 1
    assert "journal of another search (its check command differs)" in err
    rc, _, err = run_cli(capsys, fused_ws, "-c", f"bisect fusion --out {out} --check {shlex.quote(check)}")
    assert rc == 1 and "holds a bisect journal already" in err
    assert len(journal(out)[1]) == result["trials"]


def test_keep_fp32_finds_the_two_op_set_both_needed(sample_ws, tmp_path, capsys):
    ws, manifest = sample_ws
    assert manifest["overflow"]["op"] == KEEP_FP32_OVERFLOW_FIX[0]
    # the pair is not adjacent, so ddmin must go through complements to find it
    names = [KEEP_FP32_OVERFLOW_FIX[0], "aux/Mean", KEEP_FP32_OVERFLOW_FIX[1]]
    listed = tmp_path / "candidates.txt"
    listed.write_text("# ops to try\n" + "\n".join(names) + "\n", encoding="utf-8")
    check = f"{GENERATE} --keep-fp32 {{keep_fp32}} >/dev/null && {PSHELL} -c ac --fail-on-findings"
    out = tmp_path / "search"
    rc, stdout, err = run_cli(capsys, ws, "--format", "json", "-c",
                              f"bisect keep-fp32 -j 2 --candidates {listed} --out {out} --check {shlex.quote(check)}")
    assert rc == 0, err
    result = json_docs(stdout)[0]
    assert result["candidates"] == names
    assert sorted(result["culprits"]) == sorted(KEEP_FP32_OVERFLOW_FIX) and result["verified"]
    assert result["trials"] <= worst_case(len(names))
    outcome = {frozenset(h["set"]): h["passed"] for h in result["history"]}
    for name in KEEP_FP32_OVERFLOW_FIX:         # each alone was tried and did not fix it
        assert outcome[frozenset([name])] is False
    assert (Path(result["config"]).read_text(encoding="utf-8").split()
            == [n for n in names if n in KEEP_FP32_OVERFLOW_FIX])


def test_cannot_fix_and_not_reproducible_exit_1_with_one_line(sample_ws, tmp_path, capsys):
    ws, _ = sample_ws
    # fusion cannot fix an fp16 overflow: the check fails with every pass off
    check = f"{GENERATE} --fusion-switch {{switch}} >/dev/null && {PSHELL} -c ac --fail-on-findings"
    rc, stdout, err = run_cli(capsys, ws, "-c", f"bisect fusion -j 2 --out {tmp_path / 'a'} --check {shlex.quote(check)}")
    errors = [line for line in err.splitlines() if line.startswith("error:")]
    assert rc == 1 and len(errors) == 1 and "this knob cannot fix it" in errors[0]
    assert len(journal(tmp_path / "a")[1]) == 2
    rc, _, err = run_cli(capsys, ws, "-c", f"bisect fusion --out {tmp_path / 'b'} --check true")
    errors = [line for line in err.splitlines() if line.startswith("error:")]
    assert rc == 1 and len(errors) == 1 and "not reproducible" in errors[0]
    rc, _, err = run_cli(capsys, ws, "-c", f"bisect fusion --out {tmp_path / 'c'} --check no-such-command-xyz")
    assert rc == 1 and "could not run (exit 127: command not found" in err


def test_timeout_kills_the_trial_process_group(sample_ws, tmp_path, capsys):
    ws, _ = sample_ws
    # the check leaves a background child (same group) and hangs
    check = "sleep 60 & echo $! > {trial}/child.pid; echo $$ > {trial}/sh.pid; sleep 60"
    out = tmp_path / "s"
    rc, _, err = run_cli(capsys, ws, "-c", f"bisect fusion --timeout 0.5 --out {out} --check {shlex.quote(check)}")
    assert rc == 1 and "timed out; its process group was killed" in err
    header, trials = journal(out)
    assert trials[0]["passed"] is False and "timed out" in trials[0]["reason"]
    for pid_file in (out / "trial-001/child.pid", out / "trial-001/sh.pid"):
        assert not alive(int(pid_file.read_text()))


def alive(pid: int) -> bool:
    """Running (a zombie waiting for a reaper that never comes in a container is dead)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def test_bad_inputs_one_line_each(sample_ws, tmp_path, capsys):
    ws, _ = sample_ws
    binary = tmp_path / "bin.txt"
    binary.write_bytes(b"\xff\xfe\x00garbage")
    cases = [(f"bisect fusion --candidates {binary} --check true", "not UTF-8"),
             (f"bisect fusion --candidates {tmp_path / 'missing.txt'} --check true", "cannot read candidates"),
             ("bisect fusion --max-trials 3 --check true", "need at least"),
             ("bisect keep-fp32 --check true", "run `vcs` first"),
             ("bisect fusion --check 'cat {keep_fp32}'", "the other knob's file")]
    for line, expected in cases:
        rc, _, err = run_cli(capsys, ws, "-c", line)
        assert rc in (1, 2) and err.count("\n") == 1 and expected in err, (line, err)


def test_a_script_may_not_start_processes(sample_ws, tmp_path, capsys):
    ws, _ = sample_ws
    script = tmp_path / "s.txt"
    script.write_text(f"bisect fusion --out {tmp_path / 'x'} --check true\ninfo\n", encoding="utf-8")
    rc, stdout, err = run_cli(capsys, ws, "-f", script)
    assert rc == 1 and "starts processes" in err and "--allow-shell" in err
    assert "graph" in stdout                   # the rest of the script still ran
    assert not (tmp_path / "x").exists()
    rc, _, err = run_cli(capsys, ws, "-c", f"source {script}")         # `source` from a typed line
    assert rc == 1 and "starts processes" in err and not (tmp_path / "x").exists()
    rc, _, err = run_cli(capsys, ws, "-c", f"bisect fusion --out {tmp_path / 'x'} --check true")
    assert rc == 1 and "not reproducible" in err                       # typed: it runs


def test_dry_run_ranks_suspect_ops_roots_first(sample_ws, capsys):
    ws, manifest = sample_ws
    rc, stdout, err = run_cli(capsys, ws, "--format", "json", "-c", "vcs; bisect keep-fp32 --dry-run --check x")
    assert rc == 0, err
    suspects, plan = json_docs(stdout)
    roots = [s["op"] for s in suspects if s["role"] == "root"]
    kept = [s["op"] for s in suspects if s["golden"]]
    assert sorted(plan["candidates"]) == sorted(kept)
    assert sorted(plan["candidates"][:len(roots)]) == sorted(roots)
    assert manifest["lossy"]["op"] in roots and plan["trials"] == 0


def test_ctrl_c_in_a_pty_kills_the_running_trial_and_keeps_the_journal(sample_ws, tmp_path):
    pexpect = pytest.importorskip("pexpect")
    ws, _ = sample_ws
    listed = tmp_path / "names.txt"
    listed.write_text("A\nB\nC\nD\n", encoding="utf-8")
    # B alone fixes it; from the fifth trial on the check hangs, until Ctrl-C
    check = ("grep -q B {keep_fp32} || exit 1; n=$(ls -d {trial}/../trial-* | wc -l); "
             "if [ $n -ge 5 ]; then echo $$ > {trial}/sh.pid; sleep 60; fi")
    out = tmp_path / "search"
    env = {**os.environ, "HOME": str(tmp_path), "XDG_DATA_HOME": str(tmp_path / "data"),
           "XDG_STATE_HOME": str(tmp_path / "state"), "XDG_CONFIG_HOME": str(tmp_path / "config"),
           "TERM": "xterm-256color", "PAGER": "cat"}
    child = pexpect.spawn(sys.executable, ["-m", "precision_shell", str(ws), "--no-color"], env=env,
                          encoding="utf-8", dimensions=(50, 200), timeout=30)
    try:
        expect_prompt(child, pexpect)
        child.send(f"bisect keep-fp32 --candidates {listed} --out {out} --check {shlex.quote(check)}\r")
        child.expect(r"trial 4 \[ddmin\]")
        pid_file = out / "trial-005" / "sh.pid"
        for _ in range(200):
            if pid_file.is_file() and pid_file.read_text().strip():
                break
            child.expect([pexpect.TIMEOUT], timeout=0.05)
        child.sendcontrol("c")
        child.expect("interrupted; 4 finished trial")
        expect_prompt(child, pexpect)
        child.send("quit\r")
        child.expect(pexpect.EOF)
    finally:
        child.close(force=True)
    header, trials = journal(out)
    assert [t["trial"] for t in trials] == [1, 2, 3, 4] and header["candidates"] == ["A", "B", "C", "D"]
    assert not alive(int(pid_file.read_text()))


def expect_prompt(child, pexpect) -> None:
    """The prompt, answering the cursor-position query a real terminal answers."""
    import re

    while child.expect([re.escape("\x1b[6n"), "pshell>"]) == 0:
        child.send("\x1b[1;1R")


def test_runner_caps_output_and_names_the_signal(tmp_path, monkeypatch):
    from precision_shell.commands import process_runner as pr

    monkeypatch.setattr(pr, "OUTPUT_CAP", 1 << 20)
    specs = [pr.ProcessSpec("head -c 5000000 /dev/zero; echo done >&2", tmp_path / "big", dict(os.environ)),
             pr.ProcessSpec("kill -SEGV $$", tmp_path / "segv", dict(os.environ)),
             pr.ProcessSpec("exit 7", tmp_path / "seven", dict(os.environ))]
    done: dict[int, pr.ProcessOutcome] = {}
    pr.run_processes(len(specs), specs.__getitem__, 2, lambda i, o: done.__setitem__(i, o) or False)
    big = (tmp_path / "big/stdout.txt").read_bytes()
    assert done[0].exit_code == 0 and done[0].cut == ["stdout"]
    assert big.startswith(b"\0" * (1 << 20)) and b"output cut at 1 MiB" in big[1 << 20:]
    assert (tmp_path / "big/stderr.txt").read_text() == "done\n"
    assert done[1].exit_code is None and done[1].signal == "SIGSEGV" and done[1].reason() == "killed by SIGSEGV"
    assert done[2].exit_code == 7 and not done[2].ok


def test_a_fusion_report_without_effective_passes_is_one_line(tmp_path, capsys):
    write_workspace(tmp_path, SampleOptions(fusion_off=("ALL:graph", "ALL:ub")))
    doc = json.loads((tmp_path / "precision_data/fusion/fusion_result.json").read_text(encoding="utf-8"))
    assert not any(int(c["effect_times"]) for kind in ("graph_fusion", "ub_fusion") for c in doc[kind].values())
    rc, _, err = run_cli(capsys, tmp_path, "-c", "bisect fusion --check true")
    assert rc == 1 and err.count("\n") == 1 and "no fusion pass to switch off" in err


def test_max_trials_stops_and_resume_goes_on(sample_ws, tmp_path, capsys):
    ws, _ = sample_ws
    names = list("ABCDEFGH")
    listed = tmp_path / "names.txt"
    listed.write_text("\n".join(names) + "\n", encoding="utf-8")
    out = tmp_path / "s"
    line = f"bisect keep-fp32 --candidates {listed} --out {out} --check 'grep -q E {{keep_fp32}}'"
    rc, _, err = run_cli(capsys, ws, "-c", line + " --max-trials 6")
    assert rc == 1 and "--max-trials 6 reached" in err and len(journal(out)[1]) == 6
    rc, stdout, err = run_cli(capsys, ws, "--format", "json", "-c", line + " --resume")
    assert rc == 0, err
    result = json_docs(stdout)[0]
    assert result["culprits"] == ["E"] and result["verified"] and result["new_trials"] == result["trials"] - 6
    assert result["trials"] <= worst_case(len(names))
