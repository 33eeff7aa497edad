"""Text a store holds, made safe to show: every character that is not printable spelled out.

A store's fields (locators, ids, host names, notes) are written by whoever wrote the
store. A control character, a newline or a bidi override would otherwise act on the
terminal or change what the reader sees (``txt.exe`` shown as ``exe.txt``).
"""

from __future__ import annotations

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
