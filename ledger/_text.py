"""Text a store holds, made safe to show: every character that is not printable spelled out.

A store's fields (locators, ids, host names, notes) are written by whoever wrote the
store. A control character, a newline or a bidi override would otherwise act on the
terminal or change what the reader sees (``txt.exe`` shown as ``exe.txt``).
"""

from __future__ import annotations

import json
import re

UNPRINTABLE = re.compile(r"[^ -~]")


def _spelled(match: re.Match[str]) -> str:
    char = match.group()
    if char.isprintable():
        return char
    code = ord(char)
    return (
        f"\\x{code:02x}"
        if code <= 0xFF
        else f"\\u{code:04x}"
        if code <= 0xFFFF
        else f"\\U{code:08x}"
    )


def printable(text: str) -> str:
    """``text`` with every non-printable character (controls, newlines, bidi marks) spelled out."""
    return text if text.isprintable() else UNPRINTABLE.sub(_spelled, text)


def shortened(text: str, limit: int) -> str:
    """``text`` made printable and cut to at most ``limit`` characters, the cut said.

    The cut falls between characters of ``text``, never inside a spelled-out one; what
    was cut is said as ``... (N chars)``, N the length of the whole ``text``.
    """
    if len(text) <= limit and text.isprintable():
        return text
    shown: list[str] = []
    size = 0
    for char in text:
        piece = char if char.isprintable() else UNPRINTABLE.sub(_spelled, char)
        if size + len(piece) > limit:
            return "".join(shown) + f"... ({len(text)} chars)"
        shown.append(piece)
        size += len(piece)
    return "".join(shown)


def compact_json(value: object) -> str:
    """A recorded JSON value as one line of compact JSON, as it is stored (not made printable)."""
    return json.dumps(value, ensure_ascii=False, sort_keys=True, separators=(",", ":"))
