"""``pshell mcp``: pshell's analyses as typed tools for agents (Model Context Protocol, stdio).

:mod:`.tools` is the tool table (schemas and argv from the command registry), :mod:`.answers`
the JSON answer with its evidence and size cap, :mod:`.session_tools` the one workspace and the
runs on it, :mod:`.command_thread` the main-thread job loop (Ctrl-C semantics for cancellation),
:mod:`.server` the SDK wiring: the only module importing ``mcp`` (the ``mcp`` extra).
"""
