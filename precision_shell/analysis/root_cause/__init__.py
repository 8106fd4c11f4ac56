"""Roots, propagated ops and the first divergence over the dataflow graph, for tensor or
statistics verdicts, and the one JSON row schema of `vcs`."""
