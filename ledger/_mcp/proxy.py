"""``ledger mcp-proxy``: an MCP stdio proxy that makes every tool call an effect.

The proxy starts the server (COMMAND) and sits between it and the client, speaking
newline-delimited JSON-RPC on both sides. Two threads move the lines, one per
direction, each blocked in a read until a line arrives: nothing polls, and a line is
passed on as soon as it is read. Every ``tools/call`` is claimed in the ledger before
it is passed on (with the claim's idempotency key in ``params._meta``), and its answer
is recorded before the client gets it; that is the only time the proxy adds.

Why a raw relay and not the SDK's ``ClientSession``/``ServerSession``: a session parses
every message into the models of the protocol version it negotiated, answers pings
itself, drops what it does not know and serialises what it passes again. A proxy
between two other programs must change nothing it does not have to: so every line it
does not interpret goes through byte for byte, whatever it holds (a method of a
protocol version this SDK does not know, a server's stray output). The SDK's types
read the few messages the proxy must understand (``initialize`` and
``server/discover`` results for the server's name, ``tools/list`` for annotations,
``tools/call`` and its answer, ``notifications/cancelled``) and make the answers it
gives itself.

What the proxy answers itself instead of passing on, never crashing:
- a ``tools/call`` it cannot claim (not a valid request, arguments JSON cannot hold
  exactly, the store failing): an error, and the server never sees the call;
- a ``tools/call`` the guard refuses: a tool error naming the earlier effect;
- a gated ``tools/call`` (``--approve``) without a person's grant for its exact action:
  the approval error (:mod:`ledger._mcp.approvals`), or first a question to the
  client, when it declared form elicitation; the call waits for the answer in a
  thread of its own (:mod:`ledger._mcp.gate`), since the answer comes on the stream
  the client's reader reads;
- a client message longer than the limit: an error (it cannot be read, so it cannot
  be claimed); a server's is passed on in pieces;
- a client line that is not one strict JSON value (:func:`ledger._mcp.wire.parse`):
  a parse error. Any tool call in it could not be claimed, since the server's parser
  may read it otherwise than the proxy's; a line of whitespace only is passed on;
- a server's answer to a tool call that is not strict JSON either: the call failed,
  maybe done, and the client gets an error in its place;
- requests left unanswered when the server exits: an error each.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import dataclasses
import datetime as dt
import os
import shlex
import signal
import subprocess
import sys
import threading
import urllib.parse
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from types import FrameType
from typing import IO, Any

from mcp_types import (
    INTERNAL_ERROR,
    INVALID_PARAMS,
    INVALID_REQUEST,
    PARSE_ERROR,
    SERVER_INFO_META_KEY,
    CancelledNotificationParams,
    Implementation,
    InitializeResult,
)
from pydantic import ValidationError

from ledger import _telemetry, storage
from ledger._mcp.approvals import ELICITATION_TIMEOUT, Client, denied_line, read_client
from ledger._mcp.calls import Call, brief, kinds_listed, outcome_of, read_call, result_of
from ledger._mcp.gate import Asking, Gate
from ledger._mcp.runs import MAX_NAME, REFUSAL_META, ProxyRun, Refusal, check_name
from ledger._mcp.wire import (
    IdKey,
    Lines,
    UnreadableError,
    answer_id,
    blank,
    error_line,
    id_key,
    parse,
    result_line,
    tool_error,
)
from ledger._text import printable
from ledger.effects import ApprovalPolicy, EffectClaim, EffectKind, ExecutionOutcome, Impact
from ledger.errors import ApprovalDenied, ApprovalPending, EffectPersistenceError

__all__ = ["ELICITATION_TIMEOUT", "MAX_MESSAGE", "ProxyError", "run"]

MAX_MESSAGE = 64 << 20  # bytes of one message; more from the client is refused
# After the client has gone: how long the server gets to exit on its own, then after
# SIGTERM (the MCP stdio shutdown sequence).
_GRACE = 5.0


class ProxyError(Exception):
    """The proxy cannot start (the server's command cannot be run)."""


_PR_SET_PDEATHSIG = 1  # linux/prctl.h


def _dies_with_parent() -> Callable[[], None] | None:
    """What the server's child process runs before exec: SIGTERM when the proxy dies.

    A proxy killed outright (SIGKILL, the OOM killer) runs no code to stop its server,
    and a server busy in a call, or one that does not read its stdin, would outlive
    it; Linux's parent-death signal stops it. The signal is tied to the thread that
    started the child, which is the proxy's main thread, alive until the proxy ends.
    A proxy that died between the fork and the request leaves the child orphaned
    already: it exits instead of running the server. ``None`` where there is no
    ``prctl`` (not Linux): the server is then stopped only when the proxy can act.
    """
    if not sys.platform.startswith("linux"):
        return None
    try:
        prctl = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True).prctl
    except (OSError, AttributeError):
        return None
    prctl.argtypes = (ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong)
    prctl.restype = ctypes.c_int
    parent, term = os.getpid(), int(signal.SIGTERM)

    # Runs in the child between fork and exec: no import, no lock, nothing allocated
    # that another thread of the parent could have held.
    def before_exec() -> None:
        if prctl(_PR_SET_PDEATHSIG, term, 0, 0, 0) != 0 or os.getppid() != parent:
            os._exit(1)

    return before_exec


@dataclasses.dataclass(slots=True)
class _Pending:
    """A client request the server has not answered yet."""

    request_id: int | str
    method: str
    claim: EffectClaim | None = None  # a tools/call's effect


def _label(text: str) -> str:
    """A server-given string as a ledger identifier (printable, at most 200 characters)."""
    return printable(" ".join(text.split()))[:200]


class Proxy:
    """One proxy process: the server, the two relays, the run."""

    def __init__(
        self,
        command: Sequence[str],
        directory: storage.Location,
        *,
        name: str | None,
        kinds: Mapping[str, EffectKind],
        error_impacts: Mapping[str, Impact] | None = None,
        record: bool = True,
        approve: Sequence[str] = (),
        approval_ttl: dt.timedelta | None = None,
        elicitation_timeout: float = ELICITATION_TIMEOUT,
        client_in: IO[bytes],
        client_out: IO[bytes],
        say: Callable[[str], None],
    ) -> None:
        self._command = list(command)
        self._directory = directory
        self._name = None if name is None else check_name(name)
        self._kinds = dict(kinds)
        self._error_impacts = dict(error_impacts or {})
        self._record = record
        self._client_in = client_in
        self._client_out = client_out
        self.say = say
        self._lock = threading.Lock()  # the pending requests, the tools' kinds, the run
        self._out_lock = threading.Lock()  # one writer at a time on the client's stdout
        self._in_lock = threading.Lock()  # and on the server's stdin
        self._pending: dict[IdKey, _Pending] = {}
        self._annotated: dict[str, EffectKind] = {}
        self._server: Implementation | None = None
        self._run: ProxyRun | None = None
        self._run_lock = threading.Lock()
        self._closing = False
        self._gone = False  # the client has gone: the server's stdin is being closed
        # Held while a tools/call is claimed and sent: the run is closed only between calls.
        self._calling = threading.Lock()
        self._child: subprocess.Popen[bytes] | None = None
        self._client: Client | None = None  # from the client's initialize
        self._gate = Gate(
            self,
            self._lock,
            patterns=approve,
            ttl=approval_ttl,
            timeout=elicitation_timeout,
            store=storage.describe(directory),
        )

    # ------------------------------------------------------------------ lifecycle

    def serve(self) -> int:
        """Run until the server exits; return the proxy's exit status."""
        if self._name is not None:
            self._ensure_run()  # recovery first: before the server runs any call
        try:
            self._child = subprocess.Popen(  # noqa: S603 - the user's own server
                self._command,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                preexec_fn=_dies_with_parent(),  # noqa: PLW1509 - see _dies_with_parent
            )
        except OSError as e:
            raise ProxyError(f"cannot start {self._command[0]}: {e.strerror or e}") from None
        previous = {
            s: signal.signal(s, self._on_signal)
            for s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
        }
        try:
            reader = threading.Thread(target=self._from_client, name="mcp-client", daemon=True)
            reader.start()
            self._from_server()  # until the server's stdout ends
            status = self._child.wait()
        finally:
            for signum, handler in previous.items():
                signal.signal(signum, handler)
            with self._calling, self._lock:
                self._closing = True  # no claim is made from now on
            with self._run_lock:
                if self._run is not None:
                    self._run.close()
        return status if status >= 0 else 128 - status

    def _on_signal(self, _signum: int, _frame: FrameType | None) -> None:
        # Like a client that goes: the server's stdin closes, and it is stopped if it stays.
        # In a thread: the handler runs in the thread reading the server, which must go on
        # reading while the stdin lock waits for a write the server has yet to take.
        threading.Thread(target=self._client_gone, name="mcp-signal", daemon=True).start()

    def _client_gone(self) -> None:
        with self._lock:
            if self._gone:
                return
            self._gone = True
        self._gate.wake()
        # The timer first: a server that reads nothing more must not block the close below.
        threading.Thread(target=self._stop_server, name="mcp-stop", daemon=True).start()
        child = self._child
        if child is not None and child.stdin is not None:
            with self._in_lock, contextlib.suppress(OSError):
                child.stdin.close()

    def _stop_server(self) -> None:
        child = self._child
        assert child is not None  # noqa: S101 - started before any reader
        for stop in (child.terminate, child.kill):
            try:
                child.wait(_GRACE)
            except subprocess.TimeoutExpired:
                stop()
            else:
                return

    # ------------------------------------------------------------------ the run

    def _ensure_run(self) -> ProxyRun:
        """The run, started (and earlier runs of its name recovered) on first need."""
        with self._run_lock:
            if self._run is None:
                name = self._name or self._server_name() or Path(self._command[0]).name
                run = ProxyRun(
                    self._directory,
                    check_name(_label(name)[:MAX_NAME] or "mcp"),
                    record=self._record,
                )
                earlier = run.start()
                for recovery in earlier.recovered:
                    for outcome in recovery.outcomes:
                        tool = earlier.operations[recovery.run_id, outcome.effect_id]
                        self.say(
                            f"recovered run {recovery.run_id} of a dead proxy named {run.name}: "
                            f"effect {outcome.effect_id} ({tool}) interrupted, impact possible"
                        )
                self.say(f"{run.name}: run {run.run_id} in {storage.describe(self._directory)}")
                self._run = run
            return self._run

    def _server_name(self) -> str:
        return "" if self._server is None else self._server.name

    def _backend(self) -> str:
        if self._server is None:
            return ""
        return _label(f"{self._server.name}/{self._server.version}".strip("/"))

    def _resource_host(self, run: ProxyRun) -> str:
        # Short enough that any tool's URI stays a ledger identifier.
        return urllib.parse.quote(self._server_name() or run.name, safe="-._~")[:60]

    # ------------------------------------------------------------------ writing

    def to_client(self, data: bytes) -> None:
        with self._out_lock, contextlib.suppress(OSError):  # a client gone hears nothing
            self._client_out.write(data)
            self._client_out.flush()

    def _to_server(self, data: bytes) -> bool:
        """Pass ``data`` to the server; False when it can no longer read."""
        child = self._child
        assert child is not None  # noqa: S101 - started
        assert child.stdin is not None  # noqa: S101 - started
        with self._in_lock:
            try:
                child.stdin.write(data)
                child.stdin.flush()
            except (OSError, ValueError):  # a broken pipe, or closed after the client went
                return False
        return True

    # ------------------------------------------------------------------ client to server

    def _from_client(self) -> None:
        lines = Lines(self._client_in, MAX_MESSAGE)
        while (item := lines.next()) is not None:
            data, complete = item
            if not complete:
                while (rest := lines.next()) is not None and not rest[1]:
                    pass
                self.to_client(
                    error_line(
                        None, INVALID_REQUEST, f"message longer than {MAX_MESSAGE} bytes: dropped"
                    )
                )
                continue
            try:
                self._from_client_line(data)
            except Exception as e:  # a bug of the proxy's own must not end the session
                self.say(f"a client message could not be handled: {brief(e)}")
                try:
                    request = parse(data)
                except UnreadableError:
                    continue
                if isinstance(request, dict) and "method" in request and "id" in request:
                    self.to_client(
                        error_line(request["id"], INTERNAL_ERROR, "ledger mcp-proxy failed")
                    )
        self._client_gone()

    def _from_client_line(self, data: bytes) -> None:
        if blank(data):  # no message in any parser's reading: passed on, as ever
            self._to_server(data)
            return
        try:
            message = parse(data)
        except UnreadableError as e:
            # The server's parser may read a tool call in it the proxy cannot see: never sent.
            self.say(f"a client line that is not JSON was refused: {brief(e)}")
            self.to_client(error_line(None, PARSE_ERROR, f"Parse error: {brief(e)}"))
            return
        if isinstance(message, list):
            if any(isinstance(m, dict) and m.get("method") == "tools/call" for m in message):
                # A batch cannot be split, and a tool call in it cannot pass unclaimed.
                for m in message:
                    if isinstance(m, dict) and "id" in m and "method" in m:
                        self.to_client(
                            error_line(
                                m["id"],
                                INVALID_REQUEST,
                                "ledger mcp-proxy: no batches with tools/call",
                            )
                        )
                return
        elif isinstance(message, dict):
            method = message.get("method")
            if method == "tools/call":
                with self._calling:
                    self._call(message)
                return
            key = id_key(message.get("id"))
            if method is None and key is not None and self._gate.answers(key, message):
                return
            if method == "initialize":
                client = read_client(message.get("params"))
                with self._lock:
                    self._client = client
            if isinstance(method, str) and key is not None:
                with self._lock:
                    held = self._pending.get(key)
                    asked = self._gate.holds(key)  # a gated call waiting for its approval
                    if not asked and (held is None or held.claim is None):
                        self._pending[key] = _Pending(message["id"], method)
                if asked or (held is not None and held.claim is not None):
                    # Its answer could be taken for the tool call's, whose outcome it is not.
                    why = "refused: its id is that of a tool call in flight"
                    self.to_client(error_line(message["id"], INVALID_REQUEST, why))
                    return
            elif method == "notifications/cancelled" and self._cancelled(message):
                return  # it cancels a call the server never got
        if not self._to_server(data):
            self._unsent(data, message)

    def _unsent(self, data: bytes, message: object) -> None:
        """A message the server could not take: a request gets an error."""
        del data
        if isinstance(message, dict) and "method" in message:
            key = id_key(message.get("id"))
            if key is not None:
                with self._lock:
                    pending = self._pending.pop(key, None)
                if pending is not None:
                    self._answer_gone(pending, "the MCP server has exited")

    def _cancelled(self, message: dict[str, Any]) -> bool:
        """The client gave up on a request: a tool call still unanswered failed, maybe done.

        A gated call still waiting for the client's decision is dropped, never forwarded:
        True, the cancellation is the proxy's (the server never got the call).
        """
        try:
            params = CancelledNotificationParams.model_validate(message.get("params") or {})
        except ValidationError:
            return False  # passed on as it is; the server judges it
        key = id_key(params.request_id)
        if key is None:
            return False
        with self._lock:
            if self._gate.cancel(key):
                return True
            pending = self._pending.get(key)
            if pending is None or pending.claim is None:
                return False
            del self._pending[key]
        self._settle(pending.claim, ExecutionOutcome.FAILED, Impact.POSSIBLE)
        return False

    def _call(self, message: dict[str, Any]) -> None:
        """A tools/call: claimed, then passed on with its key; or answered here."""
        call = read_call(message)
        if call is None:
            self.say("a tools/call without an id (a notification) was dropped, not claimed")
            return
        if isinstance(call, bytes):
            self.to_client(call)
            return
        with self._lock:
            kind = self._kinds.get(call.tool) or self._annotated.get(call.tool, EffectKind.WRITE)
            in_use = call.key in self._pending or self._gate.holds(call.key)
            refused = "its id is already in use" if in_use else None
            refused = "the proxy is closing" if self._closing else refused
        if refused is not None:
            self.to_client(error_line(call.request_id, INVALID_REQUEST, f"refused: {refused}"))
            return
        policy = self._gate.policy(call.tool)
        # The claim is made in the client's trace, and the server is sent the call's span.
        with _telemetry.continued(call.message["params"].get("_meta")):
            claim = self._claim(call, kind, policy)
        if claim is not None:
            self._forward(call, claim)

    def _forward(self, call: Call, claim: EffectClaim) -> None:
        """Pass a claimed call on to the server, with its key; answered here if it cannot be."""
        try:
            line = call.with_key(claim.idempotency_key, self._trace(claim))
        except (ValueError, RecursionError) as e:  # claimed, but it cannot be sent: it did nothing
            self._settle(claim, ExecutionOutcome.FAILED, Impact.NONE)
            self.to_client(error_line(call.request_id, INVALID_PARAMS, f"cannot send: {brief(e)}"))
            return
        with self._lock:
            self._pending[call.key] = _Pending(call.request_id, "tools/call", claim)
        if not self._to_server(line):
            with self._lock:
                pending = self._pending.pop(call.key, None)
            if pending is not None:  # it never reached the server: it did nothing
                self._settle(claim, ExecutionOutcome.FAILED, Impact.NONE)
                self.to_client(
                    error_line(call.request_id, INTERNAL_ERROR, "the MCP server has exited")
                )

    def _claim(
        self, call: Call, kind: EffectKind, policy: ApprovalPolicy | None, *, ask: bool = True
    ) -> EffectClaim | None:
        """The call's durable claim; or None, the client answered (refused, or not claimable).

        A gated call (``policy``) is claimed only under a grant for its exact action;
        without one the client is asked (when ``ask`` and it can be), or gets the error
        that says how to approve it.
        """
        try:
            run = self._ensure_run()
            refusal = run.refusal(call.tool, call.args, kind)
            if refusal is not None:
                self._refuse(run, call, kind, refusal)
                return None
            return run.claim(
                call.tool,
                call.args,
                kind=kind,
                backend=self._backend(),
                server=self._resource_host(run),
                approval=policy,
            )
        except ApprovalPending as e:
            assert policy is not None  # noqa: S101 - only a gated claim waits for a person
            if not (ask and self._gate.ask(call, kind, policy, e)):
                self._gate.refuse(call, e)
            return None
        except ApprovalDenied as e:
            self.say(f"not forwarded: {call.tool} (approval {e.approval_id}), denied by {e.by}")
            self.to_client(
                denied_line(
                    call.request_id,
                    tool=call.tool,
                    run_id=e.run_id,
                    approval_id=e.approval_id,
                    by=e.by,
                    note=e.note,
                )
            )
            return None
        except ValueError as e:
            why, code = f"cannot claim this call: {brief(e)}", INVALID_PARAMS
        except EffectPersistenceError as e:
            why = f"the ledger could not record the claim, so the call was not made: {brief(e)}"
            code = INTERNAL_ERROR
        self.to_client(error_line(call.request_id, code, why))
        return None

    def _trace(self, claim: EffectClaim) -> dict[str, str]:
        """The W3C trace context of the claim's span, for the server; ``{}`` without one."""
        run = self._run
        return {} if run is None else run.trace_meta(claim.effect_id)

    def _refuse(self, run: ProxyRun, call: Call, kind: EffectKind, refusal: Refusal) -> None:
        """Answer a call the guard does not forward, once the refusal is recorded.

        The refusal is a record of the run (a claim settled as failed with impact none,
        the answer as its result), so the run shows what the client asked and was told;
        the answer's ``_meta`` names the effect that blocks it. The answer does not wait
        on the record: a refusal that cannot be written is said, and the call refused
        all the same.
        """
        blocking = {"run_id": refusal.run_id, "effect_id": refusal.effect_id}
        answer = tool_error(refusal.message(self._directory), {REFUSAL_META: blocking})
        said = f"refused {call.tool}: effect {refusal.effect_id} of run {refusal.run_id}"
        try:
            effect_id = run.refused(
                call.tool,
                call.args,
                kind=kind,
                backend=self._backend(),
                server=self._resource_host(run),
                answer=answer,
            )
            self.say(f"{said}; recorded as effect {effect_id}")
        except (ValueError, EffectPersistenceError) as e:
            self.say(f"{said}; the refusal could not be recorded: {brief(e)}")
        self.to_client(result_line(call.request_id, answer))

    # ------------------------------------------------------------------ the approval gate

    def askable(self) -> Client | None:
        """The client, if it may be asked to approve now (the lock held): see ledger._mcp.gate."""
        client = self._client
        if client is None or not client.asks or self._closing or self._gone:
            return None
        return client

    def decided(self, asking: Asking, client: Client, *, granted: bool, note: str) -> None:
        """Record the answer of the person at the client, then claim and forward the call."""
        call, pending = asking.call, asking.pending
        with self._calling:
            with self._lock:
                closing = self._closing
            if closing:
                self._gate.refuse(call, pending, "the proxy is closing")
                return
            run = self._run
            assert run is not None  # noqa: S101 - the request was written through it
            try:
                run.answer(
                    pending.approval_id,
                    granted=granted,
                    by=client.name,
                    note=note,
                )
                verb = "granted" if granted else "denied"
                self.say(f"{client.name} {verb} approval {pending.approval_id} ({call.tool})")
            except ValueError as e:
                # Decided meanwhile (ledger approve or deny), or expired: the gate
                # below goes by what the store holds.
                self.say(f"the answer of {client.name} was not recorded: {brief(e)}")
            except EffectPersistenceError as e:
                self.say(f"the answer of {client.name} could not be recorded: {brief(e)}")
                self._gate.refuse(call, pending, "the answer could not be recorded")
                return
            with _telemetry.continued(call.message["params"].get("_meta")):
                claim = self._claim(call, asking.kind, asking.policy, ask=False)
            if claim is not None:
                self._forward(call, claim)

    def _settle(
        self,
        claim: EffectClaim,
        execution: ExecutionOutcome,
        impact: Impact,
        *,
        result: object = None,
        answered: bool = False,
    ) -> None:
        run = self._run
        assert run is not None  # noqa: S101 - a claim was made through it
        try:
            run.settle(claim.effect_id, execution, impact, result=result, answered=answered)
        except EffectPersistenceError as e:
            self.say(
                f"the outcome of effect {claim.effect_id} ({execution.value}) could not be "
                f"recorded; it stays in doubt: {brief(e)}"
            )

    # ------------------------------------------------------------------ server to client

    def _from_server(self) -> None:
        child = self._child
        assert child is not None  # noqa: S101 - started
        assert child.stdout is not None  # noqa: S101 - started
        lines = Lines(child.stdout, MAX_MESSAGE)
        while (item := lines.next()) is not None:
            data, complete = item
            if complete:
                self._from_server_line(data)
                continue
            # Too long to read: passed on in pieces, unread (an answer in it records nothing).
            with self._out_lock, contextlib.suppress(OSError):
                self._client_out.write(data)
                while (rest := lines.next()) is not None:
                    self._client_out.write(rest[0])
                    if rest[1]:
                        break
                self._client_out.flush()
        status = child.wait()
        with self._lock:
            self._closing = True
            left = list(self._pending.values())
            self._pending.clear()
        self._gate.wake()
        for pending in left:
            self._answer_gone(
                pending, f"the MCP server exited ({_status(status)}) before answering"
            )

    def _answer_gone(self, pending: _Pending, why: str) -> None:
        if pending.claim is not None:
            self._settle(pending.claim, ExecutionOutcome.INTERRUPTED, Impact.POSSIBLE)
            run = self._run
            assert run is not None  # noqa: S101 - the claim was made through it
            settle = self._settle_with(run.run_id, pending.claim.effect_id)
            why += (
                f"; the call may have happened: effect {pending.claim.effect_id} of run "
                f"{run.run_id} is recorded as interrupted ({settle})"
            )
        self.to_client(error_line(pending.request_id, INTERNAL_ERROR, why))

    def _from_server_line(self, data: bytes) -> None:
        try:
            message = parse(data, constants=True)
        except UnreadableError as e:
            self._unreadable(data, e)
            return
        if isinstance(message, dict) and "method" not in message:
            key = id_key(message.get("id"))
            with self._lock:
                pending = None if key is None else self._pending.pop(key, None)
            if pending is not None:
                try:
                    self._answered(pending, message)
                except Exception as e:  # the answer still goes on to the client
                    self.say(f"a server message could not be read: {brief(e)}")
        self.to_client(data)

    def _unreadable(self, data: bytes, why: UnreadableError) -> None:
        """A server line the proxy cannot read strictly: it settles no call as done.

        An answer to a tool call (its id found by a lenient reading) settles the call as
        failed, maybe done, and the client gets an error instead: a parser that reads the
        line otherwise could show it a success the ledger does not hold. Anything else is
        passed on, as every line the proxy does not interpret; a tool call whose answer
        is past finding stays in doubt until the server exits.
        """
        key = None if blank(data) else id_key(answer_id(data))
        with self._lock:
            pending = None if key is None else self._pending.pop(key, None)
        if pending is None or pending.claim is None:
            self.to_client(data)
            return
        self._settle(pending.claim, ExecutionOutcome.FAILED, Impact.POSSIBLE)
        run = self._run
        assert run is not None  # noqa: S101 - the claim was made through it
        self.say(f"the answer to effect {pending.claim.effect_id} is not JSON: {brief(why)}")
        settle = self._settle_with(run.run_id, pending.claim.effect_id)
        self.to_client(
            error_line(
                pending.request_id,
                INTERNAL_ERROR,
                f"the MCP server's answer could not be read ({brief(why)}); the call may have "
                f"happened: effect {pending.claim.effect_id} of run {run.run_id} is recorded "
                f"as failed, impact possible ({settle})",
            )
        )

    def _settle_with(self, run_id: str, effect_id: str) -> str:
        """The commands that show the run and settle the effect, ready to paste."""
        store = f"--store {shlex.quote(storage.describe(self._directory))}"
        return (
            f"ledger show {run_id} {store}; once you know whether it landed: ledger resolve "
            f"{run_id} {effect_id} --applied --by NAME {store} (or --not-applied)"
        )

    def _answered(self, pending: _Pending, message: dict[str, Any]) -> None:
        """Read what the proxy needs from an answer, before the client gets it."""
        result = message.get("result")
        if pending.claim is not None:
            claim = pending.claim
            with self._lock:
                stopping = self._gone
            execution, impact = outcome_of(
                message,
                claim.kind,
                self._error_impacts.get(claim.operation.name),
                stopping=stopping,
            )
            recorded, answered = result_of(message)
            self._settle(claim, execution, impact, result=recorded, answered=answered)
        elif not isinstance(result, dict):
            return
        elif pending.method in ("initialize", "server/discover"):
            self._learn_server(pending.method, result)
        elif pending.method == "tools/list":
            found = kinds_listed(result)
            with self._lock:
                self._annotated.update(found)

    def _learn_server(self, method: str, result: dict[str, Any]) -> None:
        try:
            if method == "initialize":
                server = InitializeResult.model_validate(result).server_info
            else:
                meta = result.get("_meta")
                stamp = meta.get(SERVER_INFO_META_KEY) if isinstance(meta, dict) else None
                server = Implementation.model_validate(stamp)
        except ValidationError:
            return  # no name to learn: the run is named by --name or the command
        with self._lock:
            if self._server is None:
                self._server = server
        try:
            self._ensure_run()  # earlier runs of this name recovered before the first call
        except (EffectPersistenceError, ValueError) as e:
            # Said here; each tool call then tries again, and is refused while it fails.
            self.say(f"the run cannot start: {brief(e)}")


def _status(status: int) -> str:
    if status < 0:
        return f"killed by {signal.Signals(-status).name}"
    return f"status {status}"


def run(
    command: Sequence[str],
    directory: storage.Location,
    *,
    name: str | None,
    kinds: Mapping[str, EffectKind],
    error_impacts: Mapping[str, Impact] | None = None,
    record: bool = True,
    approve: Sequence[str] = (),
    approval_ttl: dt.timedelta | None = None,
    elicitation_timeout: float = ELICITATION_TIMEOUT,
    say: Callable[[str], None],
) -> int:
    """Run the proxy on this process's stdin and stdout; return its exit status."""
    # Buffered copies of fds 0 and 1 (a line is read at once, not byte by byte); the
    # proxy flushes after each message.
    stdin = os.fdopen(os.dup(0), "rb")
    stdout = os.fdopen(os.dup(1), "wb")
    proxy = Proxy(
        command,
        directory,
        name=name,
        kinds=kinds,
        error_impacts=error_impacts,
        record=record,
        approve=approve,
        approval_ttl=approval_ttl,
        elicitation_timeout=elicitation_timeout,
        client_in=stdin,
        client_out=stdout,
        say=say,
    )
    return proxy.serve()
