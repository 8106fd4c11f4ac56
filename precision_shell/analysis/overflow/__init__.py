"""Overflow scans: the graph-mode scan (Opdebug records + values), the value scan and the scan
written against the run model."""
