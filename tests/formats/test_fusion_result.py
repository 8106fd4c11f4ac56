"""read_fusion_result: the four shapes of formats.md §4, graphId, and garbage."""

from __future__ import annotations

import json

import pytest

from precision_shell.errors import FormatError
from precision_shell.formats.fusion_result import FusionGraphStats, FusionPass, read_fusion_result

GRAPH_PASSES = {"MatMulBiasAddFusionPass": (4, 3), "ConvBatchnormFusionPass": (2, 0)}
UB_PASSES = {"TbeCommonRules0FusionPass": (7, 7, 2), "TbeEltwiseFusionPass": (1, 1, None)}


def entry(graph_id, id_key="session_and_graph_id", as_numbers=False):
    """One per-graph object as FE writes it (counts are strings); the expected stats beside it."""
    conv = (lambda n: n) if as_numbers else str
    obj, passes = {id_key: graph_id} if id_key else {}, []
    obj["graph_fusion"] = {}
    for name, (match, effect) in GRAPH_PASSES.items():
        obj["graph_fusion"][name] = {"effect_times": conv(effect), "match_times": conv(match)}
        passes.append(FusionPass(name, "graph", match, effect, None))
    obj["ub_fusion"] = {}
    for name, (match, effect, hits) in UB_PASSES.items():
        counts = {"effect_times": conv(effect), "match_times": conv(match)}
        if hits is not None:
            counts["repository_hit_times"] = conv(hits)
        obj["ub_fusion"][name] = counts
        passes.append(FusionPass(name, "ub", match, effect, hits))
    return obj, FusionGraphStats(graph_id if id_key else "", passes)


def write(tmp_path, text):
    path = tmp_path / "fusion_result.json"
    path.write_text(text, encoding="utf-8")
    return path


def test_shape1_single_object(tmp_path):
    obj, expected = entry("0_0")
    (stats,) = read_fusion_result(write(tmp_path, json.dumps(obj, indent=4, sort_keys=True)))
    assert stats.graph_id == "0_0"  # passes come in file order: FE sorts the keys
    assert stats.passes == sorted(expected.passes, key=lambda p: (p.kind != "graph", p.name))


def test_shape2_objects_back_to_back(tmp_path):
    objs = [entry(f"{i}_{i}") for i in range(3)]
    text = "".join(json.dumps(o, indent=4) for o, _ in objs) + "\n"  # "}{" with no separator
    assert "}{" in text
    assert read_fusion_result(write(tmp_path, text)) == [e for _, e in objs]
    spaced = "\n\n".join(json.dumps(o) for o, _ in objs)
    assert read_fusion_result(write(tmp_path, spaced)) == [e for _, e in objs]


def test_shape3_array(tmp_path):
    objs = [entry("0_0"), entry("100_100")]
    assert read_fusion_result(write(tmp_path, json.dumps([o for o, _ in objs]))) == [e for _, e in objs]


def test_shape4_keyed_by_session_and_graph_id(tmp_path):
    (first, e1), (second, e2) = entry("0_0", id_key=None), entry("1_5", id_key=None)
    text = json.dumps({"session_and_graph_id_0_0": first, "session_and_graph_id_1_5": second})
    assert [s.graph_id for s in read_fusion_result(write(tmp_path, text))] == ["0_0", "1_5"]
    assert [s.passes for s in read_fusion_result(write(tmp_path, text))] == [e1.passes, e2.passes]


def test_graph_id_key_numbers_and_partial_objects(tmp_path):
    obj, expected = entry(7, id_key="graphId", as_numbers=True)
    (stats,) = read_fusion_result(write(tmp_path, json.dumps(obj)))
    assert stats.graph_id == "7" and stats.passes == expected.passes
    only_ub = {"session_and_graph_id": "0_1", "ub_fusion": {"P": {"match_times": "2", "effect_times": "1"}}}
    assert read_fusion_result(write(tmp_path, json.dumps(only_ub))) == [
        FusionGraphStats("0_1", [FusionPass("P", "ub", 2, 1, None)])]
    assert read_fusion_result(write(tmp_path, "[]")) == []


@pytest.mark.parametrize("text,words", [
    ("", "empty"),
    ("   \n", "empty"),
    ('{"graph_fusion": {"P": {"match_times": "1"', "not JSON"),
    ('{"graph_fusion": {}} garbage', "not JSON"),
    ('{"graph_fusion": {"P": {"match_times": "x", "effect_times": "1"}}}', "not a count"),
    ('{"graph_fusion": {"P": {"effect_times": "1"}}}', "match_times is missing"),
    ('{"graph_fusion": {"P": {"match_times": "-1", "effect_times": "1"}}}', "not a count"),
    ('{"graph_fusion": {"P": 3}}', "expected an object"),
    ('{"graph_fusion": []}', "not an object"),
    ('{"something": 1}', "unexpected key"),
    ('"just a string"', "expected a JSON object"),
])
def test_bad_files(tmp_path, text, words):
    path = write(tmp_path, text)
    with pytest.raises(FormatError) as err:
        read_fusion_result(path)
    assert str(err.value).startswith(str(path)) and words in str(err.value)


def test_unreadable_and_binary(tmp_path):
    with pytest.raises(FormatError, match="cannot read"):
        read_fusion_result(tmp_path / "absent.json")
    path = tmp_path / "bin.json"
    path.write_bytes(b"\xff\xfe\x00{")
    with pytest.raises(FormatError, match="UTF-8"):
        read_fusion_result(path)
