"""msprobe's statistics verdicts as array work (analysis/compare/msprobe/stats_verdicts.judge, the
one implementation both statistics paths use) against msprobe's checkers written here row by
row, entry by entry (the per-API loop pshell had before), on random chunks that trigger every
checker: ignored APIs, scalar class arguments, N/A benches, inf/nan texts, grads, dtypes, shapes
and the norm relative errors around each threshold."""

from __future__ import annotations

import json
import random

import pytest

from precision_shell.analysis.compare.msprobe.cells import csv_line_bytes
from precision_shell.analysis.compare.msprobe.csv_layout import BASIC, STAT_DIFFS, STAT_RELATIVE, SUMMARY
from precision_shell.analysis.compare.msprobe.stats_verdicts import extreme_percent, judge

COLUMNS = BASIC + STAT_DIFFS + STAT_RELATIVE + SUMMARY
ALL_IGNORE = {"empty", "empty_like", "numpy", "to", "__setitem__", "empty_with_format", "new_empty_strided",
              "new_empty", "empty_strided"}
INPUT_IGNORE = {"_reduce_scatter_base", "_all_gather_base", "all_to_all_single", "batch_isend_irecv"}
ORDER = {"pass": 0, "warning": 1, "error": 2}


def _percent(text):
    try:
        return float(text.strip("%")) / 100
    except ValueError:
        return 0.0


def _inf_or_nan(text):
    return text.strip().lower() in ("inf", "-inf", "nan")


def _largest(rows, key="NormRelativeErr"):
    value = 0.0
    for c in rows:
        v = c[key]
        if v.endswith("%"):
            value = max(value, _percent(v))
    return value


def reference(group, dtype_is_error):
    """msprobe's statistics checkers over one entry's rows (dicts by column), in their order."""
    for c in group:
        c["Result"], c["msgs"] = "pass", []

    def flag(c, level, message):
        if ORDER[level] > ORDER[c["Result"]]:
            c["Result"] = level
        c["msgs"].append(f"{level}: {message}")
    outputs = [c for c in group if ".output." in c["NPU Name"]]
    inputs = [c for c in group if ".output." not in c["NPU Name"]]
    parts = inputs[0]["NPU Name"].split(".") if inputs else []
    api = parts[1] if len(parts) >= 2 else ""
    ignore = "all" if api in ALL_IGNORE else "input" if api in INPUT_IGNORE else ""
    checked = [] if ignore == "all" else outputs if ignore == "input" else inputs + outputs
    for c in checked:
        if not (_inf_or_nan(c["Bench max"]) or _inf_or_nan(c["Bench min"])) and \
                (_inf_or_nan(c["NPU max"]) or _inf_or_nan(c["NPU min"])):
            flag(c, "error", "There is nan/inf/-inf in the maximum or minimum value of NPU.")
    if not ignore and abs(_largest(inputs)) < 0.1:
        for c in outputs:
            if abs(_percent(c["NormRelativeErr"])) > 0.5:
                flag(c, "error", "The NormRelativeErr of output is greater than 0.5.")
    for c in checked:
        if c["Bench Name"] != "N/A" and c["NPU Requires_grad"] != c["Bench Requires_grad"]:
            flag(c, "error", "The Required_Grad of NPU and Bench are inconsistent")
    if not ignore:
        for c in inputs:
            if c["Bench Name"] != "N/A" and "class" in c["NPU Dtype"] and "class" in c["Bench Dtype"] \
                    and c["NPU Tensor Shape"] == "[]" and c["NPU max"] != c["Bench max"]:
                flag(c, "error", "The scalar parameters of NPU and Bench are inconsistent.")
    for c in checked:
        if c["Bench Name"] == "N/A":
            continue
        if dtype_is_error and "qkv" not in c["Bench Name"] and "gate_up" not in c["Bench Name"] \
                and c["NPU Dtype"] != c["Bench Dtype"]:
            flag(c, "error", "The dtype of NPU and Bench are inconsistent.")
        if c["NPU Tensor Shape"] != c["Bench Tensor Shape"]:
            flag(c, "error", "The shape of NPU and Bench are inconsistent.")
    if not ignore and outputs:
        max_in, max_out = abs(_largest(inputs)), abs(_largest(outputs))
        if (max_out > 0.1) if max_in == 0 else (max_out / max_in > 10):
            flag(outputs[0], "warning", "The norm relative error of output is 10 times that of input.")
    return [(c["Result"], json.dumps(c["msgs"])) for c in group]


def _row(rng, entry, api, io, index):
    pick = rng.choice
    name = f"{entry}.{io}.{index}"
    shape = pick(["[]", "[2, 3]", "[4]"])
    rel = pick(["0", "inf", "nan%", "N/A", "0.0%", "5.0%", "9.99%", "10.0%", "10.000000000000002%", "50.0%",
                "50.00000000001%", "120.0%", "-3.0%", "1e-05%", "1000.0%"])
    stat = lambda: pick(["1.0", "2.5", "inf", " inf", " -inf", "Nan", "nan", "-0.0", "None", "True"])   # noqa: E731
    bench = pick([name, name, name, "N/A", f"{name}.qkv", f"{name}.gate_up"])
    return {"NPU Name": name, "Bench Name": bench,
            "NPU Dtype": pick(["torch.float32", "torch.bfloat16", "<class 'int'>", "<class 'float'>"]),
            "Bench Dtype": pick(["torch.float32", "torch.float32", "<class 'int'>", "<class 'float'>", "N/A"]),
            "NPU Tensor Shape": shape, "Bench Tensor Shape": pick([shape, shape, "[2, 3]", "N/A"]),
            "NPU Requires_grad": pick(["True", "False", "N/A"]), "Bench Requires_grad": pick(["True", "False", "N/A"]),
            **{c: pick(["0", "1.5", "N/A"]) for c in STAT_DIFFS},
            **{c: rel if c == "NormRelativeErr" else pick(["0", "1.0%", "inf"]) for c in STAT_RELATIVE},
            **{c: stat() for c in SUMMARY}}


def _chunk(rng):
    rows, bounds = [], []
    for e in range(rng.randint(1, 40)):
        api = rng.choice(["linear", "to", "empty", "_all_gather_base", "all_to_all_single", "add", "matmul"])
        entry = f"{rng.choice(['Torch', 'Functional', 'Tensor'])}.{api}.{e}.forward"
        start = len(rows)
        ios = [rng.choice(["input", "output", "parameters"]) for _ in range(rng.randint(1, 6))]
        rows += [_row(rng, entry, api, io, i) for i, io in enumerate(ios)]
        if rng.random() < 0.1:      # a name without dots after the prefix
            rows[start]["NPU Name"] = rng.choice(["x", "Torch"])
        bounds.append((start, len(rows), entry))
    return rows, bounds


@pytest.mark.parametrize("dtype_is_error", [False, True])
def test_judge_equals_msprobes_checkers_entry_by_entry(dtype_is_error):
    rng = random.Random(31)
    flagged = set()
    for _ in range(300):
        rows, bounds = _chunk(rng)
        cols = [[r[c] for r in rows] for c in COLUMNS]
        percent = [extreme_percent(r["NormRelativeErr"]) for r in rows]
        results, messages = judge(cols, [False] * len(rows), percent, bounds, dtype_is_error)
        expected = [v for start, end, _ in bounds for v in reference([dict(r) for r in rows[start:end]], dtype_is_error)]
        assert list(zip(results, messages)) == expected
        flagged |= {m for text in messages for m in json.loads(text)}
    assert len(flagged) == (7 if dtype_is_error else 6)      # every checker fired somewhere


def test_csv_lines_quote_and_guard_cells_as_the_python_columns_do(monkeypatch):
    from precision_shell.analysis.compare.msprobe.stats_table import _csv_column

    rng = random.Random(5)
    pool = ["a", "1.5", "-1.5", "-.5", "-", "-x", "-1abc", "=SUM(A1)", "+1", "@x", "\tx", "a,b", 'say "hi"', "x\ny",
            "r\rs", "é,ü", "\u4e2d", "", "N/A", "[8, 64]", "torch.float32", "inf", " inf", "nan"]
    for _ in range(300):
        rows = rng.randint(0, 12)
        cols = [[rng.choice(pool[:6] if k % 2 else pool) for _ in range(rows)] for k in range(rng.randint(1, 7))]
        final = frozenset(k for k in range(len(cols)) if rng.random() < 0.2)
        for k in final:      # a column written as it is: joined numbers, as the copied summaries
            cols[k] = [f"{rng.random()},{rng.random()}" for _ in range(rows)]
        want = "".join(",".join(row) + "\r\n" for row in zip(*[c if k in final else _csv_column(c)
                                                                for k, c in enumerate(cols)])).encode("utf-8")
        assert csv_line_bytes(cols, final, _csv_column) == want
        with monkeypatch.context() as m:
            m.setenv("PSHELL_NO_EXT", "1")
            assert csv_line_bytes(cols, final, _csv_column) == want
    assert csv_line_bytes([["a,b", 'q"', "-x", "-1"]], frozenset(), _csv_column) == \
        b'"a,b"\r\n"q"""\r\n\'-x\r\n-1\r\n'
    assert csv_line_bytes([["a,b"], ["c"]], frozenset({0}), _csv_column) == b"a,b,c\r\n"
