"""Writes a complete sample workspace ``OUT/precision_data/`` (formats.md §5) plus the manifest.

Layout written::

    precision_data/tf/dump/{op}.{i}.{ts}.npy                          golden, every framework output
    precision_data/npu/debug_0/dump/{time}/0/{graph}/1/0/{dumps}      one per executed NPU op
    precision_data/npu/debug_0/graph/ge_proto_00000000_PreRunBegin.txt   stage decoy (not Build)
    precision_data/npu/debug_0/graph/ge_proto_00000001_Build.txt      the built graph
    precision_data/overflow/dump/{time}/0/{graph}/1/0/                overflow op dump + Opdebug (convnet)
    precision_data/fusion/fusion_result.json
    pshell_sample_manifest.json

Ops are written one at a time (dump, graph text, manifest entry), so the large benchmark mode
holds only the current block's tensors in memory.
"""

from __future__ import annotations

import os
import shutil
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
from google.protobuf import text_format

from ..formats.dump_file import DumpTensor, write_dump
from ..formats.opdebug import encode_opdebug_new, encode_opdebug_old
from . import fusion_report, manifest as mf, tower as tw
from .graph_builder import GraphTextWriter, framework_model_def
from .naming import TASK_TYPE_DEBUG, Timeline, dump_file_name, golden_file_name, op_duration_us
from .amp_network import run_bf16_amp
from .replay_network import run_replay_sample
from .lowprec_network import run_lowprec_sample, write_quantized_dumps
from .compiler_knobs import CompilerKnobs
from .network import NetworkRun, run_network
from .records import FrameworkOp, NpuInput, NpuOp, NpuTensor

SESSION_GRAPH_ID = "0_1"
DEVICE_ID, MODEL_ID, STEP = 0, 1, 0
FIRST_TASK_ID = 2
# --variant: the network a workspace holds (see network.py, amp_network.py)
VARIANTS = {"convnet": run_network, "bf16-amp": run_bf16_amp, "replay": run_replay_sample,
            "lowprec": run_lowprec_sample}


@dataclass(frozen=True)
class SampleOptions:
    seed: int = 0
    name_fields: int = 5                 # 4, 5 or 9 dot-separated fields in dump file names
    opdebug_layout: str = "old"          # "old" (2048-byte record) or "new" (magic 0x5A5A5A5A)
    fusion_shape: int = 1                # fusion_result.json shape 1..4 (formats.md §4)
    scale_mb: float | None = None        # large mode: ~this many MB of NPU dumps
    files: int | None = None             # large mode: ~this many NPU dump files
    small_tensors: bool = False          # with scale_mb: ~0.35 MB tensors in three device layouts
    variant: str = "convnet"             # a key of VARIANTS
    # compiler knobs (--fusion-switch / --keep-fp32, compiler_knobs.py); convnet only
    fusion_off: tuple[str, ...] = ()     # passes switched off ("ALL:graph" / "ALL:ub": a section)
    keep_fp32: tuple[str, ...] = ()      # framework op names kept in fp32

    def knobs(self) -> CompilerKnobs:
        return CompilerKnobs(frozenset(self.fusion_off), frozenset(self.keep_fp32))

    def manifest_options(self) -> dict:
        """The options as the manifest records them; the knobs only when given (the default
        sample's manifest is what it always was)."""
        entry = asdict(self)
        if not entry["small_tensors"]:
            del entry["small_tensors"]
        for name in ("fusion_off", "keep_fp32"):
            if entry[name]:
                entry[name] = sorted(entry[name])
            else:
                del entry[name]
        return entry

    def validate(self) -> None:
        if (self.fusion_off or self.keep_fp32) and (self.variant != "convnet" or self.scale_mb is not None
                                                    or self.files is not None):
            raise ValueError("--fusion-switch and --keep-fp32 apply to the small convnet workspace only")
        if self.variant not in VARIANTS:
            raise ValueError(f"--variant must be one of {', '.join(VARIANTS)}")
        if self.variant != "convnet" and (self.scale_mb is not None or self.files is not None):
            raise ValueError("--scale and --files only extend the convnet variant")
        if self.name_fields not in (4, 5, 9):
            raise ValueError("--name-fields must be 4, 5 or 9")
        if self.opdebug_layout not in ("old", "new"):
            raise ValueError("--opdebug-layout must be old or new")
        if self.fusion_shape not in (1, 2, 3, 4):
            raise ValueError("--fusion-shape must be 1, 2, 3 or 4")
        if self.scale_mb is not None and self.files is not None:
            raise ValueError("--scale and --files are exclusive")
        if self.small_tensors and self.scale_mb is None:
            raise ValueError("--small-tensors shapes a --scale workspace")
        if (self.scale_mb is not None and self.scale_mb <= 0) or (self.files is not None and self.files <= 0):
            raise ValueError("--scale and --files must be positive")


def _dump_tensor(t: NpuTensor, *, output: bool) -> DumpTensor:
    name, index = (t.golden_ref.rsplit(":", 1) if output and t.golden_ref else (None, None))
    return DumpTensor(t.device(), t.dtype_code, t.format_code, original_shape=t.logical_shape,
                      original_name=name, original_output_index=None if index is None else int(index))


def _op_dump_bytes(op: NpuOp) -> int:
    return sum(i.tensor.nbytes_device for i in op.inputs) + sum(o.nbytes_device for o in op.outputs)


class WorkspaceWriter:
    def __init__(self, out_dir: str | os.PathLike, options: SampleOptions):
        options.validate()
        self.out = Path(out_dir)
        self.opt = options
        self.time = Timeline(options.seed)
        graph = self.time.graph_name
        self.root = self.out / "precision_data"
        leaf = Path(str(DEVICE_ID), graph, str(MODEL_ID), str(STEP))
        self.dump_dir = self.root / "npu/debug_0/dump" / self.time.dump_dir_time / leaf
        self.overflow_dir = self.root / "overflow/dump" / self.time.overflow_dir_time / leaf
        self.graph_dir = self.root / "npu/debug_0/graph"
        self.golden_dir = self.root / "tf/dump"
        self.fusion_file = self.root / "fusion/fusion_result.json"
        self.ops_manifest: list[dict] = []
        self.graph_only: list[dict] = []
        self.golden_files: dict[str, str] = {}
        self.totals = {"npu_dump_files": 0, "npu_dump_bytes": 0, "golden_files": 0, "golden_bytes": 0}
        self._graph_id = 0
        self._order = 0
        self._ts = self.time.dump_start_us
        self._golden_ts = self.time.golden_start_us
        self._dump_paths: dict[str, Path] = {}          # network ops only (not tower blocks)
        self._block_text: dict[tuple[str, str], tw.BlockText] = {}   # by (input, output) format
        self.warnings: list[str] = []

    def rel(self, path: Path) -> str:
        return path.relative_to(self.out).as_posix()

    # ---- pieces ------------------------------------------------------------------------------
    def write_golden(self, fop: FrameworkOp) -> None:
        for index, value in enumerate(fop.outputs):
            path = self.golden_dir / golden_file_name(fop.name, index, self._golden_ts)
            self._golden_ts += 11
            np.save(path, value, allow_pickle=False)
            self.golden_files[f"{fop.name}:{index}"] = self.rel(path)
            self.totals["golden_files"] += 1
            self.totals["golden_bytes"] += path.stat().st_size

    def add_static(self, graph: GraphTextWriter, op: NpuOp) -> None:
        op.graph_id = self._next_graph_id()
        graph.add(op)
        self.graph_only.append(mf.op_entry(op, dump_file=None, timestamp=None))

    def add_executed(self, graph: GraphTextWriter, op: NpuOp, *, block: int | None = None) -> None:
        """Dump one executed op and print it into the graph; tower blocks get a compact entry."""
        op.graph_id = self._next_graph_id()
        op.order = self._order
        op.task_id = FIRST_TASK_ID + self._order
        self._order += 1
        ts = self._ts
        self._ts += op_duration_us(op.order, _op_dump_bytes(op))
        path = self.dump_dir / dump_file_name(op.type, op.name, op.task_id, op.stream_id, ts, self.opt.name_fields)
        size = write_dump(path, op.name, [_dump_tensor(i.tensor, output=False) for i in op.inputs],
                          [_dump_tensor(o, output=True) for o in op.outputs], dump_time=ts)
        self.totals["npu_dump_files"] += 1
        self.totals["npu_dump_bytes"] += size
        if block is None:
            self._dump_paths[op.name] = path
            graph.add(op)
            self.ops_manifest.append(mf.op_entry(op, dump_file=self.rel(path), timestamp=ts))
            return
        formats = (op.inputs[0].tensor.format, op.outputs[0].format)
        if formats not in self._block_text:
            self._block_text[formats] = tw.BlockText(op)
        graph.add(op, self._block_text[formats].render(block, op.inputs[0].source.rsplit(":", 1)[0], op.graph_id))
        self.ops_manifest.append({"name": op.name, "type": op.type, "graph_id": op.graph_id, "order": op.order,
                                  "task_id": op.task_id, "stream_id": op.stream_id, "timestamp": ts,
                                  "dump_file": self.rel(path), "original_ops": op.original_ops,
                                  "passes": op.passes, "tower_block": block})

    def _next_graph_id(self) -> int:
        self._graph_id += 1
        return self._graph_id - 1

    def write_overflow_run(self, op: NpuOp, status: int) -> dict:
        """The overflow-mode dump: the overflowing op's dump and its Opdebug record, same dir."""
        self.overflow_dir.mkdir(parents=True, exist_ok=True)
        ts = self.time.overflow_start_us + 1000 * op.order
        path = self.overflow_dir / dump_file_name(op.type, op.name, op.task_id, op.stream_id, ts, self.opt.name_fields)
        write_dump(path, op.name, [_dump_tensor(i.tensor, output=False) for i in op.inputs],
                   [_dump_tensor(o, output=True) for o in op.outputs], dump_time=ts)
        # The debug task is launched right after the op: its own task id (in the file name) is
        # the next one, which is *not* the overflowing op's id (formats.md §2.1).
        debug_task = op.task_id + 1
        pc = 0x12C0000 + 0x1000 * op.order
        if self.opt.opdebug_layout == "old":
            record = encode_opdebug_old(ai_core={
                "model_id": MODEL_ID, "stream_id": op.stream_id, "task_id": op.task_id, "task_type": 0,
                "pc_start": pc, "para_base": pc + 0x800, "kernel_code": pc + 0x400, "block_idx": 0,
                "status": status})
        else:
            record = encode_opdebug_new("AIC", {
                "model_id": MODEL_ID, "stream_id": op.stream_id, "task_id": op.task_id, "task_type": 0,
                "context_id": 65535, "thread_id": 65535, "pc_start": pc, "para_base": pc + 0x800,
                "core_id": 0, "block_id": 0, "status": status})
        debug_name = dump_file_name("Opdebug", "Node_OpDebug", debug_task, op.stream_id, ts + 1,
                                    self.opt.name_fields, TASK_TYPE_DEBUG)
        write_dump(self.overflow_dir / debug_name, "Node_OpDebug", [],
                   [DumpTensor(np.frombuffer(record, np.uint8), 4, 2)], dump_time=ts + 1)
        return {"opdebug_file": self.rel(self.overflow_dir / debug_name), "opdebug_layout": self.opt.opdebug_layout,
                "opdebug_file_task_id": debug_task, "overflow_dump_file": self.rel(path),
                "dump_file": self.rel(self._dump_paths[op.name])}

    # ---- the whole workspace -----------------------------------------------------------------
    def write(self, run: NetworkRun | None = None) -> dict:
        """Write the workspace of ``run`` (default: the options' variant, computed here)."""
        opt = self.opt
        for d in (self.dump_dir, self.graph_dir, self.golden_dir, self.fusion_file.parent):
            d.mkdir(parents=True, exist_ok=True)
        large = opt.scale_mb is not None or opt.files is not None
        if run is None and self.opt.knobs().any:
            knobs = opt.knobs()
            run = run_network(opt.seed, knobs=knobs)
            for name in knobs.unused_keep():
                self.warnings.append(f"--keep-fp32: no op named {name} in the graph (ignored)")
        run = run or VARIANTS[opt.variant](opt.seed, net_output=not large)
        tower = self._make_tower(run) if large else None

        statics = [op for op in run.ops if not op.executed and op.type != "NetOutput"]
        executed = run.executed
        inputs = [f"{op.name}:0" for op in statics if op.type == "Data"]
        outputs = list(run.outputs)
        if tower:
            statics += tower.static_ops
            inputs.append(f"{tw.DATA_NAME}:0")
            outputs.append(f"{tw.last_block_name(tower.plan)}:0")

        for fop in list(run.framework.values()) + (tower.static_framework if tower else []):
            self.write_golden(fop)
        build = self.graph_dir / "ge_proto_00000001_Build.txt"
        used = fusion_report.passes_of(executed)
        with GraphTextWriter(build, self.time.graph_name, inputs, outputs, SESSION_GRAPH_ID) as graph:
            for op in statics:
                self.add_static(graph, op)
            for op in executed:
                self.add_executed(graph, op)
            if tower:
                for op, framework, block in tower.executed_ops(trans_start=_trans_count(executed)):
                    for fop in framework:
                        self.write_golden(fop)
                    self.add_executed(graph, op, block=block)
                    for name in op.passes:
                        used.setdefault(name, []).append(op.name)
                net_output = NpuOp("Node_Output", "NetOutput",
                                   [run_input(run, s) for s in run.outputs] +
                                   [NpuInput(outputs[2], tower.output, tower.output.golden_ref, None)],
                                   [], executed=False, engine="DNN_VM_GE_LOCAL_OP_STORE")
            else:
                net_output = run.op("Node_Output")
            self.add_static(graph, net_output)

        stage = framework_model_def(self.time.graph_name, run.framework.values(), SESSION_GRAPH_ID)
        (self.graph_dir / "ge_proto_00000000_PreRunBegin.txt").write_text(text_format.MessageToString(stage))
        trans_casts = sum(1 for op in executed if op.type == "Cast") + (1 if tower else 0)
        self.fusion_file.write_text(fusion_report.fusion_result_text(opt.fusion_shape, used, SESSION_GRAPH_ID, trans_casts,
                                                                       switched_off=opt.knobs().fusion_off))
        overflow = None
        if run.overflow_op is not None:
            overflow = {**mf.overflow_finding(run),
                        **self.write_overflow_run(run.op(run.overflow_op), run.overflow_status)}
        manifest = self._manifest(run, used, overflow, build)
        if opt.variant == "lowprec":   # issue 27: quantized dumps in the low-precision dtypes
            # a folder of its own beside precision_data: opened alone (pshell OUT/lowprec), no graph
            manifest["lowprec"] = write_quantized_dumps(self.out / "lowprec", opt.seed, self._ts + 10_000)
        mf.write_manifest(self.out / mf.MANIFEST_NAME, manifest)
        return manifest

    def _make_tower(self, run: NetworkRun) -> tw.Tower:
        if self.opt.files is not None:
            plan = tw.plan_for_files(self.opt.files, len(run.executed))
        else:
            plan = tw.plan_for_scale(self.opt.scale_mb, sum(_op_dump_bytes(op) for op in run.executed),
                                     self.opt.small_tensors)
        return tw.Tower(self.opt.seed, plan)

    def _manifest(self, run: NetworkRun, used, overflow: dict | None, build: Path) -> dict:
        extra = {"replay": run.replay_truth} if run.replay_truth is not None else {}
        return {
            "generator": "precision_shell.samples", "manifest_version": mf.MANIFEST_VERSION,
            "options": self.opt.manifest_options(), "graph_name": self.time.graph_name,
            "session_graph_id": SESSION_GRAPH_ID, "device_id": DEVICE_ID, "model_id": MODEL_ID, "step": STEP,
            "paths": {"workspace": self.rel(self.root), "npu_dump_dir": self.rel(self.dump_dir),
                      "golden_dir": self.rel(self.golden_dir), "graph_file": self.rel(build),
                      "stage_graph_file": self.rel(self.graph_dir / "ge_proto_00000000_PreRunBegin.txt"),
                      "fusion_file": self.rel(self.fusion_file), "overflow_dump_dir": self.rel(self.overflow_dir) if overflow else None},
            "totals": dict(self.totals), "lossy": mf.lossy_finding(run) if run.lossy_op else None,
            "overflow": overflow,
            "passes": mf.passes_entry(used), "ops": self.ops_manifest, "graph_only_ops": self.graph_only,
            "golden_files": self.golden_files, **extra,
            **({"compiler_knobs": {**self.opt.knobs().manifest_entry(), "warnings": self.warnings}}
               if self.opt.knobs().any else {}),
        }


def run_input(run: NetworkRun, source: str) -> NpuInput:
    name, index = source.rsplit(":", 1)
    tensor = run.op(name).outputs[int(index)]
    return NpuInput(source, tensor, tensor.golden_ref, tensor.golden)


def _trans_count(ops: list[NpuOp]) -> int:
    return sum(1 for op in ops if op.type in ("Cast", "TransData"))


def write_workspace(out_dir: str | os.PathLike, options: SampleOptions = SampleOptions(), *,
                    force: bool = False, run: NetworkRun | None = None,
                    multi: tuple[int, int] | None = None) -> dict:
    """Generate the workspace into ``out_dir``; returns the manifest (also written to disk).
    ``run``: a network built elsewhere (tests build small graphs with ``NetBuilder``).
    ``multi``: (ranks, steps) for a multi-device, multi-step workspace (``multi_rank``).

    Refuses to write over an existing ``precision_data/`` unless ``force``, which first deletes
    it and the old manifest (the directory must hold nothing else of value).
    """
    out = Path(out_dir)
    root, manifest_path = out / "precision_data", out / mf.MANIFEST_NAME
    if root.exists() or manifest_path.exists():
        if not force:
            raise FileExistsError(f"{out} already holds a workspace; use --force to replace it")
        shutil.rmtree(root, ignore_errors=True)
        manifest_path.unlink(missing_ok=True)
    if multi is not None:
        from .multi_rank import write_multi_rank

        return write_multi_rank(out, options, *multi, WorkspaceWriter)
    return WorkspaceWriter(out, options).write(run)
