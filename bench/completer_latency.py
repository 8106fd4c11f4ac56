"""Benchmark: per-keystroke completion latency over 100k synthetic op names (target < 50 ms).

    python bench/completer_latency.py [--ops 100000] [--seed 0]

Names look like a real transformer/convnet GE graph (``model/block12/attn/conv3/Conv2D_1``).
Each query is "typed" one character at a time after ``ni `` (op names) and ``pt `` (tensor refs),
and every keystroke runs the whole completer and consumes every candidate, as the menu would:
prefix queries, path-component queries (``MatMul``), fuzzy subsequences (``b12c3cv``) and
queries that match nothing (the worst case: every scan runs to the end). Prints the index build
time, then median / p95 / max latency per query family and overall.
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from prompt_toolkit.completion import CompleteEvent  # noqa: E402
from prompt_toolkit.document import Document  # noqa: E402

from precision_shell.commands import REGISTRY  # noqa: E402
from precision_shell.shell.completer import ShellCompleter  # noqa: E402

_TYPES = ["Conv2D", "MatMulV2", "BatchMatMul", "Relu", "BiasAdd", "Add", "Mul", "Cast",
          "TransData", "BNTrainingUpdate", "SoftmaxV2", "Reshape", "Transpose", "LayerNorm",
          "GeluV2", "RealDiv", "ReduceMeanD"]
_PARTS = ["conv", "fc", "attn", "mlp", "norm", "proj", "qkv", "ffn"]


@dataclass
class Desc:
    shape: tuple[int, ...]


@dataclass
class Op:
    name: str
    type: str
    outputs: list[Desc]
    inputs: list = field(default_factory=list)


class SyntheticGraph:
    def __init__(self, n: int, seed: int):
        rnd = random.Random(seed)
        self.ops: dict[str, Op] = {}
        while len(self.ops) < n:
            op_type = rnd.choice(_TYPES)
            name = (f"model/block{rnd.randrange(400)}/{rnd.choice(_PARTS)}{rnd.randrange(12)}/"
                    f"{op_type}{rnd.choice(['', '_1', '_2', '_3'])}")
            shape = tuple(rnd.choice([1, 8, 16, 64, 128, 256]) for _ in range(rnd.randrange(1, 5)))
            self.ops[name] = Op(name, op_type, [Desc(shape)])
        self._sorted = sorted(self.ops)

    def sorted_names(self) -> list[str]:
        return self._sorted


class FakeSession:
    def __init__(self, graph: SyntheticGraph):
        self.graph = graph
        self.golden = None
        self.dumps = None


def keystroke_latencies(completer: ShellCompleter, command: str, query: str) -> list[float]:
    event = CompleteEvent(text_inserted=True)
    out = []
    for end in range(1, len(query) + 1):
        text = f"{command} {query[:end]}"
        start = time.perf_counter()
        for _ in completer.get_completions(Document(text), event):
            pass
        out.append(time.perf_counter() - start)
    return out


def summary(values: list[float]) -> str:
    ms = sorted(v * 1000 for v in values)
    p95 = ms[min(len(ms) - 1, int(round(0.95 * (len(ms) - 1))))]
    return f"median {statistics.median(ms):6.2f} ms  p95 {p95:6.2f} ms  max {ms[-1]:6.2f} ms  (n={len(ms)})"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--ops", type=int, default=100_000)
    p.add_argument("--seed", type=int, default=0)
    opts = p.parse_args(argv)
    for name in ("ni", "pt"):
        if REGISTRY.get(name) is None:
            print(f"command {name!r} is not registered; nothing to benchmark", file=sys.stderr)
            return 1

    start = time.perf_counter()
    graph = SyntheticGraph(opts.ops, opts.seed)
    print(f"{len(graph.ops):,} synthetic op names generated in {time.perf_counter() - start:.2f} s")
    completer = ShellCompleter(FakeSession(graph))
    start = time.perf_counter()
    completer.warm_up()
    print(f"index built once in {(time.perf_counter() - start) * 1000:.0f} ms")

    rnd = random.Random(opts.seed + 1)
    some = rnd.sample(graph.sorted_names(), 6)
    families = {
        "prefix (full names)": some[:3],
        "component (MatMulV2, block37/attn)": ["MatMulV2", "block37/attn", "LayerNorm_2"],
        "fuzzy (b12c3cv, blk37qkv, mdlb9ffn)": ["b12c3cv", "blk37qkv2", "mdlb9ffn"],
        "no match (zzq, block9999, conv99X)": ["zzq", "block9999", "conv99xq"],
    }
    everything = []
    for family, queries in families.items():
        values = []
        for command in ("ni", "pt"):
            for q in queries:
                values += keystroke_latencies(completer, command, q)
        everything += values
        print(f"{family:38s} {summary(values)}")
    print(f"{'all keystrokes':38s} {summary(everything)}")
    worst = max(everything) * 1000
    print(f"target < 50 ms per keystroke: {'met' if worst < 50 else 'NOT met'} (worst {worst:.1f} ms)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
