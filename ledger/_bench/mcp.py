"""``ledger bench``'s MCP cases: a tool call through ``ledger mcp-proxy``, and direct.

Both talk to the same minimal stdio server (it answers every ``tools/call`` at once),
over pipes, one JSON-RPC line each way: what the proxy adds is what the difference
shows, and it should be about one claim and one outcome commit. The cases need the MCP
SDK (the proxy does); without it they are left out of the report, which says so.
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

from ledger._bench.cases import timed, warm
from ledger._paths import DB_NAME

__all__ = ["WHAT", "McpCalls", "available"]

WHAT = {
    "mcp_direct": "an MCP tools/call and its answer over stdio, straight to the server",
    "mcp_call": "the same call through ledger mcp-proxy: claimed, relayed, settled",
}

# The server: answers initialize and every tools/call at once, nothing else.
_SERVER = """\
import json, sys
for line in sys.stdin:
    m = json.loads(line)
    if "id" not in m:
        continue
    if m.get("method") == "initialize":
        r = {"protocolVersion": "2025-11-25", "capabilities": {"tools": {}},
             "serverInfo": {"name": "bench", "version": "1"}}
    else:
        r = {"content": [{"type": "text", "text": "ok"}]}
    sys.stdout.write(json.dumps({"jsonrpc": "2.0", "id": m["id"], "result": r}) + "\\n")
    sys.stdout.flush()
"""


def available() -> bool:
    """Whether the MCP SDK, which the proxy needs, is installed."""
    return importlib.util.find_spec("mcp_types") is not None


class _Peer:
    """One stdio connection: a request line out, its answer line back."""

    def __init__(self, argv: list[str], stderr: Path) -> None:
        # The proxy's lines (its run, or why it failed) go to a file: a script running the
        # bench reads only errors on its stderr. The file is in the scratch directory.
        self.stderr = stderr
        with stderr.open("wb") as err:
            self.proc = subprocess.Popen(  # noqa: S603 - this Python, and this package's proxy
                argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err
            )
        assert self.proc.stdin is not None  # noqa: S101 - a pipe was asked for
        assert self.proc.stdout is not None  # noqa: S101 - a pipe was asked for
        self.stdin: IO[bytes] = self.proc.stdin
        self.stdout: IO[bytes] = self.proc.stdout
        self.next = 0
        self.ask({"method": "initialize", "params": {"protocolVersion": "2025-11-25"}})

    def ask(self, request: dict[str, Any]) -> None:
        self.next += 1
        self.stdin.write(json.dumps({"jsonrpc": "2.0", "id": self.next, **request}).encode())
        self.stdin.write(b"\n")
        self.stdin.flush()
        line = self.stdout.readline()
        try:
            answer = json.loads(line)
        except ValueError:
            answer = None
        if not isinstance(answer, dict) or answer.get("id") != self.next or "result" not in answer:
            said = " ".join(self.stderr.read_text(errors="replace").split()[-40:])
            raise OSError(f"the MCP bench call got {line[:200]!r} ({said or 'nothing on stderr'})")

    def call(self, i: int) -> None:
        self.ask({"method": "tools/call", "params": {"name": "echo", "arguments": {"i": i}}})

    def close(self) -> None:
        self.stdin.close()
        self.proc.wait(30)
        self.stdout.close()


class McpCalls:
    """The server twice: once direct, once behind a proxy writing to a store in ``scratch``."""

    def __init__(self, scratch: Path) -> None:
        server = [sys.executable, "-c", _SERVER]
        self.direct = _Peer(server, scratch / "mcp-direct.err")
        store = scratch / "mcp-store"
        self.proxied = _Peer(
            [sys.executable, "-m", "ledger", "mcp-proxy", "--store", str(store), "--", *server],
            scratch / "mcp-proxy.err",
        )
        # Its store warmed as the others are: until its WAL is reused rather than grown.
        warm(
            store / DB_NAME,
            lambda: timed(self.proxied.call, range(50)),
            lambda: self.proxied.call(0),
        )

    def chunks(self) -> dict[str, Callable[[int], list[int]]]:
        """The two cases, each timing ``count`` calls."""
        return {
            "mcp_direct": lambda count: timed(self.direct.call, range(count)),
            "mcp_call": lambda count: timed(self.proxied.call, range(count)),
        }

    def close(self) -> None:
        self.direct.close()
        self.proxied.close()
