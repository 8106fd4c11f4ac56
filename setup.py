"""Builds the optional C metrics kernel (precision_shell.analysis.compare._fused_metrics).

Everything else is declared in setup.cfg / pyproject.toml. The kernel is optional: without a
working C compiler (or numpy's headers) the install still succeeds with a warning, and pshell
computes the metrics with numpy (analysis/compare/fused_metrics.py picks the path at run time).

Flags: -O3 vectorises; -march=native because pshell is installed from source on the machine
that runs it (pip install -e . / pip install .), and the kernel's vectors are as wide as that
machine's registers (AVX2: 2x the SSE2 baseline's speed here). Set PSHELL_PORTABLE_BUILD=1 when
building a wheel for other machines (SSE2 / the compiler's default target; same results, slower);
a compiler that refuses -march=native gets the portable flags too. -ffp-contract=off keeps a*b+c
as two roundings (no fused multiply-add: results must equal numpy's bit for bit);
-fno-math-errno / -fno-trapping-math drop only errno and FP-trap bookkeeping. Never -ffast-math:
it breaks NaN/Inf handling and reorders sums.
"""

import os
import sys
import warnings

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

PORTABLE_FLAGS = ["-O3", "-ftree-vectorize", "-ffp-contract=off", "-fno-math-errno",
                  "-fno-trapping-math", "-std=gnu11", "-Wno-psabi"]
HOST_FLAGS = PORTABLE_FLAGS + ["-march=native"]
# repr() of doubles in C (formats/msprobe/float_repr.h on our shortest digits, shortest_digits.h;
# pow10_table.h is made by make_pow10_table.py)
_FLOAT_REPR = ("float_repr", "shortest_digits", "pow10_table")


class OptionalBuildExt(build_ext):
    """build_ext that warns instead of failing when the kernel cannot be built."""

    def build_extension(self, ext):
        try:
            import numpy
        except ImportError:
            self._skip(ext, "numpy is not importable at build time")
            return
        ext.include_dirs.append(numpy.get_include())
        attempts = [[]]  # non-unix compilers: their own defaults
        if self.compiler.compiler_type == "unix":
            portable = os.environ.get("PSHELL_PORTABLE_BUILD") == "1"
            attempts = [PORTABLE_FLAGS] if portable else [HOST_FLAGS, PORTABLE_FLAGS]
        for flags in attempts:
            ext.extra_compile_args = flags
            try:
                super().build_extension(ext)
                return
            except Exception as exc:  # no compiler, a failing one, missing headers...
                error = f"{type(exc).__name__}: {exc}"
        self._skip(ext, error)

    def _skip(self, ext, reason):
        message = (f"pshell: the optional C kernel {ext.name} was not built ({reason}); "
                   "pshell uses its Python path (same results, slower)")
        warnings.warn(message)
        print("WARNING: " + message, file=sys.stderr)


setup(
    ext_modules=[Extension(
        "precision_shell.analysis.compare._fused_metrics",
        [f"precision_shell/analysis/compare/{name}.c" for name in ("_fused_metrics", "_fused_passes", "_fused_batch")],
        depends=[f"precision_shell/analysis/compare/{name}.h" for name in ("_fused_metrics", "_fused_vectors")],
        optional=True),
        # msprobe's tensor-mode sums for framework dumps (analysis/compare/msprobe/kernel.py)
        Extension("precision_shell.analysis.compare._framework_metrics",
                  ["precision_shell/analysis/compare/_framework_metrics.c"],
                  depends=[f"precision_shell/analysis/compare/{name}.h" for name in ("_fused_metrics", "_fused_vectors")],
                  optional=True),
        # TFRecord framing + masked CRC32C + scalar Event decoding for `curve`
        # (formats/logs/events.py; without it: protobuf per record, same results, slower)
        Extension("precision_shell.formats.logs._tfrecord",
                  ["precision_shell/formats/logs/_tfrecord.c"], optional=True),
        # the start-up scan of GE graph texts into columns (formats/graph/columns.py; without it:
        # formats/graph/scan.py in Python, same graph, slower)
        Extension("precision_shell.formats.graph._graph_scan",
                  [f"precision_shell/formats/graph/{name}.c" for name in ("_graph_scan", "_graph_link")],
                  depends=["precision_shell/formats/graph/_graph_scan.h"], optional=True),
        # statistics columns straight from dump.json's bytes (formats/msprobe/columns.py, rank_columns;
        # without it: the columns from the parsed entries in Python, same columns, slower)
        Extension("precision_shell.formats.msprobe._stats_scan", ["precision_shell/formats/msprobe/_stats_scan.c"],
                  depends=[f"precision_shell/formats/msprobe/{name}.h" for name in _FLOAT_REPR], optional=True),
        # repr() of the statistics CSV's floats in C (analysis/compare/msprobe/cells.py; without it: map(repr))
        Extension("precision_shell.analysis.compare.msprobe._stats_cells",
                  ["precision_shell/analysis/compare/msprobe/_stats_cells.c"],
                  depends=[f"precision_shell/formats/msprobe/{name}.h" for name in _FLOAT_REPR], optional=True),
        # many dump headers' bytes in one call for vc's planning (formats/dump_header.read_dump_headers;
        # without it: each file read alone, same headers, slower beside the compare's threads)
        # and the v2 headers' DumpData decoded into TensorEntry objects (dump_header._parse; without
        # it: protobuf, same headers)
        Extension("precision_shell.formats._file_heads",
                  [f"precision_shell/formats/{name}.c" for name in ("_file_heads", "_dump_v2")],
                  depends=[f"precision_shell/formats/{name}.h" for name in ("_dump_v2", "_proto_wire")], optional=True)],
    cmdclass={"build_ext": OptionalBuildExt},
)
