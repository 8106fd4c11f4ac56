"""Commands: argparse adapters over the analyses, registered in :mod:`.registry`.

Importing this package registers every command.
"""

from precision_shell.commands import (  # noqa: F401  (importing registers the commands)
    basic, compare_cmd, config_cmd, decode, eval_cmd, export, fusion_cmd, info, inspect_cmd, overflow_cmd, plot_cmd, qstat_cmd,
    replay_cmd,
    stepping, tensor_cmd,
)
from precision_shell.commands import curve_cmd  # noqa: F401  (curve: training logs to the step)
from precision_shell.commands import bisect_cmd  # noqa: F401  (bisect: rerun a check per knob change)
# framework variants of the commands above (msprobe dumps); after them: they extend them
from precision_shell.commands import framework_analysis, framework_exports, framework_inspect  # noqa: F401
from precision_shell.commands import mindspore_graph_cmd  # noqa: F401  (MindSpore graph-mode dumps)
from precision_shell.commands import framework_replay  # noqa: F401  (replay on framework dumps)
from precision_shell.commands import impact_cmd  # noqa: F401  (impact: share of the error per root)
from precision_shell.commands.registry import REGISTRY

__all__ = ["REGISTRY"]
