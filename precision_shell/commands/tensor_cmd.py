"""``print_tensor``/``pt``: registered here; the work (numpy) is in :mod:`.tensor_print`, imported
on first use so that start-up does not pay for numpy."""

from __future__ import annotations

from typing import Any

from precision_shell.commands.registry import arg, command
from precision_shell.model.session import Session


# how an array is shown: `pt` and `eval` take the same options
VALUE_ARGS = [
    arg("-a", "--all", action="store_true", help="print every value (no ... summary), each row after its index ([12, :])"),
    arg("-r", "--ranges", metavar="RANGES",
        help='mark elements inside inclusive ranges, e.g. "[[-inf,-1],[1,inf]]" or "[0,1e-8]"; '
             "their count is always shown and each is marked: coloured on a colour terminal, * after "
             "the value in plain text (pipes, files, NO_COLOR)"),
    arg("-s", "--stats", action="store_true", help="header and statistics only, no values"),
    arg("--hist", action="store_true", help="add a histogram of the finite values"),
    arg("-w", "--write", nargs="?", const="", default=None, metavar="FILE.npy", complete="path",
        help="save the (sliced) logical array; a relative FILE is relative to the current "
             "folder; no FILE: <output folder>/<tensor>.npy"),
    arg("-l", "--lines", type=int, default=0, metavar="LINES",
        help="show at most LINES lines of values (0 = no limit, the default)"),
    arg("--at", metavar="I,J", help="show the values around the element at I,J (one index per axis, "
                                    "negatives from the end), the element marked")]


@command("print_tensor", aliases=("pt",),
         summary="Print a tensor: header, stats (min/max/mean/std, nan/inf/zero counts), values "
                 "(numpy printing, summarised unless -a), elements in ranges (-r), histogram (--hist), "
                 "save as .npy (-w). Tensors: OP:N (output N), OP:inN (input N), golden:OP:N, FILE.npy "
                 "(OP:output:N, OP:input:N too), with an optional slice [0, :8].",
         example='pt fc1/MatMul:0[0, :8]\npt fc1/MatMul:in1 -s\npt golden:fc1_BiasAdd:0 -s\n'
                 'pt conv1/Conv2D:0 -r "[[-inf,-1],[1,inf]]"\npt fc1/MatMul:0 --hist\n'
                 'pt golden:fc1_BiasAdd:0 -w fc1.npy\npt conv1/Conv2D:0 --at 1,3,7,7',
         args=[arg("tensor", complete="tensor", help="tensor reference with optional numpy slice")]
         + VALUE_ARGS)
def print_tensor(session: Session, args: Any):
    from precision_shell.commands.tensor_print import print_tensor as run

    return run(session, args)
