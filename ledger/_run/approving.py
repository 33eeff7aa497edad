"""The approval doors of a log: the gate a call passes, and a person's answers.

:class:`Approvals` is the part of :class:`~ledger.effect_log.EffectLog` that
:meth:`~Approvals.approve`, :meth:`~Approvals.deny` and :meth:`~Approvals.approvals` are,
and the gate ``log.effect(..., approval=...)`` and ``log.claim(..., approval=...)`` go
through (:meth:`Approvals.gate`). The store is the judge of what counts: a claim made
under an approval is refused in its own transaction unless the approval is granted for
that effect, unexpired by the store's clock, and unused.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import TYPE_CHECKING, NamedTuple, NoReturn

from ledger._run.requests import new_effect_id
from ledger._run.writes import Request, degraded_error
from ledger.effects import (
    APPROVAL_STATES,
    ApprovalDecision,
    ApprovalPolicy,
    ApprovalRequest,
    ApprovalSource,
    ApprovalView,
    Decision,
    EffectClaim,
    InvalidTypeError,
    NextStep,
    action_digest,
    check_identifier,
    idempotency_key,
)
from ledger.errors import ApprovalDenied, ApprovalPending, EffectPersistenceError
from ledger.storage import ANSWER_TOO_LATE, GRANT_LAPSED

if TYPE_CHECKING:
    import threading

    from ledger._run.journal import Journal
    from ledger._run.state import RunState
    from ledger._run.writes import Writes

__all__ = ["Approvals", "Gate"]

_DIGEST_PREFIX = re.compile(r"[0-9a-f]{8,64}")


class Gate(NamedTuple):
    """A call let through the gate: the approval it is claimed under, and its effect id."""

    approval_id: str
    effect_id: str


def _expiry(now: str, policy: ApprovalPolicy) -> str:
    from datetime import datetime  # noqa: PLC0415 - only when a request is written

    return (datetime.fromisoformat(now) + policy.ttl).isoformat(timespec="microseconds")


class Approvals:
    """``approve``, ``deny``, ``approvals`` and the gate of :class:`EffectLog`."""

    if TYPE_CHECKING:  # the log's, which these methods use
        _cond: threading.Condition
        _state: RunState
        _writes: Writes
        _journal: Journal
        _run_id: str
        _asked: set[str]

        def _check_open(self) -> None: ...

    # ------------------------------------------------------------------ the gate

    def _store_now(self, action: str) -> str:
        """The store's clock (what expiry is judged by)."""
        return self._journal.acquire().now(action)

    def _catch_up(self, action: str) -> None:
        """See the answers other processes gave since this log last read its run."""
        if self._writes.started:
            self._writes.catch_up(action)

    def gate(self, probe: EffectClaim, policy: ApprovalPolicy, *, step: str, args: object) -> Gate:
        """Let the call of ``probe`` through under a grant, or raise why it may not run.

        Called with the log's lock held, for a call's first attempt only (a retry of an
        attempt proven not to have landed runs under the approval that attempt used).
        The newest request for the call's :func:`~ledger.effects.action_digest` decides:
        granted and unused, the call is let through (claimed with its ``approval_id``
        and the effect id it reserved); pending, :class:`ApprovalPending` again; denied,
        :class:`ApprovalDenied`; none, expired or used by an earlier call, a new request
        is written and :class:`ApprovalPending` raised.
        """
        if not isinstance(policy, ApprovalPolicy):
            raise InvalidTypeError(
                f"approval must be an ApprovalPolicy, not {type(policy).__name__}"
            )
        digest = action_digest(probe)
        action = f"cannot ask for approval of {probe.operation.name}"
        book = self._state.approvals
        while digest in book.asking:  # another thread is asking for this very call
            self._cond.wait()
        request = book.latest(digest)
        if request is not None and request.approval_id not in book.answer:
            self._catch_up(action)
        now = self._store_now(action)
        state = None if request is None else book.state(request, now)
        if request is not None and state == "granted" and self._spent(request, now):
            state = "used"
        if request is None or state in ("expired", "used"):
            request = self._ask(probe, policy, digest, step=step, args=args, now=now)
            state = "pending"
        assert request is not None  # noqa: S101 - asked above
        if state == "granted":
            book.passing.add(request.approval_id)  # until the caller's passed()
            return Gate(request.approval_id, request.effect_id)
        if state == "denied":
            answer = book.answer[request.approval_id]
            note = f": {answer.note}" if answer.note else ""
            raise ApprovalDenied(
                f"{probe.operation.name} was denied by {answer.by}{note} (approval "
                f"{request.approval_id}); it was not run and must not be",
                run_id=self._run_id,
                effect_id=request.effect_id,
                decision=self._decision(request, NextStep.DENIED),
                approval_id=request.approval_id,
                by=answer.by,
                note=answer.note,
            )
        raise self._pending(request)

    def passed(self, gate: Gate) -> None:
        """The claim of a call :meth:`gate` let through is durable, or failed.

        Durable, its approval is used; failed, the next call may pass under it again.
        """
        with self._cond:
            self._state.approvals.passing.discard(gate.approval_id)

    def give_back_step(self, probe: EffectClaim) -> None:
        """``probe``'s call was not claimed: made again, it gets the same automatic step."""
        with self._cond:
            op = probe.operation
            self._state.steps.give_back(op.name, op.args_sha256)

    def claim_passed(
        self,
        passed: Gate,
        claim: Callable[[], EffectClaim],
        probe: EffectClaim,
        policy: ApprovalPolicy,
        *,
        step: str,
        args: object,
        automatic: bool,
    ) -> EffectClaim:
        """Make ``claim`` of a call :meth:`gate` let through as ``passed``; then it has passed.

        Refused by the store, the grant is released first (the call made again may pass
        under it), the call's step given back when it was the automatic one, and
        :meth:`lapsed` raises: :class:`ApprovalPending` when the grant expired meanwhile,
        the refusal otherwise.
        """
        try:
            claimed = claim()
        except EffectPersistenceError as e:
            self.passed(passed)
            if automatic:
                self.give_back_step(probe)
            self.lapsed(e, probe, policy, step=step, args=args)
        except BaseException:
            self.passed(passed)
            raise
        self.passed(passed)
        return claimed

    def lapsed(
        self,
        error: EffectPersistenceError,
        probe: EffectClaim,
        policy: ApprovalPolicy,
        *,
        step: str,
        args: object,
    ) -> NoReturn:
        """Raise for a claim under a grant that failed with ``error``.

        When the store refused it because the approval expired between the gate and the
        claim's transaction (a grant given in the last instant), the call is not run and
        asks anew, as one made a moment later would: :class:`ApprovalPending`. Any other
        failure is raised as it is.
        """
        if GRANT_LAPSED not in str(error):
            raise error
        with self._cond:
            passed = self.gate(probe, policy, step=step, args=args)  # past expiry: asks anew
            self._state.approvals.passing.discard(passed.approval_id)
        raise error  # the store's clock and the gate's disagree: the refusal stands

    def _spent(self, request: ApprovalRequest, now: str) -> bool:
        """Whether a grant can no longer let a call through, though no claim used it yet.

        It lapsed unused at the request's expiry (the store refuses a claim under it from
        then on), or another call passed the gate under it and is claiming it: either way
        this call asks anew rather than meet the store's refusal.
        """
        return now >= request.expires_at or request.approval_id in self._state.approvals.passing

    def _ask(
        self,
        probe: EffectClaim,
        policy: ApprovalPolicy,
        digest: str,
        *,
        step: str,
        args: object,
        now: str,
    ) -> ApprovalRequest:
        effect_id = probe.effect_id
        book = self._state.approvals
        if effect_id in book.reserved or effect_id in self._state.claimed:
            effect_id = new_effect_id()  # an earlier request of this call holds the given one
        record = ApprovalRequest(
            approval_id=new_effect_id(),
            seq=self._state.next_free,
            effect_id=effect_id,
            action_digest=digest,
            operation=probe.operation.name,
            requested_at=now,
            expires_at=_expiry(now, policy),
            step=step,
            args=args,
            reason=policy.reason,
            **self._writes.process(),
        )
        book.asking.add(digest)
        try:
            written = self._write(record, f"approval request for {probe.operation.name}")
        finally:
            book.asking.discard(digest)
            self._cond.notify_all()
        self._asked.add(record.approval_id)
        return written  # type: ignore[return-value]  # the request

    def _write(self, record: ApprovalRequest | ApprovalDecision, what: str) -> object:
        if self._writes.degraded:
            raise degraded_error(self._run_id)
        pending = Request(what, [record], raises=True)
        self._writes.submit(pending)
        if pending.error is not None:
            raise pending.error
        return pending.records[0]

    def _pending(self, request: ApprovalRequest) -> ApprovalPending:
        command = (
            f"ledger approve {self._run_id} {request.approval_id} --by NAME "
            f"--expect-digest {request.action_digest[:12]}"
        )
        return ApprovalPending(
            f"{request.operation} needs a person's approval (approval {request.approval_id}, "
            f"expires {request.expires_at}); it was not run. To approve it: {command}",
            run_id=self._run_id,
            effect_id=request.effect_id,
            decision=self._decision(request, NextStep.WAIT),
            approval_id=request.approval_id,
            action_digest=request.action_digest,
            expires_at=request.expires_at,
        )

    def _decision(self, request: ApprovalRequest, step: NextStep) -> Decision:
        reasons = {
            NextStep.WAIT: f"It waits for a person's approval (approval {request.approval_id}).",
            NextStep.RETRY: f"A person approved it (approval {request.approval_id}): run it.",
            NextStep.DENIED: f"A person denied it (approval {request.approval_id}): do not run it.",
            NextStep.ESCALATE: (
                f"Its approval request {request.approval_id} expired unanswered: ask again."
            ),
        }
        return Decision(
            request.effect_id,
            step,
            reasons[step],
            idempotency_key(self._run_id, request.effect_id),
        )

    def approval_decision(self, effect_id: str) -> Decision | None:
        """The decision of an effect that has an approval request and no claim, if it is one."""
        with self._cond:
            if effect_id in self._state.claimed:
                return None
            request = self._state.approvals.of_effect(effect_id)
            if request is None:
                return None
            if request.approval_id not in self._state.approvals.answer:
                self._catch_up(f"cannot decide effect {effect_id!r}")
            now = self._store_now(f"cannot decide effect {effect_id!r}")
            state = self._state.approvals.state(request, now)
            if state == "granted" and now >= request.expires_at:
                return Decision(
                    effect_id,
                    NextStep.ESCALATE,
                    f"Its approval {request.approval_id} was granted but not used before it "
                    f"expired at {request.expires_at}: ask again.",
                    idempotency_key(self._run_id, effect_id),
                )
            step = {
                "pending": NextStep.WAIT,
                "granted": NextStep.RETRY,
                "denied": NextStep.DENIED,
                "expired": NextStep.ESCALATE,
            }[state]
            return self._decision(request, step)

    # ------------------------------------------------------------------ answers

    def approve(
        self, approval_id: str, *, by: str, expect_digest: str | None = None, note: str = ""
    ) -> ApprovalDecision:
        """Grant approval ``approval_id``: the call it asks for may run, once.

        ``by`` names the person; the process writing it is recorded beside (OS user,
        host, program, pid). ``expect_digest`` (a prefix of at least 8 hex characters of
        the request's action digest) must match, so that what was shown is what is
        approved. ``ValueError`` for an unknown request, one already decided or expired
        (by the store's clock), a digest that does not match, or a request this log (or
        this process) made: a worker does not approve its own calls. Durable when it
        returns.
        """
        return self._answer(
            approval_id, granted=True, by=by, note=note, expect_digest=expect_digest, source=None
        )

    def deny(self, approval_id: str, *, by: str, note: str = "") -> ApprovalDecision:
        """Deny approval ``approval_id``: the call it asks for must not run.

        As :meth:`approve`; the worker's next attempt at the call raises
        :class:`~ledger.errors.ApprovalDenied`.
        """
        return self._answer(
            approval_id, granted=False, by=by, note=note, expect_digest=None, source=None
        )

    def answer_approval(
        self,
        approval_id: str,
        *,
        granted: bool,
        by: str,
        source: ApprovalSource,
        note: str = "",
    ) -> ApprovalDecision:
        """Record a person's answer that reached this process another way than a command.

        For ``ledger mcp-proxy``, which asks the MCP client (``source`` ``ELICITATION``,
        ``by`` the client's name); the answer is recorded with its source, and the
        request may be this log's own. Otherwise as :meth:`approve` / :meth:`deny`.
        """
        if not isinstance(granted, bool):
            raise InvalidTypeError(f"granted must be a bool, not {type(granted).__name__}")
        if not isinstance(source, ApprovalSource):
            raise InvalidTypeError(f"source must be an ApprovalSource, not {type(source).__name__}")
        return self._answer(
            approval_id, granted=granted, by=by, note=note, expect_digest=None, source=source
        )

    def _answer(
        self,
        approval_id: str,
        *,
        granted: bool,
        by: str,
        note: str,
        expect_digest: str | None,
        source: ApprovalSource | None,
    ) -> ApprovalDecision:
        check_identifier(approval_id, "approval_id")
        check_identifier(by, "by")
        if not isinstance(note, str):
            raise InvalidTypeError(f"note must be a str, not {type(note).__name__}")
        if expect_digest is not None:
            if not isinstance(expect_digest, str):
                raise InvalidTypeError(
                    f"expect_digest must be a str, not {type(expect_digest).__name__}"
                )
            expect_digest = expect_digest.lower()
            if not _DIGEST_PREFIX.fullmatch(expect_digest):
                raise ValueError("expect_digest must be at least 8 hex characters of the digest")
        word = "approve" if granted else "deny"
        action = f"cannot {word} approval {approval_id}"
        with self._cond:
            self._check_open()
            self._catch_up(action)
            book = self._state.approvals
            request = book.by_id.get(approval_id)
            if request is None:
                raise ValueError(f"run {self._run_id} has no approval request {approval_id!r}")
            elicited = source is ApprovalSource.ELICITATION
            process = self._writes.process()
            if not elicited and (
                approval_id in self._asked
                or (request.pid == process["pid"] and request.host == process["host"])
            ):
                raise ValueError(
                    f"approval {approval_id} was requested by this process: a worker does not "
                    "approve its own calls (a person does, with ledger approve)"
                )
            answer = book.answer.get(approval_id)
            if answer is not None:
                raise ValueError(
                    f"approval {approval_id} is already decided: {answer.decision} by "
                    f"{answer.by} at {answer.decided_at}"
                )
            now = self._store_now(action)
            if now >= request.expires_at:
                raise ValueError(
                    f"approval {approval_id} expired at {request.expires_at}, unanswered: the "
                    "call asks again when it is made again"
                )
            if expect_digest is not None and not request.action_digest.startswith(expect_digest):
                raise ValueError(
                    f"approval {approval_id} is for action digest {request.action_digest}, "
                    f"not {expect_digest}: the call is not the one you expected"
                )
            if source is None:
                source = (
                    ApprovalSource.COMMAND
                    if self._writes.visitor is not None
                    else ApprovalSource.PROGRAM
                )
            record = ApprovalDecision(
                approval_id=approval_id,
                seq=self._state.next_free,
                decision="granted" if granted else "denied",
                by=by,
                decided_at=now,
                source=source,
                note=note,
                **process,
            )
            try:
                return self._write(record, f"decision on approval {approval_id}")  # type: ignore[return-value]
            except EffectPersistenceError as e:
                if ANSWER_TOO_LATE in str(e):
                    raise ValueError(
                        f"approval {approval_id} expired at {request.expires_at} by the store's "
                        "clock before the answer could be recorded: nothing was recorded"
                    ) from e
                raise

    def approvals(self, *, state: str | None = None) -> list[ApprovalView]:
        """The run's approval requests as a person reads them, oldest first.

        ``state`` keeps those in one state: ``"pending"``, ``"granted"`` (not yet used),
        ``"denied"``, ``"expired"`` (unanswered past their expiry, by the store's clock)
        or ``"used"`` (granted, and a claim made under it). Reads the answers other
        processes gave since this log last read its run.
        """
        if state is not None and state not in APPROVAL_STATES:
            raise ValueError(f"state must be one of {', '.join(APPROVAL_STATES)}, not {state!r}")
        with self._cond:
            self._check_open()
            book = self._state.approvals
            if not book.requests:
                return []
            self._catch_up("cannot read the approvals")
            now = self._store_now("cannot read the approvals")
            views = [book.view(self._run_id, r, now) for r in book.requests]
        return [v for v in views if state is None or v.state == state]
