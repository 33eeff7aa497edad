"""Malformed input from either side: refused, passed on or answered, never a crash, never a lost claim.

A raw client writes what no SDK client would (not JSON, JSON that parsers read
differently, not JSON-RPC, unknown methods, tool calls that cannot be claimed, a batch,
a huge message); a server writes garbage before every answer, or answers a call with a
line the proxy cannot read. After each, the proxy still relays, every call the server
got was claimed with the key it got, and every claim has its outcome.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ledger._mcp.proxy import MAX_MESSAGE
from tests.builders import CERTAIN, FAILED, INTERRUPTED, POSSIBLE, PYTHON, SUCCESS
from tests.mcp.driver import HERE, RawClient, Setup, outcome_of, run_id_in, wait_file

pytestmark = pytest.mark.program

PARSE_ERROR = -32700
INVALID_REQUEST = -32600
INVALID_PARAMS = -32602
INTERNAL_ERROR = -32603


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
        for garbage in (b"not json at all\n", b"\xff\xfe\n"):
            client.send(garbage)
            assert client.answer(None)["error"]["code"] == PARSE_ERROR
        for harmless in (b"[1, 2, 3]\n", b'{"a": 1}\n', b"\n", b" \t\r\n"):
            client.send(harmless)  # JSON (or nothing) every parser reads alike: passed on
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


def _call_line(*, method: bytes = b'"method":"tools/call"', params: bytes) -> bytes:
    return b'{"jsonrpc":"2.0","id":"bad",' + method + b',"params":' + params + b"}\n"


def _writing(text: bytes) -> bytes:
    """A write_file call whose arguments end with ``text`` (raw JSON)."""
    return _call_line(params=b'{"name":"write_file","arguments":{"path":"bad.txt","text":' + text)


_PING = b'{"jsonrpc":"2.0","id":"p","method":"ping"}'
_UNREADABLE = {
    "not json": b"not json at all\n",
    "invalid utf-8 in a string": _writing(b'"\xff\xfe"}}'),
    "an integer beyond the conversion limit": _writing(b'"t","n":' + b"9" * 5000 + b"}}"),
    "deep nesting": _writing(b'"t","n":' + b"[" * 100_000 + b"]" * 100_000 + b"}}"),
    "a lone surrogate": _writing(b'"\\ud800"}}'),
    "NaN": _writing(b"NaN}}"),
    "Infinity": _writing(b"Infinity}}"),
    "-Infinity": _writing(b"-Infinity}}"),
    # The proxy's parser keeps the last of two keys, another the first: never guess.
    "method twice": _call_line(
        method=b'"method":"tools/call","method":"ping"',
        params=b'{"name":"write_file","arguments":{"path":"bad.txt","text":"t"}}',
    ),
    "name twice": _call_line(
        params=b'{"name":"write_file","name":"read_note","arguments":'
        b'{"name":"n","path":"bad.txt","text":"t"}}'
    ),
    "an argument twice": _writing(b'"t","path":"other.txt"}}'),
    "a key twice inside a batch": b"["
    + _call_line(
        method=b'"method":"tools/call","method":"ping"', params=b'{"name":"write_file"}'
    ).rstrip()
    + b"]\n",
    "a byte order mark": b"\xef\xbb\xbf" + _writing(b'"t"}}'),
    "two messages on one line": _PING + b" " + _writing(b'"t"}}'),
    "two messages split by a carriage return": _PING + b"\r" + _writing(b'"t"}}'),
}


@pytest.mark.parametrize("line", list(_UNREADABLE.values()), ids=list(_UNREADABLE))
def test_a_client_line_that_is_not_one_strict_json_message_never_reaches_the_server(
    tmp_path: Path, line: bytes
) -> None:
    """Parsers disagree on it, so it cannot be claimed: a parse error, and relaying goes on.

    The server is the SDK's, behind a tee that records every line it receives.
    """
    setup = Setup.make(tmp_path)
    server = [PYTHON, str(HERE / "tee_server.py"), str(setup.state)]
    client = RawClient(setup.argv(server=server), tmp_path / "proxy.err")
    try:
        client.start()
        client.send(line)
        client.send(
            {
                "jsonrpc": "2.0",
                "id": "after",
                "method": "tools/call",
                "params": {"name": "write_file", "arguments": {"path": "a.txt", "text": "a"}},
            }
        )
        before = []  # what the client got until the next call's answer
        while (message := json.loads(client.line())).get("id") != "after":
            before.append(message)
        assert message["result"]["isError"] is False
    finally:
        status = client.close()
    assert status == 0
    assert [m["id"] for m in before] == [None]
    assert before[0]["error"]["code"] == PARSE_ERROR
    received = (setup.state / "lines.bin").read_bytes().splitlines(keepends=True)
    assert line not in received
    assert b'"bad"' not in b"".join(received)  # not even rewritten
    assert [c["tool"] for c in setup.calls()] == ["write_file"]
    assert (setup.state / "a.txt").read_text() == "a"
    assert not (setup.state / "bad.txt").exists()
    run_id = run_id_in((tmp_path / "proxy.err").read_text())
    _every_call_claimed(setup, run_id)
    history = setup.history(run_id)
    assert [outcome_of(history, c.effect_id) for c in history.claims] == [(SUCCESS, CERTAIN)]


def test_an_answer_the_proxy_cannot_read_never_settles_a_call_as_done(tmp_path: Path) -> None:
    """Parsers may read it differently: failed, maybe done, and the client told so.

    An answer whose id can still be found settles its call at once, and the client gets
    an error in its place (not a line it might read as success); one too deep to find
    its id in is passed on, and its call stays in doubt until the server exits. The
    next call is read and settled as usual.
    """
    from tests.mcp.garbage_server import UNREADABLE

    setup = Setup.make(tmp_path)
    server = [PYTHON, str(HERE / "garbage_server.py"), str(setup.state)]
    client = RawClient(setup.argv("--name", "unreadable", server=server), tmp_path / "proxy.err")
    tools = [*UNREADABLE, "echo"]
    answers: dict[object, dict[str, object]] = {}
    try:
        for request_id, tool in enumerate(tools, start=1):
            client.send(
                {
                    "jsonrpc": "2.0",
                    "id": request_id,
                    "method": "tools/call",
                    "params": {"name": tool, "arguments": {"n": request_id}},
                }
            )
        while len(tools) not in answers:
            line = client.line()
            assert line, "the proxy's stdout ended"
            try:
                message = json.loads(line)
            except (ValueError, RecursionError):
                continue
            if isinstance(message, dict) and "id" in message:
                answers.setdefault(message["id"], message)
    finally:
        status = client.close()
    assert status == 0
    found = list(UNREADABLE)[:-1]  # all but "deep"
    assert {
        tool: answers.get(request_id, {}).get("error", {}).get("code")  # type: ignore[union-attr]
        for request_id, tool in enumerate(found, start=1)
    } == dict.fromkeys(found, INTERNAL_ERROR)
    run_id = run_id_in((tmp_path / "proxy.err").read_text())
    _every_call_claimed(setup, run_id)
    history = setup.history(run_id)
    assert {c.operation.name: outcome_of(history, c.effect_id) for c in history.claims} == {
        **dict.fromkeys(found, (FAILED, POSSIBLE)),
        "deep": (INTERRUPTED, POSSIBLE),
        "echo": (SUCCESS, CERTAIN),
    }
