"""Time ``impact`` on a long synthetic graph and show it streams (issue 28: the sample's whole
downstream graph in < 2 s; a 1,000-op graph recomputed op by op with bounded memory).

    python bench/impact.py [--ops 1000] [--elements 262144]

The graph is an in-memory run-model adapter (no files): a chain of Add/Tanh/Mul ops in float16
where every Add also reads the output three ops back (so tensors live past their next op), fed
by one root whose golden is substituted. Dumped values and goldens are made on demand from a
seed per tensor. Prints wall and CPU time, the ops recomputed, the most recomputed tensors held
at once (``peak_live``) and peak RSS above the start: without freeing, ``ops x elements x 8``
bytes would be held.
"""

from __future__ import annotations

import argparse
import os
import resource
import sys
import time
import zlib

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from precision_shell.analysis.impact import Impact, impact_rows  # noqa: E402
from precision_shell.model.runs.base import Edge, TensorInfo  # noqa: E402


class _Op:
    kind = "kernel"

    def __init__(self, order, name, type_, inputs, outputs):
        self.order, self.name, self.type, self.kernel_key = order, name, type_, type_
        self.inputs, self.outputs = inputs, outputs
        self.tensors = inputs + outputs


class ChainRun:
    """A Run of ``n`` ops after a root: op k = Add(op k-1, op k-3) | Tanh(op k-1) | Mul(op k-1, op k-1)."""
    kind, warnings, extras, path = "ge", [], {}, "<synthetic>"

    def __init__(self, n: int, elements: int):
        self.shape = (elements,)
        self.ops, self._by, self._tensors, self._prod = [], {}, {}, {}
        self._cons: dict[str, list[Edge]] = {}
        self._add("root", "Tanh", [])
        for k in range(1, n + 1):
            prev = self.ops[-1].name
            kind = ("Add", "Tanh", "Mul")[k % 3]
            srcs = [prev, self.ops[max(0, len(self.ops) - 3)].name] if kind == "Add" else \
                [prev] if kind == "Tanh" else [prev, prev]
            self._add(f"op{k}", kind, srcs)

    def _t(self, op, io, i):
        t = TensorInfo(f"{op}:{io}:{i}", op, io, str(i), "float16", self.shape, None, True)
        self._tensors[t.name] = t
        return t

    def _add(self, name, kind, srcs):
        ins = [self._t(name, "input", i) for i in range(len(srcs))]
        op = _Op(len(self.ops), name, kind, ins, [self._t(name, "output", 0)])
        for t, src in zip(ins, srcs):
            e = Edge(f"{src}:output:0", t.name, src, name, True)
            self._prod[t.name] = e
            self._cons.setdefault(src, []).append(e)
        self.ops.append(op)
        self._by[name] = op

    def op(self, name):
        return self._by[name]

    def tensor(self, name):
        return self._tensors[name]

    def load(self, name):
        rng = np.random.default_rng(zlib.crc32(name.encode()))
        return (rng.standard_normal(self.shape) * 0.5).astype(np.float16)

    def producer(self, tensor):
        return self._prod.get(tensor)

    def producers(self, op):
        return [self._prod[t.name] for t in self._by[op].inputs]

    def consumers(self, op):
        return list(self._cons.get(op, ()))


class _Pairing:
    def golden_for(self, tensor):
        return TensorInfo("golden:" + tensor.name, tensor.op, tensor.io, tensor.index, "float32", tensor.shape,
                          None, True)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--ops", type=int, default=1000)
    ap.add_argument("--elements", type=int, default=1 << 18)
    a = ap.parse_args()
    run = ChainRun(a.ops, a.elements)
    rss0 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    impact = Impact(run, _Pairing(), lambda t: run.load(t.name).astype(np.float32), max_ops=a.ops + 1)
    wall, cpu = time.perf_counter(), time.process_time()
    problems: list[str] = []
    rows = list(impact_rows(impact, ["root"], None, False, problems))
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    rss = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - rss0) / 1024
    row = rows[0]
    print(f"ops {a.ops}, {a.elements:,} elements each: recomputed {row.recomputed}, wall {wall:.2f} s, "
          f"cpu {cpu:.2f} s, peak_live {impact.peak_live} tensors, peak RSS +{rss:.0f} MB "
          f"(holding all: {a.ops * a.elements * 8 / 2**20:.0f} MB); share {row.share_removed}")
    for p in problems:
        print("problem:", p)


if __name__ == "__main__":
    main()
