"""`curve`: the rules of product.md §13 over float64 series (rules.py), which series is the
curve and which the loss scale (select.py), and one analysis with its events and dump link
(findings.py). Log readers are in formats/logs."""
