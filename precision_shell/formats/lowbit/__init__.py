"""Low-precision dump dtypes (formats.md Appendix B, docs/low-precision.md): HiFloat8, FP8
E5M2/E4M3FN, E8M0 scale bytes, FP6 E3M2/E2M3, FP4 E2M1/E1M2 packed two per byte.

``catalog`` holds each format's 2**bits values as float32 (decoding is a table lookup, bit-exact
by construction), ``packing`` the two-per-byte storage, ``rounding`` the encoders (nearest value
of the table, ties to even or away) used by ``qstat``, replay profiles and the sample generator.
"""

from .catalog import FORMATS, LowbitFormat, by_dtype_code, by_name, decode_codes  # noqa: F401
from .packing import pack_nibbles, unpack_nibbles  # noqa: F401
