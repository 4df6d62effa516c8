"""Readable kernel names for display: demangled, template arguments shortened.

Kernel names arrive mangled on some platforms (ROCm traces: ``_ZN7ck_tile6kentry...``,
hundreds of characters) and, once demangled, are still long templates. For tables and
findings ``display_name``:

1. demangles Itanium names (``_Z...``) with LLVM's demangler (``pycxxfilt``, the one
   behind ``llvm-cxxfilt``: it reads every mangled name of the shared traces, where
   GNU ``c++filt`` 2.40 and the Rust ``cpp_demangle`` crate fail on some);
2. drops a leading ``void`` return type and the function's parameter list (a
   parenthesised group that ends the name, cv/ref qualifiers after it allowed);
3. writes template arguments (and parenthesised groups inside them) nested deeper than
   ``depth`` as ``...``: ``ck_tile::kentry<1, ck_tile::Rmsnorm2dFwd<...>>``;
4. cuts what is still longer than ``width`` characters, ending it with ``...``.

Names that are not mangled only go through steps 2-4 (and only when they read as a
C++ name, not a phrase such as ``Memcpy HtoD (Pageable -> Device)``); a name the
demangler refuses is shortened as written. The raw name stays in the store and in
JSON output: this is for people reading a table. Cached per (name, depth, width).
"""

from __future__ import annotations

import re
from functools import lru_cache

import pycxxfilt

DEPTH = 1
"""Template nesting kept by default: the kernel's own template arguments."""
WIDTH = 120
"""Longest display name by default (characters)."""

_OPEN = {"<": ">", "(": ")", "{": "}"}
_CLOSE = {">", ")", "}"}
_KEEP_PARENS = "(anonymous namespace)"
_QUALIFIED = re.compile(r"[\w:~$.]+(?:\(anonymous namespace\)::[\w:~$.]*)*(?:[<({]|$)")
"""A qualified C++ name up to its first bracket (no spaces: not a phrase)."""
_TAIL = re.compile(r"(?:\s*(?:const|volatile|&&|&|noexcept))*\s*")
"""What may follow a parameter list (cv and ref qualifiers)."""


def demangle(name: str) -> str:
    """The demangled form of an Itanium-mangled ``name`` (``_Z...``, also with a
    leading ``_`` as on macOS); any other name, or one that does not demangle, as is."""
    if not (name.startswith("_Z") or name.startswith("__Z")):
        return name
    try:
        return str(pycxxfilt.itanium_demangle(name[1:] if name.startswith("__Z") else name))
    except ValueError:
        return name


@lru_cache(maxsize=65_536)
def display_name(name: str, depth: int = DEPTH, width: int = WIDTH) -> str:
    """``name`` for people: demangled, shortened (see the module docstring)."""
    text = shorten(demangle(name), depth)
    return text if len(text) <= width else text[: max(width - 3, 1)] + "..."


def shorten(text: str, depth: int = DEPTH) -> str:
    """Drop a leading ``void`` and the parameter list; arguments nested deeper than
    ``depth`` become ``...``. Text whose brackets do not pair up is returned as is."""
    if text.startswith("void "):
        text = text[5:]
    if not _QUALIFIED.match(text):
        return text  # not a C++ name (``Memcpy HtoD (Pageable -> Device)``)
    out: list[str] = []
    stack: list[str] = []
    i, n = 0, len(text)
    while i < n:
        char = text[i]
        if text.startswith("operator", i) and _operator_end(text, i) > i + 8:
            end = _operator_end(text, i)
            if len(stack) <= depth:
                out.append(text[i:end])
            i = end
            continue
        if char == "(" and text.startswith(_KEEP_PARENS, i):
            if len(stack) <= depth:
                out.append(_KEEP_PARENS)
            i += len(_KEEP_PARENS)
            continue
        if char in _OPEN:
            if not stack and char == "(":
                close = _matching(text, i)
                if close is None:
                    return text
                if _TAIL.fullmatch(text, close + 1):
                    break  # the parameter list: dropped with what follows (const, ...)
            if len(stack) == depth:
                out.append(char + "...")
            elif len(stack) < depth:
                out.append(char)
            stack.append(char)
        elif char in _CLOSE:
            if not stack or _OPEN[stack[-1]] != char:
                return text
            stack.pop()
            if len(stack) <= depth:
                out.append(char)
        elif len(stack) <= depth:
            out.append(char)
        i += 1
    if stack:
        return text
    return "".join(out).replace("> >", ">>").strip()


def _operator_end(text: str, at: int) -> int:
    """End of an ``operator`` token starting at ``at``: ``operator<<``, ``operator()``,
    ``operator->``...; ``at + 8`` when only a word follows (``operator_x``, a cast)."""
    end = at + 8
    if text.startswith("()", end):
        return end + 2
    if text.startswith("[]", end):
        return end + 2
    while end < len(text) and text[end] in "<>=!+-*/%&|^~,":
        end += 1
    return end


def _matching(text: str, at: int) -> int | None:
    """Index of the bracket closing the one at ``at`` (any of ``<>(){}``), or None."""
    stack: list[str] = []
    for j in range(at, len(text)):
        char = text[j]
        if char in _OPEN:
            stack.append(char)
        elif char in _CLOSE:
            if not stack or _OPEN[stack[-1]] != char:
                return None
            stack.pop()
            if not stack:
                return j
    return None
