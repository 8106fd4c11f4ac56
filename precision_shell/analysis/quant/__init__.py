"""Quantization forensics (issue 27, ``qstat``): re-quantize a tensor under a named FP8 / MX /
NVFP4 / HiFloat8 recipe (``recipes``) and measure what the recipe costs (``report``)."""

from .recipes import RECIPES, Quantized, Recipe, quantize  # noqa: F401
from .report import QuantReport, quant_report  # noqa: F401
