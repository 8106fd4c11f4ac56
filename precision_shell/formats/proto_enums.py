"""The enums of ``protos/dump_data.proto`` (data types, formats) read from its text.

Why not protobuf's enum wrappers: every command that names a dtype or a format would import
protobuf (~20 ms) and build the message classes only for these two tables; a dump's v2 header
is decoded without protobuf (``_dump_v2.c``), so a compare need not import it at all.
tests/formats/test_protoload.py holds them equal to protobuf's.
"""

from __future__ import annotations

import re
from functools import lru_cache
from importlib import resources

_COMMENT = re.compile(r"//[^\n]*|/\*.*?\*/", re.S)
_ENUM = re.compile(r"\benum\s+(\w+)\s*\{([^}]*)\}")
_VALUE = re.compile(r"(\w+)\s*=\s*(-?\d+)\s*;")


def read_enums(text: str) -> dict[str, dict[str, int]]:
    """{enum name: {value name: number}} of the enums in a .proto text (top level and nested)."""
    text = _COMMENT.sub(" ", text)
    return {m.group(1): {name: int(number) for name, number in _VALUE.findall(m.group(2))}
            for m in _ENUM.finditer(text)}


@lru_cache(maxsize=None)
def dump_data_enums() -> dict[str, dict[str, int]]:
    """``OutputDataType``, ``OutputFormat``, ... of ``toolkit.dumpdata``."""
    return read_enums(resources.files(__package__).joinpath("protos", "dump_data.proto").read_text("utf-8"))
