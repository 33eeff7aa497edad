"""The wire of ``ledger mcp-proxy``: newline-delimited JSON-RPC lines, read and made.

MCP's stdio transport is one JSON-RPC message per line, UTF-8, no embedded newline.
The proxy reads lines as bytes and passes on every one it does not interpret exactly
as it came; :class:`Lines` hands over a line longer than the limit in pieces, so that
one huge message costs bounded memory. The answers the proxy gives itself (an error,
a refused call) are made here with the SDK's types, so they are what any MCP peer
expects.
"""

from __future__ import annotations

import json
from typing import IO, Any

from mcp.types import (
    CallToolResult,
    ErrorData,
    JSONRPCError,
    JSONRPCResponse,
    TextContent,
)

__all__ = ["IdKey", "Lines", "error_line", "id_key", "parse", "result_line", "tool_error_line"]

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


def parse(line: bytes) -> Any:
    """The JSON value of a line, or ``None`` when it holds none (the proxy passes it on)."""
    try:
        return json.loads(line)
    except (ValueError, RecursionError):  # not JSON, not UTF-8, or nested beyond reason
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


def error_line(request_id: object, code: int, message: str) -> bytes:
    """A JSON-RPC error answering ``request_id`` (``null`` when it is not a valid id)."""
    error = JSONRPCError(
        jsonrpc="2.0", id=_id(request_id), error=ErrorData(code=code, message=message)
    )
    return encode(error.model_dump(mode="json", by_alias=True, exclude_none=False))


def result_line(request_id: int | str, result: dict[str, Any]) -> bytes:
    """A JSON-RPC result answering ``request_id``."""
    response = JSONRPCResponse(jsonrpc="2.0", id=request_id, result=result)
    return encode(response.model_dump(mode="json", by_alias=True))


def tool_error_line(request_id: int | str, text: str) -> bytes:
    """A ``tools/call`` result with ``isError``: the model sees ``text`` and can act on it."""
    result = CallToolResult(content=[TextContent(type="text", text=text)], is_error=True)
    return result_line(request_id, result.model_dump(mode="json", by_alias=True, exclude_none=True))
