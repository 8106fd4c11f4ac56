"""The naive baseline: what a straightforward tool does for each pshell measurement.

    python bench/baseline.py startup WS         # walk the dump folders + text_format graph parse
    python bench/baseline.py ac WS              # value scan of every NPU output for inf/nan
    python bench/baseline.py compare WS         # all ten metrics for every NPU/golden pair
    python bench/baseline.py ni WS OP           # the op from the graph, stats of its tensors
    python bench/baseline.py pt WS 'OP:output:0[0, :4]'

Each mode prints one JSON line (counts the harness checks against pshell's answer, so that the
two sides provably did the same work). Single process, plain numpy and protobuf, no caching
beyond "the file just read": ``np.fromfile`` of the whole dump, the protobuf header parsed with
``DumpData.FromString``, the tensor bytes viewed with ``np.frombuffer``, the layout restored with
one transpose, the golden ``np.load``-ed whole, both cast to float32 and every metric evaluated
with its own whole-array numpy expression (formats.md A.8.3). Graphs are parsed with
``google.protobuf.text_format`` (the reference parser every tool starts with).

``compare`` borrows pshell's discovery and NPU->golden mapping (formats.md A.8.5: names and
graph only, a small part of the run) so that both sides compare exactly the same pairs; the
ratio therefore measures the data path: reading, decoding, layout, metrics.
"""

from __future__ import annotations

import json
import math
import os
import re
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

EPS = np.finfo(np.float64).eps
EPS32 = np.finfo(np.float32).eps

# formats.md §1.3 OutputDataType codes -> numpy (the ones a straightforward tool handles)
_DTYPES = {1: "<f4", 2: "<f2", 3: "i1", 4: "u1", 5: "<i2", 6: "<u2", 7: "<i4", 8: "<i8", 9: "<u4",
           10: "<u8", 11: "?", 12: "<f8", 16: "<c8", 17: "<c16", 23: "<i8"}
_BF16 = 27
# formats.md §1.3 OutputFormat codes used below
_NCHW, _NHWC, _ND, _NC1HWC0, _FRACTAL_Z, _FRACTAL_NZ = 0, 1, 2, 3, 4, 29
_ESCAPE = str.maketrans({".": "_", "/": "_", "\\": "_", " ": "_"})


# ------------------------------------------------------------------------------------------------
# metrics, the plain way

def naive_metrics(npu: np.ndarray, golden: np.ndarray) -> dict:
    """formats.md A.8.3 (+ msprobe's thousandth ratios), one whole-array expression per metric,
    full-size temporaries; keys as pshell's ``Metrics.as_json``."""
    x = npu.reshape(-1).astype(np.float32)
    y = golden.reshape(-1).astype(np.float32)
    with np.errstate(all="ignore"):
        nx, ny = np.linalg.norm(x), np.linalg.norm(y)
        if x.size and all(d == 1 for d in npu.shape):
            cos = 1.0                                        # "scalar" shape type
        elif nx <= EPS and ny < EPS:
            cos = 1.0
        elif math.sqrt(nx) <= EPS or math.sqrt(ny) <= EPS:
            cos = float("nan")
        else:
            cos = min(float(np.sum((x / nx) * (y / ny))), 1.0)
        diff = x - y
        rel = np.where(np.abs(y) > EPS, np.abs(x / y - 1), 0)
        out = {
            "cosine": cos,
            "max_abs_error": float(np.max(np.abs(diff))) if x.size else float("nan"),
            "accumulated_relative_error": float(rel.sum()),
            "relative_euclidean_distance": (float(np.sqrt(np.sum(diff ** 2) / np.sum(y ** 2)))
                                            if math.sqrt(ny) > EPS else 0.0),
            "mean_abs_error": float(np.mean(np.abs(diff))),
            "rmse": float(np.sqrt(np.mean(diff ** 2))),
            "max_relative_error": float(rel.max()) if x.size else float("nan"),
            "mean_relative_error": float(rel.mean()),
            "standard_deviation": {"mean_npu": float(np.mean(x, dtype=np.float64)),
                                   "std_npu": float(np.std(x, dtype=np.float64)),
                                   "mean_golden": float(np.mean(y, dtype=np.float64)),
                                   "std_golden": float(np.std(y, dtype=np.float64))},
        }

        def scaled(v):
            if not v.size:
                return v
            span = v.max() - v.min()
            v = (v - v.min()) / span if span != 0 else v
            v = np.maximum(v, EPS32)
            return v / v.sum()

        p, q = scaled(x), scaled(y)
        kl = float(np.sum(p * np.log(p / q))) if x.size else float("nan")
        out["kl_divergence"] = 0.0 if abs(kl) < 2.2e-16 else kl
        zero = y == 0
        xn, yn = x.copy(), y.copy()
        xn[zero] += EPS32
        yn[zero] += EPS32
        err = np.abs((xn - yn) / yn)
        out["one_thousandth_err_ratio"] = float(np.sum(err < 0.001) / err.size) if err.size else float("nan")
        out["five_thousandths_err_ratio"] = float(np.sum(err < 0.005) / err.size) if err.size else float("nan")
    return out


def tensor_stats(arr: np.ndarray) -> dict:
    """min/max/mean/std and nan/inf/zero counts, each its own pass over a float32 copy."""
    v = arr.astype(np.float32).reshape(-1)
    with np.errstate(all="ignore"):
        return {"count": int(v.size), "min": float(np.min(v)) if v.size else None,
                "max": float(np.max(v)) if v.size else None, "mean": float(np.mean(v)) if v.size else None,
                "std": float(np.std(v)) if v.size else None, "nan": int(np.isnan(v).sum()),
                "pos_inf": int(np.isposinf(v).sum()), "neg_inf": int(np.isneginf(v).sum()),
                "zero": int((v == 0).sum())}


# ------------------------------------------------------------------------------------------------
# dump files, the plain way

class NaiveDump:
    """A whole dump file in memory with its parsed header (formats.md §1.2)."""

    def __init__(self, path: str | os.PathLike):
        from precision_shell.formats.protoload import dump_data_pb

        self.path = str(path)
        self.raw = np.fromfile(self.path, dtype=np.uint8)
        header_len = int(self.raw[:8].view("<u8")[0])
        self.msg = dump_data_pb().DumpData.FromString(self.raw[8:8 + header_len].tobytes())
        self.offsets: dict[tuple[str, int], int] = {}
        pos = 8 + header_len
        for io, tensors in (("input", self.msg.input), ("output", self.msg.output)):
            for i, t in enumerate(tensors):
                self.offsets[(io, i)] = pos
                pos += t.size

    def entry(self, io: str, index: int):
        return (self.msg.input if io == "input" else self.msg.output)[index]

    def device_array(self, io: str, index: int) -> np.ndarray:
        t = self.entry(io, index)
        shape = tuple(int(d) for d in t.shape.dim)
        start = self.offsets[(io, index)]
        if t.data_type == _BF16:
            import ml_dtypes
            dtype = np.dtype(ml_dtypes.bfloat16)
        else:
            dtype = np.dtype(_DTYPES[t.data_type])
        count = math.prod(shape) if shape else t.size // dtype.itemsize
        arr = np.frombuffer(self.raw, dtype=dtype, count=count, offset=start)
        return arr.reshape(shape) if shape else arr

    def logical_array(self, io: str, index: int, target_format: str | None = None) -> np.ndarray:
        t = self.entry(io, index)
        return to_logical(self.device_array(io, index), t.format,
                          tuple(int(d) for d in t.original_shape.dim), target_format)


def to_logical(arr: np.ndarray, fmt: int, shape: tuple[int, ...], target: str | None) -> np.ndarray:
    """formats.md §7 / A.6 for the layouts the generator writes; anything else is reshaped."""
    if fmt == _NC1HWC0 and arr.ndim == 5 and len(shape) == 4:
        n, c1, h, w, c0 = arr.shape
        nchw = arr.transpose(0, 1, 4, 2, 3).reshape(n, c1 * c0, h, w)
        if target == "NHWC":
            return nchw[:, :shape[3]].transpose(0, 2, 3, 1).copy()
        return nchw[:, :shape[1]].copy()
    if fmt == _FRACTAL_Z and arr.ndim == 4 and len(shape) == 4:
        _, no, ni, c0 = arr.shape
        n, c, h, w = shape
        c1 = arr.shape[0] // (h * w)
        full = arr.reshape(c1, h, w, no, ni, c0).transpose(3, 4, 0, 5, 1, 2).reshape(no * ni, c1 * c0, h, w)
        return full[:n, :c].copy()
    if fmt == _FRACTAL_NZ and arr.ndim >= 4 and len(shape) >= 2:
        *batch, c1, no, ni, c0 = arr.shape
        b = math.prod(batch)
        full = arr.reshape(b, c1, no, ni, c0).transpose(0, 2, 3, 1, 4).reshape(b, no * ni, c1 * c0)
        return full[:, :shape[-2], :shape[-1]].reshape(shape).copy()
    if shape and math.prod(shape) == arr.size:
        return arr.reshape(shape)
    return arr


def walk_dumps(root: Path):
    """(path, fields) of every NPU dump file under ``root``: a name with >= 4 dot fields whose
    trailing fields are numbers (formats.md §1.1)."""
    for dirpath, _, filenames in os.walk(root):
        for name in filenames:
            parts = name.split(".")
            if len(parts) >= 4 and all(p.isdigit() for p in parts[2:]):
                yield os.path.join(dirpath, name), parts


# ------------------------------------------------------------------------------------------------
# the modes

def _graph_models(pd: Path):
    from google.protobuf import text_format

    from precision_shell.formats.protoload import ge_ir_pb

    models = []
    for path in sorted(pd.glob("npu/*/graph/ge_proto_*_Build.txt")):
        models.append(text_format.Parse(path.read_text(), ge_ir_pb().ModelDef()))
    return models


def startup(ws: Path) -> dict:
    """List every file with its size, classify by name, parse the graph and the fusion report."""
    pd = ws / "precision_data"
    dumps = golden = other = size = 0
    for dirpath, _, filenames in os.walk(pd):
        for name in filenames:
            size += os.stat(os.path.join(dirpath, name)).st_size
            parts = name.split(".")
            if name.endswith(".npy"):
                golden += 1
            elif len(parts) >= 4 and all(p.isdigit() for p in parts[2:]):
                dumps += 1
            else:
                other += 1
    models = _graph_models(pd)
    ops = {op.name: op for m in models for g in m.graph for op in g.op}
    fusion = pd / "fusion" / "fusion_result.json"
    passes = len(json.loads(fusion.read_text())) if fusion.exists() else 0
    return {"dump_files": dumps, "golden_files": golden, "other_files": other, "bytes": size,
            "ops": len(ops), "fusion_entries": passes}


def overflow_scan(ws: Path) -> dict:
    """Every output of every dump, read and checked for nan/inf, in timestamp order; an op with
    a non-finite output is a producer when all its inputs are finite (product.md §5)."""
    found, producers = [], 0
    scanned = 0
    for path, parts in sorted(walk_dumps(ws / "precision_data" / "npu"), key=lambda p: int(p[1][-1])):
        if parts[0] == "Opdebug":
            continue
        dump = NaiveDump(path)
        for i in range(len(dump.msg.output)):
            stats = tensor_stats(dump.logical_array("output", i))
            scanned += 1
            if stats["nan"] or stats["pos_inf"] or stats["neg_inf"]:
                found.append(dump.msg.op_name)
                inputs = [tensor_stats(dump.logical_array("input", j)) for j in range(len(dump.msg.input))]
                producers += all(not (s["nan"] or s["pos_inf"] or s["neg_inf"]) for s in inputs)
                break
    return {"outputs_scanned": scanned, "non_finite_ops": len(found), "producers": producers}


def compare(ws: Path) -> dict:
    from precision_shell.analysis.compare.mapping import plan_golden_compare
    from precision_shell.model.session import Session

    start = time.perf_counter()
    session = Session.open(ws)
    plan = plan_golden_compare(session.graph, session.dumps, session.golden)
    planned = time.perf_counter() - start
    compared = failing = skipped = 0
    dump: NaiveDump | None = None
    for job in plan.jobs:
        if job.npu is None or job.golden is None:
            continue
        if dump is None or dump.path != job.npu.path:      # one whole-file read per op
            dump = NaiveDump(job.npu.path)
        npu = dump.logical_array(job.npu.io, job.npu.index, job.npu.target_format)
        golden = np.load(job.golden.path)
        if npu.size != golden.size:
            skipped += 1
            continue
        metrics = naive_metrics(npu, golden)
        compared += 1
        failing += not metrics["cosine"] > session.settings.threshold
    return {"compared": compared, "failing_tensors": failing, "size_mismatch": skipped,
            "plan_seconds": round(planned, 4), "data_seconds": round(time.perf_counter() - start - planned, 4)}


def node_info(ws: Path, op_name: str) -> dict:
    pd = ws / "precision_data"
    ops = {op.name: op for m in _graph_models(pd) for g in m.graph for op in g.op}
    op = ops[op_name]
    key = op_name.translate(_ESCAPE)
    files = sorted((p for p in walk_dumps(pd / "npu") if p[1][1] == key), key=lambda p: int(p[1][-1]))
    stats = []
    if files:
        dump = NaiveDump(files[-1][0])
        for io, tensors in (("input", dump.msg.input), ("output", dump.msg.output)):
            stats += [tensor_stats(dump.logical_array(io, i)) for i in range(len(tensors))]
    originals = [s.decode() for s in op.attr["_datadump_original_op_names"].list.s]
    golden = []
    for name in originals:
        for path in sorted((pd / "tf" / "dump").glob(f"{name.translate(_ESCAPE)}.*.npy")):
            golden.append(tensor_stats(np.load(path)))
    return {"op": op.name, "type": op.type, "inputs": len(op.input), "dump_tensors": len(stats),
            "golden_tensors": len(golden)}


_TENSOR = re.compile(r"^(?P<op>.+):(?P<io>input|output):(?P<index>\d+)(?P<slice>\[.*\])?$")


def _parse_slice(text: str) -> tuple:
    parts = []
    for item in text.strip()[1:-1].split(","):
        item = item.strip()
        if ":" in item:
            parts.append(slice(*(int(v) if v.strip() else None for v in item.split(":"))))
        else:
            parts.append(int(item))
    return tuple(parts)


def print_tensor(ws: Path, ref: str) -> dict:
    m = _TENSOR.match(ref.strip())
    key = m["op"].translate(_ESCAPE)
    files = sorted((p for p in walk_dumps(ws / "precision_data" / "npu") if p[1][1] == key),
                   key=lambda p: int(p[1][-1]))
    dump = NaiveDump(files[-1][0])
    arr = dump.logical_array(m["io"], int(m["index"]))
    if m["slice"]:
        arr = arr[_parse_slice(m["slice"])]
    text = np.array2string(arr, threshold=1000)
    return {"shape": list(arr.shape), **tensor_stats(arr), "printed_chars": len(text)}


# ------------------------------------------------------------------------------------------------
# completion, the plain way

def naive_complete(names: list[str], query: str) -> list[str]:
    """Fuzzy (subsequence) match of ``query`` against every name, best first: a fresh regex per
    keystroke and a linear scan, as a straightforward completer does."""
    pattern = re.compile(".*?".join(map(re.escape, query)), re.IGNORECASE)
    hits = [n for n in names if pattern.search(n)]
    hits.sort(key=lambda n: (query not in n, len(n), n))
    return hits


# ------------------------------------------------------------------------------------------------
# the vendor engine (msaccucmp inside mindstudio-probe), when it happens to be installed

# ../shared/tools/vendor-engine/setup.sh installs the engine here (a launcher script)
VENDOR_LAUNCHER = Path.home() / ".cache" / "pshell-vendor-engine" / "msaccucmp"


def vendor_engine() -> tuple[Path | None, str]:
    """(the launcher set up by the vendor-engine tools, or msaccucmp.py when ``msprobe`` is
    importable here, "") else (None, why not). Only detected: a benchmark must not install
    anything."""
    import importlib.util

    if VENDOR_LAUNCHER.exists():
        return VENDOR_LAUNCHER, ""

    try:
        spec = importlib.util.find_spec("msprobe")
    except (ImportError, ValueError):
        spec = None
    if spec is None or not spec.submodule_search_locations:
        return None, "not installed"
    for folder in spec.submodule_search_locations:
        script = Path(folder) / "msaccucmp" / "msaccucmp.py"
        if script.exists():
            return script, ""
    return None, "msprobe is installed but has no msaccucmp/msaccucmp.py"


def _attr_json(attr) -> dict:
    """One ge.proto AttrDef the way atc's Pb2Json writes it (formats.md A.8.5): the fields the
    vendor's fusion rule reads (s, i, b, f, list of s/i/b/f)."""
    kind = attr.WhichOneof("value")
    if kind == "s":
        return {"s": attr.s.decode(errors="replace")}
    if kind in ("i", "b", "f"):
        return {kind: getattr(attr, kind)}
    if kind == "list":
        lst = attr.list
        return {"list": {k: ([v.decode(errors="replace") for v in lst.s] if k == "s" else list(getattr(lst, k)))
                         for k in ("s", "i", "b", "f") if len(getattr(lst, k))}}
    return {}


def _enum_name(message, field: str) -> str | int:
    value = getattr(message, field)
    named = message.DESCRIPTOR.fields_by_name[field].enum_type.values_by_number.get(value)
    return named.name if named is not None else value


def write_vendor_rule(graph_file: Path, out: Path) -> Path:
    """The GE graph as the JSON fusion rule ``msaccucmp compare -f`` takes (``atc --mode=5``)."""
    from precision_shell.formats.graph.text import parse_graph_text

    model = parse_graph_text(graph_file)
    graphs = []
    for g in model.graph:
        ops = []
        for op in g.op:
            ops.append({"name": op.name, "type": op.type, "id": op.id, "input": list(op.input),
                        "attr": [{"key": k, "value": _attr_json(v)} for k, v in op.attr.items()],
                        "output_desc": [{"dtype": _enum_name(d, "dtype"), "attr": [{"key": k, "value": _attr_json(v)}
                                                                   for k, v in d.attr.items()]}
                                        for d in op.output_desc]})
        graphs.append({"name": g.name, "op": ops})
    out.write_text(json.dumps({"name": model.name, "graph": graphs}))
    return out


def vendor_compare_cmd(script: Path, ws: Path, manifest: dict, out: Path) -> list[str]:
    """``msaccucmp compare`` on the workspace's NPU dump set and golden folder (its default
    worker count: half the cores, formats.md A.9)."""
    out.mkdir(parents=True, exist_ok=True)
    rule = write_vendor_rule(ws / manifest["paths"]["graph_file"], out / "fusion_rule.json")
    launch = [sys.executable, str(script)] if script.suffix == ".py" else [str(script)]
    return [*launch, "compare", "-m", str(ws / manifest["paths"]["npu_dump_dir"]),
            "-g", str(ws / manifest["paths"]["golden_dir"]), "-f", str(rule), "-out", str(out)]


def main(argv: list[str]) -> int:
    if len(argv) < 2:
        print(__doc__, file=sys.stderr)
        return 2
    mode, ws = argv[0], Path(argv[1])
    modes = {"startup": lambda: startup(ws), "ac": lambda: overflow_scan(ws), "compare": lambda: compare(ws),
             "ni": lambda: node_info(ws, argv[2]), "pt": lambda: print_tensor(ws, argv[2])}
    if mode not in modes:
        print(f"unknown mode {mode!r}; one of {', '.join(modes)}", file=sys.stderr)
        return 2
    print(json.dumps(modes[mode]()))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
