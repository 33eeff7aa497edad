"""A server that speaks MCP badly: before each answer it writes lines no peer expects.

    python garbage_server.py STATE_DIR

It answers ``initialize``, ``tools/list`` and ``tools/call`` (echoing the idempotency
key it received into STATE_DIR/calls.jsonl); before each answer it writes the lines of
``GARBAGE``, which the proxy must pass on untouched, without dying. The tool
``bad_answer`` gets a result that is not an object; each tool of ``UNREADABLE`` an
answer written as that raw line (its id put in), which parsers may read differently.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

GARBAGE = [
    b"this is not json\n",
    b"\xff\xfe not even utf-8\n",
    b"[1, 2, 3]\n",
    b'{"no": "jsonrpc here"}\n',
    b'{"jsonrpc": "2.0", "id": 987654, "result": {}}\n',
    b'{"jsonrpc": "2.0", "method": "notifications/no/such/thing", "params": {"x": 1}}\n',
    b"\n",
]

_CONTENT = b'{"content":[{"type":"text","text":"done"}]'
UNREADABLE = {
    # Python's json keeps the last isError, a parser that keeps the first says it failed.
    "iserror_twice": _CONTENT + b',"isError":true,"isError":false}',
    "invalid_utf8": b'{"content":[{"type":"text","text":"\xff\xfe"}]}',
    "huge_integer": _CONTENT + b',"n":' + b"9" * 5000 + b"}",
    "lone_surrogate": b'{"content":[{"type":"text","text":"\\udc00"}]}',
    "deep": _CONTENT + b',"n":' + b"[" * 100_000 + b"]" * 100_000 + b"}",
}


def send(message: dict[str, object] | bytes) -> None:
    for line in GARBAGE:
        sys.stdout.buffer.write(line)
    raw = message if isinstance(message, bytes) else json.dumps(message).encode()
    sys.stdout.buffer.write(raw + b"\n")
    sys.stdout.buffer.flush()


def main(state: Path) -> None:
    """Answer requests on stdin until it ends."""
    for raw in sys.stdin.buffer:
        try:
            request = json.loads(raw)
        except ValueError:
            continue
        if not isinstance(request, dict) or "id" not in request:
            continue
        method, rid = request.get("method"), request["id"]
        if method == "initialize":
            result: object = {
                "protocolVersion": "2025-11-25",
                "capabilities": {"tools": {}},
                "serverInfo": {"name": "garbage", "version": "0.1"},
            }
        elif method == "tools/list":
            result = {"tools": [{"name": "echo", "inputSchema": {"type": "object"}}]}
        elif method == "tools/call":
            params = request["params"]
            with (state / "calls.jsonl").open("a") as f:
                key = params.get("_meta", {}).get("ledger/idempotency-key")
                f.write(json.dumps({"tool": params["name"], "key": key}) + "\n")
            if params["name"] in UNREADABLE:
                send(b'{"jsonrpc":"2.0","id":%d,"result":%s}' % (rid, UNREADABLE[params["name"]]))
                continue
            if params["name"] == "bad_answer":
                result = "not an object"
            else:
                result = {
                    "content": [{"type": "text", "text": json.dumps(params.get("arguments"))}]
                }
        else:
            send(
                {
                    "jsonrpc": "2.0",
                    "id": rid,
                    "error": {"code": -32601, "message": "no such method"},
                }
            )
            continue
        send({"jsonrpc": "2.0", "id": rid, "result": result})


if __name__ == "__main__":
    main(Path(sys.argv[1]))
