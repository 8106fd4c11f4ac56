"""`curve` (issue 24) on the committed real-writer logs (sample_data/curves, made by its
generate.py with torch's SummaryWriter) and the multi-rank sample's curve pair: every reader
yields the designed series; the findings equal an independent numpy computation; bad input is
one line each."""

from __future__ import annotations

import shutil
import struct
from pathlib import Path

import numpy as np
import pytest

from precision_shell.formats.logs import read_log
from precision_shell.samples import curves
from tests.conftest import json_docs, run_cli

SAMPLES = Path(__file__).resolve().parents[2] / "sample_data" / "curves"
# each format's printed precision: relative (event files: float32) or absolute (text digits)
TARGETS = {"target": ("train/loss", 1e-7, 0.0), "target_megatron.log": ("lm loss", 1e-6, 0.0),
           "target_deepspeed.log": ("loss", 0.0, 5.1e-5), "target_mindformers.log": ("loss", 0.0, 5.1e-4),
           "target.csv": ("loss", 0.0, 0.0), "target.jsonl": ("loss", 0.0, 0.0)}


def _close(got, want, rel, abs_):
    both = np.isfinite(want)
    assert np.array_equal(np.isfinite(got), both)
    np.testing.assert_allclose(got[both], want[both], rtol=rel, atol=abs_)


@pytest.mark.parametrize("name", list(TARGETS))
def test_every_reader_yields_the_designed_series(name):
    truth = curves.curve_runs()["target"]
    tag, rel, abs_ = TARGETS[name]
    read = read_log(SAMPLES / name)
    loss = read.metrics[tag]
    assert loss.steps.tolist() == truth["step"].tolist()
    _close(loss.values, truth["loss"], rel, abs_)
    scale = next((s for n, s in read.metrics.items() if "scale" in n.replace("-", "_")), None)
    if name == "target_deepspeed.log":   # DeepSpeed logs only the overflow lines' scales
        assert scale is None
        assert [(d.step, d.before, d.after) for d in read.drops] == [
            (int(s), truth["loss_scale"][k - 1], truth["loss_scale"][k])
            for k, s in enumerate(truth["step"]) if truth["skipped"][k]]
    else:
        np.testing.assert_array_equal(scale.values, truth["loss_scale"])
    if name != "target":   # TensorBoard has no skip records
        assert read.skipped == truth["step"][truth["skipped"]].tolist()


def test_golden_tensor_summaries_and_the_restart_are_read_as_tensorboard_does():
    truth = curves.curve_runs()
    golden = read_log(SAMPLES / "golden")
    assert golden.metrics["train/loss"].steps.tolist() == truth["golden"]["step"].tolist()
    np.testing.assert_allclose(golden.metrics["train/loss"].values, truth["golden"]["loss"], rtol=1e-15)
    target = read_log(SAMPLES / "target")   # two files: the second re-logs steps 50..52
    assert len(target.lines) == 2 and "steps repeat or go back at 9 points" in target.warnings[0]


def test_the_python_path_reads_what_the_kernel_reads(monkeypatch):
    from precision_shell.formats.logs import events

    if events._kernel is None:
        pytest.skip("the C kernel is not built")
    fast = read_log(SAMPLES / "target")
    monkeypatch.setattr(events, "_kernel", None)
    slow = read_log(SAMPLES / "target")
    for tag, series in fast.metrics.items():
        assert np.array_equal(series.steps, slow.metrics[tag].steps)
        assert np.array_equal(series.values, slow.metrics[tag].values, equal_nan=True)
    assert fast.warnings == slow.warnings


def test_tensorboards_own_reader_agrees():
    accumulator = pytest.importorskip("tensorboard.backend.event_processing.event_accumulator")
    for run in ("target", "golden"):
        acc = accumulator.EventAccumulator(str(SAMPLES / run), size_guidance={"scalars": 0, "tensors": 0})
        acc.Reload()
        ours = read_log(SAMPLES / run).metrics["train/loss"]
        if "train/loss" in acc.Tags()["scalars"]:
            pts = {e.step: e.value for e in acc.Scalars("train/loss")}
        else:
            from tensorboard.util import tensor_util

            pts = {e.step: float(tensor_util.make_ndarray(e.tensor_proto)) for e in acc.Tensors("train/loss")}
        assert sorted(pts) == ours.steps.tolist()
        _close(np.array([pts[s] for s in sorted(pts)]), ours.values, 0.0, 0.0)


def _expected(t_steps, t, g_steps, g, tol=0.02, window=10, spike=0.5):
    """§13 computed here, independently, with plain loops."""
    common = [s for s in t_steps if s in set(g_steps)]
    tv = dict(zip(t_steps, t))
    gv = dict(zip(g_steps, g))
    errors = []
    for s in common:
        if not np.isfinite(gv[s]):
            continue
        e = abs(tv[s] - gv[s]) / max(abs(gv[s]), 1e-12) if np.isfinite(tv[s]) else np.inf
        errors.append((s, e))
    finite = [e for _, e in errors if np.isfinite(e)]
    mean = sum(finite) / len(finite)
    divergent = None
    for k in range(window - 1, len(errors)):
        chunk = [e for _, e in errors[k - window + 1:k + 1]]
        if np.inf in chunk or sum(chunk) / window > tol:
            divergent = errors[k][0]
            break
    nonfinite = next((s for s in common if not np.isfinite(tv[s]) and np.isfinite(gv[s])), None)
    spikes = []
    for k in range(window, len(t)):
        prev = [v for v in t[k - window:k] if np.isfinite(v)]
        if np.isfinite(t[k]) and prev and t[k] > (1 + spike) * float(np.median(prev)):
            spikes.append(int(t_steps[k]))
    verdict = "fail" if mean > tol or nonfinite is not None else "pass"
    return mean, verdict, divergent, nonfinite, spikes


@pytest.mark.parametrize("name", list(TARGETS))
def test_findings_equal_an_independent_computation(capsys, tmp_path, name):
    tag = TARGETS[name][0]
    target, golden = read_log(SAMPLES / name), read_log(SAMPLES / "golden_megatron.log")
    t, g = target.metrics[tag], golden.metrics["lm loss"]
    mean, verdict, divergent, nonfinite, spikes = _expected(t.steps.tolist(), t.values.tolist(),
                                                            g.steps.tolist(), g.values.tolist())
    rc, out, err = run_cli(capsys, tmp_path, "-o", tmp_path / "out", "-c",
                           f"curve {SAMPLES / name} --golden {SAMPLES / 'golden_megatron.log'}", "--format", "json")
    doc = json_docs(out)[0]
    assert rc == 0, err
    assert doc["verdict"] == verdict == "fail"
    assert doc["mean_relative_error"] == pytest.approx(mean, rel=1e-12)
    assert doc["first_divergent_step"] == divergent == curves.DRIFT_STEP + 3
    assert doc["first_nonfinite_step"] == nonfinite == curves.NAN_STEP
    assert doc["spikes"] == spikes == [curves.SPIKE_STEP]
    truth = curves.curve_runs()["target"]
    skipped = truth["step"][truth["skipped"]].tolist()
    scale = doc["loss_scale"]
    assert [d["step"] for d in scale["drops"]] == skipped
    assert scale["skipped_steps"] == ([] if name == "target" else skipped)
    assert scale["min"] == truth["loss_scale"].min()
    assert doc["suggested_step"] == curves.OVERFLOW_STEP
    assert doc["golden"] == str(SAMPLES / "golden_megatron.log") and doc["target"] == str(SAMPLES / name)
    assert [e["step"] for e in doc["events"]] == sorted(e["step"] for e in doc["events"])
    assert f"{SAMPLES / 'golden_megatron.log'}: 1 of the target's 60 steps have no golden value" in err


def test_json_keys_are_those_of_the_spec(capsys, tmp_path):
    rc, out, err = run_cli(capsys, tmp_path, "-o", tmp_path / "out", "-c", f"curve {SAMPLES / 'target.csv'}",
                           "--format", "json")
    doc = json_docs(out)[0]
    assert list(doc) == ["metric", "target", "golden", "steps", "tolerance", "window", "mean_relative_error",
                         "verdict", "first_divergent_step", "first_nonfinite_step", "spikes", "loss_scale",
                         "dump_steps", "suggested_step", "suggested_dump_step", "events"]
    assert doc["verdict"] is None and doc["golden"] is None and set(doc["loss_scale"]) == {"drops", "skipped_steps", "min"}
    assert {e["kind"] for e in doc["events"]} == {"skipped", "scale_drop", "nonfinite", "spike"}


def test_gate_exits_3_on_fail_and_0_on_a_run_against_itself(capsys, tmp_path):
    log = SAMPLES / "golden_megatron.log"
    rc, out, err = run_cli(capsys, tmp_path, "-o", tmp_path / "o1", "--fail-on-findings", "-c",
                           f"curve {SAMPLES / 'target_megatron.log'} --golden {log}")
    assert rc == 3
    rc, out, err = run_cli(capsys, tmp_path, "-o", tmp_path / "o2", "--fail-on-findings", "-c",
                           f"curve {log} --golden {log}")
    assert rc == 0 and "verdict           pass: mean relative error 0" in out


def test_then_ac_on_the_multi_rank_sample_names_the_designed_step_rank_and_op(capsys, tmp_path):
    from precision_shell.samples.writer import SampleOptions, write_workspace

    manifest = write_workspace(tmp_path / "ws", SampleOptions(seed=0), multi=(4, 2))
    pair, first = manifest["scale_out"]["curve"], manifest["scale_out"]["overflow"]["first"]
    rc, out, err = run_cli(capsys, tmp_path / "ws", "-c",
                           f"curve {pair['target']} --golden {pair['golden']} --step-offset {pair['step_offset']} "
                           "--then ac", "--format", "json")
    assert rc == 0, err
    doc, rows = json_docs(out)
    assert doc["dump_steps"] == [0, 1] and doc["suggested_step"] == pair["overflow_step"]
    assert doc["suggested_dump_step"] == first["step"] == pair["dump_step"]
    assert (rows[0]["step"], rows[0]["rank"], rows[0]["op"], rows[0]["role"]) == \
        (first["step"], first["rank"], first["op"], "producer")
    rc, out, err = run_cli(capsys, tmp_path / "ws", "-c",
                           f"curve {pair['target']} --golden {pair['golden']} --then ac")
    assert "dump step 2 to look inside: it is not dumped (dumped steps: 0, 1)" in out


def _records(path: Path) -> list[tuple[int, int]]:
    data, out, pos = path.read_bytes(), [], 0
    while pos < len(data):
        (n,) = struct.unpack_from("<Q", data, pos)
        out.append((pos, n))
        pos += 16 + n
    return out


def test_a_corrupted_record_is_one_warning_naming_file_and_offset(tmp_path, monkeypatch):
    from precision_shell.formats.logs import events

    run = tmp_path / "run"
    shutil.copytree(SAMPLES / "golden", run)
    path = next(run.iterdir())
    records = _records(path)
    offset, n = records[len(records) // 2]
    data = bytearray(path.read_bytes())
    data[offset + 12 + n // 2] ^= 0xFF
    path.write_bytes(bytes(data))
    good = read_log(SAMPLES / "golden")
    for kernel in (events._kernel, None):
        monkeypatch.setattr(events, "_kernel", kernel)
        bad = read_log(run)
        assert bad.warnings == [f"{path}: offset {offset}: data CRC mismatch: record skipped"]
        lost = sum(len(good.metrics[t]) - len(bad.metrics[t]) for t in good.metrics)
        assert lost == 1   # one record, one scalar; the rest read


def test_truncated_and_non_event_files_say_so_and_keep_the_rest(tmp_path):
    from precision_shell.formats.logs.events import frame

    src = next((SAMPLES / "golden").iterdir())
    cut = tmp_path / "events.out.tfevents.cut"
    records = _records(src)
    last = records[-1][0]
    cut.write_bytes(src.read_bytes()[:last + 20])
    read = read_log(cut)
    assert read.warnings == [f"{cut}: offset {last}: truncated record"]
    assert len(read.metrics["train/loss"]) + len(read.metrics["train/loss_scale"]) + \
        len(read.metrics["train/grad_norm"]) == len(records) - 2   # file_version record + the cut one
    junk = tmp_path / "events.out.tfevents.junk"
    junk.write_bytes(src.read_bytes() + frame(b"\xff\xff\xff\xff"))
    read = read_log(junk)
    assert read.warnings == [f"{junk}: offset {src.stat().st_size}: not an Event proto: record skipped"]


def test_bad_inputs_are_one_line_each(capsys, tmp_path):
    empty = tmp_path / "empty.log"
    empty.write_bytes(b"")
    other = tmp_path / "notes.txt"
    other.write_text("hello\n")
    cases = {f"curve {empty}": f"error: {empty}: empty file",
             f"curve {tmp_path / 'nope'}": f"error: {tmp_path / 'nope'}: no such file or folder",
             f"curve {other}": f"error: {other}: no training-log line recognised",
             f"curve {SAMPLES / 'target.csv'} --metric accuracy":
                 f"error: {SAMPLES / 'target.csv'}: no series matching 'accuracy' (it has: loss, grad_norm"}
    for line, message in cases.items():
        rc, out, err = run_cli(capsys, tmp_path, "-o", tmp_path / "out", "-c", line)
        assert rc == 1 and err.startswith(message) and len(err.strip().splitlines()) == 1, (line, err)
    rc, out, err = run_cli(capsys, tmp_path, "-o", tmp_path / "out", "-c",
                           f"curve {SAMPLES / 'target.csv'} --golden {empty}")
    assert rc == 0 and f"{empty}: empty file (golden not read: single-run findings only)" in out
    rc, out, err = run_cli(capsys, tmp_path, "-o", tmp_path / "out", "-c",
                           f"curve {SAMPLES / 'target.csv'} --golden {SAMPLES / 'target_deepspeed.log'} --metric grad_norm")
    assert "no series matching 'grad_norm' (it has: loss): single-run findings only" in out
    assert set(tmp_path.iterdir()) <= {empty, other, tmp_path / "out"}   # nothing beside the logs


def test_non_utf8_and_interleaved_ranks(tmp_path):
    run = curves.curve_runs()["target"]
    lines = curves.megatron_log(run).splitlines()
    mixed = tmp_path / "mixed.log"
    body = []
    for line in lines:
        body += [f"[default0]:{line}", f"[default1]:{line.replace('lm loss: ', 'lm loss: 9')}"]
    body.insert(3, "[default1]:\xff\xfe garbage")
    mixed.write_bytes("\n".join(body).encode("utf-8").replace("\xff\xfe".encode("utf-8"), b"\xff\xfe") + b"\n")
    read = read_log(mixed)
    assert f"{mixed}: 1 line with bytes that are not UTF-8 (first: line 4): read with those bytes replaced" in read.warnings
    assert f"{mixed}: lines of 2 ranks interleaved (0, 1): rank 0's are read" in read.warnings
    _close(read.metrics["lm loss"].values, run["loss"], 1e-6, 0.0)


def test_plot_draws_the_curve_the_error_and_the_scale(capsys, tmp_path):
    pytest.importorskip("plotext")
    rc, out, err = run_cli(capsys, tmp_path, "-o", tmp_path / "out", "-c",
                           f"curve {SAMPLES / 'target'} --golden {SAMPLES / 'golden'} --plot")
    assert rc == 0, err
    for title in ("train/loss: target (and golden) by step", "relative error |t - g| / |g| (line: tolerance 0.02)",
                  "loss scale by step"):
        assert title in out
    assert "▲ divergence" in out and "● spike" in out and "▼ scale drop" in out


def test_report_gains_a_curve_section_after_curve(capsys, sample_ws, tmp_path):
    pytest.importorskip("jinja2")
    root, _ = sample_ws
    html = tmp_path / "r.html"
    rc, out, err = run_cli(capsys, root, "-o", tmp_path / "out", "-c",
                           f"curve {SAMPLES / 'target_megatron.log'} --golden {SAMPLES / 'golden_megatron.log'}; "
                           f"report -o {html}")
    assert rc == 0, err
    text = html.read_text()
    assert f"Training curve: lm loss of {SAMPLES / 'target_megatron.log'}" in text
    assert f"divergence: target" in text and f"step {curves.DRIFT_STEP + 3}" in text
