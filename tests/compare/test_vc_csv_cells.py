"""``vc``'s CSV written from the result arrays (``vendor_csv.StoreCsvCells``: an op's and a
distinct result's cells formatted once) against the row-object writer it replaced
(``write_compare_csv`` of ``csv_rows``): the same bytes, formula-like names included."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

from precision_shell.analysis.compare.engine import run_compare
from precision_shell.analysis.compare.mapping import plan_golden_compare
from precision_shell.analysis.compare.vendor_csv import csv_rows, write_vendor_csv
from precision_shell.formats.compare_csv import write_compare_csv
from precision_shell.model.session import Session
from precision_shell.samples.writer import SampleOptions, write_workspace


@pytest.fixture(scope="module")
def compared(tmp_path_factory):
    root = tmp_path_factory.mktemp("vc_cells_ws")
    write_workspace(root, SampleOptions(seed=5))
    s = Session.open(root, output=root / "out")
    plan = plan_golden_compare(s.graph, s.dumps, s.golden)
    return run_compare(plan, workers=1)


def _old_writer(path: Path, result) -> None:
    write_compare_csv(path, csv_rows(result), golden_address=result.mode == "npu")


@pytest.mark.parametrize("mode", ["golden", "npu"])   # npu: the golden Address column too
def test_cells_from_the_arrays_are_the_row_writers_bytes(compared, tmp_path, mode, monkeypatch):
    monkeypatch.setattr(compared, "mode", mode)
    count = write_vendor_csv(tmp_path / "new.csv", compared)
    _old_writer(tmp_path / "old.csv", compared)
    new = (tmp_path / "new.csv").read_bytes()
    assert new == (tmp_path / "old.csv").read_bytes()
    rows = list(csv.reader(new.decode().splitlines()))
    assert count == len(rows) - 1 == int(compared.store.done().sum()) > 0
    assert ("Address" in rows[0][rows[0].index("GroundTruth"):]) == (mode == "npu")


NAMES = ["=HYPERLINK(1)", "-", "-5x", "-5", "+a", "@sum", "", "\tx", "-.5", "a,b", 'q"uote']


def test_formula_like_names_and_reasons_are_neutralised_alike(compared, tmp_path, monkeypatch):
    ops = compared.ops
    assert len(ops) >= len(NAMES)
    for op, name in zip(ops, NAMES):
        monkeypatch.setattr(op, "op", name)
        monkeypatch.setattr(op, "type", name)
        monkeypatch.setattr(op, "golden_ops", [name] if name else [])
    store = compared.store
    # a result's reason from data: "-x" is a formula start too (the empty reason of every
    # compared row becomes it)
    monkeypatch.setattr(store, "objects", ["-x" if o == "" else o for o in store.objects])
    write_vendor_csv(tmp_path / "new.csv", compared)
    _old_writer(tmp_path / "old.csv", compared)
    new = (tmp_path / "new.csv").read_bytes()
    assert new == (tmp_path / "old.csv").read_bytes()
    text = new.decode()
    assert "'=HYPERLINK(1)" in text and "'+a" in text and "'@sum" in text and ",'-x\n" in text
