"""``pt -a`` with row indices, progress and Ctrl-C; ``pt X --at I,J`` with the window around one
element. Values are read back from the printed text and compared with the arrays themselves."""

from __future__ import annotations

import re

import numpy as np
import pytest

from precision_shell.cli import main
from precision_shell.commands import REGISTRY
from precision_shell.commands import tensor_rows
from precision_shell.model.session import Session
from tests.conftest import InterruptAfter

ROW = re.compile(r"^\s*(\[[\d, ]+(?:, :|)\])\s+(.*)$")


@pytest.fixture(autouse=True)
def _fixed_width(monkeypatch):
    monkeypatch.setenv("COLUMNS", "100")


def values_block(text: str) -> list[str]:
    lines = text.split("\n")
    start = lines.index("  values") + 1
    end = next((k for k in range(start, len(lines)) if not lines[k].startswith("    ")), len(lines))
    return lines[start:end]


def parse_rows(block: list[str]) -> dict[str, list[float]]:
    """{row prefix: its numbers} from ``pt -a`` text (continuation lines joined to their row)."""
    rows: dict[str, list[float]] = {}
    current = None
    for line in block:
        m = ROW.match(line)
        body = line
        if m:
            current = m.group(1)
            rows[current] = []
            body = m.group(2)
        rows[current] += [float(t) for t in body.replace("[", " ").replace("]", " ").split()]
    return rows


def pt(session: Session, *argv: str):
    cmd = REGISTRY.lookup("pt")
    return cmd.handler(session, cmd.parse(list(argv)))


def test_pt_all_prefixes_every_row_with_its_index(sample_ws, tmp_path, capsys, monkeypatch):
    arr = np.random.default_rng(1).standard_normal((3, 5, 37)).astype(np.float32)
    path = tmp_path / "t.npy"
    np.save(path, arr)
    monkeypatch.setattr(tensor_rows, "CHUNK_ELEMENTS", 100)    # several chunks: indices carry on
    rc = main([str(sample_ws[0]), "-c", f"pt {path} -a"])
    out = capsys.readouterr().out
    assert rc == 0
    rows = parse_rows(values_block(out))
    want = {f"[{i}, {j}, :]": arr[i, j] for i in range(3) for j in range(5)}
    assert list(rows) == list(want)
    for key, values in rows.items():
        np.testing.assert_allclose(values, want[key].astype(np.float64), rtol=1e-6)
    # 1-D: each line starts with the index of its first value
    flat = arr.reshape(-1)[:300]
    np.save(path, flat)
    rc = main([str(sample_ws[0]), "-c", f"pt {path} -a"])
    block = values_block(capsys.readouterr().out)
    for line in block:
        start, body = re.match(r"^    \[(\d+)\]\s+(.*)$", line).groups()
        numbers = [float(t) for t in body.replace("[", " ").replace("]", " ").split()]
        np.testing.assert_allclose(numbers, flat[int(start):int(start) + len(numbers)], rtol=1e-6)


def test_pt_all_shows_progress_and_ctrl_c_keeps_the_rows_done(sample_ws, tmp_path, monkeypatch):
    arr = np.arange(40 * 50, dtype=np.float32).reshape(40, 50)
    path = tmp_path / "big.npy"
    np.save(path, arr)
    monkeypatch.setattr(tensor_rows, "CHUNK_ELEMENTS", 500)    # 10 rows a chunk, 4 chunks
    session = Session.open(sample_ws[0])
    labels = []

    class Recording(InterruptAfter):
        def __call__(self, label, total):
            labels.append((label, total))
            return super().__call__(label, total)

    session.progress = Recording(2)
    result = pt(session, str(path), "-a")
    assert labels == [("formatting values", 4)]
    assert result.interrupted
    rows = parse_rows(dict(result.blocks)["values"])
    assert list(rows) == [f"[{i}, :]" for i in range(20)]   # the two chunks done, whole
    np.testing.assert_array_equal([rows[f"[{i}, :]"] for i in range(20)], arr[:20])
    assert "interrupted: 20 of 40 rows printed (Ctrl-C)" in dict(result.blocks)["notes"]


def test_pt_at_shows_the_window_around_the_element(sample_ws, tmp_path, capsys):
    arr = np.arange(10 * 20, dtype=np.float32).reshape(10, 20) / 8
    path = tmp_path / "w.npy"
    np.save(path, arr)
    rc = main([str(sample_ws[0]), "-c", f"pt {path} --at 8,-2"])
    out = capsys.readouterr().out
    assert rc == 0
    assert f"element        [8, 18] = {arr[8, 18]}" in out
    block = values_block(out)
    assert [line.split("]")[0] + "]" for line in block] == [f"    [{r}, 14:20]" for r in range(5, 10)]
    for line, r in zip(block, range(5, 10)):
        cells = re.findall(r"(-?\d+\.\d*)\s*(\*?)", line.split("]", 1)[1])
        assert [float(number) for number, _ in cells] == arr[r, 14:20].tolist()
        assert [star == "*" for _, star in cells] == [r == 8 and c == 18 for c in range(14, 20)]
    session = Session.open(sample_ws[0])
    data = pt(session, str(path), "--at", "8,-2").data["at"]
    assert data["index"] == [8, 18] and data["rows"] == [5, 10] and data["columns"] == [14, 20]
    assert data["window"] == arr[5:10, 14:20].tolist()


@pytest.mark.parametrize("at, message", [("3", "has 2 axes"), ("10,0", "outside axis 0"),
                                         ("a,b", "one integer per axis")])
def test_pt_at_bad_index_is_one_line(sample_ws, tmp_path, capsys, at, message):
    np.save(tmp_path / "w.npy", np.zeros((10, 20), np.float32))
    rc = main([str(sample_ws[0]), "-c", f"pt {tmp_path / 'w.npy'} --at {at}"])
    err = capsys.readouterr().err
    assert rc == 1 and message in err and len(err.strip().splitlines()) == 1
