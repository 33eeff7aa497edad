"""Approvals in the pure layer: the action digest, the records, their state, the run's rules.

What a person approves is one :func:`fx.action_digest`: every part of a call its claim
will say changes it, and nothing else does. A request's state is a function of its
answer, its use and the store's time; an unanswered request past its expiry is
``expired``, never an answer. ``fx.check_history`` (what load, verify and import hold a
run to) refuses a history whose approvals break the rules: a decision after expiry, by
the asking process, twice; a claim under an approval not granted before it, for another
call, or used twice.
"""

from __future__ import annotations

import dataclasses
from datetime import timedelta
from typing import Any

import pytest

from ledger import effects as fx
from tests.builders import fs_ref, sha

RUN = "0123456789abcdef0123456789abcdef"
T0 = "2026-01-01T00:00:00.000000+00:00"
T1 = "2026-01-01T00:00:01.000000+00:00"
T2 = "2026-01-01T00:00:02.000000+00:00"
EXPIRES = "2026-01-01T01:00:00.000000+00:00"
LATER = "2026-01-01T02:00:00.000000+00:00"
A, B = fs_ref("/w/a.txt"), fs_ref("/w/b.txt")
WORKER = {"os_user": "agent", "host": "box", "program": "worker.py", "pid": 100}
PERSON = {"os_user": "alice", "host": "desk", "program": "ledger approve", "pid": 200}


def claim(**change: Any) -> fx.EffectClaim:
    """A refund's claim; ``change`` replaces any of its fields."""
    fields: dict[str, Any] = {
        "effect_id": "e1",
        "seq": 3,
        "action_id": "a1",
        "operation": fx.OperationRef("refund", "payments/1", sha(b'{"amount":150}')),
        "impact_scope": (A,),
        "obligations": (fx.Postcondition(A, fx.Predicate.EXISTS),),
        "recorded_at": T2,
        "kind": fx.EffectKind.IRREVERSIBLE,
        "idempotency_key": fx.idempotency_key(RUN, "e1"),
        "args": {"amount": 150},
        "approval_id": "ap1",
    }
    return fx.EffectClaim(**(fields | change))


def request(**change: Any) -> fx.ApprovalRequest:
    """The request the refund's claim was asked under."""
    fields: dict[str, Any] = {
        "approval_id": "ap1",
        "seq": 1,
        "effect_id": "e1",
        "action_digest": fx.action_digest(claim()),
        "operation": "refund",
        "requested_at": T0,
        "expires_at": EXPIRES,
        "args": {"amount": 150},
        "reason": "refunds over 100",
        **WORKER,
    }
    return fx.ApprovalRequest(**(fields | change))


def decision(**change: Any) -> fx.ApprovalDecision:
    """A person's grant of the request."""
    fields: dict[str, Any] = {
        "approval_id": "ap1",
        "seq": 2,
        "decision": "granted",
        "by": "alice",
        "decided_at": T1,
        "source": fx.ApprovalSource.COMMAND,
        "note": "ok",
        **PERSON,
    }
    return fx.ApprovalDecision(**(fields | change))


# --------------------------------------------------------------------------- the action digest

CHANGES = {
    "operation name": {
        "operation": fx.OperationRef("refund2", "payments/1", sha(b'{"amount":150}'))
    },
    "operation backend": {
        "operation": fx.OperationRef("refund", "payments/2", sha(b'{"amount":150}'))
    },
    "arguments": {"operation": fx.OperationRef("refund", "payments/1", sha(b'{"amount":151}'))},
    "kind": {"kind": fx.EffectKind.WRITE},
    "impact scope": {"impact_scope": (B,)},
    "a second resource": {"impact_scope": (A, B)},
    "a resource's role": {"impact_scope": (fs_ref("/w/a.txt", role="source"),)},
    "postcondition predicate": {"obligations": (fx.Postcondition(A, fx.Predicate.ABSENT),)},
    "postcondition dropped": {"obligations": ()},
    "postcondition digest": {
        "obligations": (fx.Postcondition(A, fx.Predicate.SHA256, sha(b"x")),),
    },
}


@pytest.mark.parametrize("change", CHANGES.values(), ids=CHANGES.keys())
def test_every_part_of_the_call_a_claim_says_changes_the_digest(change: dict[str, Any]) -> None:
    """A call that differs from the approved one in any part its claim says has another digest."""
    assert fx.action_digest(claim(**change)) != fx.action_digest(claim())


SAME = {
    "effect id": {"effect_id": "e2", "idempotency_key": fx.idempotency_key(RUN, "e2")},
    "seq": {"seq": 9},
    "time": {"recorded_at": T0},
    "action id": {"action_id": "a9"},
    "step": {"step": "refund-step"},
    "approval": {"approval_id": None},
}


@pytest.mark.parametrize("change", SAME.values(), ids=SAME.keys())
def test_what_is_not_the_call_leaves_the_digest(change: dict[str, Any]) -> None:
    """The effect id, position, time, step and approval of a claim are not what is approved."""
    assert fx.action_digest(claim(**change)) == fx.action_digest(claim())


def test_the_digest_is_sha256_hex_and_stable() -> None:
    """The digest is 64 lowercase hex characters, the same for equal calls."""
    digest = fx.action_digest(claim())
    assert len(digest) == 64
    assert digest == digest.lower()
    int(digest, 16)
    assert fx.action_digest(claim()) == digest


# --------------------------------------------------------------------------- the policy and records


@pytest.mark.parametrize(
    ("ttl", "error"),
    [
        (timedelta(0), ValueError),
        (timedelta(seconds=-1), ValueError),
        (timedelta(days=367), ValueError),
        (3600, TypeError),
    ],
)
def test_a_policy_needs_a_positive_ttl_of_at_most_a_year(ttl: Any, error: type[Exception]) -> None:
    """A ttl that is not a positive timedelta of at most 366 days is refused."""
    with pytest.raises(error):
        fx.ApprovalPolicy(ttl=ttl)


def test_the_records_round_trip_through_json() -> None:
    """A request and a decision come back equal from their dictionaries."""
    assert fx.ApprovalRequest.from_dict(request().to_dict()) == request()
    assert fx.ApprovalDecision.from_dict(decision().to_dict()) == decision()


@pytest.mark.parametrize(
    "change",
    [
        {"expires_at": T0},  # expires when asked
        {"action_digest": "00"},
        {"pid": 0},
        {"pid": "100"},
        {"os_user": ""},
    ],
)
def test_a_malformed_request_is_refused(change: dict[str, Any]) -> None:
    """A request that expires before it is made, or names no process, cannot be built."""
    with pytest.raises((ValueError, TypeError)):
        request(**change)


@pytest.mark.parametrize(
    "change",
    [{"decision": "expired"}, {"decision": "approved"}, {"by": ""}, {"source": "command"}],
)
def test_a_decision_is_granted_or_denied_by_someone(change: dict[str, Any]) -> None:
    """A decision other than granted or denied (expired above all), or by nobody, is refused."""
    with pytest.raises((ValueError, TypeError)):
        decision(**change)


# --------------------------------------------------------------------------- approval_state


def test_an_unanswered_request_is_pending_until_its_expiry_then_expired() -> None:
    """At its expiry to the microsecond, an unanswered request is expired, not pending."""
    assert fx.approval_state(request(), None, None, T1) == "pending"
    assert fx.approval_state(request(), None, None, EXPIRES) == "expired"
    assert fx.approval_state(request(), None, None, LATER) == "expired"


def test_an_answer_is_what_the_person_said_and_a_used_grant_is_used() -> None:
    """Granted, denied and used follow the answer and the claim, not the clock."""
    denied = decision(decision="denied")
    assert fx.approval_state(request(), decision(), None, T2) == "granted"
    assert fx.approval_state(request(), decision(), "e1", T2) == "used"
    assert fx.approval_state(request(), denied, None, T2) == "denied"
    assert fx.approval_state(request(), denied, None, LATER) == "denied"
    assert fx.approval_state(request(), decision(), "e1", LATER) == "used"


# --------------------------------------------------------------------------- the run's rules


def history(
    requests: tuple[fx.ApprovalRequest, ...] = (),
    decisions: tuple[fx.ApprovalDecision, ...] = (),
    claims: tuple[fx.EffectClaim, ...] = (),
) -> fx.History:
    return fx.History(claims=claims, approval_requests=requests, approval_decisions=decisions)


def test_a_grant_then_its_claim_is_a_valid_run() -> None:
    """Request, grant, claim under it: the rules hold."""
    fx.check_history(history((request(),), (decision(),), (claim(),)))


def test_an_expired_request_with_no_decision_is_a_valid_run() -> None:
    """Expiry writes nothing: a run whose request was never answered is whole."""
    fx.check_history(history((request(),)))


BROKEN = {
    "decided after expiry": (
        (request(),),
        (decision(decided_at=EXPIRES),),
        (),
        "after it expired",
    ),
    "decided by the asking process": (
        (request(),),
        (decision(**(WORKER | {"program": "ledger approve"})),),
        (),
        "process that asked",
    ),
    "decided twice": (
        (request(),),
        (decision(), decision(seq=3, decision="denied")),
        (),
        "decided twice",
    ),
    "decided before asked": (
        (request(seq=2),),
        (decision(seq=1),),
        (),
        "not requested before",
    ),
    "claimed with no decision": ((request(),), (), (claim(seq=2),), "not decided before"),
    "claimed under a denial": (
        (request(),),
        (decision(decision="denied"),),
        (claim(),),
        "denied",
    ),
    "claimed under a grant for another call": (
        (request(action_digest=fx.action_digest(claim(kind=fx.EffectKind.WRITE))),),
        (decision(),),
        (claim(),),
        "digests differ",
    ),
    "claimed for another effect": (
        (request(effect_id="e9"),),
        (decision(),),
        (claim(),),
        "asked for effect",
    ),
    "one grant used twice": (
        (request(),),
        (decision(),),
        (
            claim(),
            claim(
                seq=4, effect_id="e2", action_id="a2", idempotency_key=fx.idempotency_key(RUN, "e2")
            ),
        ),
        "an approval is used once",
    ),
}


@pytest.mark.parametrize(
    ("requests", "decisions", "claims", "words"), BROKEN.values(), ids=BROKEN.keys()
)
def test_a_run_that_breaks_an_approval_rule_is_refused(
    requests: tuple[fx.ApprovalRequest, ...],
    decisions: tuple[fx.ApprovalDecision, ...],
    claims: tuple[fx.EffectClaim, ...],
    words: str,
) -> None:
    """check_history names the approval rule a run breaks."""
    with pytest.raises(ValueError, match=words):
        fx.check_history(history(requests, decisions, claims))


def test_an_elicited_answer_may_come_from_the_asking_process() -> None:
    """The MCP proxy asks its client and records the client's answer from its own process."""
    relayed = decision(source=fx.ApprovalSource.ELICITATION, by="claude-desktop", **WORKER)
    fx.check_history(history((request(),), (relayed,), (claim(),)))


def test_a_view_reads_its_request() -> None:
    """An ApprovalView's id, digest, effect and expiry are its request's."""
    view = fx.ApprovalView(RUN, request(), decision(), "granted")
    assert (view.approval_id, view.action_digest, view.effect_id, view.expires_at) == (
        "ap1",
        request().action_digest,
        "e1",
        EXPIRES,
    )
    assert view.to_dict()["decision"] == decision().to_dict()
    assert dataclasses.replace(view, decision=None).to_dict()["decision"] is None
