"""``python -m precision_shell.capture --out DIR [options] -- train.py ARGS``: run a script under
the capture (framework-dumps.md B3).

The script runs in this process as ``__main__`` with ``sys.argv`` = ``[train.py, *ARGS]``, under
``torch.autocast(DEVICE, DTYPE)`` when ``--autocast`` is given, after ``torch.manual_seed(SEED)``
so two runs start from the same weights. ``--pair`` runs it twice, fp32 into ``DIR/fp32`` and
the autocast run into ``DIR/{bf16|fp16}``, each in a child process, and prints the ``pshell``
command that opens the pair. Every problem is one line; exit 0 done, 1 failed or partial, 2 bad
arguments.
"""

from __future__ import annotations

import argparse
import os
import runpy
import subprocess
import sys

_AUTOCAST = {"bf16": "bfloat16", "fp16": "float16"}


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m precision_shell.capture",
                                description="Run a PyTorch script under pshell's capture.")
    p.add_argument("--out", required=True, metavar="DIR", help="output folder (step{N}/rank{R}/ inside)")
    p.add_argument("--autocast", choices=tuple(_AUTOCAST), help="run the script under torch.autocast")
    p.add_argument("--device", choices=("cpu", "cuda"), default="cpu",
                   help="device type of the autocast (default cpu)")
    p.add_argument("--mode", choices=("tensor", "statistics"), default="tensor")
    p.add_argument("--level", choices=("api", "module", "mix"), default="mix")
    p.add_argument("--max-bytes", type=int, metavar="N",
                   help="stop writing tensor files after N bytes (statistics go on)")
    p.add_argument("--seed", type=int, default=0, help="torch.manual_seed before the script (default 0)")
    p.add_argument("--pair", action="store_true",
                   help="run fp32 into DIR/fp32 and the --autocast run (default bf16) into DIR/<dtype>")
    p.add_argument("script", metavar="-- SCRIPT ARGS", nargs=argparse.REMAINDER)
    return p


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    opts = parser.parse_args(argv)
    script = opts.script[1:] if opts.script[:1] == ["--"] else opts.script
    if not script:
        parser.print_usage(sys.stderr)
        print("error: no script given (put it after --)", file=sys.stderr)
        return 2
    if not os.path.isfile(script[0]):
        print(f"error: {script[0]}: no such script", file=sys.stderr)
        return 2
    if opts.pair:
        return _pair(opts, script)
    return _run(opts, script)


def _run(opts, script: list[str]) -> int:
    import torch    # here, so --help and argument errors never pay for it

    from .session import CaptureError, capture
    if opts.device == "cuda" and not torch.cuda.is_available():
        print(f"error: --device cuda: this torch ({torch.__version__}) sees no CUDA device",
              file=sys.stderr)
        return 2
    autocast = (opts.device, getattr(torch, _AUTOCAST[opts.autocast])) if opts.autocast else None
    torch.manual_seed(opts.seed)
    saved_argv, saved_path = sys.argv, list(sys.path)
    sys.argv = list(script)
    sys.path.insert(0, os.path.dirname(os.path.abspath(script[0])))
    failure = None
    cap = capture(opts.out, mode=opts.mode, level=opts.level, max_bytes=opts.max_bytes,
                  autocast=autocast)
    try:
        with cap:
            try:
                runpy.run_path(script[0], run_name="__main__")
            except SystemExit as exc:
                if exc.code not in (None, 0):
                    raise
    except CaptureError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    except BaseException as exc:     # the script's own failure: its capture is kept
        failure = f"{type(exc).__name__}: {exc}".splitlines()[0]
    finally:
        sys.argv, sys.path[:] = saved_argv, saved_path
    return _report(cap, script[0], failure)


def _report(cap, script: str, failure: str | None) -> int:
    import json
    rank_dir = cap.written[-1] if cap.written else cap.out
    with open(os.path.join(rank_dir, "pshell_meta.json")) as f:
        meta = json.load(f)
    for note in meta["not_eager"]:
        print(f"warning: {note}: not eager, its calls are not in the capture", file=sys.stderr)
    if meta["tensors_stopped"]:
        print(f"warning: tensor files stopped: {meta['tensors_stopped']}; statistics kept for "
              f"every entry", file=sys.stderr)
    if failure is not None:
        print(f"error: {script} raised {failure}; partial capture kept in {rank_dir} "
              f"({meta['entries']} entries, marked partial in pshell_meta.json)", file=sys.stderr)
        return 1
    if meta["entries"] == 0:
        print(f"error: {script}: nothing captured: no torch call on a tensor ran under the "
              f"capture ({rank_dir})", file=sys.stderr)
        return 1
    print(f"captured {meta['entries']} entries, {meta['tensor_files']} tensor files "
          f"({meta['tensor_bytes']} bytes) in {rank_dir}")
    return 0


def _pair(opts, script: list[str]) -> int:
    dtype = opts.autocast or "bf16"
    golden, target = os.path.join(opts.out, "fp32"), os.path.join(opts.out, dtype)
    common = ["--device", opts.device, "--mode", opts.mode, "--level", opts.level,
              "--seed", str(opts.seed)]
    if opts.max_bytes is not None:
        common += ["--max-bytes", str(opts.max_bytes)]
    for out, extra in ((golden, []), (target, ["--autocast", dtype])):
        rc = subprocess.call([sys.executable, "-m", "precision_shell.capture", "--out", out,
                              *common, *extra, "--", *script])
        if rc != 0:
            print(f"error: the {'fp32' if out == golden else dtype} run failed (exit {rc}); "
                  f"no pair", file=sys.stderr)
            return rc
    print(f"pshell {target} --golden {golden}")
    return 0
