"""Malformed input from either side: passed on or answered, never a crash, never a lost claim.

A raw client writes what no SDK client would (not JSON, not JSON-RPC, unknown methods,
tool calls that cannot be claimed, a batch, a huge message); a server writes garbage
before every answer. After each, the proxy still relays, every call the server got
was claimed with the key it got, and every claim has its outcome.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ledger._mcp import MAX_MESSAGE
from tests.builders import CERTAIN, FAILED, POSSIBLE, PYTHON, SUCCESS
from tests.mcp.driver import HERE, RawClient, Setup, outcome_of, run_id_in, wait_file

pytestmark = pytest.mark.program

INVALID_REQUEST = -32600
INVALID_PARAMS = -32602


def _every_call_claimed(setup: Setup, run_id: str) -> None:
    """The server got exactly the claimed calls, each with its claim's key, each settled."""
    history = setup.history(run_id)
    assert [c["key"] for c in setup.calls()] == [c.idempotency_key for c in history.claims]
    assert {o.effect_id for o in history.outcomes} == {c.effect_id for c in history.claims}


def test_malformed_client_input_is_passed_on_or_answered_and_the_proxy_goes_on(
    tmp_path: Path,
) -> None:
    """Garbage, unknown methods, unclaimable calls, a batch, huge lines: relaying goes on."""
    setup = Setup.make(tmp_path)
    client = RawClient(setup.argv(), tmp_path / "proxy.err")
    try:
        client.start()
        for garbage in (b"not json at all\n", b"\xff\xfe\n", b"[1, 2, 3]\n", b'{"a": 1}\n', b"\n"):
            client.send(garbage)
        client.send({"jsonrpc": "2.0", "id": "u1", "method": "no/such/method"})
        assert "error" in client.answer("u1")  # the server's answer, passed on

        unclaimable = {
            "m1": {"name": 5},  # a name that is not a string
            "m2": {"name": "write_file", "arguments": [1, 2]},  # arguments not an object
            "m3": {"name": "x" * 300, "arguments": {}},  # a name the ledger cannot hold
        }
        for request_id, params in unclaimable.items():
            client.send(
                {"jsonrpc": "2.0", "id": request_id, "method": "tools/call", "params": params}
            )
            assert client.answer(request_id)["error"]["code"] == INVALID_PARAMS, request_id
        client.send(
            b'{"jsonrpc":"2.0","id":"m4","method":"tools/call","params":'
            b'{"name":"write_file","arguments":{"path":"nan.txt","text":NaN}}}\n'
        )
        assert client.answer("m4")["error"]["code"] == INVALID_PARAMS
        client.send({"jsonrpc": "2.0", "id": None, "method": "tools/call", "params": {"name": "a"}})
        assert client.answer(None)["error"]["code"] == INVALID_REQUEST
        client.send(b'{"jsonrpc":"2.0","method":"tools/call","params":{"name":"send_email"}}\n')
        batch = [
            {"jsonrpc": "2.0", "id": "b1", "method": "tools/call", "params": {"name": "read_note"}},
            {"jsonrpc": "2.0", "id": "b2", "method": "tools/list"},
        ]
        client.send(json.dumps(batch).encode() + b"\n")
        assert client.answer("b1")["error"]["code"] == INVALID_REQUEST
        assert client.answer("b2")["error"]["code"] == INVALID_REQUEST
        assert setup.calls() == []  # none of them reached the server

        big = "x" * (4 << 20)
        answer = client.call(1, "write_file", path="big.txt", text=big)
        assert answer["result"]["isError"] is False
        assert (setup.state / "big.txt").stat().st_size == len(big)

        client.send(b"y" * (MAX_MESSAGE + 10) + b"\n")
        assert client.answer(None)["error"]["code"] == INVALID_REQUEST

        answer = client.call(2, "send_email", to="a@example.org", body="after the garbage")
        assert answer["result"]["isError"] is False
        # A cancellation after the answer changes nothing.
        client.send(
            {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 2}}
        )
        assert client.call(3, "read_note", name="n")["result"]["isError"] is False
    finally:
        status = client.close()
    assert status == 0
    run_id = run_id_in((tmp_path / "proxy.err").read_text())
    _every_call_claimed(setup, run_id)
    history = setup.history(run_id)
    assert [outcome_of(history, c.effect_id) for c in history.claims] == [
        (SUCCESS, CERTAIN),
        (SUCCESS, CERTAIN),
        (SUCCESS, CERTAIN),  # read_note is WRITE: this client never listed the tools
    ]
    assert (setup.state / "outbox.txt").read_text() == "a@example.org: after the garbage\n"


def test_a_garbage_writing_server_is_passed_through_untouched(tmp_path: Path) -> None:
    """A server's stray lines reach the client byte for byte; its answers are still recorded."""
    from tests.mcp.garbage_server import GARBAGE

    setup = Setup.make(tmp_path)
    server = [PYTHON, str(HERE / "garbage_server.py"), str(setup.state)]
    client = RawClient(setup.argv(server=server), tmp_path / "proxy.err")
    try:
        client.send(
            {"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {"protocolVersion": "x"}}
        )
        seen = [client.line() for _ in GARBAGE]
        assert seen == GARBAGE
        assert json.loads(client.line())["result"]["serverInfo"]["name"] == "garbage"
        client.send({"jsonrpc": "2.0", "id": 1, "method": "tools/list"})
        client.answer(1)
        answers = {}
        for request_id, tool in ((2, "echo"), (3, "bad_answer"), (4, "echo")):
            client.send(
                {
                    "jsonrpc": "2.0",
                    "id": request_id,
                    "method": "tools/call",
                    "params": {"name": tool, "arguments": {"n": request_id}},
                }
            )
            answers[request_id] = client.answer(request_id)
        assert answers[2]["result"]["content"][0]["text"] == '{"n": 2}'
        assert answers[3]["result"] == "not an object"
    finally:
        status = client.close()
    assert status == 0
    run_id = run_id_in((tmp_path / "proxy.err").read_text())
    _every_call_claimed(setup, run_id)
    history = setup.history(run_id)
    assert [outcome_of(history, c.effect_id) for c in history.claims] == [
        (SUCCESS, CERTAIN),
        (FAILED, POSSIBLE),
        (SUCCESS, CERTAIN),
    ]
    assert {c.operation.backend for c in history.claims} == {"garbage/0.1"}


def test_a_request_reusing_the_id_of_a_call_in_flight_is_refused(tmp_path: Path) -> None:
    """Its answer would pass for the tool call's: it is answered with an error instead."""
    setup = Setup.make(tmp_path)
    client = RawClient(setup.argv(), tmp_path / "proxy.err")
    try:
        client.start()
        client.send(
            {
                "jsonrpc": "2.0",
                "id": 5,
                "method": "tools/call",
                "params": {"name": "slow_write", "arguments": {"label": "r"}},
            }
        )
        wait_file(setup.state / "started-r")
        client.send({"jsonrpc": "2.0", "id": 5, "method": "ping"})
        refused = client.answer(5)
        assert refused["error"]["code"] == INVALID_REQUEST
        (setup.state / "release-r").write_text("")
        assert client.answer(5)["result"]["content"][0]["text"] == "done r"
    finally:
        status = client.close()
    assert status == 0
    run_id = run_id_in((tmp_path / "proxy.err").read_text())
    _every_call_claimed(setup, run_id)
    history = setup.history(run_id)
    assert [outcome_of(history, c.effect_id) for c in history.claims] == [(SUCCESS, CERTAIN)]
