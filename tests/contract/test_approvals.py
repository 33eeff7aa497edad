"""Approvals through the log, on each backend: the five ways other gates fail their users.

A worker's gated call (``approval=fx.ApprovalPolicy(...)``) writes a request and raises
``ApprovalPending``; a person answers from another process (a child Python that stays
up for the test, as ``ledger approve`` or as a program would answer); the worker's next
identical call runs under the grant, once. Each test is one of the bugs users of other
gates report: a changed argument still covered; a grant used twice; an expiry taken for
a person's answer, or a grant accepted after it; an approver's identity taken on trust,
or a worker approving itself; and what ``decide`` says meanwhile.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import threading
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

import ledger
from ledger import effects as fx
from ledger.effect_log import EffectLog, EffectPersistenceError
from ledger.errors import ApprovalDenied, ApprovalPending
from ledger.resources import ExternalResource
from tests.backends import POSTGRESQL, Backend, writes_nothing
from tests.builders import (
    CHILD_TIMEOUT,
    PYTHON,
    REPO,
    Call,
    run_threads,
    subprocess_env,
    wait_for,
)

pytestmark = pytest.mark.program

IRREVERSIBLE = fx.EffectKind.IRREVERSIBLE
LEDGER_ACCOUNT = ExternalResource("https://payments.example/accounts/7")
OTHER_ACCOUNT = ExternalResource("https://payments.example/accounts/8")
POLICY = fx.ApprovalPolicy(ttl=timedelta(hours=1), reason="refunds over 100")
SHORT = timedelta(seconds=1)  # a request a test waits out

# A person in another process: one JSON command a line on stdin, one JSON answer a line
# on stdout. "command" answers as `ledger approve` does, "program" as a program would.
PERSON = """
import json, os, sys
from datetime import datetime, timedelta
from ledger._core import values
from ledger.effect_log import EffectLog

class Skewed(datetime):  # this process's clock, as the library reads it: off by `skew`
    skew = timedelta(0)

    @classmethod
    def now(cls, tz=None):
        return datetime.now(tz) + cls.skew

values.datetime = Skewed
print(json.dumps({"pid": os.getpid()}), flush=True)
for line in sys.stdin:
    ask = json.loads(line)
    Skewed.skew = timedelta(seconds=ask["skew"])
    try:
        if ask["how"] == "command":
            log = EffectLog._visit(ask["run"], ask["store"], "ledger approve")
        else:
            log = EffectLog.load(ask["run"], ask["store"])
        with log:
            if ask["what"] == "approve":
                done = log.approve(ask["id"], by=ask["by"], expect_digest=ask["expect"],
                                   note=ask["note"])
            else:
                done = log.deny(ask["id"], by=ask["by"], note=ask["note"])
        answer = {"decision": done.to_dict()}
    except Exception as e:
        answer = {"error": type(e).__name__, "message": str(e)}
    print(json.dumps(answer), flush=True)
"""


class Person:
    """Someone answering approval requests from a process of their own."""

    def __init__(self, store: Path | str) -> None:
        self.store = str(store)
        self.proc = subprocess.Popen(
            [PYTHON, "-c", PERSON],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env=subprocess_env(),
            cwd=REPO,
        )
        self.pid = self._read()["pid"]

    def _read(self) -> dict[str, Any]:
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        assert line, f"the person's process exited {self.proc.wait(timeout=CHILD_TIMEOUT)}"
        found: dict[str, Any] = json.loads(line)
        return found

    def answer(
        self,
        run_id: str,
        approval_id: str,
        *,
        what: str = "approve",
        by: str = "alice",
        expect: str | None = None,
        note: str = "",
        how: str = "command",
        skew: float = 0,
    ) -> dict[str, Any]:
        """What the person's process said: ``{"decision": ...}`` or ``{"error": ...}``."""
        assert self.proc.stdin is not None
        ask = {
            "run": run_id,
            "store": self.store,
            "id": approval_id,
            "what": what,
            "by": by,
            "expect": expect,
            "note": note,
            "how": how,
            "skew": skew,
        }
        self.proc.stdin.write(json.dumps(ask) + "\n")
        self.proc.stdin.flush()
        return self._read()

    def approve(self, run_id: str, approval_id: str, **kwargs: Any) -> dict[str, Any]:
        """Grant it; the decision as recorded."""
        said = self.answer(run_id, approval_id, **kwargs)
        assert "decision" in said, said
        decision: dict[str, Any] = said["decision"]
        return decision

    def deny(self, run_id: str, approval_id: str, **kwargs: Any) -> dict[str, Any]:
        """Deny it; the decision as recorded."""
        return self.approve(run_id, approval_id, what="deny", **kwargs)

    def close(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        self.proc.wait(timeout=CHILD_TIMEOUT)
        assert self.proc.stdout is not None
        self.proc.stdout.close()


@pytest.fixture
def person(store_dir: Path | str) -> Iterator[Person]:
    """A person answering requests of the test's store from another process."""
    found = Person(store_dir)
    yield found
    found.close()


@pytest.fixture
def log(store_dir: Path | str, run_id: str) -> Iterator[EffectLog]:
    """The worker's log; the gated call is the run's first record."""
    with EffectLog(run_id, store_dir) as made:
        yield made


class Refunds:
    """The worker's gated call, and the bodies that ran."""

    def __init__(self, log: EffectLog, policy: fx.ApprovalPolicy = POLICY) -> None:
        self.log = log
        self.policy = policy
        self.ran: list[str] = []

    def refund(self, amount: int = 150, **change: Any) -> str:
        """Refund ``amount`` (``change``: kind, impact_scope, obligations); the effect id."""
        options: dict[str, Any] = {
            "kind": IRREVERSIBLE,
            "impact_scope": [LEDGER_ACCOUNT],
            "approval": self.policy,
        } | change
        with self.log.effect("refund", args={"amount": amount}, **options) as call:
            self.ran.append(call.effect_id)
        return call.effect_id

    def pending(self, amount: int = 150, **change: Any) -> ApprovalPending:
        """Make the call, which must not run: the ApprovalPending it raised."""
        ran = list(self.ran)
        with pytest.raises(ApprovalPending) as raised:
            self.refund(amount, **change)
        assert self.ran == ran
        return raised.value


def count(backend: Backend, store: Path | str, table: str) -> int:
    return backend.row_counts(store)[table]


# --------------------------------------------------------------------------- 1. what is approved


CHANGED = {
    "argument": {"amount": 151},
    "kind": {"kind": fx.EffectKind.WRITE},
    "scope": {"impact_scope": [OTHER_ACCOUNT]},
    "postcondition": {
        "obligations": [fx.Postcondition(LEDGER_ACCOUNT.to_ref("target"), fx.Predicate.EXISTS)]
    },
}


@pytest.mark.parametrize("change", CHANGED.values(), ids=CHANGED.keys())
def test_a_grant_does_not_cover_a_changed_call(
    backend: Backend,
    store_dir: Path | str,
    log: EffectLog,
    person: Person,
    change: dict[str, Any],
) -> None:
    """Approve refund(150): refund(151), or one of another kind, scope or postcondition, asks anew."""
    calls = Refunds(log)
    first = calls.pending()
    person.approve(log.run_id, first.approval_id, expect=first.action_digest[:8])
    change = dict(change)  # the parameter is shared by the backends' runs
    amount = change.pop("amount", 150)
    other = calls.pending(amount, **change)
    assert other.approval_id != first.approval_id
    assert other.action_digest != first.action_digest
    assert log.history().claims == ()
    assert count(backend, store_dir, "approval_requests") == 2
    # The approved call itself runs, under its own grant.
    effect_id = calls.refund()
    assert calls.ran == [effect_id]
    (claim,) = log.history().claims
    assert (claim.approval_id, claim.effect_id) == (first.approval_id, first.effect_id)
    assert fx.action_digest(claim) == first.action_digest


def test_a_grant_names_the_digest_the_person_saw(
    backend: Backend, store_dir: Path | str, log: EffectLog, person: Person
) -> None:
    """expect_digest that is not the request's: ValueError, and nothing recorded."""
    asked = Refunds(log).pending()
    wrong = "0" * 12 if not asked.action_digest.startswith("0" * 12) else "f" * 12
    with writes_nothing(backend, store_dir, log):
        said = person.answer(log.run_id, asked.approval_id, expect=wrong)
    assert said["error"] == "ValueError"
    assert "not the one you expected" in said["message"]
    assert count(backend, store_dir, "approval_decisions") == 0


# --------------------------------------------------------------------------- 2. used once


def test_a_grant_runs_the_call_once_and_the_same_call_again_asks_anew(
    backend: Backend, store_dir: Path | str, log: EffectLog, person: Person
) -> None:
    """One grant, one claim: the identical call after it needs another person's yes."""
    calls = Refunds(log)
    asked = calls.pending()
    assert calls.pending().approval_id == asked.approval_id  # asked once
    assert count(backend, store_dir, "approval_requests") == 1
    person.approve(log.run_id, asked.approval_id)
    calls.refund()
    again = calls.pending()
    assert again.approval_id != asked.approval_id
    assert len(calls.ran) == 1
    (used,) = log.approvals(state="used")
    assert (used.approval_id, used.used_by) == (asked.approval_id, calls.ran[0])
    assert [v.approval_id for v in log.approvals(state="pending")] == [again.approval_id]
    rows = backend.query(store_dir, "SELECT approval_id FROM claims WHERE approval_id IS NOT NULL")
    assert rows == [(asked.approval_id,)]


def test_a_grant_given_while_the_worker_goes_on_with_other_calls_is_taken_in(
    backend: Backend, store_dir: Path | str, log: EffectLog, person: Person
) -> None:
    """The worker's next ungated write meets the person's decision in the run: it adopts it."""
    calls = Refunds(log)
    asked = calls.pending()
    person.approve(log.run_id, asked.approval_id)
    with log.effect("note", args={"text": "waiting"}, kind=fx.EffectKind.IDEMPOTENT) as call:
        noted = call.effect_id
    assert not log.degraded
    calls.refund()
    claims = log.history().claims
    assert [c.effect_id for c in claims] == [noted, asked.effect_id]
    assert [r[0] for r in backend.query(store_dir, "SELECT seq FROM claims ORDER BY seq")] == [
        c.seq for c in claims
    ]


def test_threads_entering_the_granted_call_together_use_the_grant_once(
    log: EffectLog, person: Person
) -> None:
    """Four threads make the approved call at once: one runs, the others are asked anew."""
    calls = Refunds(log)
    asked = calls.pending()
    person.approve(log.run_id, asked.approval_id)
    errors = run_threads([calls.refund] * 4)
    assert len(calls.ran) == 1
    assert sum(e is None for e in errors) == 1
    later = {e.approval_id for e in errors if isinstance(e, ApprovalPending)}
    assert len(later) == 1  # one new request, for the three
    assert asked.approval_id not in later
    assert [type(e) for e in errors if e is not None] == [ApprovalPending] * 3


def test_a_retry_of_a_failed_attempt_needs_no_second_approval(
    backend: Backend, store_dir: Path | str, log: EffectLog, person: Person
) -> None:
    """An attempt under the grant failed with impact none: its retry runs without asking."""
    outcomes = iter([fx.Impact.NONE, None])

    def refund() -> str:
        with log.effect(
            "refund", args={"amount": 150}, kind=IRREVERSIBLE, step="refund", approval=POLICY
        ) as call:
            impact = next(outcomes)
            if impact is not None:
                call.failed(impact=impact)
        return call.effect_id

    with pytest.raises(ApprovalPending) as raised:
        refund()
    person.approve(log.run_id, raised.value.approval_id)
    first = refund()
    assert log.decide(first).step is fx.NextStep.RETRY
    second = refund()
    first_claim, retry = log.history().claims
    assert (first_claim.effect_id, retry.effect_id) == (first, second)
    assert first_claim.approval_id == raised.value.approval_id
    assert (retry.retry_of, retry.approval_id) == (first, None)
    assert count(backend, store_dir, "approval_requests") == 1


def test_a_pending_request_is_the_same_after_a_restart(
    backend: Backend, store_dir: Path | str, run_id: str, person: Person
) -> None:
    """The worker's first and only record is a request: it is durable, and asked once."""
    with EffectLog.resume(run_id, store_dir) as first:
        asked = Refunds(first).pending()
    with EffectLog.resume(run_id, store_dir) as second:
        again = Refunds(second).pending()
        assert again.approval_id == asked.approval_id
        assert count(backend, store_dir, "approval_requests") == 1
        person.approve(run_id, asked.approval_id)
        calls = Refunds(second)
        calls.refund()
        assert len(calls.ran) == 1


# --------------------------------------------------------------------------- 3. expiry


def expired(log: EffectLog, approval_id: str) -> None:
    """Wait until the store's clock has passed the request's expiry."""
    wait_for(
        lambda: approval_id in {v.approval_id for v in log.approvals(state="expired")},
        f"approval {approval_id} expired",
    )


def test_an_expired_request_is_no_one_s_answer_and_cannot_be_granted(
    backend: Backend, store_dir: Path | str, log: EffectLog, person: Person
) -> None:
    """Past expiry: no decision row, state expired, decide ESCALATE, a grant refused."""
    calls = Refunds(log, fx.ApprovalPolicy(ttl=SHORT))
    asked = calls.pending()
    assert log.decide(asked.effect_id).step is fx.NextStep.WAIT
    expired(log, asked.approval_id)
    (view,) = log.approvals(state="expired")
    assert view.decision is None
    assert count(backend, store_dir, "approval_decisions") == 0
    decided = log.decide(asked.effect_id)
    assert decided.step is fx.NextStep.ESCALATE
    assert asked.approval_id in decided.reason
    with writes_nothing(backend, store_dir, log):
        said = person.answer(log.run_id, asked.approval_id)
    assert said["error"] == "ValueError"
    assert "expired" in said["message"]
    # The identical call asks again, in a request of its own.
    again = calls.pending()
    assert again.approval_id != asked.approval_id
    assert again.action_digest == asked.action_digest
    assert log.decide(again.effect_id).step is fx.NextStep.WAIT
    assert count(backend, store_dir, "approval_decisions") == 0
    assert calls.ran == []


def test_a_person_s_clock_behind_the_store_s_does_not_extend_a_request(
    backend: Backend, store_dir: Path | str, log: EffectLog, person: Person
) -> None:
    """Expired by the store's clock, a grant from a process whose clock is an hour behind is refused."""
    asked = Refunds(log, fx.ApprovalPolicy(ttl=SHORT)).pending()
    expired(log, asked.approval_id)
    with writes_nothing(backend, store_dir, log):
        said = person.answer(log.run_id, asked.approval_id, skew=-3600)
    assert said["error"] == "ValueError"
    assert "expired" in said["message"]


# A SQLite store's clock is its machine's, which every process there reads: only a server
# has a clock of its own.
@pytest.mark.parametrize("backend", [POSTGRESQL], ids=[POSTGRESQL.name], indirect=True)
def test_a_person_s_clock_ahead_of_the_store_s_does_not_cut_a_request_short(
    log: EffectLog, person: Person
) -> None:
    """Pending by the store's clock, a grant from a process whose clock is an hour ahead counts."""
    calls = Refunds(log)
    asked = calls.pending()
    decision = person.approve(log.run_id, asked.approval_id, skew=3600)
    assert decision["decided_at"] < asked.expires_at  # the store's time, not the person's
    calls.refund()
    assert len(calls.ran) == 1


def test_a_grant_not_used_before_the_expiry_lapses(
    backend: Backend, store_dir: Path | str, log: EffectLog, person: Person
) -> None:
    """Granted but unused past the expiry: the call asks anew, nothing runs, the log is fine."""
    # A short time to live, yet time for the person: longer each time they were too slow.
    for seconds in (3, 8, 20):
        calls = Refunds(log, fx.ApprovalPolicy(ttl=timedelta(seconds=seconds)))
        asked = calls.pending()
        said = person.answer(log.run_id, asked.approval_id)
        if "error" not in said:
            break
    assert "error" not in said, said

    def past_expiry() -> bool:
        now = backend.query(store_dir, "SELECT 1")  # a round trip, then compare clocks
        return bool(now) and fx.utc_now() > asked.expires_at

    wait_for(past_expiry, "the expiry passed")
    assert log.decide(asked.effect_id).step is fx.NextStep.ESCALATE
    again = calls.pending()
    assert again.approval_id != asked.approval_id
    assert not log.degraded
    assert log.history().claims == ()


def test_a_claim_the_store_refuses_as_expired_asks_anew(
    backend: Backend, store_dir: Path | str, log: EffectLog, person: Person
) -> None:
    """Granted in time, claimed too late (the store was busy): not run, ApprovalPending anew."""
    # The claim must reach the store's lock within the ttl: a longer one each time it did not.
    for seconds in (2, 5, 12):
        calls = Refunds(log, fx.ApprovalPolicy(ttl=timedelta(seconds=seconds)))
        asked = calls.pending()
        in_time = "error" not in person.answer(log.run_id, asked.approval_id)
        if not in_time:  # the person answered after the expiry
            continue
        with backend.write_locked(store_dir):
            claiming = Call(calls.refund)
            effect_id, expires_at = asked.effect_id, asked.expires_at
            wait_for(lambda: effect_id in log._state.queued_claims, "the claim is queued")  # noqa: B023 - read at once
            in_time = fx.utc_now() < expires_at  # else the gate itself saw it expire
            wait_for(lambda: fx.utc_now() > expires_at, "the approval expired")  # noqa: B023
        with pytest.raises(ApprovalPending) as raised:
            claiming.result()
        if in_time:
            break
    assert in_time, "the claim never reached the store within the ttl"
    assert raised.value.approval_id != asked.approval_id
    assert calls.ran == []
    assert not log.degraded
    assert log.history().claims == ()
    assert count(backend, store_dir, "claims") == 0
    # The call made again is the same call: it has the same step, and asks no more.
    first, second = log.history().approval_requests
    assert first.step == second.step
    assert calls.pending().approval_id == raised.value.approval_id


# --------------------------------------------------------------------------- 4. who answered


@pytest.mark.parametrize(
    ("how", "source", "program"),
    [
        ("command", fx.ApprovalSource.COMMAND, "ledger approve"),
        ("program", fx.ApprovalSource.PROGRAM, None),
    ],
)
def test_a_decision_records_the_process_that_wrote_it(
    log: EffectLog, person: Person, how: str, source: fx.ApprovalSource, program: str | None
) -> None:
    """by, the source, OS user, host, program and pid of the answering process are recorded."""
    calls = Refunds(log)
    asked = calls.pending()
    person.approve(log.run_id, asked.approval_id, by="alice", note="checked the invoice", how=how)
    calls.refund()
    (view,) = log.approvals()
    decision = view.decision
    assert decision is not None
    assert (decision.by, decision.note, decision.decision) == (
        "alice",
        "checked the invoice",
        "granted",
    )
    assert decision.source is source
    assert decision.pid == person.pid != os.getpid()
    assert decision.host == view.request.host
    assert decision.os_user
    if program is not None:
        assert decision.program == program
    assert view.request.pid == os.getpid()


def test_a_worker_cannot_approve_its_own_request(
    backend: Backend, store_dir: Path | str, log: EffectLog
) -> None:
    """The requesting log, and another log of its process, get ValueError; nothing is recorded."""
    asked = Refunds(log).pending()
    with writes_nothing(backend, store_dir, log):
        with pytest.raises(ValueError, match="own calls"):
            log.approve(asked.approval_id, by="the-agent")
        with pytest.raises(ValueError, match="own calls"):
            log.deny(asked.approval_id, by="the-agent")
        for other in (
            EffectLog.load(log.run_id, store_dir),
            EffectLog._visit(log.run_id, store_dir, "ledger approve"),
        ):
            with other, pytest.raises(ValueError, match="own calls"):
                other.approve(asked.approval_id, by="someone")
    assert log.approvals(state="pending")[0].approval_id == asked.approval_id


def test_the_store_refuses_a_decision_from_the_asking_process(
    backend: Backend, store_dir: Path | str, log: EffectLog
) -> None:
    """A grant written past the library's check, by the asking process, is refused by the store."""
    asked = Refunds(log).pending()
    with EffectLog.load(log.run_id, store_dir) as other:
        forged = fx.ApprovalDecision(
            approval_id=asked.approval_id,
            seq=other.history().records()[-1].seq + 1,
            decision="granted",
            by="someone",
            decided_at=fx.utc_now(),
            source=fx.ApprovalSource.PROGRAM,
            **other._writes.process(),
        )
        with (
            other._cond,
            pytest.raises(EffectPersistenceError, match="not decided by the process that made it"),
        ):
            other._write(forged, "a forged decision")
    assert count(backend, store_dir, "approval_decisions") == 0
    with pytest.raises(ApprovalPending):
        Refunds(log).refund()


# --------------------------------------------------------------------------- 5. decide


def test_decide_waits_while_pending_and_says_denied_after_a_denial(
    backend: Backend, store_dir: Path | str, log: EffectLog, person: Person
) -> None:
    """WAIT naming the approval; then DENIED, and ApprovalDenied with by and note, asked no more."""
    calls = Refunds(log)
    asked = calls.pending()
    waiting = log.decide(asked.effect_id)
    assert waiting.step is fx.NextStep.WAIT
    assert asked.approval_id in waiting.reason
    assert asked.decision == waiting
    person.deny(log.run_id, asked.approval_id, by="bob", note="duplicate refund")
    for _ in range(2):
        with pytest.raises(ApprovalDenied) as raised:
            calls.refund()
        assert (raised.value.by, raised.value.note) == ("bob", "duplicate refund")
        assert raised.value.approval_id == asked.approval_id
        assert raised.value.decision.step is fx.NextStep.DENIED
    assert log.decide(asked.effect_id).step is fx.NextStep.DENIED
    assert calls.ran == []
    assert count(backend, store_dir, "approval_requests") == 1
    (view,) = log.approvals(state="denied")
    assert view.decision is not None
    assert view.decision.decision == "denied"


def test_decide_says_run_it_once_granted_and_done_after(log: EffectLog, person: Person) -> None:
    """Granted and unused: RETRY (run it); once run, its claim's decision governs."""
    calls = Refunds(log)
    asked = calls.pending()
    person.approve(log.run_id, asked.approval_id)
    assert log.decide(asked.effect_id).step is fx.NextStep.RETRY
    effect_id = calls.refund()
    assert effect_id == asked.effect_id
    assert log.decide(effect_id).step is fx.NextStep.DONE


def test_deciding_twice_is_refused(
    backend: Backend, store_dir: Path | str, log: EffectLog, person: Person
) -> None:
    """A second answer, yes or no, is a ValueError and records nothing."""
    asked = Refunds(log).pending()
    person.approve(log.run_id, asked.approval_id)
    with writes_nothing(backend, store_dir, log):
        for what in ("approve", "deny"):
            said = person.answer(log.run_id, asked.approval_id, what=what, by="carol")
            assert said["error"] == "ValueError"
            assert "already decided" in said["message"]


# --------------------------------------------------------------------------- every door


def test_a_decorated_tool_is_gated(log: EffectLog, person: Person) -> None:
    """@log.tool(approval=...) asks, then runs once under the grant."""
    ran: list[int] = []

    @log.tool(kind=IRREVERSIBLE, approval=POLICY)
    def refund(amount: int) -> int:
        ran.append(amount)
        return amount

    with pytest.raises(ApprovalPending) as raised:
        refund(150)
    person.approve(log.run_id, raised.value.approval_id)
    assert refund(150) == 150
    with pytest.raises(ApprovalPending):
        refund(150)
    assert ran == [150]


def test_ledger_tool_is_gated(store_dir: Path | str, run_id: str, person: Person) -> None:
    """ledger.tool(approval=...) asks in the log entered, then runs once under the grant."""
    ran: list[int] = []

    @ledger.tool(kind=IRREVERSIBLE, approval=POLICY)
    def refund(amount: int) -> int:
        ran.append(amount)
        return amount

    with EffectLog.resume(run_id, store_dir), pytest.raises(ApprovalPending) as raised:
        refund(150)
    person.approve(run_id, raised.value.approval_id)
    with EffectLog.resume(run_id, store_dir) as log:
        assert refund(150) == 150
        (claim,) = log.history().claims
        assert claim.approval_id == raised.value.approval_id
    assert ran == [150]


def test_an_async_effect_is_gated(log: EffectLog, person: Person) -> None:
    """async with log.effect(..., approval=...) asks, then runs once under the grant."""
    ran: list[str] = []

    async def refund() -> None:
        async with log.effect(
            "refund", args={"amount": 150}, kind=IRREVERSIBLE, approval=POLICY
        ) as call:
            ran.append(call.effect_id)

    with pytest.raises(ApprovalPending) as raised:
        asyncio.run(refund())
    person.approve(log.run_id, raised.value.approval_id)
    asyncio.run(refund())
    with pytest.raises(ApprovalPending):
        asyncio.run(refund())
    assert ran == [raised.value.effect_id]


def test_a_gated_claim_carries_the_reserved_effect_id(log: EffectLog, person: Person) -> None:
    """log.claim(approval=...) asks, then claims under the grant with the effect id it reserved."""
    op = fx.OperationRef("refund", "payments/1", fx.args_digest({"amount": 150}))

    def claim(effect_id: str) -> fx.EffectClaim:
        return log.claim(
            effect_id=effect_id,
            action_id="a1",
            operation=op,
            impact_scope=[LEDGER_ACCOUNT.to_ref("target")],
            kind=IRREVERSIBLE,
            approval=POLICY,
        )

    with pytest.raises(ApprovalPending) as raised:
        claim("e1")
    assert raised.value.effect_id == "e1"
    person.approve(log.run_id, raised.value.approval_id)
    made = claim("e2")
    assert (made.effect_id, made.approval_id) == ("e1", raised.value.approval_id)
    with pytest.raises(ApprovalPending):
        claim("e3")


def test_the_lock_is_not_held_while_a_thread_waits_for_a_person(log: EffectLog) -> None:
    """ApprovalPending returns at once: the log serves other threads, nothing waits on the gate."""
    asked = Refunds(log).pending()
    done = threading.Event()

    def other() -> None:
        with log.effect("note", args={}, kind=fx.EffectKind.READ):
            pass
        done.set()

    thread = threading.Thread(target=other)
    thread.start()
    thread.join(timeout=CHILD_TIMEOUT)
    assert done.is_set()
    assert log.approvals()[0].approval_id == asked.approval_id
