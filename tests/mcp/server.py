"""An MCP server for the proxy's tests, written with the SDK's server API (stdio).

    python server.py STATE_DIR

Each tool call appends one JSON line to STATE_DIR/calls.jsonl: the tool, its
arguments and the ``ledger/idempotency-key`` and ``traceparent`` it found in the request's
``_meta``, so a test can compare what the server received with what the ledger claimed.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
from pathlib import Path
from typing import Any

from mcp.server.mcpserver import Context, MCPServer
from mcp.shared.exceptions import MCPError
from mcp.types import INVALID_PARAMS, SamplingMessage, TextContent, ToolAnnotations

STATE = Path(sys.argv[1])
server = MCPServer(name="ledger-test-server", version="1.2.3")


def record(ctx: Context, tool: str, **args: Any) -> None:
    meta = ctx.request_context.meta or {}
    line = {
        "tool": tool,
        "args": args,
        "key": meta.get("ledger/idempotency-key"),
        "traceparent": meta.get("traceparent"),
        "pid": os.getpid(),
        "ppid": os.getppid(),  # the proxy, for a test that kills it
    }
    with (STATE / "calls.jsonl").open("a") as f:
        f.write(json.dumps(line) + "\n")


@server.tool(annotations=ToolAnnotations(read_only_hint=True))
def read_note(name: str, ctx: Context) -> str:
    """Read a note."""
    record(ctx, "read_note", name=name)
    path = STATE / "notes" / name
    return path.read_text() if path.exists() else ""


@server.tool(annotations=ToolAnnotations(idempotent_hint=True))
def upsert_note(name: str, text: str, ctx: Context) -> str:
    """Create or replace a note."""
    record(ctx, "upsert_note", name=name, text=text)
    (STATE / "notes").mkdir(exist_ok=True)
    (STATE / "notes" / name).write_text(text)
    return "ok"


@server.tool()
def write_file(path: str, text: str, ctx: Context) -> str:
    """Write a file under the state directory."""
    record(ctx, "write_file", path=path, text=text)
    (STATE / path).write_text(text)
    return f"wrote {len(text)} characters"


@server.tool()
def send_email(to: str, body: str, ctx: Context) -> str:
    """Send an email (appended to outbox.txt)."""
    record(ctx, "send_email", to=to, body=body)
    with (STATE / "outbox.txt").open("a") as f:
        f.write(f"{to}: {body}\n")
    return "sent"


@server.tool()
async def slow_write(label: str, ctx: Context) -> str:
    """Write a marker, then wait until the test releases it (STATE/release-LABEL)."""
    record(ctx, "slow_write", label=label)
    (STATE / f"started-{label}").write_text("")
    while not (STATE / f"release-{label}").exists():  # noqa: ASYNC110 - the test writes it
        await asyncio.sleep(0.02)
    return f"done {label}"


@server.tool()
async def count_up(steps: int, ctx: Context) -> str:
    """Report progress ``steps`` times, then finish."""
    record(ctx, "count_up", steps=steps)
    for i in range(steps):
        await ctx.report_progress(i + 1, steps, f"step {i + 1}")
    return f"counted to {steps}"


@server.tool()
async def ask_model(question: str, ctx: Context) -> str:
    """Ask the client's model (a server-initiated sampling request)."""
    record(ctx, "ask_model", question=question)
    result = await ctx.request_context.session.create_message(
        [SamplingMessage(role="user", content=TextContent(type="text", text=question))],
        max_tokens=10,
    )
    content = result.content
    return content.text if isinstance(content, TextContent) else "?"


@server.tool()
def explode(reason: str, ctx: Context) -> str:
    """Raise: the SDK answers with a tool error."""
    record(ctx, "explode", reason=reason)
    raise RuntimeError(f"exploded: {reason}")


@server.tool()
def refuse(reason: str, ctx: Context) -> str:
    """Answer with a JSON-RPC error (the SDK passes an MCPError through)."""
    record(ctx, "refuse", reason=reason)
    raise MCPError(code=INVALID_PARAMS, message=f"refused: {reason}")


@server.tool()
def big(size: int, ctx: Context) -> str:
    """Return ``size`` characters."""
    record(ctx, "big", size=size)
    return "x" * size


@server.tool()
def die(code: int, ctx: Context) -> str:
    """Kill this server's own process, mid-call."""
    record(ctx, "die", code=code)
    os.kill(os.getpid(), signal.SIGKILL)
    return "unreachable"


if __name__ == "__main__":
    server.run("stdio")
