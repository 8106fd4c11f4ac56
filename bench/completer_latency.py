"""Benchmark: per-keystroke completion latency over 100k synthetic op names (target < 50 ms).

    python bench/completer_latency.py [--ops 100000] [--seed 0] [--naive] [--json]

Names look like a real transformer/convnet GE graph (``model/block12/attn/conv3/Conv2D_1``).
Each query is "typed" one character at a time after ``ni `` (op names) and ``pt `` (tensor refs),
and every keystroke runs the whole completer and consumes every candidate, as the menu would:
prefix queries, path-component queries (``MatMul``), fuzzy subsequences (``b12c3cv``) and
queries that match nothing (the worst case: every scan runs to the end). Prints the index build
time, then median / p95 / max latency per query family and overall. ``--naive`` times the naive
baseline completer (``bench/baseline.py``: a fresh regex and a linear scan per keystroke) on the
same keystrokes; ``--json`` prints one JSON document instead (what ``bench/run.py`` reads).
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from baseline import naive_complete  # noqa: E402
from common import percentile  # noqa: E402

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


def keystroke_latencies(complete: Callable[[str], object], command: str, query: str) -> list[float]:
    """Seconds per keystroke while ``query`` is typed after ``command``; ``complete(text)`` runs
    a completer on the whole line and consumes every candidate, as the menu would."""
    out = []
    for end in range(1, len(query) + 1):
        text = f"{command} {query[:end]}"
        start = time.perf_counter()
        complete(text)
        out.append(time.perf_counter() - start)
    return out


def pshell_complete(completer: ShellCompleter) -> Callable[[str], int]:
    event = CompleteEvent(text_inserted=True)
    return lambda text: sum(1 for _ in completer.get_completions(Document(text), event))


def naive_completer(names: list[str]) -> Callable[[str], int]:
    return lambda text: len(naive_complete(names, text.split(" ", 1)[1])[:100])


def query_families(graph: SyntheticGraph, seed: int) -> dict[str, list[str]]:
    rnd = random.Random(seed + 1)
    some = rnd.sample(graph.sorted_names(), 6)
    return {
        "prefix (full names)": some[:3],
        "component (MatMulV2, block37/attn)": ["MatMulV2", "block37/attn", "LayerNorm_2"],
        "fuzzy (b12c3cv, blk37qkv, mdlb9ffn)": ["b12c3cv", "blk37qkv2", "mdlb9ffn"],
        "no match (zzq, block9999, conv99X)": ["zzq", "block9999", "conv99xq"],
    }


def family_latencies(complete: Callable[[str], object], families: dict[str, list[str]]) -> dict[str, list[float]]:
    """Per family, the latency of every keystroke of its queries after ``ni`` and ``pt``."""
    return {family: [t for command in ("ni", "pt") for q in queries
                     for t in keystroke_latencies(complete, command, q)]
            for family, queries in families.items()}


def summary(values: list[float]) -> str:
    ms = [v * 1000 for v in values]
    return (f"median {statistics.median(ms):6.2f} ms  p95 {percentile(ms, 0.95):6.2f} ms  "
            f"max {max(ms):6.2f} ms  (n={len(ms)})")


def summary_json(values: list[float]) -> dict:
    ms = [v * 1000 for v in values]
    return {"median_ms": round(statistics.median(ms), 3), "p95_ms": round(percentile(ms, 0.95), 3),
            "max_ms": round(max(ms), 3), "keystrokes": len(ms)}


def measure(ops: int = 100_000, seed: int = 0, naive: bool = False) -> dict:
    """Everything the harness reports: index build time, per-family and overall keystroke
    latencies of pshell's completer (and of the naive baseline with ``naive``)."""
    start = time.perf_counter()
    graph = SyntheticGraph(ops, seed)
    generated = time.perf_counter() - start
    completer = ShellCompleter(FakeSession(graph))
    start = time.perf_counter()
    completer.warm_up()
    result = {"names": len(graph.ops), "generate_s": round(generated, 3),
              "index_build_ms": round((time.perf_counter() - start) * 1000, 1)}
    families = query_families(graph, seed)
    sides = {"pshell": pshell_complete(completer)}
    if naive:
        sides["baseline"] = naive_completer(graph.sorted_names())
    for side, complete in sides.items():
        per_family = family_latencies(complete, families)
        result[side] = {"families": {f: summary_json(v) for f, v in per_family.items()},
                        "all": summary_json([t for v in per_family.values() for t in v]),
                        "raw": per_family}
    return result


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--ops", type=int, default=100_000)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--naive", action="store_true", help="also time the naive baseline completer")
    p.add_argument("--json", action="store_true", help="print one JSON document (for bench/run.py)")
    opts = p.parse_args(argv)
    for name in ("ni", "pt"):
        if REGISTRY.get(name) is None:
            print(f"command {name!r} is not registered; nothing to benchmark", file=sys.stderr)
            return 1
    result = measure(opts.ops, opts.seed, opts.naive)
    if opts.json:
        for side in ("pshell", "baseline"):
            result.get(side, {}).pop("raw", None)
        print(json.dumps(result))
        return 0
    print(f"{result['names']:,} synthetic op names generated in {result['generate_s']:.2f} s")
    print(f"index built once in {result['index_build_ms']:.0f} ms")
    for side in ("pshell", "baseline"):
        if side not in result:
            continue
        print(f"-- {side}")
        everything = []
        for family, values in result[side]["raw"].items():
            everything += values
            print(f"{family:38s} {summary(values)}")
        print(f"{'all keystrokes':38s} {summary(everything)}")
    worst = result["pshell"]["all"]["max_ms"]
    print(f"target < 50 ms per keystroke: {'met' if worst < 50 else 'NOT met'} (worst {worst:.1f} ms)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
