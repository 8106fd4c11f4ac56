"""The work of ``replay`` (numpy): gather one op's tensors from the session, replay, render,
export. Imported on first use by :mod:`.replay_cmd` so start-up does not pay for numpy."""

from __future__ import annotations

import json
from typing import Any, Callable

import numpy as np

from precision_shell.analysis.compare.mapping import op_golden_refs
from precision_shell.analysis.replay.calls import plain_attrs
from precision_shell.analysis.replay.engine import OpCase, ReplayError, excess_ratio, ideal_error, own_input_error, replay
from precision_shell.analysis.replay.kernels import Kernel, kernel_for
from precision_shell.analysis.replay.metrics import cosine
from precision_shell.analysis.replay.profiles import DEFAULT_PROFILES, format_of, parse_profile
from precision_shell.analysis.replay.reproducer import reproducer_script
from precision_shell.analysis.replay.verdict import InputCheck, Verdict
from precision_shell.atomic_write import write_atomic
from precision_shell.commands.results import Sections, Table
from precision_shell.commands.tensor_print import read_tensor
from precision_shell.config import current_config
from precision_shell.errors import CommandError, UsageError
from precision_shell.formats.golden_npy import load_npy
from precision_shell.model.session import Session
from precision_shell.model.tensor_ref import golden_json_name, golden_name_of, name_of
from precision_shell.model.tensor_resolve import resolve_tensor

# session.results key: op name -> the Verdict of its last replay (shown in the `next` panel)
REPLAYED = "replay"


def _tensor(session: Session, op_name: str, io: str, index: int) -> np.ndarray:
    return read_tensor(session, resolve_tensor(session, f"{op_name}:{io}:{index}"))


def _golden(session: Session, ref: str | None) -> np.ndarray | None:
    if ref is None or session.golden.folder is None:
        return None
    name, idx = ref.rsplit(":", 1)
    found = session.golden.find(name, int(idx))
    return None if found is None else np.asarray(load_npy(found.path))


def _check_shape(op: Any, j: int, array: np.ndarray) -> None:
    """The dumped input must have the shape the graph gives it."""
    refs = [r for r in op.inputs if r.producer]
    desc = refs[j].desc if j < len(refs) else None
    shape = getattr(desc, "origin_shape", None)
    if shape and all(d >= 0 for d in shape) and tuple(shape) != tuple(array.shape):
        raise CommandError(f"{op.name}:in{j} has shape {tuple(array.shape)} in its dump, the graph "
                           f"says {tuple(shape)}: the dump does not belong to this graph")


def _producer(session: Session, op: Any, j: int) -> str | None:
    """The name of the op whose output is input ``j`` of ``op`` (from the graph's edges)."""
    refs = [r for r in op.inputs if r.producer]
    if j >= len(refs):
        return None
    node = session.graph.ops.get(refs[j].producer)
    return node.name if node is not None else refs[j].producer


def _input_check(op_name: str, j: int, x: np.ndarray, ref: str | None, golden: np.ndarray | None,
                 producer: str | None) -> InputCheck:
    tensor = f"{op_name}:input:{j}"
    if golden is None or golden.size != x.size:
        return InputCheck(j, tensor, ref if golden is not None else None, None, producer=producer)
    g = np.asarray(golden, dtype=np.float64).reshape(x.shape)
    xf = x.astype(np.float64)
    nonfinite = bool((~np.isfinite(xf) & np.isfinite(g)).any())
    return InputCheck(j, tensor, ref, cosine(xf, g), nonfinite, producer)


def load_case(session: Session, op: Any) -> OpCase:
    dump = session.op_dump(op.name)
    if dump is None:
        where = session.active.label if session.active else "no dump set"
        raise CommandError(f"op {op.name} has no dump file in the active dump set ({where}): nothing to replay")
    header = session.dumps.header(dump)
    wanted = len([r for r in op.inputs if r.producer])
    if len(header.inputs) < wanted:
        raise CommandError(f"{dump.path.name} holds {len(header.inputs)} inputs of {op.name}, the graph "
                           f"gives it {wanted}: missing input dumps")
    if not header.outputs:
        raise CommandError(f"{dump.path.name} holds no output of {op.name}: nothing to compare")
    inputs = [_tensor(session, op.name, "input", j) for j in range(len(header.inputs))]
    for j, x in enumerate(inputs):
        _check_shape(op, j, x)
    outputs = [_tensor(session, op.name, "output", i) for i in range(len(header.outputs))]
    in_refs, out_refs = op_golden_refs(session.graph, session.dumps, session.golden, op, header)
    in_goldens = [_golden(session, ref) for ref in in_refs]
    checks = [_input_check(op.name, j, x, ref, g, _producer(session, op, j))
              for j, (x, ref, g) in enumerate(zip(inputs, in_refs, in_goldens))]
    shaped = [np.asarray(g).reshape(x.shape) if g is not None and g.size == x.size else None
              for g, x in zip(in_goldens, inputs)]
    return OpCase(op.name, op.type, plain_attrs(op), inputs, outputs,
                  [o.dtype.name for o in outputs], [_golden(session, r) for r in out_refs], checks,
                  list(op.passes), input_goldens=shaped, input_dtypes=[x.dtype.name for x in inputs])


def _profiles(args: Any) -> tuple[list, dict[str, str]]:
    named = current_config().profiles
    texts = (args.profile if args is not None else None) or list(DEFAULT_PROFILES) + sorted(named)
    out = []
    for text in texts:
        try:
            out.append(parse_profile(text, named))
        except ValueError as exc:
            raise UsageError(f"replay --profile {text}: {exc}") from None
    return out, named


def default_profiles() -> list:
    """The profiles ``replay`` tries without ``--profile``: the built-in set and the config's."""
    return _profiles(None)[0]


def _num(value: float | None, fmt: str = "{:.6g}") -> str:
    return "-" if value is None else fmt.format(value)


def _export(session: Session, folder: str, kernel: Kernel, case: OpCase, verdict: Verdict,
            profiles: list, named: dict) -> str:
    path = session.output_path(folder, folder=True)

    def save(name: str, array: np.ndarray) -> str:
        if array.dtype.name == "bfloat16":
            array = array.astype(np.float32)   # .npy has no bfloat16; float32 holds it exactly
        write_atomic(path / name, lambda fh: np.lib.format.write_array(
            fh, np.ascontiguousarray(array), allow_pickle=False), binary=True)
        return name

    inputs = [save(f"input_{j}.npy", x) for j, x in enumerate(case.inputs)]
    outputs = [save(f"npu_output_{i}.npy", o) for i, o in enumerate(case.outputs)]
    k = verdict.output
    golden = case.goldens[k] if k < len(case.goldens) else None
    golden_name = save(f"golden_output_{k}.npy", np.asarray(golden).reshape(case.outputs[k].shape)) \
        if golden is not None and golden.size == case.outputs[k].size else None
    meta = {"op": case.op, "type": case.type, "attrs": case.attrs, "inputs": inputs, "npu_outputs": outputs,
            "output": k, "output_dtype": verdict.dtype,
            "output_formats": [format_of(d) for d in case.output_dtypes], "golden": golden_name,
            "profiles": [p.name for p in profiles if p.name != "exact"], "named_profiles": named,
            "op_type_argument": kernel.op_type is not None, "verdict": verdict.verdict,
            "profile": verdict.profile}
    write_atomic(path / "replay.json", lambda fh: json.dump(meta, fh, indent=1))
    write_atomic(path / "replay.py", lambda fh: fh.write(reproducer_script(kernel)))
    return str(path)


def _result(v: Verdict, exported: str | None) -> Sections:
    head = [("op", f"{v.op} ({v.type}), output {v.output} ({v.dtype})"), ("verdict", v.verdict)]
    if v.profile:
        head.append(("profile", v.profile))
    head += [("why", v.reason), ("advice", v.advice)]
    rows = [[c.profile, _num(c.error_vs_npu), _num(c.error_vs_golden), _num(c.cosine, "{:.6f}")]
            for c in v.candidates]
    highlight = {i for i, c in enumerate(v.candidates) if c.profile == v.profile}
    if v.npu_error_vs_golden is not None:
        rows.append(["npu", "0", _num(v.npu_error_vs_golden), _num(v.npu_cosine, "{:.6f}")])
    evidence = Table(["profile", "max ulps vs NPU", "error vs golden", "cosine"], rows,
                     notes=["ulps of the output dtype; error vs golden: relative RMS error"],
                     highlight=highlight)
    inputs = Table(["input", "golden", "cosine"],
                   [[name_of(c.tensor), golden_name_of(c.golden), _num(c.cosine, "{:.6f}") + (" non-finite" if c.nonfinite else "")]
                    for c in v.inputs])
    blocks: list = [("", head), ("inputs", inputs), ("evidence", evidence)]
    if exported:
        blocks.append(("notes", [f"reproducer written to {exported} (python {exported}/replay.py)"]))
    data = {"op": v.op, "type": v.type, "verdict": v.verdict, "profile": v.profile,
            "candidates": [{"profile": c.profile, "error_vs_npu": c.error_vs_npu,
                            "error_vs_golden": c.error_vs_golden, "cosine": c.cosine} for c in v.candidates],
            "advice": v.advice, "output": v.output, "dtype": v.dtype, "reason": v.reason,
            "upstream_input": v.upstream_input,
            "npu": {"error_vs_golden": v.npu_error_vs_golden, "cosine": v.npu_cosine},
            "inputs": [{"tensor": c.tensor, "golden": golden_json_name(c.golden), "cosine": c.cosine, "nonfinite": c.nonfinite}
                       for c in v.inputs], "exported": exported}
    return Sections(title=f"replay {v.op}", blocks=blocks, data=data)


def replay_op(session: Session, op: Any, profiles: list) -> tuple[Kernel, OpCase, Verdict]:
    """Replay one graph op under ``profiles``; CommandError (one line) when it cannot be."""
    kernel = kernel_for(op.type)
    if kernel is None:
        raise CommandError(f"no reference kernel for {op.type}")
    case = load_case(session, op)
    try:
        return kernel, case, replay(kernel, case, profiles, session.settings.threshold)
    except ReplayError as exc:
        raise CommandError(f"replay {op.name}: {exc}") from None


def run_replay(session: Session, args: Any) -> Sections:
    op = session.resolve_op(args.op)
    if kernel_for(op.type) is None:
        raise CommandError(f"no reference kernel for {op.type}")
    profiles, named = _profiles(args)
    kernel, case, verdict = replay_op(session, op, profiles)
    session.results.setdefault(REPLAYED, {})[op.name] = verdict
    exported = _export(session, args.export, kernel, case, verdict, profiles, named) if args.export else None
    return _result(verdict, exported)


def verdict_text(v: Verdict) -> str:
    return f"{v.verdict} ({v.profile})" if v.profile else v.verdict


def add_root_verdicts(session: Session, table: Table, roots: list[str],
                      replay_one: Callable[[str], Verdict] | None = None, column: str = "op") -> None:
    """``vcs --replay``: replay every root with the default profiles; a ``verdict`` column (and
    JSON key: null for propagated ops) and one note per root that could not be replayed.
    ``replay_one(name)``: the verdict of one root (default: a graph op's); ``column``: the table's
    header of the names."""
    profiles = default_profiles()
    replay_one = replay_one or (lambda name: replay_op(session, session.resolve_op(name), profiles)[2])
    done = session.results.setdefault(REPLAYED, {})
    texts: dict[str, str] = {}
    for name in roots:
        try:
            done[name] = replay_one(name)
            texts[name] = verdict_text(done[name])
        except CommandError as exc:
            texts[name] = "-"
            table.notes.append(f"replay {name}: {exc}")
    op = table.headers.index(column)
    table.headers.append("verdict")
    for row in table.rows:
        row.append(texts.get(row[op], ""))
    for row in table.json_rows or []:
        v = done.get(row["op"]) if row["op"] in texts else None
        row["verdict"] = v.verdict if v is not None else None
        row["replay_profile"] = v.profile if v is not None else None


def _graph_case(session: Session, name: str) -> tuple[Kernel, OpCase] | None:
    op = session.graph.ops.get(name) if session.graph is not None else None
    kernel = kernel_for(op.type) if op is not None else None
    return None if kernel is None else (kernel, load_case(session, op))


def excess_of(session: Session, suspects: list,
              case_of: Callable[[str], tuple[Kernel, OpCase] | None] | None = None
              ) -> dict[str, tuple[float, float, float] | None]:
    """``vcs --sort excess``: per failing op (observed error, expected error, observed / expected),
    the expected one an ideal kernel in the NPU's dtypes would make. A root (its inputs match
    golden) is measured against the golden; any other op on its own dumped inputs, since its error
    vs golden is upstream's (``own_input_error``). None for ops without a kernel or a reference.
    ``case_of(name)``: (kernel, case) of one op, None without a kernel (default: a graph op's)."""
    case_of = case_of or (lambda name: _graph_case(session, name))
    errors: dict[str, tuple[float, float] | None] = {}
    for s in suspects:
        errors[s.op] = None
        try:
            found = case_of(s.op)
        except CommandError:
            continue
        if found is not None:
            kernel, case = found
            errors[s.op] = ideal_error(kernel, case) if s.role == "root" else own_input_error(kernel, case)

    ratios = {name: excess_ratio(*pair) if pair else None for name, pair in errors.items()}
    return {name: (errors[name][0], errors[name][1], ratio) if ratio is not None else None
            for name, ratio in ratios.items()}


def add_excess_column(table: Table, excess: dict, column: str = "op") -> None:
    op = table.headers.index(column)
    table.headers.append("excess")
    for row in table.rows:
        found = excess.get(row[op])
        row.append(f"{found[2]:.3g}" if found else "-")
    for row in table.json_rows or []:
        found = excess.get(row["op"])
        row["expected_error"] = found[1] if found else None
        row["excess"] = found[2] if found else None
        row["excess_reference"] = None if not found else "golden" if row.get("role") == "root" else "own inputs"
    table.notes.append("excess = error vs golden (relative RMS) / that of an ideal kernel in the NPU's dtypes "
                       "(exact on the golden inputs, output rounded); for a non-root op both are measured "
                       "against the exact kernel on its own dumped inputs (its error vs golden is "
                       "upstream's); `--sort -excess`: highest first")
