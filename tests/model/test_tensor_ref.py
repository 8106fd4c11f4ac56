import numpy as np
import pytest

from precision_shell.errors import CommandError
from precision_shell.model.tensor_ref import apply_slice, parse_slice, parse_tensor_ref


def test_npu_golden_and_file_refs():
    r = parse_tensor_ref("fc1/MatMul:output:0[0, :4]")
    assert (r.kind, r.name, r.io, r.index, r.slice_text) == ("npu", "fc1/MatMul", "output", 0, "[0, :4]")
    r = parse_tensor_ref("a:b:input:2")
    assert (r.name, r.io, r.index) == ("a:b", "input", 2)
    r = parse_tensor_ref("golden:conv1/Relu:1")
    assert (r.kind, r.name, r.index) == ("golden", "conv1/Relu", 1)
    assert parse_tensor_ref("golden:conv1/Relu").index == 0
    r = parse_tensor_ref("/tmp/x.npy[..., -1]")
    assert (r.kind, r.name) == ("file", "/tmp/x.npy")


def test_slices_index_like_numpy():
    a = np.arange(60).reshape(3, 4, 5)
    for text, key in [("[0, :4]", (0, slice(None, 4))), ("[..., ::2]", (Ellipsis, slice(None, None, 2))),
                      ("[-1, 1:3, None]", (-1, slice(1, 3), None))]:
        assert parse_slice(text) == key
        np.testing.assert_array_equal(apply_slice(a, text, "a"), a[key])


@pytest.mark.parametrize("text", ["op:output:0[a]", "op:output:0[1:2:3:4]", "op:output:0[]",
                                  "op:output:0[0", "justaname", "op:outputs:0"])
def test_bad_refs_are_one_error_pointing_into_the_text(text):
    with pytest.raises(CommandError) as info:
        parse_tensor_ref(text)
    lines = str(info.value).split("\n")
    # one line, or a slice error: the reason, the reference, a caret under a column of it
    assert len(lines) in (1, 3)
    if len(lines) == 3:
        assert lines[1] == f"  {text}" and lines[2].strip() == "^" and len(lines[2]) - 3 <= len(text)


def test_out_of_range_slice_names_the_shape():
    with pytest.raises(CommandError, match=r"shape \(3, 4\)"):
        apply_slice(np.zeros((3, 4)), "[5]", "x")
