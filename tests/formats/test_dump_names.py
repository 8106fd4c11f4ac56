"""File-name grammar: NPU dump names, golden .npy names, mapping.csv."""

from __future__ import annotations

import pytest

from precision_shell.errors import FormatError
from precision_shell.formats.dump_names import (
    DumpName, GoldenName, dump_names_in, escape_op_name, golden_keys_in, is_dump_name, parse_dump_name,
    parse_dump_names, parse_golden_name, parse_golden_names, read_mapping_csv,
)


def test_five_field_name():
    n = parse_dump_name("Conv2D.resnet_conv1_Conv2D.42.3.1700000000123456")
    assert n == DumpName("Conv2D", "resnet_conv1_Conv2D", 42, 3, 1700000000123456,
                         None, None, None, None, 5)
    assert not n.is_opdebug


def test_four_field_name_has_no_stream():
    n = parse_dump_name("/some/dir/MatMul.fc1_MatMul.7.1619492699305998")
    assert (n.op_type, n.op_name, n.task_id, n.stream_id, n.timestamp, n.n_fields) == \
        ("MatMul", "fc1_MatMul", 7, None, 1619492699305998, 4)


def test_nine_field_name_as_msaccucmp_reads_it():
    # msaccucmp's own example: task 0, stream 3, then task_type 4, context 1, thread 0, device 0
    n = parse_dump_name("Add.partition0_rank1_new_sub_graph1_sgt_graph_0_Add.0.3.1673383728093446.4.1.0.0")
    assert (n.task_id, n.stream_id, n.timestamp) == (0, 3, 1673383728093446)
    assert (n.task_type, n.context_id, n.thread_id, n.device_id, n.n_fields) == (4, 1, 0, 0, 9)


def test_eight_field_name_is_the_doc_form_without_stream():
    n = parse_dump_name("Add.add_1.5.1673383728093446.4.2.1.7")
    assert (n.task_id, n.stream_id, n.timestamp) == (5, None, 1673383728093446)
    assert (n.task_type, n.context_id, n.thread_id, n.device_id) == (4, 2, 1, 7)


@pytest.mark.parametrize("name, fields", [
    ("Add.a.1.2.1700000000000000.9", 6),
    ("Add.a.1.2.1700000000000000.9.8", 7),
    ("Add.a.1.2.1700000000000000.4.1.0.0.5", 10),
])
def test_other_field_counts_read_task_stream_timestamp_first(name, fields):
    n = parse_dump_name(name)
    assert (n.task_id, n.stream_id, n.timestamp, n.n_fields) == (1, 2, 1700000000000000, fields)


def test_opdebug_name():
    n = parse_dump_name("Opdebug.Node_OpDebug.59.1.1700000000000301")
    assert n.is_opdebug and n.op_name == "Node_OpDebug" and n.task_id == 59


@pytest.mark.parametrize("name", [
    "Add.add_1.3.2.1700000000000000.input.0.npy",     # decoded sibling
    "Opdebug.Node_OpDebug.0.3.1673383728094391.output.0.json",
    "Add.add_1.3.2.1700000000000000.csv",             # per-op stats dump
    "mapping.csv",
    "1234567890123",                                  # hashed name (looked up in mapping.csv)
    "fc1_MatMul.0.1619492699305998.npy",
    "Add.add.1",                                      # too few numeric fields
    "Add.add\\1.1.2.3",
    "Add.add 1.1.2.3",
    "Add..1.2.3",
    "Add.add.1.²2.3",                                  # a non-ASCII digit
    "result_20240101.csv",
    "",
])
def test_non_dump_names(name):
    assert parse_dump_name(name) is None


def test_escape_op_name():
    assert escape_op_name("net/conv.1\\x y") == "net_conv_1_x_y"
    # escaping is lossy: three spellings collide
    assert escape_op_name("a/b") == escape_op_name("a.b") == escape_op_name("a_b")


def test_escaped_name_round_trips_through_a_file_name():
    real = "InceptionV3/Mixed_5b/Branch_1/Conv2d_0a_1x1/Conv2D"
    file_name = f"Conv2D.{escape_op_name(real)}.12.0.1700000000000042"
    n = parse_dump_name(file_name)
    assert n.op_name == escape_op_name(real) and n.op_name.count("_") >= real.count("/")


@pytest.mark.parametrize("name, expected", [
    ("fc1_MatMul.0.1619492699305998.npy", GoldenName("fc1_MatMul", 0, 1619492699305998)),
    ("gradients_x_GreaterEqual.2.1619492699305998.npy", GoldenName("gradients_x_GreaterEqual", 2, 1619492699305998)),
    ("fc1_MatMul.1.npy", GoldenName("fc1_MatMul", 1, None)),
    ("/golden/dir/a-b.3.17.npy", GoldenName("a-b", 3, 17)),
    ("op.with.dots.0.1700000000000000.npy", GoldenName("op.with.dots", 0, 1700000000000000)),
])
def test_golden_names(name, expected):
    assert parse_golden_name(name) == expected


@pytest.mark.parametrize("name", [
    "fc1_MatMul.0.1619492699305998",                  # no .npy
    "fc1_MatMul.npy",                                 # no index
    "Add.add_1.3.2.1700000000000000.output.0.npy",    # decoded NPU tensor
    "Add.add_1.3.2.1700000000000000.input.1.npy",
    "bad name.0.1.npy",
    ".0.1.npy",
    "x.²0.npy",
])
def test_non_golden_names(name):
    assert parse_golden_name(name) is None


def test_mapping_csv(tmp_path):
    p = tmp_path / "mapping.csv"
    long_name = "Conv2D." + "x" * 300 + ".1.2.1700000000000000"
    p.write_text(f"1700000000000001,{long_name}\n\n1700000000000002,\"Add.a,b.1.2.3\"\n")
    assert read_mapping_csv(p) == {"1700000000000001": long_name, "1700000000000002": "Add.a,b.1.2.3"}


def test_mapping_csv_empty_file_is_an_empty_mapping(tmp_path):
    p = tmp_path / "mapping.csv"
    p.write_text("")
    assert read_mapping_csv(p) == {}


@pytest.mark.parametrize("content", ["123,a,b\n", "123\n", ",name\n", "123,\n"])
def test_mapping_csv_malformed(tmp_path, content):
    p = tmp_path / "mapping.csv"
    p.write_text("1,ok\n" + content)
    with pytest.raises(FormatError) as e:
        read_mapping_csv(p)
    assert str(e.value).startswith(str(p)) and "line 2" in str(e.value)


def test_mapping_csv_unreadable(tmp_path):
    binary = tmp_path / "bin.csv"
    binary.write_bytes(b"\xff\xfe\x00bad")
    for path in (tmp_path / "missing.csv", tmp_path, binary):
        with pytest.raises(FormatError) as e:
            read_mapping_csv(path)
        assert str(e.value).startswith(str(path))


# -- the single-regex grammar equals the field-by-field rules of formats.md §1.1 / §5 ----------------
# Reference implementations: the field-by-field readings the regexes replaced (kept here verbatim
# so any divergence of the fast path is caught).
def _ref_number(text):
    return text.isascii() and text.isdigit()


def _ref_dump(filename):
    import os
    import re
    field = re.compile(r"[A-Za-z0-9_-]+\Z")
    parts = os.path.basename(filename).split(".")
    n = len(parts)
    if n < 4 or not field.match(parts[0]) or not field.match(parts[1]):
        return None
    if not all(_ref_number(p) for p in parts[2:]):
        return None
    nums = [int(p) for p in parts[2:]]
    stream = task_type = context = thread = device = None
    if n == 4:
        task, ts = nums
    elif n == 8:
        task, ts, task_type, context, thread, device = nums
    elif n >= 9:
        task, stream, ts, task_type, context, thread, device = nums[:7]
    else:
        task, stream, ts = nums[:3]
    return DumpName(parts[0], parts[1], task, stream, ts, task_type, context, thread, device, n)


def _ref_golden(filename):
    import os
    import re
    base = os.path.basename(filename)
    if not base.endswith(".npy"):
        return None
    parts = base[: -len(".npy")].split(".")
    if len(parts) >= 3 and _ref_number(parts[-1]) and _ref_number(parts[-2]):
        op_parts, index, ts = parts[:-2], int(parts[-2]), int(parts[-1])
    elif len(parts) >= 2 and _ref_number(parts[-1]):
        op_parts, index, ts = parts[:-1], int(parts[-1]), None
    else:
        return None
    if op_parts[-1] in ("input", "output"):
        return None
    op = ".".join(op_parts)
    if not op or not re.compile(r"[.A-Za-z0-9_-]+\Z").match(op):
        return None
    return GoldenName(op, index, ts)


_TRICKY_NAMES = [
    "", ".", "..", ".npy", "1.npy", ".1.npy", "..1.npy", ".1.2.npy", "..1.2.npy", "1.2.npy",
    "1.2.3.npy", "a.npy", "a.1.npy", "a.01.npy", "a.1.2.npy", "a.1.2.3.npy", "a..1.npy",
    "a..1.2.npy", "a.b.1.npy", "a.b.1.2.npy", "a.b.c.npy", "a.1.b.npy", "a.1.npy.npy",
    "x.input.0.npy", "x.output.0.1.npy", "input.0.npy", "output.0.1.npy", "xinput.0.npy",
    "x_output.0.1.npy", "x.inputs.0.npy", "x.input.npy", "a b.0.npy", "a/b.0.npy", "d/a.0.1.npy",
    "a.²1.npy", "a.1.²2.npy", "a.1.2.npy\n", "a\n.1.npy", "é.1.npy", "a.1.NPY", "a.1.2.npz",
    "Add.add.1", "Add.add.1.2", "Add.add.1.2.3", "Add.add.01.002.3", "Add..1.2", "Add.add..1.2",
    ".Add.1.2", "Add.add.1.2.", "Add.add.1.2.3\n", "Add.add.1.²2.3", "Add.a-b_c.1.2.3",
    "A.b.1.2.3.4.5.6.7.8.9.10", "A.b.1.2.3.4.5.6", "A.b.1.2.3.4.5", "A.b.1.2.3.4", "A.b.c.1.2",
    "Add.add 1.1.2.3", "Add.add\\1.1.2.3", "dir/Add.add.1.2.3", "Opdebug.Node_OpDebug.1.2",
    "1234567890", "mapping.csv", "Add.add.1.2.3.input.0.npy", "Add.add.1.2.3.csv",
]


@pytest.mark.parametrize("name", _TRICKY_NAMES)
def test_fast_name_grammar_equals_the_field_rules(name):
    assert parse_dump_name(name) == _ref_dump(name)
    assert parse_golden_name(name) == _ref_golden(name)
    if "/" not in name:  # the many-names forms take bare file names
        _assert_bare_forms_agree([name])


def test_fast_name_grammar_equals_the_field_rules_on_random_names():
    import random
    rng = random.Random(20240125)
    pieces = ["a", "Add", "0", "1", "07", "123", "", "input", "output", "npy", "x-y", "_", "²",
              " ", "é", "Opdebug", "b.c"]
    numbers = ["0", "1", "07", "123", "1700000000123456", "0", "1", "²", ""]
    valid_dumps = valid_goldens = 0
    names = []
    for _ in range(20000):
        n = rng.randint(1, 11)
        if rng.random() < 0.5:  # mostly-numeric tails: the shapes both grammars accept
            name = ".".join([rng.choice(pieces) for _ in range(2)] +
                            [rng.choice(numbers if rng.random() < 0.97 else pieces) for _ in range(n)])
        else:
            name = ".".join(rng.choice(pieces) for _ in range(n))
        if rng.random() < 0.5:
            name += ".npy"
        valid_dumps += _ref_dump(name) is not None
        valid_goldens += _ref_golden(name) is not None
        assert parse_dump_name(name) == _ref_dump(name), name
        assert parse_golden_name(name) == _ref_golden(name), name
        names.append(name)
    assert valid_dumps > 500 and valid_goldens > 1000  # the comparison covered both grammars
    _assert_bare_forms_agree(names)


def _assert_bare_forms_agree(names):
    """The many-names forms the indexes use agree with the reference, name by name."""
    dumps, goldens = [_ref_dump(n) for n in names], [_ref_golden(n) for n in names]
    assert [is_dump_name(n) for n in names] == [d is not None for d in dumps]
    assert dump_names_in(names) == [n for n, d in zip(names, dumps) if d is not None]
    assert parse_dump_names(names) == dumps
    assert parse_golden_names(names) == goldens
    assert golden_keys_in(names) == [(n, g.op_name, g.output_index) for n, g in zip(names, goldens) if g]


def test_golden_keys_in_many_names_agrees_with_parsing_each_name():
    """What start-up counts goldens with gives what parse_golden_name gives name by name, names
    holding a newline included."""
    from precision_shell.formats.dump_names import golden_keys_in, parse_golden_name

    names = ["conv1_Conv2D.0.1700000000000001.npy", "a.0.npy", ".0.npy", "x.input.0.npy",
             "x.output.3.5.npy", "y.b.output.0.npy", "z.1.2.npy", "bad", "c.01.npy", "d.0.npyx",
             "e..0.npy", "f.0.0.0.npy", "g.-1.npy", "output.0.npy", "h.output.0.1.npy", "",
             "k l.0.npy", "m.0.npy\n", "n.7.npy"]
    for batch in (names, names + ["p\nq.0.npy", "r.0.npy\ns.1.npy"], iter(names)):
        batch = list(batch)
        expected = [(n, g.op_name, g.output_index) for n in batch
                    if "\n" not in n and (g := parse_golden_name(n)) is not None]
        assert golden_keys_in(batch) == expected
        assert golden_keys_in(iter(batch)) == expected
    # decoded NPU files (….input/output.N.npy), names outside the grammar and blanks are not goldens
    assert [k[1:] for k in golden_keys_in(names)] == [("conv1_Conv2D", 0), ("a", 0), ("z", 1), ("c", 1), ("e.", 0),
                                                      ("f.0", 0), ("n", 7)]
