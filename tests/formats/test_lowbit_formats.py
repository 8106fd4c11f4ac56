"""Low-precision dump dtypes (issue 27): every code of every format decodes bit-exactly to
float32, in ND and device layouts, through the dump reader and the commands.

Expected values are built here from the published definitions, in the encode direction
(fields -> code -> value), independently of pshell's decode tables: HiFloat8 from arXiv
2409.16626 §2, the OCP formats from their (exponent bits, mantissa bits, bias, specials), E1M2
from CANN's S|E|MM with bias 1. ml_dtypes cross-checks the OCP ones.
"""

from __future__ import annotations

import math

import ml_dtypes
import numpy as np
import pytest

from precision_shell.formats.dump_file import DumpTensor, read_dump_header, read_logical_array, write_dump
from precision_shell.formats.lowbit import FORMATS, by_name, pack_nibbles
from precision_shell.formats.lowbit.rounding import round_to
from precision_shell.samples.naming import dump_file_name
from tests.conftest import json_docs, run_cli

ND, NC1HWC0, FRACTAL_Z, FRACTAL_NZ = 2, 3, 4, 29


def _paper_hifloat8() -> dict[int, float]:
    """Every HiFloat8 code, assembled field by field from the paper's Table 1 and §2."""
    table = {0x00: 0.0, 0x80: math.nan, 0x6F: math.inf, 0xEF: -math.inf}
    # (Dot bits as a string, exponent width D, mantissa width)
    classes = [("11", 4, 1), ("10", 3, 2), ("01", 2, 3), ("001", 1, 3), ("0001", 0, 3)]
    for sign in (0, 1):
        for dot, d, m in classes:
            exponents = [0] if d == 0 else [s * mag for s in (1, -1)
                                           for mag in range(2 ** (d - 1), 2 ** d)]
            for e in exponents:
                for mant in range(2 ** m):
                    if d == 0:
                        e_bits = ""
                    else:   # sign-magnitude, the leading 1 of the magnitude implicit
                        e_bits = ("1" if e < 0 else "0") + format(abs(e) - 2 ** (d - 1), f"0{d - 1}b")[-(d - 1):] \
                            if d > 1 else ("1" if e < 0 else "0")
                    bits = f"{sign}{dot}{e_bits}{format(mant, f'0{m}b')}"
                    assert len(bits) == 8
                    code = int(bits, 2)
                    if code in (0x6F, 0xEF):
                        continue   # 1.5 * 2^15 is taken by +-inf
                    table[code] = (-1) ** sign * 2.0 ** e * (1 + mant / 2 ** m)
        for mant in range(1, 8):    # denormals, Dot 0000: 2^(M - 23)
            table[(sign << 7) | mant] = (-1) ** sign * 2.0 ** (mant - 23)
    assert len(table) == 256
    return table


def _minifloat(code: int, e_bits: int, m_bits: int, bias: int, specials: str) -> float:
    """An OCP-style sign | exponent | mantissa code (IEEE rules, then the format's specials)."""
    sign = -1.0 if code >> (e_bits + m_bits) & 1 else 1.0
    e = code >> m_bits & ((1 << e_bits) - 1)
    m = code & ((1 << m_bits) - 1)
    if specials == "ieee" and e == (1 << e_bits) - 1:
        return sign * math.inf if m == 0 else math.nan
    if specials == "fn" and e == (1 << e_bits) - 1 and m == (1 << m_bits) - 1:
        return math.nan
    if e == 0:
        return sign * m * 2.0 ** (1 - bias - m_bits)
    return sign * (1 + m / 2 ** m_bits) * 2.0 ** (e - bias)


def _expected_table(name: str) -> np.ndarray:
    if name == "hifloat8":
        t = _paper_hifloat8()
        return np.array([t[c] for c in range(256)], np.float32)
    if name == "float8_e8m0":
        return np.array([math.nan if c == 255 else 2.0 ** (c - 127) for c in range(256)], np.float32)
    spec = {"float8_e5m2": (5, 2, 15, "ieee"), "float8_e4m3fn": (4, 3, 7, "fn"), "float6_e3m2": (3, 2, 3, ""),
            "float6_e2m3": (2, 3, 1, ""), "float4_e2m1": (2, 1, 1, ""), "float4_e1m2": (1, 2, 1, "")}[name]
    bits = 1 + spec[0] + spec[1]
    return np.array([_minifloat(c, *spec) for c in range(2 ** bits)], np.float32)


def _same_bits(a: np.ndarray, b: np.ndarray) -> bool:
    """Equal as float32 bit patterns, every NaN taken as equal to every NaN."""
    a, b = np.asarray(a, np.float32), np.asarray(b, np.float32)
    nan = np.isnan(a)
    return bool(np.array_equal(nan, np.isnan(b)) and np.array_equal(a[~nan].view(np.uint32), b[~nan].view(np.uint32)))


@pytest.mark.parametrize("fmt", FORMATS, ids=lambda f: f.name)
def test_every_code_decodes_as_its_published_definition(fmt):
    assert _same_bits(fmt.values, _expected_table(fmt.name))


def test_hifloat8_facts_of_the_appendix():
    t = by_name("hifloat8")
    assert t.nan_codes == (0x80,) and t.inf_codes == (0x6F, 0xEF)
    assert t.max_finite == 2.0 ** 15 and float(t.values[0x6E]) == 2.0 ** 15
    assert float(t.values[0x01]) == 2.0 ** -22 and np.count_nonzero(t.values == 0) == 1
    # the two shortest-exponent classes (D=0 and D=1), the vendor decoder's weak spot
    assert float(t.values[0b0_0001_101]) == 1.625 and float(t.values[0b0_001_1_011]) == 0.5 * 1.375


@pytest.mark.parametrize("name,ml", [("float8_e5m2", "float8_e5m2"), ("float8_e4m3fn", "float8_e4m3fn"),
                                     ("float8_e8m0", "float8_e8m0fnu"), ("float6_e3m2", "float6_e3m2fn"),
                                     ("float6_e2m3", "float6_e2m3fn"), ("float4_e2m1", "float4_e2m1fn")])
def test_ocp_tables_agree_with_ml_dtypes(name, ml):
    fmt = by_name(name)
    codes = np.arange(2 ** fmt.bits, dtype=np.uint8)
    assert _same_bits(fmt.values, codes.view(getattr(ml_dtypes, ml)).astype(np.float32))


@pytest.mark.parametrize("name,ml", [("float8_e5m2", "float8_e5m2"), ("float8_e4m3fn", "float8_e4m3fn"),
                                     ("float6_e3m2", "float6_e3m2fn"), ("float6_e2m3", "float6_e2m3fn"),
                                     ("float4_e2m1", "float4_e2m1fn")])
def test_encoder_rounds_as_ml_dtypes_nearest_even(name, ml):
    fmt = by_name(name)
    v = np.unique(_expected_table(name)[np.isfinite(_expected_table(name))].astype(np.float32))
    mids = ((v[:-1].astype(np.float64) + v[1:]) / 2).astype(np.float32)   # exact: few mantissa bits
    x = np.concatenate([mids, -mids, v, np.nextafter(mids, np.float32(0)), np.nextafter(mids, np.float32(np.inf)),
                        np.random.default_rng(0).uniform(-fmt.max_finite, fmt.max_finite, 5000).astype(np.float32)])
    got = round_to(x.astype(np.float64), fmt)
    assert np.array_equal(got.values, x.astype(getattr(ml_dtypes, ml)).astype(np.float64))
    assert np.array_equal(fmt.values[got.codes].astype(np.float64), got.values)


def test_hifloat8_encoder_rounds_half_away_and_saturates():
    fmt = by_name("hifloat8")
    t = _paper_hifloat8()
    finite = sorted({abs(v) for v in t.values() if math.isfinite(v)})
    mids = [(a + b) / 2 for a, b in zip(finite, finite[1:])]
    got = round_to(np.array(mids), fmt).values
    assert np.array_equal(got, np.array(finite[1:]))                    # every tie goes up (away)
    below = round_to(np.nextafter(np.array(mids), 0), fmt).values
    assert np.array_equal(below, np.array(finite[:-1]))
    sat = round_to(np.array([1e6, -40000.0]), fmt)
    assert list(sat.values) == [32768.0, -32768.0] and sat.saturated.all()


# ------------------------------------------------------------------------------------------------
# through dump files: device layouts and commands

def _nz(logical: np.ndarray, c0: int) -> np.ndarray:
    """(rows, cols) -> FRACTAL_NZ (C1, N1, 16, C0), zero padded, written from the layout's definition."""
    rows, cols = logical.shape
    n1, c1 = -(-rows // 16), -(-cols // c0)
    padded = np.zeros((n1 * 16, c1 * c0), logical.dtype)
    padded[:rows, :cols] = logical
    return padded.reshape(n1 * 16, c1, c0).transpose(1, 0, 2).reshape(c1, n1, 16, c0).copy()


def _nc1hwc0(logical: np.ndarray, c0: int) -> np.ndarray:
    n, c, h, w = logical.shape
    c1 = -(-c // c0)
    padded = np.zeros((n, c1 * c0, h, w), logical.dtype)
    padded[:, :c] = logical
    return padded.reshape(n, c1, c0, h, w).transpose(0, 1, 3, 4, 2).copy()


def _fractal_z(logical: np.ndarray, c0: int) -> np.ndarray:
    n, c, h, w = logical.shape
    c1, n1 = -(-c // c0), -(-n // 16)
    padded = np.zeros((n1 * 16, c1 * c0, h, w), logical.dtype)
    padded[:n, :c] = logical
    # (C1, H, W, N, C0) -> (C1*H*W, N1, 16, C0)
    return padded.reshape(n1 * 16, c1, c0, h, w).transpose(1, 3, 4, 0, 2).reshape(c1 * h * w, n1, 16, c0).copy()


LAYOUTS = {"ND": (ND, None), "FRACTAL_NZ": (FRACTAL_NZ, _nz), "NC1HWC0": (NC1HWC0, _nc1hwc0),
           "FRACTAL_Z": (FRACTAL_Z, _fractal_z)}


@pytest.mark.parametrize("fmt", [f for f in FORMATS if f.dtype_code not in (34, 35)], ids=lambda f: f.name)
@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_dump_round_trip_in_every_layout(fmt, layout, tmp_path):
    rng = np.random.default_rng(fmt.dtype_code)
    c0 = 64 if fmt.packed else 32           # formats.md B: C0 is 32 for 8-bit, 64 for 4-bit
    shape = (20, 70) if layout in ("ND", "FRACTAL_NZ") else (18, 40, 2, 3)
    codes = rng.integers(0, 2 ** fmt.bits, shape).astype(np.uint8)
    code_format, to_device = LAYOUTS[layout]
    device = codes if to_device is None else to_device(codes, c0)
    path = tmp_path / "dump"
    write_dump(path, "op", [], [DumpTensor(device, fmt.dtype_code, code_format, original_shape=shape)])
    header = read_dump_header(path)
    entry = header.outputs[0]
    assert entry.size == (device.size + 1) // 2 if fmt.packed else device.size
    got = read_logical_array(header, entry)
    assert got.dtype == np.float32 and got.shape == shape
    assert _same_bits(got, _expected_table(fmt.name)[codes])


def _packed_by_hand(codes: np.ndarray) -> bytes:
    flat = codes.reshape(-1)
    return bytes(int(flat[i]) | int(flat[i + 1]) << 4 for i in range(0, flat.size, 2))


def test_fp4_packing_is_low_nibble_first():
    codes = np.array([1, 2, 15, 0, 7, 8], np.uint8)
    assert pack_nibbles(codes).tobytes() == _packed_by_hand(codes) == bytes([0x21, 0x0F, 0x87])


def _lowbit_workspace(root):
    dump = root / "dump"
    dump.mkdir(parents=True)
    rng = np.random.default_rng(7)
    made = {}

    def add(op, device, code, fmt_code, original):
        write_dump(dump / dump_file_name("Cast", op, len(made) + 1, 0, 1700000000000000 + len(made), 5), op, [],
                   [DumpTensor(device, code, fmt_code, original_shape=original)])
        made[op] = device

    f8 = rng.standard_normal((20, 40)).astype(ml_dtypes.float8_e5m2)
    add("f8_nz", _nz(f8, 32), 34, FRACTAL_NZ, (20, 40))
    hif8 = rng.integers(0, 256, (10, 40)).astype(np.uint8)
    add("hif8_nz", _nz(hif8, 32), 33, FRACTAL_NZ, (10, 40))
    fp4 = rng.integers(0, 16, (10, 100)).astype(np.uint8)
    add("fp4_nz", _nz(fp4, 64), 39, FRACTAL_NZ, (10, 100))
    add("odd_fp4", rng.integers(0, 16, 7).astype(np.uint8), 40, ND, None)
    add("unknown_dtype", np.zeros(4, np.uint8), 41, ND, None)
    return f8, hif8, fp4


def test_commands_on_low_precision_dumps(tmp_path, capsys):
    f8, hif8, fp4 = _lowbit_workspace(tmp_path / "ws")
    ws, out = tmp_path / "ws", tmp_path / "out"
    # float8 in FRACTAL_NZ was an internal TypeError (as_strided on an ml_dtypes type)
    rc, text, err = run_cli(capsys, ws, "-o", out, "-c", "pt f8_nz:0 -l 0", "--format", "json")
    assert rc == 0, err
    doc = json_docs(text)[0]
    assert _same_bits(np.array(doc["values"], np.float32), f8.astype(np.float32))
    expected = _expected_table("hifloat8")[hif8]
    rc, text, err = run_cli(capsys, ws, "-o", out, "-c", f"pt hif8_nz:0 -w {tmp_path / 'h.npy'}")
    assert rc == 0, err
    saved = np.load(tmp_path / "h.npy")
    assert saved.dtype == np.float32 and _same_bits(saved, expected)
    assert f"±32768 (hifloat8 max)  {int(np.count_nonzero(np.abs(expected) == 32768)):,}" in text
    for op, want in (("f8_nz", f8.astype(np.float32)), ("fp4_nz", _expected_table("float4_e2m1")[fp4])):
        rc, text, err = run_cli(capsys, ws, "-o", out, "-c", f"dc {op} -o {out / op}")
        assert rc == 0, err
        (npy,) = (out / op).glob("*.npy")
        arr = np.load(npy)      # never a void dtype numpy cannot use
        assert arr.dtype == np.float32 and _same_bits(arr, want)
    # bad input: one line naming the file each; the other tensors decode
    rc, text, err = run_cli(capsys, ws, "-o", out, "-c", "pt odd_fp4:0")
    assert rc != 0 and "odd_fp4" in err and "odd number of elements (7)" in err and len(err.strip().splitlines()) == 1
    rc, text, err = run_cli(capsys, ws, "-o", out, "-c", "pt unknown_dtype:0")
    assert rc != 0 and "unknown_dtype" in err and "code 41" in err and "Traceback" not in err
    rc, text, err = run_cli(capsys, ws, "-o", out, "-c", "ac -l 0", "--format", "json")
    assert rc == 0, err
    rows = {r["op"]: r for r in json_docs(text)[0]}
    h = rows["hif8_nz"]["outputs"][0]
    assert (h["nan"], h["pos_inf"], h["neg_inf"]) == (int(np.count_nonzero(hif8 == 0x80)),
                                                      int(np.count_nonzero(hif8 == 0x6F)),
                                                      int(np.count_nonzero(hif8 == 0xEF)))
    assert h["saturated"] == int(np.count_nonzero((hif8 & 0x7F) == 0x6E))
    assert rows["fp4_nz"]["outputs"][0]["saturated"] == int(np.count_nonzero((fp4 & 7) == 7))


@pytest.mark.parametrize("name", ["hifloat8", "float8_e8m0", "float6_e3m2", "float6_e2m3", "float4_e2m1",
                                  "float4_e1m2"])
def test_tables_agree_with_en_dtypes(name):
    """en_dtypes (an independent implementation, fixture made by tests/data/lowbit/
    make_en_dtypes_tables.py in its own venv) decodes every code as pshell does."""
    import json
    from pathlib import Path

    doc = json.loads((Path(__file__).parents[1] / "data/lowbit/en_dtypes_tables.json").read_text())
    theirs = np.array([int(h, 16) for h in doc["float32_bits"][name]], np.uint32).view(np.float32)
    assert _same_bits(by_name(name).values, theirs)


def test_hifloat8_encoder_agrees_with_en_dtypes_on_every_tie():
    import json
    from pathlib import Path

    doc = json.loads((Path(__file__).parents[1] / "data/lowbit/en_dtypes_tables.json").read_text())["hifloat8_rounding"]
    probes = np.array([int(h, 16) for h in doc["float32_bits"]], np.uint32).view(np.float32)
    got = round_to(probes.astype(np.float64), by_name("hifloat8"))
    assert got.codes.tolist() == doc["codes"]
