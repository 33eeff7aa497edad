"""What ``ledger mcp-proxy`` reads of a ``tools/call``, of its answer, and of ``tools/list``.

Pure functions of messages (parsed JSON), with the SDK's types where they check what
the proxy relies on: a request checked before it is claimed, the request as it goes on
(the claim's idempotency key added to its ``_meta``), the outcome an answer says, the
kind a tool's annotations say. The proxy (:mod:`ledger._mcp.proxy`) does the I/O.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from mcp_types import (
    CONNECTION_CLOSED,
    INVALID_PARAMS,
    INVALID_REQUEST,
    REQUEST_TIMEOUT,
    CallToolRequestParams,
    JSONRPCRequest,
)
from pydantic import ValidationError

from ledger._mcp.wire import IdKey, encode, error_line, id_key
from ledger._text import printable
from ledger.effects import EffectKind, ExecutionOutcome, Impact, check_identifier

__all__ = [
    "KEY_META",
    "Call",
    "brief",
    "kind_of",
    "kinds_listed",
    "outcome_of",
    "read_call",
    "result_of",
]

KEY_META = "ledger/idempotency-key"


def brief(error: BaseException) -> str:
    """An error as one printable line of at most 300 characters."""
    text = " ".join(str(error).split())
    return printable(text if len(text) <= 300 else text[:297] + "...")


@dataclasses.dataclass(frozen=True, slots=True)
class Call:
    """A valid ``tools/call`` request, ready to be claimed."""

    message: dict[str, Any]
    request_id: int | str
    key: IdKey
    tool: str
    args: object  # as the client sent them: the digest is of these

    def with_key(self, idempotency_key: str, trace: Mapping[str, str] | None = None) -> bytes:
        """The request as it goes on: the claim's key in ``params._meta``.

        ``trace`` (``traceparent`` and ``tracestate``: the proxy's span) replaces the
        client's trace context there, when given. ``ValueError`` (or ``RecursionError``)
        when it cannot be written as JSON again.
        """
        params: dict[str, Any] = self.message["params"]
        meta = params.get("_meta")
        meta = {**(meta if isinstance(meta, dict) else {}), **(trace or {})}
        meta[KEY_META] = idempotency_key
        return encode({**self.message, "params": {**params, "_meta": meta}})


def read_call(message: dict[str, Any]) -> Call | bytes | None:
    """A ``tools/call`` checked: the call, or the error to answer, or None for a notification.

    Nothing that fails here may reach the server: it could not be claimed.
    """
    request_id = message.get("id")
    try:
        JSONRPCRequest.model_validate(message)
    except ValidationError as e:
        if "id" not in message:
            return None
        return error_line(request_id, INVALID_REQUEST, f"invalid tools/call: {brief(e)}")
    key = id_key(request_id)
    if key is None or not isinstance(request_id, int | str):  # the SDK admits no other
        return error_line(request_id, INVALID_REQUEST, "invalid tools/call: its id")
    try:
        params = CallToolRequestParams.model_validate(message.get("params"))
        check_identifier(params.name, "tool name")
    except (ValidationError, ValueError, TypeError) as e:
        return error_line(request_id, INVALID_PARAMS, f"invalid tools/call: {brief(e)}")
    return Call(message, request_id, key, params.name, message["params"].get("arguments"))


def kind_of(tool: dict[str, Any]) -> EffectKind:
    """A tool's kind from its annotations (hints, read the way docs/mcp.md says).

    Read from the JSON as sent, not through the SDK's ``ToolAnnotations``: its lax
    validation takes ``"yes"`` or ``1`` for true, and a hint that is not JSON ``true``
    was not given. A tool misjudged ``read`` would lose the guard; one misjudged
    ``write`` only costs an escalation.
    """
    hints = tool.get("annotations")
    hints = hints if isinstance(hints, dict) else {}
    if hints.get("readOnlyHint") is True:
        return EffectKind.READ
    return EffectKind.IDEMPOTENT if hints.get("idempotentHint") is True else EffectKind.WRITE


def kinds_listed(result: dict[str, Any]) -> dict[str, EffectKind]:
    """The kind of each tool a ``tools/list`` result lists."""
    tools = result.get("tools")
    return {
        t["name"]: kind_of(t)
        for t in (tools if isinstance(tools, list) else [])
        if isinstance(t, dict) and isinstance(t.get("name"), str)
    }


# JSON-RPC errors that say a call was cut off, not refused: it may have run in part.
# REQUEST_CANCELLED and REQUEST_TIMEOUT, and the MCP SDK's answer to each call still
# running when its server shuts down (CONNECTION_CLOSED, "Connection closed"; the
# code alone is JSON-RPC's first implementation-defined one, any server's to use).
REQUEST_CANCELLED = -32800  # the SDK's HTTP servers' code; not among its types
_CUT_OFF = frozenset({REQUEST_CANCELLED, REQUEST_TIMEOUT})
_CLOSED = (CONNECTION_CLOSED, "Connection closed")


def _cut_off(error: object) -> bool:
    if not isinstance(error, dict):
        return False
    code, text = error.get("code"), error.get("message")
    if isinstance(code, bool) or not isinstance(code, int):
        return False
    return code in _CUT_OFF or (code, text) == _CLOSED


def outcome_of(
    message: dict[str, Any],
    kind: EffectKind,
    error_impact: Impact | None = None,
    *,
    stopping: bool = False,
) -> tuple[ExecutionOutcome, Impact]:
    """What a server's answer to a ``tools/call`` says happened.

    A JSON-RPC error is the server refusing the call: it failed and did nothing;
    unless the error says the call was cut off (cancelled, timed out, the server
    shutting down), or it came while the server was ``stopping`` (the proxy closed its
    stdin: a server then answers the calls it abandons with an error): maybe done. A
    result with ``isError`` is the server saying the tool failed: impact ``NONE``,
    unless ``error_impact`` (the tool's ``--error-impact``) says otherwise, or the tool
    is ``IRREVERSIBLE`` (a failure it reports may still have sent the mail):
    ``POSSIBLE``. An answer that is neither an error nor a result object says nothing
    the proxy can trust: failed, maybe done.
    """
    if "result" not in message and "error" in message:
        cut_off = stopping or _cut_off(message["error"])
        return ExecutionOutcome.FAILED, Impact.POSSIBLE if cut_off else Impact.NONE
    result = message.get("result")
    if not isinstance(result, dict) or "error" in message:
        return ExecutionOutcome.FAILED, Impact.POSSIBLE
    if result.get("isError") is True:
        if error_impact is None:
            irreversible = kind is EffectKind.IRREVERSIBLE
            error_impact = Impact.POSSIBLE if irreversible else Impact.NONE
        return ExecutionOutcome.FAILED, error_impact
    if result.get("resultType", "complete") == "input_required":
        # The server asks for input before it runs the tool: nothing has happened, and
        # the client will call again (a new effect) with the input.
        return ExecutionOutcome.FAILED, Impact.NONE
    return ExecutionOutcome.REPORTED_SUCCESS, (
        Impact.NONE if kind is EffectKind.READ else Impact.CERTAIN
    )


def result_of(message: dict[str, Any]) -> tuple[object, bool]:
    """The answer's JSON-RPC ``result`` as the server sent it, and whether it has one.

    A JSON-RPC error has none: what is recorded of a call is always its result object.
    """
    if "result" not in message or "error" in message:
        return None, False
    return message["result"], True
