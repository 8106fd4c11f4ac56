"""Completion: the name index (against a brute-force reference) and the shell completer on a
generated sample workspace."""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from prompt_toolkit.completion import CompleteEvent
from prompt_toolkit.document import Document

from precision_shell.commands import REGISTRY
from precision_shell.commands.registry import Registry, arg
from precision_shell.formats.dump_names import escape_op_name
from precision_shell.model.session import Session
from precision_shell.shell import name_index
from precision_shell.shell.completer import ShellCompleter
from precision_shell.shell.name_index import NameIndex


# -- the name index --------------------------------------------------------------------------

def is_subsequence(query: str, name: str) -> bool:
    it = iter(name)
    return all(c in it for c in query)


def reference_search(names: list[str], query: str) -> tuple[list[str], list[str], list[str], set[str]]:
    """Brute force: (prefix, component, substring, fuzzy) matches, each group sorted."""
    q = query.lower()
    order = sorted(set(names), key=lambda n: (n.lower(), n))
    prefix = [n for n in order if n.lower().startswith(q)]
    component = [n for n in order if "/" + q in n.lower() and n not in prefix]
    substring = [n for n in order if q in n.lower() and n not in prefix and n not in component]
    fuzzy = set()
    if not prefix and len(q) > 1:
        fuzzy = {n for n in order if is_subsequence(q, n.lower())} - set(component) - set(substring)
    return prefix, component, substring, fuzzy


names_strategy = st.lists(st.text(alphabet="ab/_1Q", min_size=1, max_size=8), min_size=3, max_size=40)
query_strategy = st.text(alphabet="ab/_1q", min_size=1, max_size=4)


@settings(max_examples=300, deadline=None)
@given(names=names_strategy, queries=st.lists(query_strategy, min_size=1, max_size=6))
def test_search_equals_brute_force_in_groups_and_order(names, queries):
    index = NameIndex(names)   # one index for all queries: later ones reuse cached scans
    for query in queries:
        prefix, component, substring, fuzzy = reference_search(names, query)
        got = index.search(query, limit=10_000)
        exact = prefix + component + substring
        assert got[: len(exact)] == exact
        assert set(got[len(exact):]) == fuzzy
        assert len(got) == len(set(got))


@settings(max_examples=200, deadline=None)
@given(names=names_strategy, query=st.text(alphabet="ab/_1", min_size=2, max_size=3),
       more=st.text(alphabet="ab/_1", min_size=1, max_size=2))
def test_typing_more_with_a_capped_scan_gives_the_fresh_answer(names, query, more):
    """Scans that stopped at the cap resume where they stopped when the query grows."""
    old = name_index._FUZZY_SCAN_CAP
    name_index._FUZZY_SCAN_CAP = 3          # tiny, so that scans stop early
    try:
        warm = NameIndex(names)
        warm.search(query, limit=10_000)
        fresh = NameIndex(names)
        assert warm.search(query + more, limit=10_000) == fresh.search(query + more, limit=10_000)
    finally:
        name_index._FUZZY_SCAN_CAP = old


def test_a_capped_scan_resumes_past_where_it_stopped(monkeypatch):
    monkeypatch.setattr(name_index, "_FUZZY_SCAN_CAP", 3)
    names = [f"x{i}a_b" for i in range(5)] + ["y_a_b_1", "za_b1"]
    index = NameIndex(names)
    assert len(index.search("ab")) == 3                       # the scan stopped at the cap
    # "ab1" matches only names past that point: they must still be found
    assert sorted(index.search("ab1")) == ["y_a_b_1", "za_b1"]


def test_search_limit_case_and_membership():
    index = NameIndex([f"blk{i}/Conv2D" for i in range(50)] + ["fc1/MatMul"])
    assert len(index) == 51
    assert index.search("BLK1", limit=5) == ["blk1/Conv2D", "blk10/Conv2D", "blk11/Conv2D",
                                             "blk12/Conv2D", "blk13/Conv2D"]
    assert index.search("matmul") == ["fc1/MatMul"]            # component start
    assert index.search("fmm") == ["fc1/MatMul"]               # fuzzy
    assert index.search("zz") == []
    assert "fc1/MatMul" in index and "fc1/matmul" not in index


def test_fuzzy_ranks_tight_matches_first():
    index = NameIndex(["a/x/b/y/c/z/d", "qq/abcd_op", "zz/a_b_c_d"])
    assert index.search("abcd")[0] == "qq/abcd_op"             # substring before fuzzy
    # a..d spans 4, 7 and 13 characters
    assert index.search("abd") == ["qq/abcd_op", "zz/a_b_c_d", "a/x/b/y/c/z/d"]


# -- the completer on a real (generated) workspace -------------------------------------------

@pytest.fixture(scope="module")
def sample(sample_ws):
    root, manifest = sample_ws
    return Session.open(root), manifest


def complete(completer: ShellCompleter, text: str) -> list:
    return list(completer.get_completions(Document(text), CompleteEvent(completion_requested=True)))


def registry_with(name: str, *args) -> Registry:
    """REGISTRY when it has ``name`` (the real command), else a copy with a stand-in."""
    if REGISTRY.get(name) is not None:
        return REGISTRY
    reg = Registry()
    for cmd in REGISTRY.commands():
        reg.add(cmd)
    reg.command(name, summary="stand-in", example=name, args=args)(lambda s, a: None)
    return reg


def expected_meta(op: dict) -> str:
    out = op["outputs"][0]
    shape = "[" + ",".join(str(d) for d in out["logical_shape"]) + "]"
    layout = f" {out['format']}" if out["format"] != out["origin_format"] else ""
    extra = f" +{len(op['outputs']) - 1} out" if len(op["outputs"]) > 1 else ""
    dtype = {"float16": "fp16", "float32": "fp32", "bfloat16": "bf16"}.get(out["dtype"], out["dtype"])
    return f"{op['type']} {dtype} {shape}{layout}{extra}"


def test_ni_offers_every_op_with_type_and_shape(sample):
    session, manifest = sample
    reg = registry_with("ni", arg("op", complete="op"))
    got = complete(ShellCompleter(session, reg), "ni ")
    def natural(name: str) -> list:       # digit runs as numbers: _2 before _10
        return [(0, int(p), "") if p.isdigit() else (1, 0, p.lower())
                for p in re.split(r"(\d+)", name) if p]

    assert [c.text for c in got] == sorted(session.graph.ops, key=natural)
    meta = {c.text: c.display_meta_text for c in got}
    checked = 0
    for op in manifest["ops"]:
        if op["outputs"]:
            assert meta[op["name"]] == expected_meta(op), op["name"]
            checked += 1
    assert checked >= 10


def test_ni_prefix_component_and_fuzzy(sample):
    session, manifest = sample
    completer = ShellCompleter(session, registry_with("ni", arg("op", complete="op")))
    lossy = manifest["lossy"]["op"]                   # e.g. ln1/add_1/LayerNorm
    head, _, last = lossy.rpartition("/")
    assert complete(completer, f"ni {head[:4]}")[0].text.lower().startswith(head[:4].lower())
    assert lossy in [c.text for c in complete(completer, f"ni {head}/")]
    assert lossy in [c.text for c in complete(completer, f"ni {last}")]
    abbreviation = "".join(part[0] for part in lossy.split("/")) + last[-2:]
    assert lossy in [c.text for c in complete(completer, f"ni {abbreviation}")]
    got = complete(completer, f"ni {lossy[:5]}")
    assert all(c.start_position == -5 for c in got)


def test_vcs_dash_offers_its_flags_and_not_ones_already_used(sample):
    session, _ = sample
    reg = registry_with("vcs", arg("-c", "--cosine", type=float, help="threshold"),
                        arg("-l", "--limit", type=int, help="rows"))
    completer = ShellCompleter(session, reg)
    flags = [c.text for c in complete(completer, "vcs -")]
    assert sorted(flags) == sorted(reg.get("vcs").flags())
    assert "-c" in flags and "--help" in flags
    later = [c.text for c in complete(completer, "vcs -c 0.9 -")]
    assert "-c" not in later and "--cosine" not in later and "-l" in later
    assert [c.text for c in complete(completer, "vcs --co")] == ["--cosine"]
    # a negative number is a value, not a flag: after it the next flag is still offered
    assert "-l" in [c.text for c in complete(completer, "vcs -c -0.5 -")]


def test_tensor_refs_of_an_op(sample):
    session, manifest = sample
    completer = ShellCompleter(session, registry_with("pt", arg("tensor", complete="tensor")))
    op = next(o for o in manifest["ops"] if len(o["inputs"]) >= 2 and o["outputs"])
    got = [c.text for c in complete(completer, f"pt {op['name']}:")]
    # the names tables print: OP:N outputs, OP:inN inputs
    expected = ([f"{op['name']}:{i}" for i in range(len(op["outputs"]))]
                + [f"{op['name']}:in{i}" for i in range(len(op["inputs"]))])
    assert got == expected
    assert [c.text for c in complete(completer, f"pt {op['name']}:in")] == expected[len(op["outputs"]):]
    # typing part of the name completes to the first output
    first = complete(completer, f"pt {op['name'][:-1]}")
    assert f"{op['name']}:0" in [c.text for c in first]
    assert complete(completer, f"pt {op['name']}:0[0, ") == []


def test_golden_names(sample):
    session, manifest = sample
    completer = ShellCompleter(session, registry_with("pt", arg("tensor", complete="tensor")))
    got = [c.text for c in complete(completer, "pt golden:")]
    expected = sorted((f"golden:{escape_op_name(k.rsplit(':', 1)[0])}:{k.rsplit(':', 1)[1]}"
                       for k in manifest["golden_files"]), key=str.lower)
    assert sorted(got, key=str.lower) == expected
    assert [c.text for c in complete(completer, "pt gold")] == ["golden:"]


def test_command_names_aliases_and_help_topics(sample):
    session, _ = sample
    completer = ShellCompleter(session)
    assert sorted(c.text for c in complete(completer, "")) == REGISTRY.all_names()
    assert sorted(c.text for c in complete(completer, "help ")) == REGISTRY.all_names()
    got = complete(completer, "qu")
    assert got[0].text == "quit"
    exits = {c.text: c.display_meta_text for c in complete(completer, "exi")}
    assert exits["exit"] == "= quit"


def test_statements_redirects_choices_and_paths(sample, tmp_path):
    session, _ = sample
    completer = ShellCompleter(session)
    (tmp_path / "report_low.txt").write_text("x")
    (tmp_path / "reports").mkdir()
    got = sorted(c.text for c in complete(completer, f"info > {tmp_path}/rep"))
    assert got == ["ort_low.txt", "orts/"]   # a folder ends in / (go on typing in it)
    assert [c.text for c in complete(completer, "info; hel")] == ["help"]
    assert [c.text for c in complete(completer, "config ")] == ["show", "set"]
    assert [c.text for c in complete(completer, "config set edi")] == ["editing_mode"]
    assert complete(completer, "nosuchcommand ") == []


def test_indexes_are_built_once_per_loaded_graph(sample):
    session, _ = sample
    completer = ShellCompleter(session)
    first = completer.op_index()
    assert completer.op_index() is first
    assert len(first) == len(session.graph.ops)


# -- speed -----------------------------------------------------------------------------------

@dataclass
class _Desc:
    shape: tuple


@dataclass
class _Op:
    type: str
    outputs: list = field(default_factory=list)
    inputs: list = field(default_factory=list)


class _BigGraph:
    """100k names like ``net/block12/conv3/MatMulV2_7`` (unique by construction, fast to make)."""

    def __init__(self, n: int):
        types = ["Conv2D", "MatMulV2", "Relu", "Add", "Cast"]
        self.ops = {}
        for i in range(n):
            t = types[i % 5]
            self.ops[f"net/block{i // 400}/conv{i % 400 // 10}/{t}_{i % 10}"] = _Op(t, [_Desc((8, 16))])

    def sorted_names(self):
        return sorted(self.ops)


def test_keystrokes_stay_fast_with_100k_names():
    """A loose bound (CI machines vary); bench/completer_latency.py measures the real numbers."""
    graph = _BigGraph(100_000)
    session = type("S", (), {"graph": graph, "golden": None, "dumps": None})()
    completer = ShellCompleter(session, registry_with("ni", arg("op", complete="op")))
    completer.warm_up()
    worst = 0.0
    for query in ("net/block12/conv3/", "MatMulV2_4", "b12c3mm", "zzzq", "block249/conv39/Relu_8"):
        for end in range(1, len(query) + 1):
            start = time.perf_counter()
            got = complete(completer, f"ni {query[:end]}")
            worst = max(worst, time.perf_counter() - start)
            assert len(got) <= 100
    assert worst < 0.25, f"slowest keystroke {worst * 1000:.0f} ms"
    first = graph.sorted_names()[0]
    assert complete(completer, f"ni {first}")[0].text == first


# -- robustness: any half-typed line ---------------------------------------------------------

line_pieces = st.sampled_from(["ni ", "vcs ", "pt ", "config ", "help ", "-c ", "--", "0.9 ", ";",
                               " > ", '"', "'", "[", "]", "fc1/MatMul", ":output:", "golden:", "~/",
                               "/", ":", " ", "ls -n ", "-"])


@settings(max_examples=300, deadline=None)
@given(pieces=st.lists(line_pieces, max_size=8), tail=st.text(max_size=4))
def test_completion_never_raises_on_any_line(sample, pieces, tail):
    session, _ = sample
    text = "".join(pieces) + tail
    for c in complete(ShellCompleter(session), text):
        assert -c.start_position <= len(text)      # never replaces more than was typed
