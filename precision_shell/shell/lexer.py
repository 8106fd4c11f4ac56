"""Colours the line being typed: command word, flags, numbers, known op names, strings.

An unknown command word is shown in the error colour before Enter, and an op name turns from
plain to coloured once it names a real op, which tells the user a reference will resolve.
"""

from __future__ import annotations

import re
from typing import Any, Callable

from prompt_toolkit.document import Document
from prompt_toolkit.lexers import Lexer

from precision_shell.commands.registry import REGISTRY, Registry
from precision_shell.shell.line_context import is_flag

# quoted strings, separators, and runs of anything else (brackets keep a slice in one token)
_TOKEN = re.compile(r"""(?P<string>"[^"]*"?|'[^']*'?)|(?P<sep>;|>>?)|(?P<space>\s+)|"""
                    r"""(?P<word>(?:\[[^\]]*\]?|[^\s;>'"\[])+)""")
_NUMBER = re.compile(r"^[-+]?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?$")
_REF = re.compile(r"^(?P<op>.+?):(?P<io>output|input):(?P<idx>\d+)(?P<slice>\[.*)?$")

STYLE_RULES = {
    "command": "bold ansigreen",
    "unknown-command": "ansired",
    "flag": "ansicyan",
    "number": "ansimagenta",
    "op": "ansiyellow",
    "string": "ansibrightgreen",
    "operator": "bold",
}


class ShellLexer(Lexer):
    def __init__(self, session: Any, registry: Registry = REGISTRY):
        self.session = session
        self.registry = registry

    def _is_op(self, name: str) -> bool:
        graph = getattr(self.session, "graph", None)
        return graph is not None and name in graph.ops

    def _word_tokens(self, word: str, first: bool) -> list[tuple[str, str]]:
        if first:
            known = self.registry.info(word) is not None   # the table: nothing imported
            return [("class:command" if known else "class:unknown-command", word)]
        if is_flag(word):
            return [("class:flag", word)]
        if _NUMBER.match(word):
            return [("class:number", word)]
        if self._is_op(word):
            return [("class:op", word)]
        m = _REF.match(word)
        if m and self._is_op(m["op"]):
            rest = word[len(m["op"]):]
            return [("class:op", m["op"]), ("", rest)]
        return [("", word)]

    def lex_line(self, line: str) -> list[tuple[str, str]]:
        tokens: list[tuple[str, str]] = []
        first = True
        for m in _TOKEN.finditer(line):
            kind, text = m.lastgroup, m.group()
            if kind == "word":
                tokens += self._word_tokens(text, first)
                first = False
            elif kind == "string":
                tokens.append(("class:string", text))
                first = False
            elif kind == "sep":
                tokens.append(("class:operator", text))
                first = text == ";"   # a new statement starts with a command word
            else:
                tokens.append(("", text))
        return tokens

    def lex_document(self, document: Document) -> Callable[[int], list[tuple[str, str]]]:
        lines = document.lines

        def get_line(lineno: int) -> list[tuple[str, str]]:
            return self.lex_line(lines[lineno]) if lineno < len(lines) else []

        return get_line
