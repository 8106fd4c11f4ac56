"""What differs for msprobe dumps: its pairing rules, metric formulas (kernel), CSV layout
and coverage counts."""
