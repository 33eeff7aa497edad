"""Approvals under attack from the plain ``sqlite3`` module, as a user of the shell would.

The store is test_schema's template: a run with approval requests for refund (granted by
another process, then claimed under its grant), wipe (denied), send (granted, unused),
mail (pending) and late (expired unanswered). The attacks:

- rows the schema refuses outright: a malformed request or decision (CHECK constraints),
  a decision for an unknown request, a second one, one after expiry by the store's
  clock, one written by the process that asked; a claim under an approval that is not
  granted, denied, expired, already used or for another effect; a key rewritten with
  ``INSERT OR REPLACE``;
- forged rows that the dropped guard alone stood against, chained exactly as the library
  chains them (``sha3`` registered as the stock shell has it, every other guard in
  place): ``EffectLog.load`` refuses the run and ``ledger verify`` names the approval
  and what is wrong with it. A claim whose call differs from the one approved needs no
  guard dropped (the store cannot compute an action digest): verify and load catch it.
"""

from __future__ import annotations

import dataclasses
import json
import re
import sqlite3
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from ledger import _chain
from ledger import effects as fx
from ledger.effect_log import EffectLog, EffectPersistenceError
from ledger.sqlite.rows import chain_hash, rows_of
from ledger.sqlite.schema import RECORD_TABLES
from tests.builders import ledger, op, sha
from tests.sqlite.driver import drop_changed_guards, drop_guards, query
from tests.sqlite.test_schema import (  # noqa: F401 - template and built are fixtures
    APPROVAL_DECISION,
    APPROVAL_REQUEST,
    ELSEWHERE,
    NEXT,
    TS,
    Built,
    attacker,
    built,
    insert,
    row,
    snapshot,
    template,
)

LATER = "2999-06-01T00:00:00.000000+00:00"


@pytest.fixture
def store(request: pytest.FixtureRequest) -> Built:
    """A private copy of test_schema's template store (its ``built`` fixture)."""
    copy: Built = request.getfixturevalue("built")
    return copy


def _id(store: Built, tool: str) -> str:
    return store.approvals[tool].approval_id


def _effect(store: Built, tool: str) -> str:
    return store.approvals[tool].effect_id


def _requester(store: Built, tool: str) -> dict[str, Any]:
    """The process that asked for ``tool``'s approval (this test process)."""
    ((found),) = query(
        store.path,
        "SELECT os_user, host, program, pid FROM approval_requests"
        " WHERE run_id = ? AND approval_id = ?",
        (store.run_id, _id(store, tool)),
    )
    return dict(zip(("os_user", "host", "program", "pid"), found, strict=True))


def _claim(store: Built, tool: str, **overrides: Any) -> dict[str, Any]:
    """A claim row made under ``tool``'s approval, of the effect its request reserved."""
    values = {"effect_id": _effect(store, tool), "approval_id": _id(store, tool), **overrides}
    return row(store, "claims", **values)


# --------------------------------------------------------------------------- CHECK constraints


@pytest.mark.parametrize(
    ("table", "overrides", "constraint"),
    [
        ("approval_decisions", {"decision": "approved"}, "decision"),
        ("approval_decisions", {"decision": "GRANTED"}, "decision"),
        ("approval_decisions", {"decision": ""}, "decision"),
        ("approval_decisions", {"source": "email"}, "source"),
        ("approval_decisions", {"source": "COMMAND"}, "source"),
        ("approval_decisions", {"decided_by": ""}, "decided_by"),
        ("approval_decisions", {"decided_by": "x" * 201}, "decided_by"),
        ("approval_decisions", {"pid": 0}, "pid"),
        ("approval_decisions", {"hash": "F" * 64}, "hash"),
        ("approval_requests", {"action_digest": sha(b"x").upper()}, "action_digest"),
        ("approval_requests", {"action_digest": sha(b"x")[:63]}, "action_digest"),
        ("approval_requests", {"expires_at": TS}, "expires_at"),
        ("approval_requests", {"expires_at": "2023-01-01T00:00:00.000000+00:00"}, "expires_at"),
        ("approval_requests", {"approval_id": ""}, "approval_id"),
        ("approval_requests", {"effect_id": "x" * 201}, "effect_id"),
        ("approval_requests", {"operation": ""}, "operation"),
        ("approval_requests", {"pid": -1}, "pid"),
        ("approval_requests", {"prev_hash": "g" * 64}, "prev_hash"),
    ],
)
def test_a_malformed_approval_row_fails_its_check(
    store: Built, table: str, overrides: dict[str, Any], constraint: str
) -> None:
    """An unknown decision or source word, or a malformed value, fails its named CHECK."""
    with attacker(store) as conn:
        before = snapshot(conn, table)
        with pytest.raises(
            sqlite3.IntegrityError, match=f"CHECK constraint failed: ck_{table}_{constraint}$"
        ):
            insert(conn, table, **row(store, table, **overrides))
        assert snapshot(conn, table) == before


# --------------------------------------------------------------------------- decisions


def test_a_decision_answers_a_request_of_the_run(store: Built) -> None:
    """A decision for no request, or before its request, is refused."""
    with attacker(store) as conn:
        before = snapshot(conn, "approval_decisions")
        with pytest.raises(sqlite3.IntegrityError, match="must come after its request"):
            insert(conn, "approval_decisions", **row(store, "approval_decisions", approval_id="q0"))
        # A request written after the decision that would answer it.
        insert(conn, "approval_requests", **row(store, "approval_requests", seq=NEXT + 1))
        with pytest.raises(sqlite3.IntegrityError, match="must come after its request"):
            insert(conn, "approval_decisions", **row(store, "approval_decisions", approval_id="q9"))
        assert snapshot(conn, "approval_decisions") == before


@pytest.mark.parametrize("verb", ["INSERT", "INSERT OR REPLACE", "REPLACE"])
@pytest.mark.parametrize(("tool", "decision"), [("refund", "denied"), ("wipe", "granted")])
def test_a_request_is_decided_once(store: Built, verb: str, tool: str, decision: str) -> None:
    """A second decision, inserted or put in the first one's place, is refused."""
    values = row(store, "approval_decisions", approval_id=_id(store, tool), decision=decision)
    with attacker(store) as conn:
        before = snapshot(conn, "approval_decisions")
        with pytest.raises(
            sqlite3.IntegrityError, match="append-only, that approval is already decided"
        ):
            insert(conn, "approval_decisions", verb, **values)
        assert snapshot(conn, "approval_decisions") == before


@pytest.mark.parametrize("decided_at", [TS, LATER])
def test_a_decision_after_expiry_by_the_store_clock_is_refused(
    store: Built, decided_at: str
) -> None:
    """late expired by the store's clock: an answer is refused, even one dated before."""
    values = row(store, "approval_decisions", approval_id=_id(store, "late"), decided_at=decided_at)
    with attacker(store) as conn:
        before = snapshot(conn, "approval_decisions")
        with pytest.raises(sqlite3.IntegrityError, match="has expired, an answer to it is refused"):
            insert(conn, "approval_decisions", **values)
        assert snapshot(conn, "approval_decisions") == before


def test_a_decision_dated_after_the_expiry_it_names_is_refused(store: Built) -> None:
    """Not yet expired by the clock, but the answer's own time is after the expiry."""
    with attacker(store) as conn:
        insert(
            conn,
            "approval_requests",
            **row(store, "approval_requests", expires_at="2999-01-01T00:00:00.000000+00:00"),
        )
        with pytest.raises(sqlite3.IntegrityError, match="has expired, an answer to it is refused"):
            insert(
                conn,
                "approval_decisions",
                **row(
                    store, "approval_decisions", seq=NEXT + 1, approval_id="q9", decided_at=LATER
                ),
            )


@pytest.mark.parametrize("source", ["command", "program"])
def test_the_requesting_process_cannot_decide(store: Built, source: str) -> None:
    """A decision written by the host and pid that asked is refused, whatever name it gives."""
    asker = _requester(store, "mail")
    values = row(
        store, "approval_decisions", approval_id=_id(store, "mail"), source=source, **asker
    )
    with attacker(store) as conn:
        before = snapshot(conn, "approval_decisions")
        with pytest.raises(sqlite3.IntegrityError, match="not decided by the process that made it"):
            insert(conn, "approval_decisions", **values)
        # The same pid on another host is another process.
        insert(conn, "approval_decisions", **{**values, "host": "elsewhere"})
        assert len(snapshot(conn, "approval_decisions")) == len(before) + 1


def test_an_mcp_clients_answer_relayed_by_the_asking_proxy_is_accepted(store: Built) -> None:
    """The one exception: an answer the asking proxy relays from its MCP client."""
    asker = _requester(store, "mail")
    values = row(
        store, "approval_decisions", approval_id=_id(store, "mail"), source="elicitation", **asker
    )
    with attacker(store) as conn:
        insert(conn, "approval_decisions", **values)
        assert (store.run_id, _id(store, "mail")) in {
            (r[0], r[2]) for r in snapshot(conn, "approval_decisions")
        }


# --------------------------------------------------------------------------- requests


@pytest.mark.parametrize("verb", ["INSERT", "INSERT OR REPLACE", "REPLACE"])
@pytest.mark.parametrize("taken", ["approval_id", "effect_id"])
def test_a_request_key_is_not_rewritten(store: Built, verb: str, taken: str) -> None:
    """A request with a taken approval id, or reserving a reserved effect, is refused."""
    value = _id(store, "refund") if taken == "approval_id" else _effect(store, "mail")
    with attacker(store) as conn:
        before = snapshot(conn, "approval_requests")
        with pytest.raises(
            sqlite3.IntegrityError, match="append-only, that approval_id or effect_id is already"
        ):
            insert(
                conn, "approval_requests", verb, **row(store, "approval_requests", **{taken: value})
            )
        assert snapshot(conn, "approval_requests") == before


@pytest.mark.parametrize("verb", ["INSERT", "INSERT OR REPLACE"])
@pytest.mark.parametrize("table", ["approval_requests", "approval_decisions"])
def test_an_approval_record_at_a_taken_seq_is_refused(store: Built, verb: str, table: str) -> None:
    """A seq held by any record of the run (here the refund claim's) is not taken over."""
    values = row(store, table, seq=NEXT - 1)
    with attacker(store) as conn:
        before = snapshot(conn, table)
        with pytest.raises(sqlite3.IntegrityError, match="that seq is already recorded in the run"):
            insert(conn, table, verb, **values)
        assert snapshot(conn, table) == before


def test_a_request_needs_its_run_and_an_unclaimed_effect(store: Built) -> None:
    """A request of no run, or reserving an effect already claimed, is refused."""
    with attacker(store) as conn:
        with pytest.raises(sqlite3.IntegrityError, match="rows need their run in runs"):
            insert(conn, "approval_requests", **row(store, "approval_requests", run_id="f" * 32))
        with pytest.raises(sqlite3.IntegrityError, match="reserves an effect id no claim has"):
            insert(conn, "approval_requests", **row(store, "approval_requests", effect_id="e1"))


# --------------------------------------------------------------------------- claims


@pytest.mark.parametrize(
    ("tool", "effect", "message"),
    [
        ("mail", None, "needs that approval granted for its effect before it"),  # pending
        ("wipe", None, "needs that approval granted for its effect before it"),  # denied
        ("late", None, "has expired by the store clock, a claim under it is refused"),
        ("send", "e9", "needs that approval granted for its effect before it"),  # another effect
        ("refund", None, "already used by a claim, an approval is used once"),  # used
        ("nobody", "e9", "needs that approval granted for its effect before it"),  # unknown
    ],
)
def test_a_claim_under_an_approval_that_does_not_authorize_it_is_refused(
    store: Built, tool: str, effect: str | None, message: str
) -> None:
    """Only a granted, unused approval of that very effect lets a claim carry it."""
    if tool == "nobody":
        values = row(store, "claims", effect_id="e9", approval_id="nobody")
    else:
        values = _claim(store, tool, **({} if effect is None else {"effect_id": effect}))
    with attacker(store) as conn:
        before = snapshot(conn, "claims")
        with pytest.raises(sqlite3.IntegrityError, match=message):
            insert(conn, "claims", **values)
        assert snapshot(conn, "claims") == before


@pytest.mark.parametrize("verb", ["INSERT OR REPLACE", "REPLACE"])
def test_a_used_approval_is_not_taken_over_by_replace(store: Built, verb: str) -> None:
    """Refund's claim, replaced by one of its effect and approval: refused, the row kept."""
    values = _claim(store, "refund", action_id="a-other")
    with attacker(store) as conn:
        before = snapshot(conn, "claims")
        with pytest.raises(sqlite3.IntegrityError, match="an approval is used once"):
            insert(conn, "claims", verb, **values)
        assert snapshot(conn, "claims") == before


def test_a_claim_under_a_granted_unused_approval_of_its_effect_is_accepted(store: Built) -> None:
    """The control: send's grant, for send's effect, lets one claim through, and one only."""
    with attacker(store) as conn:
        insert(conn, "claims", **_claim(store, "send"))
        with pytest.raises(sqlite3.IntegrityError, match="an approval is used once"):
            insert(conn, "claims", **_claim(store, "send", seq=NEXT + 1))


def test_a_grant_slipped_past_its_expiry_guard_authorizes_no_claim(store: Built) -> None:
    """A grant of a request already expired by the store's clock does not let a claim in."""
    expired = "2025-01-01T00:00:00.000000+00:00"
    with attacker(store) as conn:
        insert(conn, "approval_requests", **row(store, "approval_requests", expires_at=expired))
        drop_guards(conn, "approval_decisions_guard_expired")
        insert(
            conn,
            "approval_decisions",
            **row(store, "approval_decisions", seq=NEXT + 1, approval_id="q9"),
        )
        with pytest.raises(sqlite3.IntegrityError, match="has expired by the store clock"):
            insert(
                conn,
                "claims",
                **row(store, "claims", seq=NEXT + 2, effect_id="e-q9", approval_id="q9"),
            )


def test_the_unique_index_is_a_backstop_to_the_use_once_guard(store: Built) -> None:
    """With the claim guards dropped, uq_claims_approval still refuses a second use."""
    with attacker(store) as conn:
        drop_guards(conn, "claims_guard_approval_used", "claims_guard_approval")
        with pytest.raises(
            sqlite3.IntegrityError,
            match=r"^UNIQUE constraint failed: claims\.run_id, claims\.approval_id$",
        ):
            insert(conn, "claims", **_claim(store, "refund", effect_id="e9"))


# --------------------------------------------------------------------------- forgeries


def _now(offset: timedelta = timedelta(0)) -> str:
    return (datetime.now(UTC) + offset).isoformat(timespec="microseconds")


def _hash_at(conn: sqlite3.Connection, run_id: str, seq: int) -> str:
    union = " UNION ALL ".join(
        f"SELECT hash FROM {t} WHERE run_id = ? AND seq = ?" for t in RECORD_TABLES
    )
    ((found,),) = conn.execute(union, (run_id, seq) * len(RECORD_TABLES)).fetchall()
    return str(found)


def _forge(store: Built, record: Any, *guards: str) -> None:
    """Insert ``record`` at the run's end, chained as the library chains it.

    Only ``guards`` are dropped: the hash guard recomputes the hash with the shell's
    ``sha3()`` and the link guard checks ``prev_hash``, so the row is what a writer that
    knows the chain would write. The changed triggers are dropped on leaving (the
    library puts them back on its next write).
    """
    conn = sqlite3.connect(store.path, isolation_level=None)
    conn.create_function("sha3", 2, _chain.sha3)  # as the stock shell has it
    try:
        drop_guards(conn, *guards)
        prev = _hash_at(conn, store.run_id, record.seq - 1)
        values, _, _ = rows_of(store.run_id, record)
        table = {"claim": "claims", "approval_decision": "approval_decisions"}
        insert(
            conn,
            table[record.record_type],
            **values,
            prev_hash=prev,
            hash=chain_hash(store.run_id, record, prev),
        )
        drop_changed_guards(conn)
    finally:
        conn.close()


def _decision(store: Built, tool: str, **fields: Any) -> fx.ApprovalDecision:
    values: dict[str, Any] = {
        "approval_id": _id(store, tool),
        "seq": NEXT,
        "decision": "granted",
        "by": "alice",
        "decided_at": _now(),
        "source": fx.ApprovalSource.COMMAND,
        **ELSEWHERE,
        "note": "",
    }
    return fx.ApprovalDecision(**{**values, **fields})


def _claimed(store: Built, tool: str, **fields: Any) -> fx.EffectClaim:
    """The template's refund claim, made again at NEXT under ``tool``'s approval."""
    with EffectLog.load(store.run_id, store.directory) as log:
        refund = log.history().claim(_effect(store, "refund"))
    effect_id = fields.pop("effect_id", _effect(store, tool))
    values = {
        "seq": NEXT,
        "effect_id": effect_id,
        "action_id": f"a-{tool}",
        "operation": op(tool, tool.encode()),
        "idempotency_key": fx.idempotency_key(store.run_id, effect_id),
        "approval_id": _id(store, tool),
        "recorded_at": _now(),
    }
    return dataclasses.replace(refund, **{**values, **fields})


@dataclasses.dataclass(frozen=True)
class Forgery:
    """A forged record, the guards it needs dropped, and what verify must say of it."""

    record: Any
    guards: tuple[str, ...]
    says: str


def _forgeries(store: Built) -> Iterator[tuple[str, Forgery]]:
    mail, late, wipe = _id(store, "mail"), _id(store, "late"), _id(store, "wipe")
    yield (
        "decided-by-the-requester",
        Forgery(
            _decision(store, "mail", **_requester(store, "mail")),
            ("approval_decisions_guard_self",),
            f"approval '{mail}' is decided at seq {NEXT} by the process that asked for it",
        ),
    )
    yield (
        "decided-after-expiry",
        Forgery(
            _decision(store, "late"),
            ("approval_decisions_guard_expired",),
            rf"approval '{late}' is decided at seq {NEXT} \(at .*\), after it expired at",
        ),
    )
    yield (
        "claimed-under-a-denial",
        Forgery(
            _claimed(store, "wipe"),
            ("claims_guard_approval",),
            f"claimed at seq {NEXT} under approval '{wipe}', which was denied",
        ),
    )
    yield (
        "claimed-under-a-pending-request",
        Forgery(
            _claimed(store, "mail"),
            ("claims_guard_approval",),
            f"claimed at seq {NEXT} under approval '{mail}', which is not decided before it",
        ),
    )
    yield (
        "claimed-for-another-effect",
        Forgery(
            _claimed(store, "send", effect_id="e9"),
            ("claims_guard_approval",),
            f"claimed at seq {NEXT} under approval '{_id(store, 'send')}', which was asked for effect",
        ),
    )
    # No guard dropped: the store cannot compute the digest of the call it is shown.
    yield (
        "another-call-than-approved",
        Forgery(
            _claimed(store, "send", operation=op("send", b"to someone else")),
            (),
            f"claimed at seq {NEXT} under approval '{_id(store, 'send')}', which was asked for another "
            r"call \(the action digests differ\)",
        ),
    )


FORGERIES = (
    "decided-by-the-requester",
    "decided-after-expiry",
    "claimed-under-a-denial",
    "claimed-under-a-pending-request",
    "claimed-for-another-effect",
    "another-call-than-approved",
)


@pytest.mark.parametrize("name", FORGERIES)
def test_verify_names_a_forged_approval_record_and_why(store: Built, name: str) -> None:
    """A chained forgery the dropped guard stood against: load refuses, verify names it."""
    forgery = dict(_forgeries(store))[name]
    _forge(store, forgery.record, *forgery.guards)
    with pytest.raises(EffectPersistenceError, match=forgery.says):
        EffectLog.load(store.run_id, store.directory)
    done = ledger("verify", "--json", "--store", str(store.directory))
    assert done.returncode == 1, done.stdout + done.stderr
    problems = json.loads(done.stdout)["problems"]
    assert len(problems) == 1, problems
    assert problems[0].startswith(f"run {store.run_id}:")
    assert re.search(forgery.says, problems[0]), problems


def test_the_forgeries_need_no_more_than_their_guard(store: Built) -> None:
    """The control: the same writer's honest answer, chained alike, loads and verifies."""
    _forge(store, _decision(store, "mail"))
    with EffectLog.load(store.run_id, store.directory) as log:
        (view,) = [v for v in log.approvals() if v.approval_id == _id(store, "mail")]
        assert (view.state, view.decision and view.decision.by) == ("granted", "alice")
    done = ledger("verify", "--store", str(store.directory))
    assert done.returncode == 0, done.stdout + done.stderr
