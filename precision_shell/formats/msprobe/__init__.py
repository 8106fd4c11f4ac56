"""msprobe dumps (PyTorch / MindSpore eager, framework-dumps.md A): where they are and what
their names say (layout), dump.json read with a size bound (json_files), entries and leaves
(dump, leaves), tensor bytes read in place (tensor_io), and the statistics as columns
(columns; scan with the optional C scanner _stats_scan.c)."""
