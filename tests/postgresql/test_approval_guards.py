"""The approval guards on PostgreSQL: what psql may not insert, as SQLite's shell may not.

One run (tests.builders.write_five_approvals: refund granted and claimed under its
grant, wipe denied, send granted and unused, mail pending, late expired unanswered) is
written once; each attack is one transaction on a plain psycopg connection as the
store's owner, rolled back afterwards. Every attacking row extends the run's chain
(PostgreSQL checks the link; it has no ``sha3()`` to check the hash), so that only the
guard under test can refuse it, with the words SQLite uses (``ledger._sql.guards``).
Then forgeries the owner slips past one guard (switched off for the insert), chained and
hashed as the library would: ``load`` refuses the run and ``ledger verify`` names the
approval, the seq and what is wrong.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

from ledger._sql.rows import chain_hash, rows_of
from ledger.effect_log import EffectLog, EffectPersistenceError, new_run_id
from ledger.effects import ApprovalDecision, ApprovalSource, idempotency_key, utc_now
from tests.builders import Approval, ledger, op, sha, write_five_approvals
from tests.postgresql import driver
from tests.postgresql.server import server

RECORD_TABLES = (
    "claims",
    "outcomes",
    "observations",
    "resolutions",
    "approval_requests",
    "approval_decisions",
)
TS = "2024-01-01T00:00:00.000000+00:00"
ASKER = {"os_user": "worker", "host": "box", "program": "agent", "pid": 777}
ELSEWHERE = {"os_user": "alice", "host": "desk", "program": "ledger approve", "pid": 4242}
REQUEST = {
    "approval_id": "q9",
    "effect_id": "e-q9",
    "action_digest": sha(b"the call"),
    "operation": "refund",
    "step": "",
    "args": None,
    "reason": "",
    "requested_at": TS,
    "expires_at": "2999-01-01T00:00:00.000000+00:00",
    **ASKER,
}
DECISION = {
    "decision": "granted",
    "decided_by": "alice",
    "note": "",
    "decided_at": TS,
    "source": "command",
    **ELSEWHERE,
}


@dataclasses.dataclass(frozen=True)
class Store:
    url: str
    run_id: str
    approvals: dict[str, Approval]
    next: int  # the run's next free seq
    head: str  # the hash of its last record
    claim: dict[str, Any]  # refund's claim row, a model for others


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Store]:
    with pytest.MonkeyPatch.context() as mp:  # nothing here may reach the user's store
        mp.setenv("LEDGER_DIR", str(tmp_path_factory.mktemp("default") / "ledger"))
        mp.delenv("LEDGER_URL", raising=False)
        # A database of this module's own: those of new_database() go after each test.
        name = f"ledger_approvals_{os.getpid()}"
        with server().connect(autocommit=True) as admin:
            admin.execute(f"CREATE DATABASE {name} TEMPLATE template0")
        url = server().url(name)
        run_id = new_run_id()
        with EffectLog(run_id, url) as log:
            log.claim(effect_id="e1", action_id="a1", operation=op(), impact_scope=[])
        approvals, last = write_five_approvals(run_id, url)
        with driver.connect(url) as conn, conn.cursor(row_factory=psycopg.rows.dict_row) as cur:
            cur.execute("SELECT * FROM claims WHERE run_id = %s AND seq = %s", (run_id, last))
            claim = cur.fetchone()
        assert claim is not None
        try:
            yield Store(url, run_id, approvals, last + 1, claim["hash"], dict(claim))
        finally:
            with server().connect(autocommit=True) as admin:
                admin.execute(f"DROP DATABASE {name} WITH (FORCE)")


def _id(store: Store, tool: str) -> str:
    return store.approvals[tool].approval_id


def _effect(store: Store, tool: str) -> str:
    return store.approvals[tool].effect_id


def _row(store: Store, table: str, **overrides: Any) -> dict[str, Any]:
    """A row of ``table`` at the run's end, chained to its last record."""
    base: dict[str, Any] = {"run_id": store.run_id, "seq": store.next, "prev_hash": store.head}
    if table == "approval_requests":
        base |= REQUEST
    elif table == "approval_decisions":
        base |= DECISION | {"approval_id": _id(store, "mail")}
    else:
        base |= {k: v for k, v in store.claim.items() if k not in ("seq", "prev_hash")}
        base |= {"effect_id": "e9", "approval_id": None, "traceparent": None}
    base["hash"] = "f" * 64
    return base | overrides


def _claim(store: Store, tool: str, **overrides: Any) -> dict[str, Any]:
    """A claim row under ``tool``'s approval, of the effect its request reserved."""
    values = {"effect_id": _effect(store, tool), "approval_id": _id(store, tool), **overrides}
    return _row(store, "claims", **values)


def _insert(conn: psycopg.Connection, table: str, values: dict[str, Any]) -> None:
    columns = ", ".join(values)
    marks = ", ".join("%s" for _ in values)
    conn.execute(f"INSERT INTO {table} ({columns}) VALUES ({marks})", tuple(values.values()))


def _attack(store: Store, *rows: tuple[str, dict[str, Any]], refused: str | None) -> None:
    """Insert ``rows`` in one transaction, rolled back: the last is refused with ``refused``
    (a regular expression), or with ``None`` every row is accepted."""
    with driver.connect(store.url) as conn:
        try:
            *before, (table, values) = rows
            for earlier, earlier_values in before:
                _insert(conn, earlier, earlier_values)
            if refused is None:
                _insert(conn, table, values)
            else:
                with pytest.raises(psycopg.Error, match=refused):
                    _insert(conn, table, values)
        finally:
            conn.rollback()


# --------------------------------------------------------------------------- CHECK constraints


@pytest.mark.parametrize(
    ("table", "overrides", "constraint"),
    [
        ("approval_decisions", {"decision": "approved"}, "decision"),
        ("approval_decisions", {"decision": "GRANTED"}, "decision"),
        ("approval_decisions", {"source": "email"}, "source"),
        ("approval_decisions", {"decided_by": ""}, "decided_by"),
        ("approval_decisions", {"pid": 0}, "pid"),
        ("approval_requests", {"action_digest": sha(b"x").upper()}, "action_digest"),
        ("approval_requests", {"expires_at": TS}, "expires_at"),
        ("approval_requests", {"approval_id": ""}, "approval_id"),
        ("approval_requests", {"operation": ""}, "operation"),
    ],
)
def test_a_malformed_approval_row_fails_its_check(
    store: Store, table: str, overrides: dict[str, Any], constraint: str
) -> None:
    _attack(store, (table, _row(store, table, **overrides)), refused=f'"ck_{table}_{constraint}"')


def test_the_attack_rows_are_accepted_as_they_are(store: Store) -> None:
    """The control: each baseline row, and a claim under send's grant, is accepted."""
    for table in ("approval_requests", "approval_decisions"):
        _attack(store, (table, _row(store, table)), refused=None)
    _attack(store, ("claims", _claim(store, "send")), refused=None)


# --------------------------------------------------------------------------- decisions


@pytest.mark.parametrize(
    ("tool", "overrides", "message"),
    [
        ("nobody", {}, "an approval decision must come after its request"),
        ("refund", {"decision": "denied"}, "append-only, that approval is already decided"),
        ("wipe", {}, "append-only, that approval is already decided"),
        ("late", {}, "the approval request has expired, an answer to it is refused"),
        ("late", {"decided_at": "2999-06-01T00:00:00.000000+00:00"}, "has expired"),
    ],
)
def test_a_decision_the_guards_refuse(
    store: Store, tool: str, overrides: dict[str, Any], message: str
) -> None:
    approval_id = "nobody" if tool == "nobody" else _id(store, tool)
    values = _row(store, "approval_decisions", approval_id=approval_id, **overrides)
    _attack(store, ("approval_decisions", values), refused=message)


def test_a_decision_dated_after_the_expiry_it_names_is_refused(store: Store) -> None:
    request = _row(store, "approval_requests")
    decision = _row(
        store,
        "approval_decisions",
        seq=store.next + 1,
        prev_hash=request["hash"],
        approval_id="q9",
        decided_at="2999-06-01T00:00:00.000000+00:00",
    )
    _attack(
        store,
        ("approval_requests", request),
        ("approval_decisions", decision),
        refused="has expired, an answer to it is refused",
    )


@pytest.mark.parametrize("source", ["command", "program", "elicitation"])
def test_the_requesting_process_cannot_decide_unless_relaying_its_client(
    store: Store, source: str
) -> None:
    """Host and pid of the request's process: refused, but for an MCP client's answer."""
    ((os_user, host, program, pid),) = driver.POSTGRESQL.query(
        store.url,
        "SELECT os_user, host, program, pid FROM approval_requests WHERE approval_id = ?",
        (_id(store, "mail"),),
    )
    values = _row(
        store,
        "approval_decisions",
        source=source,
        os_user=os_user,
        host=host,
        program=program,
        pid=pid,
    )
    refused = None if source == "elicitation" else "not decided by the process that made it"
    _attack(store, ("approval_decisions", values), refused=refused)


# --------------------------------------------------------------------------- requests


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"approval_id": "refund"}, "that approval_id or effect_id is already requested"),
        ({"effect_id": "mail"}, "that approval_id or effect_id is already requested"),
        ({"effect_id": "e1"}, "reserves an effect id no claim has"),
        ({"seq": "taken"}, "that seq is already recorded in the run"),
    ],
)
def test_a_request_the_guards_refuse(store: Store, overrides: dict[str, Any], message: str) -> None:
    values = _row(store, "approval_requests")
    for key, value in overrides.items():
        if key == "seq":  # refund's claim's seq, linked as that claim is
            values |= {"seq": store.next - 1, "prev_hash": store.claim["prev_hash"]}
        elif value in store.approvals:
            values[key] = getattr(store.approvals[value], key)
        else:
            values[key] = value
    _attack(store, ("approval_requests", values), refused=message)


@pytest.mark.parametrize(
    "sql",
    [
        "UPDATE approval_requests SET reason = 'forged'",
        "UPDATE approval_decisions SET decision = 'denied'",
        "DELETE FROM approval_decisions",
        "DELETE FROM approval_requests",
        "TRUNCATE approval_decisions",
        (
            "INSERT INTO approval_decisions SELECT * FROM approval_decisions"
            " ON CONFLICT (run_id, seq) DO UPDATE SET decided_by = 'x'"
        ),
        "UPDATE claims SET approval_id = NULL WHERE approval_id IS NOT NULL",
    ],
)
def test_approval_history_is_append_only(store: Store, sql: str) -> None:
    with driver.connect(store.url) as conn:
        try:
            with pytest.raises(psycopg.Error, match="append-only"):
                conn.execute(sql)
        finally:
            conn.rollback()


# --------------------------------------------------------------------------- claims


@pytest.mark.parametrize(
    ("tool", "effect", "message"),
    [
        ("mail", None, "needs that approval granted for its effect before it"),  # pending
        ("wipe", None, "needs that approval granted for its effect before it"),  # denied
        ("late", None, "needs that approval granted|has expired by the store clock"),  # expired
        ("send", "e9", "needs that approval granted for its effect before it"),  # another effect
        ("refund", None, "already used by a claim, an approval is used once"),  # used
    ],
)
def test_a_claim_under_an_approval_that_does_not_authorize_it_is_refused(
    store: Store, tool: str, effect: str | None, message: str
) -> None:
    values = _claim(store, tool, **({} if effect is None else {"effect_id": effect}))
    _attack(store, ("claims", values), refused=message)


def test_a_grant_of_an_expired_request_authorizes_no_claim(store: Store) -> None:
    """A grant that reached the store past its guard does not let a claim in after expiry."""
    request = _row(store, "approval_requests", expires_at="2025-01-01T00:00:00.000000+00:00")
    grant = _row(
        store, "approval_decisions", seq=store.next + 1, prev_hash=request["hash"], approval_id="q9"
    )
    claim = _row(
        store,
        "claims",
        seq=store.next + 2,
        prev_hash=grant["hash"],
        effect_id="e-q9",
        approval_id="q9",
    )
    with driver.connect(store.url) as conn:
        try:
            _insert(conn, "approval_requests", request)
            # The owner switches the decision's guard off for its insert.
            conn.execute("ALTER TABLE approval_decisions DISABLE TRIGGER USER")
            _insert(conn, "approval_decisions", grant)
            conn.execute("ALTER TABLE approval_decisions ENABLE TRIGGER USER")
            with pytest.raises(psycopg.Error, match="has expired by the store clock"):
                _insert(conn, "claims", claim)
        finally:
            conn.rollback()


def test_the_store_still_verifies(store: Store) -> None:
    """Every attack was rolled back: the run is as the library wrote it."""
    done = ledger("verify", "--store", store.url)
    assert done.returncode == 0, done.stdout + done.stderr


# --------------------------------------------------------------------------- forgeries


def _forge(url: str, record: Any, guard: str | None) -> None:
    """As the owner: ``record`` inserted chained and hashed as the library would, with
    the one trigger ``guard`` switched off for the insert and on again after."""
    table = {"claim": "claims", "approval_decision": "approval_decisions"}[record.record_type]
    run_id = str(driver.POSTGRESQL.query(url, "SELECT run_id FROM runs")[0][0])
    prev = str(
        driver.POSTGRESQL.query(
            url, "SELECT hash FROM claims WHERE run_id = ? AND seq = ?", (run_id, record.seq - 1)
        )[0][0]
    )
    values, _, _ = rows_of(run_id, record)
    values |= {"prev_hash": prev, "hash": chain_hash(run_id, record, prev)}
    with driver.connect(url) as conn:
        if guard is not None:
            conn.execute(f"ALTER TABLE {table} DISABLE TRIGGER {guard}")
        _insert(conn, table, values)
        if guard is not None:
            conn.execute(f"ALTER TABLE {table} ENABLE TRIGGER {guard}")
        conn.commit()


@pytest.mark.parametrize(
    ("forgery", "guard", "says"),
    [
        (
            "decided-by-the-requester",
            "approval_decisions_guard_self",
            "approval '{mail}' is decided at seq {seq} by the process that asked for it",
        ),
        (
            "claimed-under-a-denial",
            "claims_guard_approval",
            "effect 'wipe-1' is claimed at seq {seq} under approval '{wipe}', which was denied",
        ),
        (
            "another-call-than-approved",
            None,
            r"claimed at seq {seq} under approval '{send}', which was asked for another call",
        ),
    ],
)
def test_verify_names_a_forged_approval_record_and_why(
    url: str, forgery: str, guard: str | None, says: str
) -> None:
    """A forgery the owner slipped past one guard, chained and hashed right: named."""
    run_id = new_run_id()
    with EffectLog(run_id, url) as log:
        log.claim(effect_id="e1", action_id="a1", operation=op(), impact_scope=[])
    approvals, last = write_five_approvals(run_id, url)
    with EffectLog.load(run_id, url) as log:
        refund = log.history().claim(approvals["refund"].effect_id)
        asker = log.history().approval_requests[0]
    seq, now = last + 1, utc_now()
    if forgery == "decided-by-the-requester":
        record: Any = ApprovalDecision(
            approval_id=approvals["mail"].approval_id,
            seq=seq,
            decision="granted",
            by="alice",
            decided_at=now,
            source=ApprovalSource.COMMAND,
            os_user=asker.os_user,
            host=asker.host,
            program="ledger approve",
            pid=asker.pid,
        )
    else:
        tool = "wipe" if forgery == "claimed-under-a-denial" else "send"
        effect_id = approvals[tool].effect_id
        record = dataclasses.replace(
            refund,
            seq=seq,
            effect_id=effect_id,
            action_id=f"a-{tool}",
            operation=op(tool, tool.encode() if tool == "wipe" else b"to someone else"),
            idempotency_key=idempotency_key(run_id, effect_id),
            approval_id=approvals[tool].approval_id,
            recorded_at=now,
        )
    _forge(url, record, guard)
    message = says.format(seq=seq, **{t: a.approval_id for t, a in approvals.items()})
    with pytest.raises(EffectPersistenceError, match=message):
        EffectLog.load(run_id, url)
    done = ledger("verify", "--json", "--store", url)
    assert done.returncode == 1, done.stdout + done.stderr
    (problem,) = json.loads(done.stdout)["problems"]
    assert problem.startswith(f"run {run_id}:")
    assert re.search(message, problem), problem
