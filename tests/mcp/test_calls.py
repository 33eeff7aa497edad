"""What the proxy reads of messages, as plain values: requests, answers, annotations, lines.

No process here: ``ledger._mcp.calls`` and ``ledger._mcp.wire`` are functions of
messages and streams.
"""

from __future__ import annotations

import io
import json
import math
from typing import Any

import pytest

from ledger._mcp.calls import (
    KEY_META,
    Call,
    kind_of,
    kinds_listed,
    outcome_of,
    read_call,
    result_of,
)
from ledger._mcp.wire import (
    Lines,
    UnreadableError,
    answer_id,
    blank,
    encode,
    error_line,
    id_key,
    parse,
    result_line,
    tool_error,
)
from ledger.effects import EffectKind, ExecutionOutcome, Impact

SUCCESS, FAILED = ExecutionOutcome.REPORTED_SUCCESS, ExecutionOutcome.FAILED


def _request(**params: Any) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": params}


def test_a_valid_call_is_read_with_its_arguments_as_sent() -> None:
    """Tool name, arguments exactly as the client sent them, and the id as a key."""
    call = read_call(_request(name="write", arguments={"b": 1.5, "a": [1, "x"]}))
    assert isinstance(call, Call)
    assert (call.tool, call.args, call.request_id, call.key) == (
        "write",
        {"b": 1.5, "a": [1, "x"]},
        7,
        ("int", 7),
    )


def test_the_key_goes_into_meta_and_nothing_else_changes() -> None:
    """The request goes on with the key added to _meta, other _meta entries kept."""
    message = _request(name="w", arguments={"x": "é"}, _meta={"progressToken": 3})
    call = read_call(message)
    assert isinstance(call, Call)
    sent = json.loads(call.with_key("k" * 32))
    assert sent["params"]["_meta"] == {"progressToken": 3, KEY_META: "k" * 32}
    del sent["params"]["_meta"]
    del message["params"]["_meta"]
    assert sent == message


@pytest.mark.parametrize(
    ("message", "code"),
    [
        ({"jsonrpc": "2.0", "id": None, "method": "tools/call", "params": {"name": "a"}}, -32600),
        ({"jsonrpc": "2.0", "id": 1.5, "method": "tools/call", "params": {"name": "a"}}, -32600),
        ({"jsonrpc": "1.0", "id": 1, "method": "tools/call", "params": {"name": "a"}}, -32600),
        (_request(), -32602),
        (_request(name=3), -32602),
        (_request(name="a", arguments=[1]), -32602),
        (_request(name="bad\nname"), -32602),
    ],
)
def test_a_call_that_cannot_be_claimed_is_answered_with_an_error(
    message: dict[str, Any], code: int
) -> None:
    """Bad envelope: invalid request; bad params: invalid params; never a call to claim."""
    answer = read_call(message)
    assert isinstance(answer, bytes)
    assert json.loads(answer)["error"]["code"] == code


def test_a_call_without_an_id_is_a_notification_to_drop() -> None:
    """No id: nothing to answer, and nothing may reach the server."""
    assert read_call({"jsonrpc": "2.0", "method": "tools/call", "params": {"name": "a"}}) is None


@pytest.mark.parametrize(
    ("annotations", "kind"),
    [
        (None, EffectKind.WRITE),
        ({}, EffectKind.WRITE),
        ({"readOnlyHint": True}, EffectKind.READ),
        ({"readOnlyHint": True, "idempotentHint": True}, EffectKind.READ),
        ({"idempotentHint": True}, EffectKind.IDEMPOTENT),
        ({"idempotentHint": True, "destructiveHint": True}, EffectKind.IDEMPOTENT),
        ({"readOnlyHint": False, "destructiveHint": False}, EffectKind.WRITE),
        ({"readOnlyHint": "yes"}, EffectKind.WRITE),  # not the SDK's type: raw, and not True
    ],
)
def test_a_tools_kind_comes_from_its_annotations(annotations: object, kind: EffectKind) -> None:
    """readOnlyHint: read; idempotentHint: idempotent; anything else: write."""
    tool: dict[str, Any] = {"name": "t", "inputSchema": {"type": "object"}}
    if annotations is not None:
        tool["annotations"] = annotations
    assert kind_of(tool) is kind


def test_a_tools_list_gives_each_named_tool_its_kind() -> None:
    """Entries without a name, and a list that is not one, are left out."""
    result = {
        "tools": [
            {"name": "r", "inputSchema": {}, "annotations": {"readOnlyHint": True}},
            {"inputSchema": {}},
            "junk",
        ]
    }
    assert kinds_listed(result) == {"r": EffectKind.READ}
    assert kinds_listed({"tools": "no"}) == {}


IRREVERSIBLE, WRITE, READ = EffectKind.IRREVERSIBLE, EffectKind.WRITE, EffectKind.READ
TOOL_ERROR = {"result": {"content": [], "isError": True}}
RPC_ERROR = {"error": {"code": -1, "message": "x"}}


@pytest.mark.parametrize(
    ("answer", "kind", "error_impact", "outcome"),
    [
        ({"result": {"content": []}}, WRITE, None, (SUCCESS, Impact.CERTAIN)),
        ({"result": {"content": []}}, READ, None, (SUCCESS, Impact.NONE)),
        ({"result": {"content": []}}, WRITE, Impact.POSSIBLE, (SUCCESS, Impact.CERTAIN)),
        (TOOL_ERROR, READ, None, (FAILED, Impact.NONE)),
        (TOOL_ERROR, WRITE, None, (FAILED, Impact.NONE)),
        (TOOL_ERROR, EffectKind.IDEMPOTENT, None, (FAILED, Impact.NONE)),
        (TOOL_ERROR, IRREVERSIBLE, None, (FAILED, Impact.POSSIBLE)),
        (TOOL_ERROR, WRITE, Impact.POSSIBLE, (FAILED, Impact.POSSIBLE)),
        (TOOL_ERROR, IRREVERSIBLE, Impact.NONE, (FAILED, Impact.NONE)),
        ({"result": {"content": [], "isError": "yes"}}, WRITE, None, (SUCCESS, Impact.CERTAIN)),
        (RPC_ERROR, WRITE, None, (FAILED, Impact.NONE)),
        (RPC_ERROR, IRREVERSIBLE, Impact.POSSIBLE, (FAILED, Impact.NONE)),
        ({**RPC_ERROR, "result": {"content": []}}, WRITE, None, (FAILED, Impact.POSSIBLE)),
        ({"result": "not an object"}, WRITE, None, (FAILED, Impact.POSSIBLE)),
        ({"result": None}, READ, None, (FAILED, Impact.POSSIBLE)),
        ({}, WRITE, None, (FAILED, Impact.POSSIBLE)),
        ({"result": {"resultType": "input_required"}}, WRITE, None, (FAILED, Impact.NONE)),
    ],
)
def test_an_answer_says_the_outcome(
    answer: dict[str, Any],
    kind: EffectKind,
    error_impact: Impact | None,
    outcome: tuple[ExecutionOutcome, Impact],
) -> None:
    """Result: success. isError: failed, impact none unless irreversible or --error-impact.

    A JSON-RPC error: failed, nothing done. Anything else (a result that is no object,
    an error and a result at once): failed, maybe done.
    """
    assert outcome_of({"jsonrpc": "2.0", "id": 1, **answer}, kind, error_impact) == outcome


@pytest.mark.parametrize(
    ("error", "stopping", "impact"),
    [
        ({"code": -32602, "message": "bad arguments"}, False, Impact.NONE),
        ({"code": -32603, "message": "internal"}, False, Impact.NONE),
        ({"code": -32000, "message": "server error"}, False, Impact.NONE),
        ({"code": -32000, "message": "Connection closed"}, False, Impact.POSSIBLE),
        ({"code": -32800, "message": "Request cancelled"}, False, Impact.POSSIBLE),
        ({"code": -32001, "message": "timed out"}, False, Impact.POSSIBLE),
        ({"code": -32602, "message": "bad arguments"}, True, Impact.POSSIBLE),
        ("not an object", False, Impact.NONE),
        ({"code": True, "message": "x"}, False, Impact.NONE),
    ],
)
def test_an_error_that_cuts_a_call_off_leaves_it_maybe_done(
    error: object, stopping: bool, impact: Impact
) -> None:
    """Cancelled, timed out, the SDK's shutdown answer, or any while the server stops."""
    message = {"jsonrpc": "2.0", "id": 1, "error": error}
    assert outcome_of(message, WRITE, None, stopping=stopping) == (FAILED, impact)


@pytest.mark.parametrize(
    ("answer", "result"),
    [
        ({"result": {"content": [], "isError": True}}, ({"content": [], "isError": True}, True)),
        ({"result": None}, (None, True)),
        ({"error": {"code": -1, "message": "x"}}, (None, False)),
        ({"error": {"code": -1, "message": "x"}, "result": {}}, (None, False)),
        ({}, (None, False)),
    ],
)
def test_the_recorded_result_is_the_result_object_as_sent(
    answer: dict[str, Any], result: tuple[object, bool]
) -> None:
    """A result (an isError one too) is recorded as it came; a JSON-RPC error is not."""
    assert result_of({"jsonrpc": "2.0", "id": 1, **answer}) == result


def test_lines_come_whole_or_an_oversized_one_in_pieces() -> None:
    """Lines up to the limit whole; a longer one in pieces, the last one ending it."""
    stream = io.BytesIO(b"short\n" + b"x" * 25 + b"\nafter\nno newline")
    lines = Lines(stream, limit=10)
    got = []
    while (item := lines.next()) is not None:
        got.append(item)
    assert got[0] == (b"short\n", True)
    assert b"".join(piece for piece, _ in got[1:-2]) == b"x" * 25 + b"\n"
    assert [complete for _, complete in got[1:-2]][-1] is True
    assert not any(complete for _, complete in got[1:-3])
    assert got[-2:] == [(b"after\n", True), (b"no newline", True)]


@pytest.mark.parametrize(
    ("line", "why"),
    [
        (b"\xff", "not UTF-8"),
        (b"[" * 100_000, "nested too deep"),
        (b"9" * 5000, "Exceeds the limit (4300 digits) for integer string conversion"),
        (b'{"a": {"b": 1, "b": 2}}', 'the key "b" is given twice'),
        (b'{"a": 1, "b": 2, "b": 3}', 'the key "b" is given twice'),  # that one, not the first
        (b'["\\udc00"]', "a string holds a lone surrogate"),
        (b'{"\\ud800": 1}', "a string holds a lone surrogate"),
        (b"-Infinity", "-Infinity is not JSON"),
        (b'\xef\xbb\xbf{"a": 1}', "Unexpected UTF-8 BOM (decode using utf-8-sig)"),
        (b'{"a": 1} {"a": 1}', "Extra data"),
        (b"\n", "Expecting value"),
    ],
)
def test_a_line_parsers_may_read_differently_is_unreadable(line: bytes, why: str) -> None:
    """Only strict JSON is read: what another parser might read otherwise is refused."""
    with pytest.raises(UnreadableError) as refused:
        parse(line)
    assert str(refused.value) == why


def test_parse_and_ids() -> None:
    """Strict JSON is read; 1 and "1" are different ids; a bool or a float is no id."""
    assert parse(b'{"a": 1, "b": ["\\ud83d\\ude00", "\\\\ud800"]}\r\n') == {
        "a": 1,
        "b": ["\U0001f600", "\\ud800"],  # a pair is one character; an escaped backslash
    }
    assert math.isnan(parse(b'{"n": NaN}', constants=True)["n"])  # a server's answer may
    assert blank(b" \t\r\n")
    assert not blank(b"\x0c\n")  # not JSON whitespace
    assert answer_id(b'{"id": 3, "result": "\xff", "n": ' + b"9" * 5000 + b"}") == 3
    assert answer_id(b'{"id": 3, "method": "x", "params": "\xff"}') is None
    assert answer_id(b'{"id": 3, "n": ' + b"[" * 100_000 + b"}") is None
    assert id_key(1) != id_key("1")
    assert id_key(True) is None
    assert id_key(1.0) is None


def test_the_proxys_own_answers_are_json_rpc() -> None:
    """An error for a bad id answers null; a refused call is a tool error result."""
    assert json.loads(error_line(1.5, -32600, "no")) == {
        "jsonrpc": "2.0",
        "id": None,
        "error": {"code": -32600, "message": "no", "data": None},
    }
    refused = json.loads(result_line("r", tool_error("not forwarded")))
    assert refused["id"] == "r"
    assert refused["result"]["isError"] is True
    assert refused["result"]["content"] == [{"type": "text", "text": "not forwarded"}]


@pytest.mark.parametrize(
    ("request_id", "sent"), [(7, 7), (0, 0), ("r-1", "r-1"), ("", ""), (True, None), (None, None)]
)
def test_an_error_answers_the_requests_own_id(request_id: object, sent: object) -> None:
    """The id goes back as it came (an int stays an int, a string a string); no id is null."""
    line = error_line(request_id, -32700, "Parse error: é")
    assert line.endswith(b"\n")
    assert line.count(b"\n") == 1
    assert line.isascii()  # any text survives a transport that is not UTF-8-clean
    assert json.loads(line) == {
        "jsonrpc": "2.0",
        "id": sent,
        "error": {"code": -32700, "message": "Parse error: é", "data": None},
    }


def test_the_proxys_results_are_whole_lines() -> None:
    """A result and a tool error: one ASCII line each, with exactly these members."""
    assert json.loads(result_line(3, {"content": []})) == {
        "jsonrpc": "2.0",
        "id": 3,
        "result": {"content": []},
    }
    refused = result_line(4, tool_error("not forwarded: ✓"))
    assert refused.isascii()
    assert refused.endswith(b"\n")
    assert refused.count(b"\n") == 1
    assert json.loads(refused) == {
        "jsonrpc": "2.0",
        "id": 4,
        "result": {
            "content": [{"type": "text", "text": "not forwarded: ✓"}],
            "isError": True,
            "resultType": "complete",  # the SDK's CallToolResult, as it serialises
        },
    }
    assert encode({"a": "ü"}) == b'{"a":"\\u00fc"}\n'


def test_ids_as_keys() -> None:
    """An id's key says its type and keeps its value."""
    assert id_key(5) == ("int", 5)
    assert id_key("5") == ("str", "5")
    assert id_key(None) is None
    assert id_key([1]) is None


def test_a_line_of_exactly_the_limit_comes_whole() -> None:
    """The limit is the longest line read whole, with or without its newline."""
    stream = io.BytesIO(b"x" * 10 + b"\n" + b"y" * 10)
    lines = Lines(stream, limit=10)
    assert lines.next() == (b"x" * 10 + b"\n", True)
    assert lines.next() == (b"y" * 10, True)
    assert lines.next() is None
    stream = io.BytesIO(b"z" * 11)
    lines = Lines(stream, limit=10)
    assert lines.next() == (b"z" * 11, False)
    assert lines.next() is None

    # One byte over, newline and all: a first line too is never read whole.
    for line in (b"w" * 11 + b"\n", b"v" * 15 + b"\n"):
        lines = Lines(io.BytesIO(line), limit=10)
        first = lines.next()
        assert first is not None
        assert len(first[0]) <= 11
        assert first[1] is False
