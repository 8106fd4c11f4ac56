"""The C scanner of statistics dump.json bytes (formats/msprobe/_stats_scan.c, msprobe_columns.rank_columns):
its columns equal the Python builder's (stats_columns of the parsed entries) cell for cell, text
codes included -- on the committed sample dumps, on a scaled pair with odd cells, and on mutated
texts (odd leaves, escapes, repeated keys, roots out of order, non-canonical numbers, other
layouts, cuts); it takes the common entries itself, and a text it cannot read falls back whole."""

from __future__ import annotations

import copy
import json
import os
import random
import re

import numpy as np
import pytest

from framework_dumps import sample
from tests.framework.test_framework_column_stats import _scaled_pair
from precision_shell.formats.msprobe import columns as msprobe_columns
from precision_shell.formats.msprobe.columns import rank_columns, stats_columns
from precision_shell.formats.msprobe.dump import read_msprobe_dump

pytestmark = pytest.mark.skipif(msprobe_columns._scanner is None, reason="the _stats_scan kernel is not built")

_FIELDS = ("row_entry", "kind", "dtype", "dtype_text", "shape", "grad", "simple")


def _assert_same(got, want):
    assert got.entry_names == want.entry_names
    assert got.names == want.names
    assert got.texts == want.texts
    for name in _FIELDS:
        assert np.array_equal(getattr(got, name), getattr(want, name)), name
        assert getattr(got, name).dtype == getattr(want, name).dtype, name
    assert np.array_equal(got.stats, want.stats, equal_nan=True)
    assert np.array_equal(np.signbit(got.stats), np.signbit(want.stats))      # -0.0 stays -0.0
    assert got.cells == want.cells
    assert got.values.keys() == want.values.keys()
    for row, values in want.values.items():
        assert np.array_equal(np.array(got.values[row], dtype=float), np.array(values, dtype=float), equal_nan=True)


def _read_both(path, monkeypatch):
    """The dump read by the scanner and by the whole-document reader (PSHELL_NO_EXT=1)."""
    monkeypatch.setenv("PSHELL_NO_EXT", "1")
    old = read_msprobe_dump(path)
    monkeypatch.delenv("PSHELL_NO_EXT")
    return read_msprobe_dump(path), old


def _assert_same_dump(new, old):
    """Everything open, info and the commands see of the two reads is the same."""
    assert new.warnings == old.warnings
    for rn, ro in zip(new.ranks, old.ranks, strict=True):
        assert (rn.task, rn.level, rn.framework, rn.dump_data_dir) == (ro.task, ro.level, ro.framework, ro.dump_data_dir)
        assert (rn.warnings, rn.data_names, rn.undescribed_files) == (ro.warnings, ro.data_names, ro.undescribed_files)
        assert [(e.name, e.kind, e.scope, e.prefix, e.op, e.counter, e.tensor_count, e.file_count) for e in rn.entries] \
            == [(e.name, e.kind, e.scope, e.prefix, e.op, e.counter, e.tensor_count, e.file_count) for e in ro.entries]
        _assert_same(rank_columns(rn), stats_columns(ro.entries))
        assert [e.leaf_sources() for e in rn.entries] == [e.leaf_sources() for e in ro.entries]
        assert [repr(e.leaves) for e in rn.entries] == [repr(e.leaves) for e in ro.entries]     # NaN == NaN here


def _scanned(rank) -> tuple[bool, int]:
    """Whether the scanner read the rank, and how many entries it left to the JSON parser."""
    return rank.columns is not None, sum(1 for e in rank.entries if e._source is None)


def _rank_at(root):
    return read_msprobe_dump(root).ranks[0]


def test_sample_dumps_scan_to_the_python_columns(monkeypatch):
    root = sample()
    checked = statistics = 0
    for name in sorted(os.listdir(root)):
        path = root / name
        if not path.is_dir() or not any(path.glob("step*")):
            continue
        new, old = _read_both(path, monkeypatch)
        found = [_scanned(rank) for rank in new.ranks]       # before the comparison parses the bodies
        _assert_same_dump(new, old)
        for rank, (scanned, parsed) in zip(new.ranks, found):
            assert scanned == (rank.task == "statistics")      # tensor and md5 dumps: as before
            if scanned:
                assert parsed < len(rank.entries) / 2       # the scanner took most entries itself
                statistics += 1
            checked += 1
    assert checked >= 6 and statistics >= 2


def test_scaled_pair_with_odd_cells_scans_to_the_python_columns(tmp_path, monkeypatch):
    for rank in _scaled_pair(tmp_path):
        new, old = _read_both(rank.location.path, monkeypatch)
        scanned, parsed = _scanned(new.ranks[0])
        assert scanned and 0 < parsed < len(rank.entries)     # odd entries parsed, the others taken
        _assert_same_dump(new, old)


def _leaf(rng, dtype="torch.float32"):
    return {"type": "torch.Tensor", "dtype": dtype, "shape": [rng.randint(0, 9) for _ in range(rng.randint(0, 3))],
            "Max": rng.uniform(0, 9), "Min": -rng.uniform(0, 9), "Mean": rng.uniform(-1, 1),
            "Norm": rng.uniform(0, 99), "requires_grad": rng.choice([True, False])}


def _mutate_leaf(rng, node):
    """One change that the scanner must either read exactly or hand to Python."""
    kind = rng.randrange(14)
    if kind == 0:
        node["Max"] = rng.choice([1, 0, -3, True, None, "inf", "nan"])
    elif kind == 1:
        node["Min"] = rng.choice([float("nan"), float("inf"), -float("inf")])
    elif kind == 2:
        node["dtype"] = rng.choice(["torch.int64", "torch.bool", "torch.uint8", "Int32", "weird", "torch.bfloat16",
                                    "Float16", "BFloat16", 3])
    elif kind == 3:
        node["shape"] = rng.choice([[-1, 2], [1.0], [True], "[2]", [[2]], list(range(70)), [2 ** 70]])
    elif kind == 4:
        node["requires_grad"] = rng.choice([None, "yes", 1])
    elif kind == 5:
        del node[rng.choice(["requires_grad", "Max", "dtype", "shape", "type"])]
    elif kind == 6:
        node["data_name"] = "x.pt"
    elif kind == 7:
        node["value"] = 3
    elif kind == 8:
        node["md5"] = ""       # a non-empty md5 turns the dump into an md5 one (the samples have those)
    elif kind == 9:
        node["extra"] = {"nested": [1, {"a": "b\\"}]}
    elif kind == 10:
        node["type"] = rng.choice([None, 5])
    elif kind == 11:     # keys in another order
        items = list(node.items())
        rng.shuffle(items)
        node.clear()
        node.update(items)
    elif kind == 12:
        node["Mean"] = -0.0
    return node


def _mutated_doc(rng):
    data = {}
    for i in range(60):
        name = f"Functional.op{rng.randrange(5)}.{i}.{rng.choice(['forward', 'backward'])}"
        body = {"input_args": [_leaf(rng) for _ in range(rng.randint(0, 3))], "input_kwargs": {},
                "output": [_leaf(rng, rng.choice(["torch.float16", "torch.bfloat16"]))]}
        roll = rng.randrange(12)
        if roll < 4:
            for node in rng.sample(body["input_args"] + body["output"], 1):
                _mutate_leaf(rng, node)
        elif roll == 4:
            body["input_kwargs"] = {"dim": _leaf(rng), "other": _leaf(rng)}
        elif roll == 5:
            body = {"output": body["output"], "input_args": body["input_args"]}      # out of msprobe's order
        elif roll == 6:
            body["input_args"].append(None)
        elif roll == 7:
            body["input_args"].append([_leaf(rng), _leaf(rng)])
        elif roll == 8:
            body["input_args"].append({"type": "int", "value": 3})
        elif roll == 9:
            body["parameters"] = {"weight": _leaf(rng)}
        elif roll == 10:
            name = f"Module.layer{i}.Linear.parameters_grad"
            body = {"weight": _leaf(rng), "bias": [_leaf(rng), _leaf(rng)]}
        data[name] = body
    return {"task": "statistics", "level": "L1", "framework": "pytorch", "dump_data_dir": None, "data": data}


def _texts(rng, doc):
    """The document as JSON in several layouts, some with textual changes json.dumps would not make."""
    text = json.dumps(doc, indent=rng.choice([None, 1, 2]), separators=rng.choice([None, (",", ":")]))
    yield text
    names = list(doc["data"])
    name = rng.choice(names)
    yield text.replace(json.dumps(name), json.dumps(name).replace("op", "o\\u0070", 1), 1)    # escaped name
    yield text.replace('"Max"', '"M\\u0061x"', 1)                                          # escaped key
    yield text.replace('"dtype"', '"dtype": "torch.float32", "dtype"', 1)                  # a repeated key
    yield text.replace(json.dumps(name) + ":", json.dumps(name) + ': {"output": []}, ' + json.dumps(name) + ":", 1)
    for old, new in ((".5", ".50"), ("e-", "E-"), (": 0.", ": 1E5, \"n\": 0."), ("1.", "1.0e0")):
        yield text.replace(old, new, 3)                                                    # non-canonical numbers
    yield text.replace('"Norm": ', '"Norm": 1e400, "x": ', 2)
    yield text[: rng.randrange(len(text))]                                                # cut
    yield "\ufeff" + text
    yield text.replace('"data"', '"data": {}, "data"', 1)


def test_mutated_texts_scan_to_the_python_columns(tmp_path, monkeypatch):
    rng = random.Random(31)
    scanned = fell_back = 0
    for case in range(12):
        doc = _mutated_doc(rng)
        for k, text in enumerate(_texts(rng, doc)):
            rank_dir = tmp_path / f"c{case}_{k}" / "step0" / "rank0"
            rank_dir.mkdir(parents=True)
            (rank_dir / "dump.json").write_text(text, encoding="utf-8")
            new, old = _read_both(rank_dir.parent, monkeypatch)
            _assert_same_dump(new, old)
            if _scanned(new.ranks[0])[0]:
                scanned += 1
            else:
                fell_back += 1
    assert scanned > 100 and fell_back >= 24


def test_no_ext_keeps_the_python_path(monkeypatch, tmp_path):
    path = _scaled_pair(tmp_path, copies=1)[0].location.path
    monkeypatch.setenv("PSHELL_NO_EXT", "1")
    rank = read_msprobe_dump(path).ranks[0]
    assert _scanned(rank) == (False, len(rank.entries))
    monkeypatch.delenv("PSHELL_NO_EXT")
    assert _scanned(read_msprobe_dump(path).ranks[0])[0]


def test_undescribed_files_drop_the_scanned_columns(tmp_path, monkeypatch):
    path = _scaled_pair(tmp_path, copies=1)[0].location.path
    tensors = os.path.join(path, "dump_tensor_data")
    os.mkdir(tensors)
    np.save(os.path.join(tensors, "Functional.extra.0.forward.output.0.npy"), np.ones(3, dtype=np.float32))
    new, old = _read_both(path, monkeypatch)
    assert new.ranks[0].undescribed_files and new.ranks[0].columns is None
    _assert_same_dump(new, old)


_NUMBER = re.compile(r'(?<=": )-?\d+\.\d+(?:e[-+]?\d+)?(?=,|\s)')


def _respelled(text: str, rng: random.Random) -> str:
    """Statistics re-spelled as json.dumps never writes them, most with the same value (1.50,
    1.5E-05, 18 digits, 1E5), some with another (-0.0, 1e400)."""
    def one(match):
        old = match.group(0)
        value, roll = float(old), rng.randrange(30)
        if roll == 0:
            return old + "0"                      # 1.50 (1.5e-050 when it has an exponent)
        if roll == 1:
            return old.replace("e", "E") if "e" in old else f"{value:.3E}" if value == float(f"{value:.3E}") else old
        if roll == 2:
            return f"{value:.17e}"               # the same double in 18 digits
        if roll == 3:
            return rng.choice(["1E5", "-0.0", "0.0", "1e400", "100000.0", "2.5e-3"])
        return old
    return _NUMBER.sub(one, text)


def test_csv_from_scanned_columns_with_respelled_numbers_is_byte_identical(tmp_path, monkeypatch):
    from precision_shell.analysis.compare.msprobe.column_pairing import pair_columns
    from precision_shell.analysis.compare.msprobe.column_table import write_column_csv
    from precision_shell.formats.msprobe.columns import decode, encode

    rng = random.Random(7)
    paths = []
    for rank in _scaled_pair(tmp_path, copies=4):
        json_path = os.path.join(rank.location.path, "dump.json")
        with open(json_path, encoding="utf-8") as f:
            text = _respelled(f.read(), rng)
        with open(json_path, "w", encoding="utf-8") as f:
            f.write(text)
        paths.append(rank.location.path)
    (target, target_old), (golden, golden_old) = (_read_both(path, monkeypatch) for path in paths)
    target, target_old, golden, golden_old = (d.ranks[0] for d in (target, target_old, golden, golden_old))
    scanned = [target.columns, decode(b"".join(encode(golden.columns)))]    # the golden's as its child sends it
    for columns in scanned:
        lines = columns.summary_slice(0, len(columns))
        assert sum(1 for line in lines if line) > 150      # copied texts ...
        assert sum(1 for line in lines if not line) > 10              # ... and rows that print repr()
    old, new = tmp_path / "old.csv", tmp_path / "new.csv"
    write_column_csv(old, pair_columns(stats_columns(target_old.entries), stats_columns(golden_old.entries)),
                     target_old.stack, chunk=64, processes=1)
    write_column_csv(new, pair_columns(*scanned), target.stack, chunk=64, processes=2)
    assert new.read_bytes() == old.read_bytes()
    assert old.read_bytes().count(b"\r\n") > 1000
    assert b"1.50," not in new.read_bytes() and b"E-" not in new.read_bytes()   # printed as repr() prints


def test_plain_entries_read_their_span_when_asked_and_a_changed_file_is_one_error(tmp_path):
    from precision_shell.errors import FormatError

    path = _scaled_pair(tmp_path, copies=1)[0].location.path
    rank = read_msprobe_dump(path).ranks[0]
    plain = [e for e in rank.entries if e._source is not None]
    assert len(plain) > 10
    with open(os.path.join(path, "dump.json"), encoding="utf-8") as f:
        doc = json.load(f)
    first = plain[0]
    assert [leaf.max for leaf in first.leaves] == [node["Max"] for key in ("input_args", "input", "output")
                                                   for node in doc["data"][first.name].get(key, [])]
    with open(os.path.join(path, "dump.json"), "a", encoding="utf-8") as f:
        f.write(" ")      # the file changed under the open dump
    with pytest.raises(FormatError) as caught:
        plain[1].leaves
    assert "dump.json" in str(caught.value) and "changed" in str(caught.value) and "\n" not in str(caught.value)


def test_scanned_entries_are_made_when_read_and_info_counts_them_without_making_them(tmp_path, monkeypatch):
    from precision_shell.formats.msprobe.entry_list import EntryList, entry_totals
    from precision_shell.model.framework_run import summarize

    for rank in _scaled_pair(tmp_path):
        new, old = _read_both(rank.location.path, monkeypatch)
        entries = new.ranks[0].entries
        assert isinstance(entries, EntryList)
        parsed = len(entries._made)                     # the entries the JSON parser read: made at open
        assert 0 < parsed < len(entries)
        assert entries.names == [e.name for e in old.ranks[0].entries]
        expected = entry_totals(list(old.ranks[0].entries))
        assert entries.totals() == expected and len(entries._made) == parsed     # none made for it
        assert summarize(new.ranks).kinds == expected[0] and summarize(new.ranks).tensors == expected[1]
        assert len(entries._made) == parsed
        middle = len(entries) // 2
        assert entries[middle] is entries[middle] is entries[middle - len(entries)]    # made once, kept
        assert entries[middle].name == old.ranks[0].entries[middle].name
        assert [e.name for e in entries[middle:middle + 3]] == entries.names[middle:middle + 3]
        with pytest.raises(IndexError):
            entries[len(entries)]
        _assert_same_dump(new, old)                     # reading them all: the whole-document reader's
        assert entries.totals() == expected


def test_scanned_statistics_are_the_json_values_bit_for_bit(tmp_path):
    """The scanner parses the common text (exactly repr of its value) with Ryu's parser confirmed
    by printing it back, any other spelling with CPython's: random bit patterns, neighbours of
    powers of ten and two, subnormals, and respelled texts all read as json.loads reads them."""
    rng = np.random.default_rng(11)
    bits = rng.integers(0, 2 ** 64, size=6000, dtype=np.uint64).view(np.float64)
    tens = np.array([float(f"1e{k}") for k in range(-320, 300, 7)])
    values = [v for v in np.concatenate([bits, tens, np.nextafter(tens, 0), np.ldexp(1.0, np.arange(-1070, 1000, 9)),
                                         [5e-324, -0.0, 0.0, 0.1, 1e16, 1e-5, 123456789.0]]).tolist()
              if np.isfinite(v)]
    spellings = [repr, lambda v: f"{v:.17e}", lambda v: f"{v:.20g}" if "e" in f"{v:.20g}" or "." in f"{v:.20g}" else repr(v)]
    leaves, texts = [], []
    for i in range(0, len(values) - 4, 4):
        spell = spellings[(i // 4) % len(spellings)]
        four = [spell(v) for v in values[i:i + 4]]
        texts.append(four)
        leaves.append('{"type": "torch.Tensor", "dtype": "torch.float32", "shape": [2], "Max": %s, "Min": %s, '
                      '"Mean": %s, "Norm": %s, "requires_grad": false}' % tuple(four))
    data = ", ".join(f'"Torch.op.{k}.forward": {{"input_args": [{leaf}], "output": []}}' for k, leaf in enumerate(leaves))
    rank = tmp_path / "step0" / "rank0"
    rank.mkdir(parents=True)
    (rank / "dump.json").write_text('{"task": "statistics", "level": "L1", "framework": "pytorch", "data": {%s}}' % data)
    scanned = read_msprobe_dump(rank).ranks[0]
    columns = scanned.columns
    assert columns is not None and len(columns) == len(texts)
    want = np.array([[float(t) for t in four] for four in texts])
    assert np.array_equal(columns.stats.view(np.uint64), want.view(np.uint64))
    lines = columns.summary_slice(0, len(columns))
    for four, line in zip(texts, lines):
        canonical = all(t == repr(float(t)) for t in four)
        assert line == (",".join(four) if canonical else "")
    assert sum(1 for line in lines if line) > 500 and sum(1 for line in lines if not line) > 500


def test_scanner_keeps_plain_entries_itself_in_step_with_the_others(tmp_path):
    """scan(..., plain): the plain entries' names, spans and leaf counts go straight into the
    caller's list and arrays, the others through on_entry in between (the arrays flushed first),
    and release(offset) is called as the scan passes each release_every bytes."""
    from array import array

    from precision_shell.formats.msprobe.columns import _Builder

    path = os.path.join(_scaled_pair(tmp_path, copies=2)[0].location.path, "dump.json")
    with open(path, "rb") as f:
        blob = f.read()
    reported = []
    assert msprobe_columns._scanner.scan(blob, _Builder(), lambda *a: reported.append(a)) is not None
    names, spans, counts = [], array("q"), array("i")
    order, released = [], []

    def on_entry(name, name_start, name_end, start, end, leaves):
        assert leaves < 0 and len(spans) == 2 * len(names) and len(counts) == len(names)    # in step
        order.append((name, start, end))
        names.append(name)
        spans.extend((0, 0))
        counts.append(-1)
    found = msprobe_columns._scanner.scan(blob, _Builder(), on_entry, (names, spans, counts, released.append, 4096))
    assert found is not None and len(names) == len(reported) == found[0]
    assert [(n, s, e) for n, _, _, s, e, leaves in reported if leaves < 0] == order
    for i, (name, _, _, start, end, leaves) in enumerate(reported):
        assert names[i] == name
        if leaves >= 0:
            assert (spans[2 * i], spans[2 * i + 1], counts[i]) == (start, end, leaves)
    assert len(released) > len(blob) // 4096 // 4 and released == sorted(released)
    assert all(b - a > 4096 for a, b in zip(released, released[1:]))
