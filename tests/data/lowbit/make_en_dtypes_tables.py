"""Writes en_dtypes_tables.json: every code of the low-precision formats decoded by the
``en_dtypes`` package (an independent implementation: its hifloat.h follows arXiv 2409.16626),
as float32 bit patterns. Run in a separate venv, never a pshell dependency:

    python -m venv /work/venvs/tool-endtypes && /work/venvs/tool-endtypes/bin/pip install en-dtypes==0.0.4
    /work/venvs/tool-endtypes/bin/python tests/data/lowbit/make_en_dtypes_tables.py
"""

import json
from pathlib import Path

import en_dtypes
import numpy as np

FORMATS = {"hifloat8": 8, "float8_e8m0": 8, "float6_e3m2": 6, "float6_e2m3": 6, "float4_e2m1": 4,
           "float4_e1m2": 4}

tables = {}
for name, bits in FORMATS.items():
    codes = np.arange(2 ** bits, dtype=np.uint8)
    values = codes.view(getattr(en_dtypes, name)).astype(np.float32)
    tables[name] = [f"{int(b):08x}" for b in values.view(np.uint32)]
# HiFloat8 rounding: every midpoint of two neighbouring finite values, and the float32 just
# below and above it, up to the largest finite 2^15 (beyond it en_dtypes gives inf)
grid = np.unique(np.abs(np.arange(256, dtype=np.uint8).view(en_dtypes.hifloat8).astype(np.float32)))
grid = grid[np.isfinite(grid)].astype(np.float64)
mids = ((grid[:-1] + grid[1:]) / 2).astype(np.float32)
probes = np.concatenate([mids, np.nextafter(mids, np.float32(0)), np.nextafter(mids, np.float32(np.inf))])
probes = np.concatenate([probes, -probes])
encoded = probes.astype(en_dtypes.hifloat8).view(np.uint8)
out = Path(__file__).with_name("en_dtypes_tables.json")
out.write_text(json.dumps({"en_dtypes": "0.0.4", "float32_bits": tables,
                           "hifloat8_rounding": {"float32_bits": [f"{int(b):08x}" for b in probes.view(np.uint32)],
                                                 "codes": [int(c) for c in encoded]}}, indent=1) + "\n")
print(f"wrote {out}")
