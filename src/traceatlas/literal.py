"""Data shown on a terminal: text that cannot act on the terminal.

Names from a trace, paths and query results are data. Rich markup and emoji codes are
switched off where they are printed (``cli/output.py``, ``report/terminal.py``); this
module handles the other half: characters that a terminal would obey rather than show.
``literal`` replaces them with Python-style escapes (``\\x1b``, ``\\n``, ``\\u202e``):

- C0 and C1 control characters and DEL (ESC starts ANSI sequences such as ``\\x1b[2J``;
  CR and backspace overwrite what was printed; a newline would split a table row),
- lone surrogates (undecodable bytes of a file name under ``surrogateescape``; they
  cannot be encoded for output at all),
- the line and paragraph separators U+2028 / U+2029,
- the bidirectional controls (U+061C, U+200E, U+200F, U+202A-U+202E, U+2066-U+2069), which
  reorder what follows them on screen.

Every other character, backslash included, is kept as is, so a name without any of these
prints exactly. Machine formats (JSON, CSV) keep the data untouched.
"""

from __future__ import annotations

import re

_UNSAFE = re.compile(
    "[\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069"
    "\ud800-\udfff]"
)
_SHORT = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def escape_char(char: str) -> str:
    r"""``"\x1b"`` -> ``\x1b``; ``"\n"`` -> ``\n``; ``"\u202e"`` -> ``\u202e``."""
    if char in _SHORT:
        return _SHORT[char]
    code = ord(char)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def literal(text: str) -> str:
    """``text`` with the characters a terminal would act on written as escapes."""
    if _UNSAFE.search(text) is None:
        return text
    return _UNSAFE.sub(lambda m: escape_char(m.group()), text)
