"""Values from a file quoted in an error message, cut short.

An error line names the file and the reason; a value copied from a hostile or corrupt file (a
5,000-digit count, a megabyte-long string) must not turn that line into kilobytes of text.
"""

from __future__ import annotations

import re

SHOWN_CHARS = 40
_UPB_PREFIX = re.compile(r"^Error parsing message(?: with type '[\w.]+')?: ")


def shown(value) -> str:
    """``value`` as it appears in an error: strings quoted, at most ``SHOWN_CHARS`` characters of
    it shown (then ``...``); integers too long to print are described by their size."""
    if isinstance(value, bytes):
        value = value.decode("utf-8", "replace")
    if isinstance(value, str):
        return repr(value if len(value) <= SHOWN_CHARS else value[:SHOWN_CHARS] + "...")
    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > 4 * SHOWN_CHARS:
        # str() of a huge int is slow and, past 4300 digits, refused by Python itself
        return f"an integer of about {int(value.bit_length() * 0.30103) + 1} digits"
    text = repr(value)
    return text if len(text) <= SHOWN_CHARS else text[:SHOWN_CHARS] + "..."


def clipped(exc: BaseException, limit: int = 2 * SHOWN_CHARS) -> str:
    """The first line of a library's error message (numpy, protobuf, csv), cut to ``limit``
    characters: such messages may quote the file's content (numpy repeats a whole .npy header)."""
    lines = str(exc).splitlines()
    text = lines[0] if lines else type(exc).__name__
    # upb's wording: "Error parsing message with type 'ge.proto.OpDef': Exceeded upb_DecodeOptions_MaxDepth"
    text = _UPB_PREFIX.sub("", text).replace("Exceeded upb_DecodeOptions_MaxDepth", "nested too deeply")
    return text if len(text) <= limit else text[:limit] + "..."


# The two ways a JSON file defeats Python's own decoder (RecursionError, a ValueError from int()).
JSON_TOO_DEEP = "JSON nested too deeply (arrays/objects more than ~1000 levels deep)"
JSON_LONG_NUMBER = "JSON holds a number of more than 4300 digits"
