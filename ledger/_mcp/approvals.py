"""What ``ledger mcp-proxy --approve`` says and reads: the gate's messages on the wire.

A gated tool call runs only under a person's grant for its exact action (the ledger's
approval gate, ``EffectLog.claim(approval=...)``). Without one, the proxy answers the
client itself, in one of two ways:

- a JSON-RPC error, :data:`APPROVAL_REQUIRED`, whose ``data`` holds the approval's id,
  action digest and expiry and the ``ledger approve`` command a person runs; the
  identical call sent again after that runs once. A denied call gets
  :data:`APPROVAL_DENIED`, with who denied it;
- when the client declared form elicitation in ``initialize``: an ``elicitation/create``
  request asking the person at the client (approve or deny, with the tool, its
  arguments and the digest), whose answer is recorded as theirs. No answer within the
  time allowed (:data:`ELICITATION_TIMEOUT`), or a dismissed form, is nobody's answer:
  the client gets the JSON-RPC error, and the request stays pending.

Pure functions of messages; the proxy (:mod:`ledger._mcp.proxy`) does the I/O.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import fnmatch
import json
import shlex
from collections.abc import Iterable, Mapping
from typing import Any

from mcp_types import (
    ElicitRequest,
    ElicitRequestFormParams,
    ElicitResult,
    InitializeRequestParams,
    JSONRPCRequest,
)
from pydantic import ValidationError

from ledger._mcp.wire import encode, error_line
from ledger._text import printable

__all__ = [
    "APPROVAL_DENIED",
    "APPROVAL_META",
    "APPROVAL_REQUIRED",
    "DECISION",
    "ELICITATION_TIMEOUT",
    "Answer",
    "Client",
    "approve_command",
    "ask_line",
    "denied_line",
    "gated",
    "read_answer",
    "read_client",
    "required_line",
]

# JSON-RPC codes of the gate's errors, in the range JSON-RPC leaves to implementations
# (-32000 to -32099), away from the codes MCP and its SDK use (-32000 to -32042).
APPROVAL_REQUIRED = -32051  # no grant for this exact call: a person must approve it
APPROVAL_DENIED = -32052  # a person denied this exact call
# How long the proxy waits for the person at the client to answer its form (seconds).
ELICITATION_TIMEOUT = 50.0
# The ``_meta`` key of the elicitation request: the approval it asks about, for a client
# that shows more than the message.
APPROVAL_META = "ledger/approval"
# The form's one required field, and its two answers.
DECISION = "decision"
_APPROVE, _DENY = "approve", "deny"


def gated(tool: str, patterns: Iterable[str]) -> bool:
    """Whether ``tool`` matches one of ``--approve``'s shell-style patterns (case counts)."""
    return any(fnmatch.fnmatchcase(tool, pattern) for pattern in patterns)


@dataclasses.dataclass(frozen=True, slots=True)
class Client:
    """What the client said of itself in ``initialize``: its name, and whether to ask it."""

    name: str
    asks: bool  # it declared form elicitation: the proxy may ask it for a decision


def read_client(params: object) -> Client | None:
    """The client of an ``initialize`` request's ``params``; ``None`` when they are not valid.

    Form elicitation is declared by ``capabilities.elicitation`` holding ``form``, or
    being empty (how protocol versions before URL elicitation declared it). A client
    that declares only URL elicitation cannot show the form: it gets the error.
    """
    try:
        read = InitializeRequestParams.model_validate(params)
    except ValidationError:
        return None
    declared = read.capabilities.elicitation
    asks = declared is not None and (declared.form is not None or declared.url is None)
    # The name is recorded as the decision's ``by``: one printable line, an identifier.
    name = printable(" ".join(read.client_info.name.split()))[:200] or "MCP client"
    return Client(name, asks)


def _iso(value: object) -> str:
    return value.isoformat() if isinstance(value, dt.datetime) else str(value)


def approve_command(store: str, run_id: str, approval_id: str, action_digest: str) -> str:
    """The command that grants the approval, ready to paste (NAME: the person's own)."""
    return (
        f"ledger approve {run_id} {approval_id} --by NAME --expect-digest {action_digest[:12]} "
        f"--store {shlex.quote(store)}"
    )


_SHOWN = 8000  # characters of the arguments the form shows


def _arguments(args: object) -> str:
    text = json.dumps({} if args is None else args, ensure_ascii=False, sort_keys=True)
    if len(text) <= _SHOWN:
        return text
    left = len(text) - _SHOWN
    return f"{text[:_SHOWN]}... ({left} more characters; the digest covers them all)"


def required_line(
    request_id: int | str,
    *,
    tool: str,
    run_id: str,
    approval_id: str,
    action_digest: str,
    expires_at: object,
    store: str,
    why: str = "",
) -> bytes:
    """The JSON-RPC error of a gated call without a grant: what to approve, and how.

    ``why`` says why the client was not asked instead (no answer in time, ...).
    """
    command = approve_command(store, run_id, approval_id, action_digest)
    message = (
        f"ledger mcp-proxy did not forward this call to {tool}: it needs a person's approval "
        f"(approval {approval_id} of run {run_id}, expires {_iso(expires_at)}). "
        f"{why + '. ' if why else ''}To approve it: {command}; then send the identical call again."
    )
    data = {
        "approval_id": approval_id,
        "action_digest": action_digest,
        "expires_at": _iso(expires_at),
        "run_id": run_id,
        "tool": tool,
        "command": command,
    }
    return error_line(request_id, APPROVAL_REQUIRED, message, data)


def denied_line(
    request_id: int | str,
    *,
    tool: str,
    run_id: str,
    approval_id: str,
    by: str,
    note: str,
) -> bytes:
    """The JSON-RPC error of a gated call a person denied."""
    message = (
        f"ledger mcp-proxy did not forward this call to {tool}: {by} denied it "
        f"(approval {approval_id} of run {run_id}){': ' + note if note else ''}."
    )
    data = {
        "approval_id": approval_id,
        "run_id": run_id,
        "tool": tool,
        "by": by,
        "note": note,
    }
    return error_line(request_id, APPROVAL_DENIED, message, data)


def ask_line(
    ask_id: str,
    *,
    tool: str,
    args: object,
    run_id: str,
    approval_id: str,
    action_digest: str,
    expires_at: object,
) -> bytes:
    """The ``elicitation/create`` request that asks the person at the client to decide."""
    message = (
        f"Approve this call to {tool}?\n"
        f"Arguments: {_arguments(args)}\n"
        f"Action digest: {action_digest}\n"
        f"Approval {approval_id} of run {run_id}, expires {_iso(expires_at)}. "
        "Only this exact call is approved, once."
    )
    schema: dict[str, Any] = {
        "type": "object",
        "properties": {
            DECISION: {
                "type": "string",
                "title": "Decision",
                "description": f"approve: the proxy passes the call to {tool}; deny: it does not",
                "enum": [_APPROVE, _DENY],
            },
            "note": {"type": "string", "title": "Note", "description": "Recorded with it"},
        },
        "required": [DECISION],
    }
    meta = {
        APPROVAL_META: {
            "approval_id": approval_id,
            "action_digest": action_digest,
            "run_id": run_id,
            "tool": tool,
        }
    }
    params = ElicitRequestFormParams.model_validate(
        {"message": message, "requestedSchema": schema, "_meta": meta}
    )
    request = ElicitRequest(params=params)
    wire = request.model_dump(mode="json", by_alias=True, exclude_none=True)
    line = JSONRPCRequest(jsonrpc="2.0", id=ask_id, method=wire["method"], params=wire["params"])
    return encode(line.model_dump(mode="json", by_alias=True, exclude_none=True))


@dataclasses.dataclass(frozen=True, slots=True)
class Answer:
    """What the client answered: a decision (``granted``), or none and why not."""

    granted: bool | None  # None: nobody decided (dismissed, an error, a form not filled)
    note: str = ""
    why: str = ""  # when nobody decided: what the client said instead


# How a client's form may say yes or no: the form's own two answers, and the words and
# booleans of clients that fill in a confirmation their own way.
_YES = frozenset({_APPROVE, "approved", "yes", "grant", "granted", "allow", "accept", "true"})
_NO = frozenset({_DENY, "denied", "no", "reject", "rejected", "refuse", "decline", "false"})
_FIELDS = (DECISION, "approve", "approved", "approval", "confirm", "confirmed", "allow")


def _verdict(value: object) -> bool | None:
    if isinstance(value, bool):
        return value
    if isinstance(value, str):
        word = value.strip().lower()
        return True if word in _YES else False if word in _NO else None
    return None


def read_answer(message: Mapping[str, Any]) -> Answer:
    """The decision in the client's answer to an ``elicitation/create`` request.

    ``accept`` is the person's decision: the form's ``decision`` (``approve`` or
    ``deny``; a client that fills in a confirmation its own way may say yes or no in
    another field, ``approve`` or ``confirm``, or as a boolean), or, with no field
    filled in at all, a yes (the person confirmed the action, in MCP's words).
    ``decline`` is their "no" (the person explicitly declined). ``cancel`` (the form
    dismissed), an error, or a form whose answer says neither is no decision.
    """
    if "result" not in message:
        error = message.get("error")
        text = error.get("message") if isinstance(error, dict) else None
        return Answer(
            granted=None, why=f"the client answered with an error ({text or 'no message'})"
        )
    try:
        result = ElicitResult.model_validate(message["result"])
    except ValidationError:
        return Answer(granted=None, why="the client's answer is not an elicitation result")
    content = result.content or {}
    note = content.get("note")
    note = note.strip() if isinstance(note, str) else ""
    if result.action == "decline":
        return Answer(granted=False, note=note or "declined at the client")
    if result.action == "cancel":
        return Answer(granted=None, why="the form was dismissed without a decision")
    given = [content[field] for field in _FIELDS if field in content]
    if not given:
        if any(v not in (None, "") for k, v in content.items() if k != "note"):
            return Answer(granted=None, why="the form came back without a decision")
        return Answer(granted=True, note=note)
    verdict = _verdict(given[0])
    if verdict is None:
        return Answer(granted=None, why="the form came back without a decision")
    return Answer(granted=verdict, note=note)
