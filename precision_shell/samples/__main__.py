"""``python -m precision_shell.samples OUT_DIR``: write a sample training workspace.

Default: the small convnet workspace committed as ``sample_data/convnet``. ``--scale MB`` and
``--files N`` append a benchmark tower to reach ~MB of NPU dumps or ~N dump files.
``--variant bf16-amp``: a bf16 mixed-precision network instead (AMP casts, GE-inserted
TransData; no planted finding), the vendor-fidelity workspace of ``bench/vendor_fidelity.py``.
``--variant replay``: one op for each verdict of ``replay`` (manifest key ``replay``).
``--ranks N --steps M``: one dump set per device and step, with an odd rank and an overflow that
starts at a later step on one rank (``multi_rank.py``; truth in the manifest's ``scale_out``).
``--fusion-switch FILE`` / ``--keep-fp32 FILE``: the compiler knobs ``bisect`` turns, honoured as
GE would (``compiler_knobs.py``), so a regeneration plus ``pshell --fail-on-findings`` is a real check.
"""

from __future__ import annotations

import argparse
import sys
import time

from .compiler_knobs import read_fusion_switch, read_keep_fp32
from .writer import VARIANTS, SampleOptions, write_workspace


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m precision_shell.samples",
                                description="Generate an Ascend precision-debugging sample workspace "
                                            "(OUT_DIR/precision_data + pshell_sample_manifest.json).")
    p.add_argument("out_dir", metavar="OUT_DIR")
    p.add_argument("--seed", type=int, default=0, help="random seed; also fixes all times (default 0)")
    p.add_argument("--variant", choices=tuple(VARIANTS), default="convnet",
                   help="the network: convnet (fp16, planted root cause and overflow) or bf16-amp "
                        "(bf16 AMP casts and GE-inserted TransData) or replay (one op per replay verdict, truth "
                        "in the manifest) or lowprec (MX block-scaled matmuls, FP8/MX/FP4/HiFloat8 dumps) "
                        "(default convnet)")
    p.add_argument("--name-fields", type=int, choices=(4, 5, 9), default=5,
                   help="dump file name grammar: type.name.task[.stream].ts[.x.x.x.x] (default 5)")
    p.add_argument("--opdebug-layout", choices=("old", "new"), default="old",
                   help="Opdebug record layout: old 2048-byte or new magic-tagged (default old)")
    p.add_argument("--fusion-shape", type=int, choices=(1, 2, 3, 4), default=1,
                   help="fusion_result.json shape (formats.md §4, default 1)")
    size = p.add_mutually_exclusive_group()
    size.add_argument("--scale", type=float, metavar="MB", help="large mode: about MB megabytes of NPU dumps")
    size.add_argument("--files", type=int, metavar="N", help="large mode: about N small NPU dump files")
    p.add_argument("--small-tensors", action="store_true",
                   help="with --scale: ~0.35 MB fp16 tensors (about 1,000 ops at --scale 740), outputs in "
                        "NC1HWC0, FRACTAL_Z and FRACTAL_NZ in turn (the many-small-ops bench)")
    p.add_argument("--ranks", type=int, metavar="N",
                   help="multi-device: N device folders (odd rank and late overflow, see multi_rank.py)")
    p.add_argument("--steps", type=int, metavar="M", help="multi-step: M step folders per device")
    p.add_argument("--fusion-switch", metavar="FILE",
                   help="a fusion switch config ({\"Switch\": {\"GraphFusion\": {PASS: \"off\"}, "
                        "\"UBFusion\": {...}}}): the passes it turns off leave their ops unfused in the "
                        "graph, the dumps and the fusion report")
    p.add_argument("--keep-fp32", metavar="FILE",
                   help="framework op names, one per line: those ops compute and dump in fp32 "
                        "(GE-inserted Casts around them)")
    p.add_argument("--force", action="store_true", help="replace an existing workspace in OUT_DIR")
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        fusion_off = sorted(read_fusion_switch(args.fusion_switch)) if args.fusion_switch else []
        keep_fp32 = sorted(read_keep_fp32(args.keep_fp32)) if args.keep_fp32 else []
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    options = SampleOptions(seed=args.seed, name_fields=args.name_fields, opdebug_layout=args.opdebug_layout,
                            fusion_shape=args.fusion_shape, scale_mb=args.scale, files=args.files,
                            small_tensors=args.small_tensors,
                            variant=args.variant, fusion_off=tuple(fusion_off), keep_fp32=tuple(keep_fp32))
    start = time.perf_counter()
    multi = None if args.ranks is None and args.steps is None else (args.ranks or 1, args.steps or 1)
    try:
        manifest = write_workspace(args.out_dir, options, force=args.force, multi=multi)
    except (FileExistsError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    for warning in manifest.get("compiler_knobs", {}).get("warnings", ()):
        print(f"warning: {warning}", file=sys.stderr)
    t = manifest["totals"]
    print(f"wrote {args.out_dir}/precision_data: graph {manifest['graph_name']}, "
          f"{t['npu_dump_files']} NPU dumps ({t['npu_dump_bytes'] / 1e6:.1f} MB), "
          f"{t['golden_files']} golden files ({t['golden_bytes'] / 1e6:.1f} MB) "
          f"in {time.perf_counter() - start:.1f} s")
    knobs = manifest.get("compiler_knobs")
    if knobs:
        print(f"compiler knobs: {len(knobs['fusion_off'])} fusion pass(es) off, "
              f"{len(knobs['keep_fp32'])} op name(s) kept in fp32")
    if manifest["lossy"] and manifest["overflow"]:
        print(f"lossy root: {manifest['lossy']['op']} (cosine {manifest['lossy']['cosine']}); "
              f"fp16 overflow: {manifest['overflow']['op']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
