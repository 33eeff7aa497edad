"""``ledger mcp-proxy`` continues the client's trace and hands the server its own span.

The MCP SDK's own client sends ``traceparent`` in ``params._meta``; the proxy runs with
the OpenTelemetry SDK as its global tracer provider (traced_proxy.py) in front of the
test MCP server (tests/mcp/server.py), which writes down the ``_meta`` it received.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import ClientSession, StdioServerParameters, stdio_client

from ledger.effect_log import EffectLog
from tests.builders import PYTHON, subprocess_env
from tests.mcp.driver import SERVER, WAIT, Setup, run_id_in, run_session

pytestmark = pytest.mark.program

HERE = Path(__file__).resolve().parent
CLIENT_TRACE = "0af7651916cd43dd8448eb211c80319c"
CLIENT_SPAN = "b7ad6b7169203331"
TRACEPARENT = f"00-{CLIENT_TRACE}-{CLIENT_SPAN}-01"


def _proxy(setup: Setup, spans: Path) -> list[str]:
    return [
        PYTHON,
        str(HERE / "traced_proxy.py"),
        str(spans),
        "mcp-proxy",
        "--store",
        str(setup.store),
        "--",
        PYTHON,
        str(SERVER),
        str(setup.state),
    ]


def _call_through_the_proxy(setup: Setup, spans: Path, errlog: Path, meta: Any) -> None:
    argv = _proxy(setup, spans)
    params = StdioServerParameters(command=argv[0], args=argv[1:], env=subprocess_env())

    async def scenario() -> None:
        with errlog.open("a") as err:
            async with (
                stdio_client(params, errlog=err) as (read, write),
                ClientSession(read, write) as client,
            ):
                with anyio.fail_after(WAIT):
                    await client.initialize()
                result = await client.call_tool(
                    "upsert_note", {"name": "n1", "text": "hello"}, meta=meta
                )
                assert not result.is_error

    run_session(scenario)


def _spans(path: Path) -> list[dict[str, Any]]:
    assert path.exists(), "the proxy wrote no spans"
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_the_proxy_continues_the_clients_trace_and_passes_its_span_on(tmp_path: Path) -> None:
    setup, spans, errlog = Setup.make(tmp_path), tmp_path / "spans.jsonl", tmp_path / "err"
    _call_through_the_proxy(setup, spans, errlog, {"traceparent": TRACEPARENT})

    (span,) = _spans(spans)
    assert span["name"] == "execute_tool upsert_note"
    assert span["kind"] == "SpanKind.INTERNAL"
    assert span["context"]["trace_id"] == "0x" + CLIENT_TRACE
    assert span["parent_id"] == "0x" + CLIENT_SPAN
    assert span["attributes"]["gen_ai.tool.name"] == "upsert_note"
    assert span["attributes"]["ledger.execution"] == "reported_success"

    # The server got the proxy's span as its parent, and the claim's key as before.
    (received,) = setup.calls()
    own = span["context"]["span_id"].removeprefix("0x")
    assert received["traceparent"].startswith(f"00-{CLIENT_TRACE}-{own}-")
    run_id = run_id_in(errlog.read_text())
    with EffectLog.load(run_id, setup.store) as log:
        (claim,) = log.history().claims
    assert received["key"] == claim.idempotency_key
    assert claim.traceparent == TRACEPARENT  # the client's span made the call
    assert span["attributes"]["ledger.effect_id"] == claim.effect_id


def test_a_call_without_a_trace_starts_one_and_the_server_gets_it(tmp_path: Path) -> None:
    setup, spans, errlog = Setup.make(tmp_path), tmp_path / "spans.jsonl", tmp_path / "err"
    _call_through_the_proxy(setup, spans, errlog, None)

    (span,) = _spans(spans)
    assert span["parent_id"] is None
    (received,) = setup.calls()
    trace_id = span["context"]["trace_id"].removeprefix("0x")
    assert received["traceparent"].startswith(f"00-{trace_id}-")
    run_id = run_id_in(errlog.read_text())
    with EffectLog.load(run_id, setup.store) as log:
        (claim,) = log.history().claims
    assert claim.traceparent is None
