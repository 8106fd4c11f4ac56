"""Multi-rank, multi-step workspaces (issue 15): Opdebug records matched to their own device and
step, the generator's truth, and ``--ranks``/``--steps`` on ``ac``/``vc``/``vcs``."""

from __future__ import annotations

import pytest

from precision_shell.samples.writer import SampleOptions, write_workspace
from tests.conftest import json_docs, run_cli


@pytest.fixture(scope="module")
def multi_ws(tmp_path_factory):
    root = tmp_path_factory.mktemp("multi_ws")
    return root, write_workspace(root, SampleOptions(seed=0), multi=(4, 2))


def _ac(capsys, root, device, step):
    rc, out, err = run_cli(capsys, root, "-c", f"use --device {device} --step {step}; ac -l 0",
                           "--format", "json")
    return rc, json_docs(out)[-1]


def test_opdebug_records_belong_to_their_own_device_and_step(capsys, multi_ws):
    root, manifest = multi_ws
    truth = manifest["scale_out"]["overflow"]
    rank, op = truth["rank"], truth["op"]
    for entry in manifest["scale_out"]["sets"]:
        _, rows = _ac(capsys, root, entry["rank"], entry["step"])
        hardware = [r for r in rows if r["source"] == "opdebug"]
        if entry["rank"] == rank and entry["step"] in truth["steps"]:
            assert [r["op"] for r in hardware] == [op]
            # the record's file is the one in this set's own overflow folder
            assert all(entry["overflow_dump_dir"] in rec["file"] for rec in hardware[0]["records"])
            assert rows[0]["op"] == op and rows[0]["role"] == "producer"
        else:
            assert hardware == [], (entry, hardware)
            assert rows == []   # the clean loss scale: no value finding either
        assert all((r["rank"], r["step"]) == (entry["rank"], entry["step"]) for r in rows)
