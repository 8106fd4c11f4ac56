"""``replay``: recompute one op from its own dumped inputs, exactly and under emulated device
arithmetic, and say why its output is wrong (issue 13, product.md §12).

``profiles`` (rounding rules) and ``metrics`` (distances) -> kernel families (one module each,
numpy only) -> ``kernels`` (op type -> kernel) -> ``engine`` (run every profile) -> ``verdict``
(the rule) ; ``reproducer`` writes the standalone script of ``replay --export``.
"""
