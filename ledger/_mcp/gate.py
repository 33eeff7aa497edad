"""``ledger mcp-proxy --approve``: the gated calls a person is asked about, and the wait.

A ``tools/call`` whose tool matches a pattern of ``--approve`` is claimed only under a
person's grant for its exact action. Without one, the client gets the approval error
(:func:`ledger._mcp.approvals.required_line`); or first, when it declared form
elicitation, the person at the client is asked (``elicitation/create``). The call is
then held: its id stays in use while a thread of its own waits for the answer, which
arrives on the stream the proxy's client reader reads, for at most the elicitation
timeout. An answer goes back to the proxy, which records it and goes on with the call;
no answer in time, a dismissed form, a cancelled call or a closing proxy ends it with
the error, and the request stays pending for ``ledger approve``.

The gate shares the proxy's lock: whether a call id is in use is one question over the
proxy's pending requests and the calls held here.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import secrets
import shlex
import threading
from collections.abc import Sequence
from typing import Any, Protocol

from mcp_types import INTERNAL_ERROR, CancelledNotificationParams

from ledger._mcp.approvals import (
    Client,
    ask_line,
    gated,
    read_answer,
    required_line,
)
from ledger._mcp.calls import Call, brief
from ledger._mcp.wire import IdKey, encode, error_line
from ledger.effects import ApprovalPolicy, EffectKind
from ledger.errors import ApprovalPending

__all__ = ["Asking", "Gate", "Host"]


@dataclasses.dataclass(slots=True)
class Asking:
    """A gated tool call held while the person at the client is asked to decide."""

    call: Call
    kind: EffectKind
    policy: ApprovalPolicy
    pending: ApprovalPending
    ask_id: str  # the id of the proxy's elicitation/create request to the client
    done: threading.Event = dataclasses.field(default_factory=threading.Event)
    answer: dict[str, Any] | None = None  # the client's answer to it
    cancelled: bool = False  # the client cancelled the tool call meanwhile


class Host(Protocol):
    """What the gate needs of its proxy."""

    def say(self, text: str) -> None:
        """Tell the person running the proxy (its stderr)."""

    def to_client(self, data: bytes) -> None:
        """Send one message to the client."""

    def askable(self) -> Client | None:
        """The client, if it may be asked now (called with the shared lock held)."""

    def decided(self, asking: Asking, client: Client, *, granted: bool, note: str) -> None:
        """Record the person's answer and go on with the call, or answer it."""


class Gate:
    """The approval gate of one proxy: its policy, its questions, the calls it holds."""

    def __init__(
        self,
        host: Host,
        lock: threading.Lock,
        *,
        patterns: Sequence[str],
        ttl: dt.timedelta | None,
        timeout: float,
        store: str,
    ) -> None:
        self._host = host
        self._lock = lock
        self._patterns = tuple(patterns)
        self._ttl = ttl
        self.timeout = timeout  # seconds the person at the client has to answer
        self._store = store  # as the approve command names it
        self._held: dict[IdKey, Asking] = {}  # gated calls being asked about, by call id
        self._asks: dict[IdKey, Asking] = {}  # the same, by the elicitation request's id
        self._asked: set[IdKey] = set()  # every elicitation request's id: late answers too

    def policy(self, tool: str) -> ApprovalPolicy | None:
        """The approval a call to ``tool`` needs (``--approve``), or None: it is not gated."""
        matching = [p for p in self._patterns if gated(tool, (p,))]
        if not matching:
            return None
        reason = " ".join(f"--approve {shlex.quote(p)}" for p in matching)
        reason = f"ledger mcp-proxy {reason}"
        if self._ttl is None:
            return ApprovalPolicy(reason=reason)
        return ApprovalPolicy(ttl=self._ttl, reason=reason)

    def refuse(self, call: Call, pending: ApprovalPending, why: str = "") -> None:
        """Answer a gated call without a grant: the error that says how to approve it."""
        self._host.say(
            f"not forwarded: {call.tool} needs approval {pending.approval_id} of run "
            f"{pending.run_id}{' (' + why + ')' if why else ''}"
        )
        self._host.to_client(
            required_line(
                call.request_id,
                tool=call.tool,
                run_id=pending.run_id,
                approval_id=pending.approval_id,
                action_digest=pending.action_digest,
                expires_at=pending.expires_at,
                store=self._store,
                why=why,
            )
        )

    def holds(self, key: IdKey) -> bool:
        """Whether a call of this id waits for its approval (the shared lock held)."""
        return key in self._held

    def cancel(self, key: IdKey) -> bool:
        """The client cancelled a call held here: dropped, never forwarded (lock held)."""
        asking = self._held.get(key)
        if asking is None:
            return False
        asking.cancelled = True
        asking.done.set()
        return True

    def ask(
        self, call: Call, kind: EffectKind, policy: ApprovalPolicy, pending: ApprovalPending
    ) -> bool:
        """Ask the person at the client to decide; False when the client cannot be asked.

        The call is held (its id in use) and the answer awaited in a thread of its own:
        it comes on the stream the proxy's client reader reads.
        """
        ask_id = f"ledger-approval-{secrets.token_hex(8)}"
        asking = Asking(call, kind, policy, pending, ask_id)
        with self._lock:
            client = self._host.askable()
            if client is None or any(
                # One question per approval: an identical call gets the error meanwhile.
                a.pending.approval_id == pending.approval_id
                for a in self._held.values()
            ):
                return False
            self._held[call.key] = asking
            self._asks["str", ask_id] = asking
            self._asked.add(("str", ask_id))
        self._host.say(
            f"asking {client.name} to approve {call.tool} (approval {pending.approval_id} of "
            f"run {pending.run_id})"
        )
        self._host.to_client(
            ask_line(
                ask_id,
                tool=call.tool,
                args=call.args,
                run_id=pending.run_id,
                approval_id=pending.approval_id,
                action_digest=pending.action_digest,
                expires_at=pending.expires_at,
            )
        )
        threading.Thread(
            target=self._await, args=(asking, client), name="mcp-approval", daemon=True
        ).start()
        return True

    def answers(self, key: IdKey, message: dict[str, Any]) -> bool:
        """Whether ``message`` answers one of the gate's own questions (never forwarded)."""
        with self._lock:
            if key not in self._asked:
                return False
            asking = self._asks.get(key)
            if asking is not None and asking.answer is None:
                asking.answer = message
                asking.done.set()
                return True
        self._host.say(f"a late answer to {key[1]} was dropped: its call was answered already")
        return True

    def wake(self) -> None:
        """Stop waiting for the client's answers: the proxy is closing."""
        with self._lock:
            for asking in self._asks.values():
                asking.done.set()

    def _await(self, asking: Asking, client: Client) -> None:
        """Wait for the client's decision and hand it to the proxy; or answer the call."""
        call, pending = asking.call, asking.pending
        try:
            answered = asking.done.wait(self.timeout)
            with self._lock:
                self._asks.pop(("str", asking.ask_id), None)
                message = asking.answer
                cancelled = asking.cancelled
            if message is None:
                # The person's form is withdrawn: its answer could no longer count.
                self._host.to_client(_cancel_line(asking.ask_id, "the call is no longer waiting"))
            if cancelled:
                return  # a cancelled request is not answered
            if message is None:
                why = (
                    f"{client.name} gave no answer within {self.timeout:g} s"
                    if not answered
                    else "the proxy is closing"
                )
                self.refuse(call, pending, why)
                return
            answer = read_answer(message)
            if answer.granted is None:
                self.refuse(call, pending, answer.why)
                return
            self._host.decided(asking, client, granted=answer.granted, note=answer.note)
        except Exception as e:  # a bug of the proxy's own must not leave the call unanswered
            self._host.say(f"a gated call could not be handled: {brief(e)}")
            self._host.to_client(
                error_line(call.request_id, INTERNAL_ERROR, "ledger mcp-proxy failed")
            )
        finally:
            with self._lock:
                self._held.pop(call.key, None)


def _cancel_line(request_id: str, reason: str) -> bytes:
    """The notification that withdraws the proxy's own request to the client."""
    params = CancelledNotificationParams(request_id=request_id, reason=reason)
    note = {
        "jsonrpc": "2.0",
        "method": "notifications/cancelled",
        "params": params.model_dump(mode="json", by_alias=True, exclude_none=True),
    }
    return encode(note)
