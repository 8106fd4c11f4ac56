"""``report``: one self-contained HTML file of what a session found, to share with the team.

:mod:`.gather` collects the data (pure functions returning dataclasses, from the results the
commands left in ``session.results`` and the results those commands return), :mod:`.layout`
places a neighbourhood graph, :mod:`.svg` draws charts, graphs and histograms as inline SVG and
:mod:`.html` fills the template (jinja2: the optional ``report`` extra).
"""
