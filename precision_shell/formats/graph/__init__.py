"""GE graph dumps (formats.md §3): which files a run has (files), the full parse of a graph text
or atc's JSON (text, atc_json), and the start-up index of a graph text: scanned in Python (scan) or
into columns by the optional C kernel _graph_scan (_graph_scan.c, _graph_link.c; columns)."""
