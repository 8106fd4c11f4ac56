"""``compare``/``vc``, ``vcs``, ``compare_tensors``/``cp``: registered here, with the compare panel
(``next``) and the exporters; the work is in :mod:`.compare_run`, imported on first use so that
start-up does not import numpy and the compare engine."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

from precision_shell.commands.export import EXPORTERS
from precision_shell.commands.finding_list import limit_arg, list_args
from precision_shell.commands.registry import arg, command
from precision_shell.commands.stepping import PANELS
from precision_shell.model.session import Session


_SET_ARGS = [arg("--ranks", metavar="all|R,R",
                 help="these ranks (device folders) at once, each its own CSV plus a merged one; "
                      "rows carry rank and step (default: the active set, see `use`)"),
             arg("--steps", metavar="all|S,S", help="these steps (step folders) at once")]


def _wants_sets(args) -> bool:
    return getattr(args, "ranks", None) is not None or getattr(args, "steps", None) is not None


def _run():
    from precision_shell.gc_pause import gc_paused

    with gc_paused():   # numpy and the compare engine: imports whose objects all stay (see cli)
        from precision_shell.commands import compare_run

    return compare_run


@command("compare", aliases=("vc",),
         summary="Whole-network compare: every NPU op's inputs and outputs against the golden run "
                 "(mapped through the graph) or another NPU run; all ten vendor metrics; CSV in the "
                 "vendor layout; Ctrl-C stops and keeps what is done.",
         example="vc\nvc -j 4\nvc --against debug_1\nvc --golden /data/tf_dump; vcs\nvc --ranks all --steps 0",
         args=[arg("--npu", metavar="DIR", complete="path",
                   help="NPU dump folder (default: the active dump set, see `use`)"),
               arg("--golden", metavar="DIR", complete="path",
                   help="golden .npy folder (default: precision_data/tf/dump)"),
               arg("--against", metavar="RUN",
                   help="compare with another NPU run (e.g. debug_1: fusion off) instead of golden"),
               arg("-j", "--jobs", type=int, default=None,
                   help="worker processes (default: CPU count; 1 = in this process)")] + _SET_ARGS)
def compare(session: Session, args: Any):
    if _wants_sets(args):
        from precision_shell.commands.multi_set import compare_sets_table

        return compare_sets_table(session, args)
    return _run().compare(session, args)


@command("vcs",
         summary="Failing ops of the compare (output cosine <= COS, NaN fails too), in execution "
                 "order, each `root` (inputs still match, output does not) or `propagated`; the first "
                 "root is the first divergence. Runs `vc` first when needed; -f reads vendor CSVs.",
         example='vcs\nvcs -c 0.99 -l 0\nvcs --sort cosine --role root\nvcs --sort -max_abs_error --type MatMul\n'
                 'vcs --metric "max_abs_error>0.1"\nvcs --replay\nvcs --sort -excess\nvcs --plot max_abs_error\n'
                 "vcs -f precision_data/temp/vector_compare/20240125/result_20240125.csv\n"
                 "vcs --ranks all     # per rank: first divergence, roots, the odd rank out",
         args=[arg("-c", "--cosine", type=float, default=None, metavar="COS",
                   help="cosine threshold (default: the `config` threshold, 0.98)"),
               limit_arg(),
               arg("-f", "--file", nargs="+", metavar="CSV", complete="path",
                   help="vendor result_*.csv files (old and new layouts) instead of the last `vc`"),
               arg("--metric", nargs="+", action="extend", metavar="NAME<VALUE",
                   help="also fail outputs where this holds, e.g. \"max_abs_error>0.1\" (quote it: "
                        "> redirects); names: cosine, max_abs_error, mean_relative_error, ..."),
               arg("--rank", choices=("order", "excess"), default="order",
                   help="excess: the same as --sort -excess"),
               arg("--replay", action="store_true",
                   help="replay every root (see `replay`) and add its verdict column (JSON: verdict, "
                        "replay_profile)"),
               arg("--plot", nargs="?", const="cosine", default=None, metavar="METRIC", complete="metric",
                   help="instead of the table, a chart of METRIC (default cosine) along execution "
                        "order, roots and the first divergence marked (see `plot`)")] + _SET_ARGS + list_args(
             "order, excess (error vs golden over that of an ideal kernel in the NPU's dtypes: "
             "noise-aware) or a metric of the row's output: cosine, max_abs_error, mean_abs_error, rmse, "
             "max_relative_error, mean_relative_error, accumulated_relative_error, "
             "relative_euclidean_distance, kl_divergence, one_thousandth_err_ratio, "
             "five_thousandths_err_ratio"))
def vcs(session: Session, args: Any):
    if _wants_sets(args):
        from precision_shell.commands.multi_set import vcs_sets_table

        return vcs_sets_table(session, args)
    return _run().vcs(session, args)


@command("compare_tensors", aliases=("cp",),
         summary="Compare two tensors: all metrics, allclose verdict, error ratio "
                 "(|a-b| > atol + rtol*|b|), and the N worst elements with their indices. Shapes "
                 "must agree (no silent zero padding, unlike the reference tool).",
         example="cp fc1/MatMul:0 golden:fc1_BiasAdd:0\n"
                 "cp ln1/add_1/LayerNorm:0[0] golden:ln1_add_1:0[0] -p 10 -al 1e-2 -rl 1e-2",
         args=[arg("a", complete="tensor", help="first tensor (NPU side): OP:N (output N), OP:inN "
                                                "(input N), golden:OP:N or .npy"),
               arg("b", complete="tensor", help="second tensor (reference side)"),
               arg("-p", "--top", type=int, default=5, metavar="N", help="worst elements to list (default 5)"),
               arg("-al", "--atol", type=float, default=1e-3, help="absolute tolerance (default 0.001)"),
               arg("-rl", "--rtol", type=float, default=1e-3, help="relative tolerance (default 0.001)")])
def compare_tensors(session: Session, args: Any):
    from precision_shell.commands.compare_tensors_run import compare_tensors

    return compare_tensors(session, args)


PANELS["compare"] = lambda session, suspect, position: _run().compare_panel(session, suspect, position)
PANELS["compare_sets"] = lambda session, item, position: _run().compare_set_panel(session, item, position)


def _exporter(factory: str, *fmt: str) -> Callable[[Session, Path], int]:
    def export(session: Session, path: Path) -> int:
        from precision_shell.commands import compare_exports  # numpy: on first use

        fn = getattr(compare_exports, factory)
        return (fn(*fmt) if fmt else fn)(session, path)
    return export


EXPORTERS[("suspects", "csv")] = _exporter("export_suspects", "csv")
EXPORTERS[("suspects", "json")] = _exporter("export_suspects", "json")
EXPORTERS[("suspects", "fusion-switch")] = _exporter("export_fusion_switch")
EXPORTERS[("suspects", "keep-fp32")] = _exporter("export_keep_fp32")
EXPORTERS[("compare", "csv")] = _exporter("export_compare", "csv")
EXPORTERS[("compare", "json")] = _exporter("export_compare", "json")
