"""Builds the optional C metrics kernel (precision_shell.analysis._fused_metrics).

Everything else is declared in setup.cfg / pyproject.toml. The kernel is optional: without a
working C compiler (or numpy's headers) the install still succeeds with a warning, and pshell
computes the metrics with numpy (analysis/fused_metrics.py picks the path at run time).

Flags: -O3 vectorises the kernel; the C source picks AVX-512 / AVX2 / baseline code at load
time (GCC target_clones), so a wheel built on one x86-64 runs on any other and no -march=native
is needed. -ffp-contract=off keeps a*b+c as two roundings (no fused multiply-add: the results
must equal numpy's bit for bit); -fno-math-errno / -fno-trapping-math only drop errno and FP
trap bookkeeping. Never -ffast-math: it breaks NaN/Inf handling and reorders sums.
"""

import sys
import warnings

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

FLAGS = ["-O3", "-ftree-vectorize", "-ffp-contract=off", "-fno-math-errno",
         "-fno-trapping-math", "-std=c11"]


class OptionalBuildExt(build_ext):
    """build_ext that warns instead of failing when the kernel cannot be built."""

    def build_extension(self, ext):
        try:
            import numpy
        except ImportError:
            self._skip(ext, "numpy is not importable at build time")
            return
        ext.include_dirs.append(numpy.get_include())
        if self.compiler.compiler_type == "unix":
            ext.extra_compile_args = FLAGS
        try:
            super().build_extension(ext)
        except Exception as exc:  # no compiler, a failing one, missing headers...
            self._skip(ext, f"{type(exc).__name__}: {exc}")

    def _skip(self, ext, reason):
        message = (f"pshell: the optional C kernel {ext.name} was not built ({reason}); "
                   "metrics use the numpy path (same results, about twice as slow)")
        warnings.warn(message)
        print("WARNING: " + message, file=sys.stderr)


setup(
    ext_modules=[Extension("precision_shell.analysis._fused_metrics",
                           ["precision_shell/analysis/_fused_metrics.c"], optional=True)],
    cmdclass={"build_ext": OptionalBuildExt},
)
