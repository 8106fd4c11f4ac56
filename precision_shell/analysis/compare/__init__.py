"""The compare engine: plans (pairs from the pairing), workers and C kernels, metrics, coverage
and the CSV layouts (msaccucmp's here, msprobe's in :mod:`.msprobe`)."""
