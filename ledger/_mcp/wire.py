"""The wire of ``ledger mcp-proxy``: newline-delimited JSON-RPC lines, read and made.

MCP's stdio transport is one JSON-RPC message per line, UTF-8, no embedded newline.
The proxy reads lines as bytes and passes on every one it does not interpret exactly
as it came; :class:`Lines` hands over a line longer than the limit in pieces, so that
one huge message costs bounded memory. The answers the proxy gives itself (an error,
a refused call) are made here with the SDK's types, so they are what any MCP peer
expects.

A line is read strictly (:func:`parse`): only what every JSON parser reads the same
way. What Python's ``json`` would take but another parser reads otherwise (a key
twice, a lone surrogate, ``NaN``, a byte order mark), and what it refuses but another
parser takes (invalid UTF-8, an integer past Python's conversion limit, deep nesting),
is :class:`UnreadableError`: the proxy cannot know what the server would make of it.
"""

from __future__ import annotations

import json
import re
from typing import IO, Any

from mcp_types import (
    CallToolResult,
    ErrorData,
    JSONRPCError,
    JSONRPCResponse,
    TextContent,
)

__all__ = [
    "IdKey",
    "Lines",
    "UnreadableError",
    "answer_id",
    "blank",
    "error_line",
    "id_key",
    "parse",
    "result_line",
    "tool_error",
]

CHUNK = 1 << 20

IdKey = tuple[str, int | str]


class Lines:
    """The lines of a binary stream: ``(data, complete)``, or ``None`` at its end.

    A line up to ``limit`` bytes comes whole (``complete``), with its newline if it had
    one. A longer one comes in pieces, ``complete`` false for all but the last, which
    ends it: the reader never holds more than ``limit`` bytes of a message.
    """

    def __init__(self, stream: IO[bytes], limit: int) -> None:
        self._stream = stream
        self._limit = limit
        self._inside = False  # in the middle of an oversized line

    def next(self) -> tuple[bytes, bool] | None:
        """The next line, or the next piece of an oversized one; ``None`` at the end."""
        if self._inside:
            piece = self._stream.readline(CHUNK)
            if not piece:
                self._inside = False
                return None
            self._inside = not piece.endswith(b"\n")
            return piece, not self._inside
        line = self._stream.readline(self._limit + 1)
        if not line:
            return None
        if len(line) > self._limit and not line.endswith(b"\n"):
            self._inside = True
            return line, False
        return line, True


class UnreadableError(ValueError):
    """A line that is not one JSON value every parser reads alike; the message says why."""


# A \u escape of a surrogate, possibly a lone one (a pair is one character once read).
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")
_JSON_SPACE = b" \t\r\n"


def blank(line: bytes) -> bool:
    """Whether a line holds nothing but JSON whitespace: no message, in any parser."""
    return not line.strip(_JSON_SPACE)


def _unique(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    # Python keeps the last of two equal keys, other parsers the first or refuse: a
    # "method" or a tool "name" given twice could be recorded as one call and run as another.
    value = dict(pairs)
    if len(value) != len(pairs):
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                raise UnreadableError(f"the key {json.dumps(key)} is given twice")
            seen.add(key)
    return value


def _no_constant(name: str) -> object:
    raise UnreadableError(f"{name} is not JSON")


def _lone_surrogate(value: object) -> bool:
    """Whether a string in ``value`` (a key too) holds half a surrogate pair."""
    # Iteratively: the value may be as deep as the parser allowed.
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            try:
                item.encode("utf-8")
            except UnicodeEncodeError:
                return True
        elif isinstance(item, dict):
            stack.extend(item)
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return False


def parse(line: bytes, *, constants: bool = False) -> Any:
    """The JSON value of a line, read strictly; :class:`UnreadableError` when it is not one.

    Strict UTF-8 (no byte order mark), RFC 8259 JSON, one value, each key once, every
    string whole Unicode, an integer Python can convert, nested no deeper than Python
    can read. ``constants``: take ``NaN`` and ``Infinity`` (a server's answer, whose
    reading they cannot change).
    """
    try:
        text = line.decode("utf-8")
        value = json.loads(
            text,
            object_pairs_hook=_unique,
            parse_constant=float if constants else _no_constant,
        )
    except UnreadableError:
        raise
    except UnicodeDecodeError:
        raise UnreadableError("not UTF-8") from None
    except RecursionError:
        raise UnreadableError("nested too deep") from None
    except ValueError as e:  # not JSON, more than one value, or an integer too long
        raise UnreadableError(str(e).split(":")[0]) from None
    if _SURROGATE_ESCAPE.search(text) and _lone_surrogate(value):
        raise UnreadableError("a string holds a lone surrogate")
    return value


def answer_id(line: bytes) -> object:
    """The id of what looks like an answer, read as leniently as Python can; else ``None``.

    For a line :func:`parse` refused: which request it may answer.
    """

    def whole(digits: str) -> int | None:
        try:
            return int(digits)
        except ValueError:  # beyond the conversion limit: no id
            return None

    try:
        value = json.loads(line.decode("utf-8", "replace"), parse_int=whole)
    except (ValueError, RecursionError):
        return None
    if isinstance(value, dict) and "method" not in value:
        return value.get("id")
    return None


def id_key(value: object) -> IdKey | None:
    """A request id as a key (``1`` and ``"1"`` differ); ``None`` for what is not an id."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return ("int", value)
    if isinstance(value, str):
        return ("str", value)
    return None


def encode(message: dict[str, Any]) -> bytes:
    """One message as a line: ASCII-only JSON (any string survives it), then a newline."""
    return json.dumps(message, separators=(",", ":")).encode("ascii") + b"\n"


def _id(value: object) -> int | str | None:
    return None if id_key(value) is None else value  # type: ignore[return-value]


def error_line(request_id: object, code: int, message: str, data: object = None) -> bytes:
    """A JSON-RPC error answering ``request_id`` (``null`` when it is not a valid id).

    ``data``, when given, is the error's ``data`` member.
    """
    error = JSONRPCError(
        jsonrpc="2.0",
        id=_id(request_id),
        error=ErrorData(code=code, message=message, data=data),
    )
    return encode(error.model_dump(mode="json", by_alias=True, exclude_none=False))


def result_line(request_id: int | str, result: dict[str, Any]) -> bytes:
    """A JSON-RPC result answering ``request_id``."""
    response = JSONRPCResponse(jsonrpc="2.0", id=request_id, result=result)
    return encode(response.model_dump(mode="json", by_alias=True))


def tool_error(text: str, meta: dict[str, Any] | None = None) -> dict[str, Any]:
    """A ``tools/call`` result with ``isError``: the model sees ``text`` and can act on it.

    ``meta`` becomes the result's ``_meta``, for a client that reads it.
    """
    result = CallToolResult(
        content=[TextContent(type="text", text=text)], is_error=True, _meta=meta
    )
    return result.model_dump(mode="json", by_alias=True, exclude_none=True)
