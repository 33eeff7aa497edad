"""The schema defends itself against a forensic user holding the plain ``sqlite3`` module.

Each store is built through the library (``EffectLog``), closed, and then attacked
with ``sqlite3.connect(path)`` exactly as a user of the ``sqlite3`` shell would: no
library code in the attack and, unless a test says so, foreign keys left off (the
``sqlite3`` default). Whatever slips past the schema must make ``EffectLog.load``
fail closed.
"""

from __future__ import annotations

import contextlib
import json
import shutil
import sqlite3
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from ledger import _chain
from ledger import effects as fx
from ledger.effect_log import EffectLog, EffectPersistenceError, new_run_id
from ledger.sqlite.engine import _on_connect
from ledger.sqlite.rows import chain_hash
from ledger.sqlite.schema import APPEND_ONLY_TABLES, RECORD_TABLES
from ledger.sqlite.store import Store
from tests.builders import Approval, fs_ref, op, sha, write_five_approvals
from tests.sqlite.driver import drop_changed_guards, drop_guards

TS = "2024-01-01T00:00:00+00:00"
# Attack rows carry well-formed chain columns; the chain guard itself is dropped by
# attacker() so that each test reaches the constraint it is about (tamper tests check
# the chain).
CHAIN = {"prev_hash": "0" * 64, "hash": "f" * 64}
A = "/sandbox/a.txt"
D = "/sandbox/d.txt"

# Complete rows of each table, overridden field by field in the tests.
CLAIM = {
    "action_id": "a9",
    "operation": "write_file",
    "backend": "test/1",
    "args_sha256": sha(b"{}"),
    "scope_count": 0,
    "obligation_count": 0,
    "recorded_at": TS,
    "kind": "write",
    "idempotency_key": "0" * 32,
    "retry_of": None,
    "impact_scope": "[]",
    "obligations": "[]",
    **CHAIN,
}
OUTCOME = {
    "execution": "failed",
    "impact": "none",
    "execution_id": None,
    "replayed": 0,
    "recorded_at": TS,
    **CHAIN,
}
OBSERVATION = {
    "observation_id": "o9",
    "resource_kind": "fs",
    "resource_locator": "/sandbox/z",
    "resource_role": "target",
    "resource_revision": None,
    "mechanism": "filesystem_stat",
    "coverage": "complete",
    "source_action_id": "a9",
    "resource_exists": 1,
    "sha256": None,
    "revision": None,
    "recorded_at": TS,
    **CHAIN,
}
RESOLUTION = {"applied": 1, "resolved_by": "ops", "note": "", "recorded_at": TS, **CHAIN}
# A worker asking (not this process, whose are the template's requests), and a person's
# command answering: two processes other than this one.
ASKER = {"os_user": "worker", "host": "box", "program": "agent", "pid": 777}
ELSEWHERE = {"os_user": "alice", "host": "desk", "program": "ledger approve", "pid": 4242}
APPROVAL_REQUEST = {
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
    **CHAIN,
}
APPROVAL_DECISION = {
    "decision": "granted",
    "decided_by": "alice",
    "note": "",
    "decided_at": TS,
    "source": "command",
    **ELSEWHERE,
    **CHAIN,
}
SCOPE = {"kind": "fs", "locator": "/sandbox/z", "role": "target", "revision": None}
OBLIGATION = {
    "target_kind": "fs",
    "target_locator": "/sandbox/z",
    "target_role": "target",
    "target_revision": None,
    "predicate": "exists",
    "expected": None,
}


@dataclass(frozen=True)
class Built:
    """A closed store holding one small run, as the library wrote it.

    seq 1 claim e1 (scope [a.txt], obligation a.txt exists); seq 2 outcome e1
    reported_success/certain; seq 3 observation o1 of a.txt (exists); seq 4 claim
    e2 (scope [b, c]); seq 5 outcome e2 running/possible; seq 6 claim e3 (scope
    [d.txt], obligation d.txt exists); seq 7 resolution of e2 (not applied). Then the
    approvals (tests.builders.write_five_approvals): seqs 8 to 12 requests, by this process, for refund (granted at
    13 by another process), wipe (denied at 14), send (granted at 15, unused), mail
    (pending) and late (expired unanswered, its ttl a microsecond); seq 16 the claim of
    refund made under its grant, the run's last record. The next free seq is NEXT, 17.
    """

    directory: Path
    path: Path
    run_id: str
    approvals: dict[str, Approval]


NEXT = 17  # the template run's next free seq


@pytest.fixture(scope="session")
def template(tmp_path_factory: pytest.TempPathFactory) -> Built:
    """The store written once by the library, then closed; tests attack copies of it."""
    store_dir = tmp_path_factory.mktemp("template") / "store"
    run_id = new_run_id()
    a = fs_ref(A)
    with EffectLog(run_id, store_dir) as log:
        log.claim(
            effect_id="e1",
            action_id="a1",
            operation=op(),
            impact_scope=[a],
            obligations=[fx.Postcondition(a, fx.Predicate.EXISTS)],
        )
        log.outcome(
            effect_id="e1",
            execution=fx.ExecutionOutcome.REPORTED_SUCCESS,
            impact=fx.Impact.CERTAIN,
        )
        log.observe(
            observation_id="o1",
            resource=a,
            mechanism=fx.ObservationMechanism.FILESYSTEM_READ,
            coverage=fx.Coverage.COMPLETE,
            source_action_id="a2",
            exists=True,
            sha256=sha(b"content"),
        )
        log.claim(
            effect_id="e2",
            action_id="a3",
            operation=op("delete_file"),
            impact_scope=[fs_ref("/sandbox/b"), fs_ref("/sandbox/c")],
        )
        log.outcome(
            effect_id="e2", execution=fx.ExecutionOutcome.RUNNING, impact=fx.Impact.POSSIBLE
        )
        d = fs_ref(D)
        log.claim(
            effect_id="e3",
            action_id="a4",
            operation=op(),
            impact_scope=[d],
            obligations=[fx.Postcondition(d, fx.Predicate.EXISTS)],
        )
        log.resolve("e2", applied=False, by="ops", note="checked b and c")
        path = log.path
    approvals, last = write_five_approvals(run_id, store_dir)
    assert last == NEXT - 1
    # Closing the last connection checkpointed the WAL: the database file is the store
    # (beside the lock file, which holds no data).
    assert sorted(p.name for p in store_dir.iterdir()) == ["ledger.lock", path.name]
    return Built(store_dir, path, run_id, approvals)


@pytest.fixture
def built(template: Built, store_dir: Path) -> Built:
    """A private copy of the template store, made as the library makes stores (0700, 0600)."""
    store_dir.mkdir(mode=0o700)
    path = store_dir / template.path.name
    shutil.copyfile(template.path, path)
    path.chmod(0o600)
    return Built(store_dir, path, template.run_id, template.approvals)


@contextlib.contextmanager
def attacker(built: Built) -> Iterator[sqlite3.Connection]:
    """A plain ``sqlite3`` connection in autocommit mode, as the shell would open.

    The chain guards (link and hash) are dropped first (see CHAIN); the triggers so
    changed are dropped on leaving, to be put back by the library's next write.
    """
    conn = sqlite3.connect(built.path, isolation_level=None)
    drop_guards(
        conn, *(f"{table}_guard_{guard}" for table in RECORD_TABLES for guard in ("chain", "hash"))
    )
    try:
        yield conn
        drop_changed_guards(conn)
    finally:
        conn.close()


def insert(
    conn: sqlite3.Connection, table: str, verb: str = "INSERT", **values: Any
) -> sqlite3.Cursor:
    """Insert one row by column name, with ``verb`` (e.g. ``INSERT OR REPLACE``)."""
    columns = ", ".join(values)
    marks = ", ".join("?" for _ in values)
    return conn.execute(f"{verb} INTO {table} ({columns}) VALUES ({marks})", tuple(values.values()))


def snapshot(conn: sqlite3.Connection, table: str) -> list[tuple[Any, ...]]:
    """Every row of ``table``, in a stable order."""
    return sorted(conn.execute(f"SELECT * FROM {table}").fetchall(), key=repr)


def row(built: Built, table: str, **overrides: Any) -> dict[str, Any]:
    """A complete row of ``table`` in the built run that breaks no constraint by itself."""
    base: dict[str, Any] = {"run_id": built.run_id}
    if table == "runs":
        base = {"run_id": "f" * 32, "created_at": TS}
    elif table == "claims":
        base.update(CLAIM, seq=NEXT, effect_id="e9")
    elif table == "outcomes":
        base.update(OUTCOME, seq=NEXT, effect_id="e3")
    elif table == "observations":
        base.update(OBSERVATION, seq=NEXT)
    elif table == "resolutions":
        base.update(RESOLUTION, seq=NEXT, effect_id="e3")
    elif table == "approval_requests":  # a new request of its own effect
        base.update(APPROVAL_REQUEST, seq=NEXT)
    elif table == "approval_decisions":  # an answer to mail's pending request
        base.update(APPROVAL_DECISION, seq=NEXT, approval_id=built.approvals["mail"].approval_id)
    elif table == "scope_index":
        base.update(kind="fs", locator="/sandbox/z", effect_id="e3", position=1)
    base.update(overrides)
    return base


# --------------------------------------------------------------------------- CHECK constraints


@pytest.mark.parametrize(
    ("table", "overrides", "constraint"),
    [
        ("outcomes", {"execution": "verified"}, "ck_outcomes_execution"),
        ("outcomes", {"execution": "succeeded"}, "ck_outcomes_execution"),
        ("outcomes", {"execution": "FAILED"}, "ck_outcomes_execution"),
        ("outcomes", {"execution": ""}, "ck_outcomes_execution"),
        ("outcomes", {"impact": "maybe"}, "ck_outcomes_impact"),
        ("outcomes", {"impact": "None"}, "ck_outcomes_impact"),
        (
            "outcomes",
            {"replayed": 2, "execution": "interrupted", "impact": "possible"},
            "ck_outcomes_replayed",
        ),
        ("outcomes", {"replayed": 1}, "ck_outcomes_replayed_interrupted"),
        (
            "outcomes",
            {"replayed": 1, "execution": "reported_success", "impact": "certain"},
            "ck_outcomes_replayed_interrupted",
        ),
        (
            "outcomes",
            {"execution": "interrupted", "impact": "none"},
            "ck_outcomes_interrupted_impact",
        ),
        (
            "outcomes",
            {"execution": "interrupted", "impact": "certain"},
            "ck_outcomes_interrupted_impact",
        ),
        ("outcomes", {"execution_id": ""}, "ck_outcomes_execution_id"),
        ("claims", {"seq": 0}, "ck_claims_seq"),
        ("observations", {"seq": 0}, "ck_observations_seq"),
        ("observations", {"coverage": "total"}, "ck_observations_coverage"),
        ("observations", {"mechanism": "guess"}, "ck_observations_mechanism"),
        ("observations", {"resource_kind": "http"}, "ck_observations_resource_kind"),
        ("observations", {"resource_exists": 2}, "ck_observations_resource_exists"),
        ("observations", {"sha256": sha(b"x").upper()}, "ck_observations_sha256"),
        ("observations", {"sha256": sha(b"x")[:63]}, "ck_observations_sha256"),
        ("observations", {"sha256": "g" * 64}, "ck_observations_sha256"),
        ("observations", {"observation_id": ""}, "ck_observations_observation_id"),
        ("claims", {"args_sha256": sha(b"{}").upper()}, "ck_claims_args_sha256"),
        ("claims", {"args_sha256": "z" * 64}, "ck_claims_args_sha256"),
        ("claims", {"args_sha256": sha(b"{}") + "0"}, "ck_claims_args_sha256"),
        ("claims", {"effect_id": "x" * 201}, "ck_claims_effect_id"),
        ("claims", {"operation": ""}, "ck_claims_operation"),
        ("runs", {"run_id": "F" * 32}, "ck_runs_run_id"),
        ("runs", {"run_id": "f" * 31}, "ck_runs_run_id"),
        ("runs", {"run_id": "g" * 32}, "ck_runs_run_id"),
        ("runs", {"run_id": "f" * 32 + "-"}, "ck_runs_run_id"),
    ],
)
def test_unknown_word_or_malformed_value_fails_its_check(
    built: Built, table: str, overrides: dict[str, Any], constraint: str
) -> None:
    """A row with an unknown enum word or a malformed value fails its named CHECK constraint."""
    with attacker(built) as conn:
        before = snapshot(conn, table)
        with pytest.raises(sqlite3.IntegrityError, match=f"CHECK constraint failed: {constraint}$"):
            insert(conn, table, **row(built, table, **overrides))
        assert snapshot(conn, table) == before


# scope_index rows are written by the claims' trigger, and no CHECK test attacks it.
@pytest.mark.parametrize("table", sorted(set(APPEND_ONLY_TABLES) - {"scope_index"}))
def test_the_baseline_attack_rows_are_valid(built: Built, table: str) -> None:
    """The unmodified attack rows are accepted, so each CHECK test fails for its one field."""
    with attacker(built) as conn:
        insert(conn, table, **row(built, table))
        assert len(snapshot(conn, table)) >= 1


def _entries(entry: dict[str, Any], **changes: Any) -> str:
    """A JSON array of one entry, ``entry`` with ``changes`` (a value of ... drops the key)."""
    changed = {k: v for k, v in {**entry, **changes}.items() if v is not ...}
    return json.dumps([changed])


_SCOPE_GOOD = _entries(SCOPE)
_DUTY_GOOD = _entries(OBLIGATION)
# The locator twice: SQLite's json_extract reads the first, Python's json the last.
_SCOPE_TWICE = _SCOPE_GOOD.replace('"role"', '"locator": "/sandbox/elsewhere", "role"')


@pytest.mark.parametrize(
    ("column", "value"),
    [
        ("impact_scope", _entries(SCOPE, kind="http")),
        ("impact_scope", _entries(SCOPE, locator=7)),
        ("impact_scope", _entries(SCOPE, role=None)),
        ("impact_scope", _entries(SCOPE, revision=...)),
        ("impact_scope", json.dumps(SCOPE)),  # an object, not an array
        ("impact_scope", json.dumps(["fs"])),
        ("impact_scope", _SCOPE_GOOD[:-1]),  # not JSON
        ("impact_scope", json.dumps([SCOPE, SCOPE])),  # more entries than scope_count
        ("impact_scope", _SCOPE_TWICE),
        ("impact_scope", _entries(SCOPE, extra="x")),
        ("obligations", _entries(OBLIGATION, predicate="contains")),
        ("obligations", _entries(OBLIGATION, target_kind="http")),
        ("obligations", _entries(OBLIGATION, expected=sha(b"x"))),
        ("obligations", _entries(OBLIGATION, predicate="sha256")),
        ("obligations", _entries(OBLIGATION, target_locator=None)),
        ("obligations", "[]"),  # fewer entries than obligation_count
    ],
)
def test_a_malformed_scope_or_obligation_entry_is_refused(
    built: Built, column: str, value: str
) -> None:
    """What the child tables' CHECKs refused is refused in a claim's JSON arrays."""
    good = {"impact_scope": _SCOPE_GOOD, "obligations": _DUTY_GOOD}
    claim = row(built, "claims", scope_count=1, obligation_count=1, **good)
    with attacker(built) as conn:
        before = snapshot(conn, "claims")
        with pytest.raises(sqlite3.IntegrityError, match=f"its {column} must be an array of"):
            insert(conn, "claims", **{**claim, column: value})
        assert snapshot(conn, "claims") == before
        insert(conn, "claims", **claim)  # the same claim with well-formed arrays is accepted
        assert conn.execute(
            "SELECT count(*) FROM scope_index WHERE effect_id = 'e9'"
        ).fetchone() == (1,)


def test_scope_index_holds_each_scope_entry_of_a_claim(store_dir: Path) -> None:
    """One resource and several are indexed alike, each at its position in the scope.

    A claim with one resource takes another trigger (INSERT ... VALUES) than one with more
    (INSERT ... SELECT from json_each): both give the locator exactly, escapes included.
    """
    odd = "/q'uote\"d\\back/é中😀\u2028\x7f/" + "x" * 300
    scopes = {
        "e0": [],
        "e1": [fs_ref("/one")],
        "e2": [fs_ref(odd)],
        "e3": [fs_ref(f"/many/{i}") for i in range(2)] + [fs_ref(odd)],
    }
    with EffectLog(new_run_id(), store_dir) as log:
        for effect_id, scope in scopes.items():
            log.claim(effect_id=effect_id, action_id="a", operation=op(), impact_scope=scope)
        run_id = log.run_id
    conn = sqlite3.connect(f"file:{store_dir / 'ledger.sqlite3'}?mode=ro", uri=True)
    try:
        rows = conn.execute(
            "SELECT effect_id, position, kind, locator FROM scope_index WHERE run_id = ?"
            " ORDER BY effect_id, position",
            (run_id,),
        ).fetchall()
    finally:
        conn.close()
    assert rows == [
        (effect_id, i, ref.kind, ref.locator)
        for effect_id, scope in scopes.items()
        for i, ref in enumerate(scope)
    ]


# --------------------------------------------------------------------------- append-only

UPDATES = {
    "runs": "created_at",
    "claims": "action_id",
    "scope_index": "locator",
    "outcomes": "impact",
    "observations": "coverage",
    "resolutions": "note",
    "approval_requests": "reason",
    "approval_decisions": "note",
}


def test_every_append_only_table_is_covered() -> None:
    """The append-only tests cover every table the schema declares append-only."""
    assert set(UPDATES) == set(APPEND_ONLY_TABLES)


@pytest.mark.parametrize("table", sorted(UPDATES))
def test_update_is_refused_as_append_only(built: Built, table: str) -> None:
    """An UPDATE of any row of a record table aborts with an append-only message."""
    column = UPDATES[table]
    with attacker(built) as conn:
        before = snapshot(conn, table)
        assert before
        with pytest.raises(sqlite3.IntegrityError, match="append-only"):
            conn.execute(f"UPDATE {table} SET {column} = {column}")
        with pytest.raises(sqlite3.IntegrityError, match="append-only"):
            conn.execute(f"UPDATE {table} SET run_id = ?", ("0" * 32,))
        assert snapshot(conn, table) == before


@pytest.mark.parametrize("table", sorted(UPDATES))
def test_delete_is_refused_as_append_only(built: Built, table: str) -> None:
    """A DELETE of any row of a record table aborts with an append-only message."""
    with attacker(built) as conn:
        before = snapshot(conn, table)
        with pytest.raises(sqlite3.IntegrityError, match="append-only"):
            conn.execute(f"DELETE FROM {table}")
        with pytest.raises(sqlite3.IntegrityError, match="append-only"):
            conn.execute(f"DELETE FROM {table} WHERE run_id = ?", (built.run_id,))
        assert snapshot(conn, table) == before


# --------------------------------------------------------------------------- keys


@pytest.mark.parametrize("verb", ["INSERT OR REPLACE", "REPLACE", "INSERT"])
@pytest.mark.parametrize(
    ("table", "overrides", "message"),
    [
        ("runs", {}, "that run_id is already recorded"),
        ("claims", {"effect_id": "e1"}, "that effect_id is already claimed"),
        ("claims", {"seq": 1}, "that seq is already recorded"),
        ("outcomes", {"seq": 2, "effect_id": "e1"}, "that seq is already recorded"),
        ("outcomes", {"seq": 5, "effect_id": "e2", "execution": "running"}, "that seq"),
        ("observations", {"observation_id": "o1"}, "that observation_id is already recorded"),
        ("observations", {"seq": 3, "observation_id": "o1"}, "that (seq|observation_id) is"),
    ],
)
def test_rewriting_an_existing_key_aborts_and_leaves_the_row(
    built: Built, verb: str, table: str, overrides: dict[str, Any], message: str
) -> None:
    """INSERT OR REPLACE (or a plain INSERT) of an existing key aborts and changes no row."""
    values = row(built, table, **overrides)
    if table == "runs":
        values["run_id"] = built.run_id
    with attacker(built) as conn:
        before = snapshot(conn, table)
        with pytest.raises(sqlite3.IntegrityError, match=f"append-only, {message}"):
            insert(conn, table, verb, **values)
        assert snapshot(conn, table) == before


@pytest.mark.parametrize(
    ("table", "overrides"),
    [
        ("claims", {"seq": 2}),  # taken by outcome e1
        ("claims", {"seq": 3}),  # taken by observation o1
        ("outcomes", {"seq": 6, "effect_id": "e2"}),  # taken by claim e3
        ("outcomes", {"seq": 3, "effect_id": "e1", "execution": "running"}),  # observation o1
        ("observations", {"seq": 4}),  # taken by claim e2
        ("observations", {"seq": 5}),  # taken by outcome e2
    ],
)
def test_a_seq_taken_in_another_record_table_is_refused(
    built: Built, table: str, overrides: dict[str, Any]
) -> None:
    """A record reusing a seq that the run already holds in another record table is refused."""
    with attacker(built) as conn:
        before = snapshot(conn, table)
        with pytest.raises(sqlite3.IntegrityError, match="that seq is already recorded in the run"):
            insert(conn, table, **row(built, table, **overrides))
        assert snapshot(conn, table) == before


# --------------------------------------------------------------------------- outcomes


def test_outcome_for_a_missing_claim_is_refused_by_the_foreign_key(built: Built) -> None:
    """With PRAGMA foreign_keys=ON and the guard trigger dropped, the foreign key still refuses it."""
    with attacker(built) as conn:
        conn.execute("PRAGMA foreign_keys = ON")
        drop_guards(conn, "outcomes_guard_claim")
        with pytest.raises(sqlite3.IntegrityError, match=r"^FOREIGN KEY constraint failed$"):
            insert(conn, "outcomes", **row(built, "outcomes", effect_id="nobody"))


def test_outcome_for_a_missing_claim_is_refused_without_fks_too(built: Built) -> None:
    """Without foreign keys (the sqlite3 shell's default) a guard trigger refuses an orphan outcome."""
    with attacker(built) as conn:
        assert conn.execute("PRAGMA foreign_keys").fetchone() == (0,)
        with pytest.raises(sqlite3.IntegrityError, match="an outcome needs its claim"):
            insert(conn, "outcomes", **row(built, "outcomes", effect_id="nobody"))


def test_an_orphan_outcome_slipped_past_the_guard_fails_load(built: Built) -> None:
    """With the guard dropped and no foreign keys an orphan outcome gets in, and load refuses the run."""
    with attacker(built) as conn:
        drop_guards(conn, "outcomes_guard_claim")
        insert(conn, "outcomes", **row(built, "outcomes", effect_id="nobody"))
        assert conn.execute(
            "SELECT count(*) FROM outcomes WHERE effect_id = 'nobody'"
        ).fetchone() == (1,)
    with pytest.raises(EffectPersistenceError, match="names unclaimed effect 'nobody'"):
        EffectLog.load(built.run_id, built.directory)


@pytest.mark.parametrize("execution", ["failed", "reported_success", "interrupted"])
def test_a_second_terminal_outcome_is_refused(built: Built, execution: str) -> None:
    """A second terminal outcome for a settled claim is refused by the guard trigger."""
    impact = "possible" if execution == "interrupted" else "none"
    values = row(built, "outcomes", effect_id="e1", execution=execution, impact=impact)
    with attacker(built) as conn:
        before = snapshot(conn, "outcomes")
        with pytest.raises(sqlite3.IntegrityError, match="already has a terminal outcome"):
            insert(conn, "outcomes", **values)
        assert snapshot(conn, "outcomes") == before


def test_the_terminal_unique_index_is_a_backstop_to_the_guard(built: Built) -> None:
    """With the guard trigger dropped, the partial unique index still refuses a second terminal."""
    with attacker(built) as conn:
        drop_guards(conn, "outcomes_guard_settled")
        with pytest.raises(
            sqlite3.IntegrityError,
            match=r"^UNIQUE constraint failed: outcomes\.run_id, outcomes\.effect_id$",
        ):
            insert(conn, "outcomes", **row(built, "outcomes", effect_id="e1"))


def test_an_outcome_after_a_terminal_one_is_refused(built: Built) -> None:
    """Even a RUNNING outcome, which the unique index allows, is refused after a terminal one."""
    values = row(built, "outcomes", effect_id="e1", execution="running", impact="possible")
    with (
        attacker(built) as conn,
        pytest.raises(sqlite3.IntegrityError, match="already has a terminal outcome"),
    ):
        insert(conn, "outcomes", **values)


def test_terminal_after_running_is_accepted(built: Built) -> None:
    """A terminal outcome after a RUNNING one, correctly chained, is allowed: the guards refuse only forgeries."""
    # Dated now, in the form the library writes: load holds every row to import's time rules.
    now = fx.utc_now()
    outcome = fx.EffectOutcome(
        "e2", NEXT, fx.ExecutionOutcome.FAILED, fx.Impact.NONE, recorded_at=now
    )
    conn = sqlite3.connect(built.path, isolation_level=None)  # every guard in place
    conn.create_function("sha3", 2, _chain.sha3)  # as the stock shell has it
    try:
        prev = conn.execute(
            "SELECT hash FROM claims WHERE run_id = ? AND seq = ?", (built.run_id, NEXT - 1)
        ).fetchone()[0]
        chained = {"prev_hash": prev, "hash": chain_hash(built.run_id, outcome, prev)}
        insert(
            conn, "outcomes", **row(built, "outcomes", effect_id="e2", recorded_at=now, **chained)
        )
    finally:
        conn.close()
    with EffectLog.load(built.run_id, built.directory) as log:
        assert log.assess("e2").execution is fx.ExecutionOutcome.FAILED


def test_an_outcome_with_a_seq_below_its_claim_is_refused(built: Built) -> None:
    """An outcome numbered before its claim is refused, even in a seq gap no other guard sees."""
    with attacker(built) as conn:
        # A claim at NEXT + 2 leaves two seqs free, so only the order guard can object.
        insert(conn, "claims", **row(built, "claims", seq=NEXT + 2))
        with pytest.raises(sqlite3.IntegrityError, match="an outcome must come after its claim"):
            insert(conn, "outcomes", **row(built, "outcomes", seq=NEXT + 1, effect_id="e9"))


# --------------------------------------------------------------------------- STRICT


@pytest.mark.parametrize(
    ("table", "overrides", "column"),
    [
        ("claims", {"seq": "x"}, "claims.seq"),
        ("outcomes", {"seq": "x"}, "outcomes.seq"),
        ("outcomes", {"replayed": "no"}, "outcomes.replayed"),
        ("observations", {"resource_exists": "true"}, "observations.resource_exists"),
        ("observations", {"seq": 7.5}, "observations.seq"),
        ("claims", {"effect_id": b"e9"}, "claims.effect_id"),
    ],
)
def test_strict_tables_refuse_a_value_of_the_wrong_type(
    built: Built, table: str, overrides: dict[str, Any], column: str
) -> None:
    """A text in an integer column (or a blob in a text one) is refused by STRICT."""
    with (
        attacker(built) as conn,
        pytest.raises(
            sqlite3.IntegrityError, match=rf"cannot store \w+ value in \w+ column {column}"
        ),
    ):
        insert(conn, table, **row(built, table, **overrides))


def test_every_table_is_strict(built: Built) -> None:
    """Every ledger table is declared STRICT."""
    with attacker(built) as conn:
        strict = {
            name: flag
            for _schema, name, kind, _ncol, _wr, flag in conn.execute("PRAGMA table_list")
            if kind == "table"
        }
    assert {t: strict[t] for t in APPEND_ONLY_TABLES} == dict.fromkeys(APPEND_ONLY_TABLES, 1)


# --------------------------------------------------------------------------- fail closed

IGNORE_CHECKS = "PRAGMA ignore_check_constraints = ON"


@pytest.mark.parametrize(
    ("statements", "table", "values", "message"),
    [
        pytest.param(
            [IGNORE_CHECKS],
            "outcomes",
            {"effect_id": "e2", "execution": "verified"},
            "'verified' is not a valid ExecutionOutcome",
            id="unknown-execution",
        ),
        pytest.param(
            [IGNORE_CHECKS],
            "outcomes",
            {"effect_id": "e2", "impact": "maybe"},
            "'maybe' is not a valid Impact",
            id="unknown-impact",
        ),
        pytest.param(
            [IGNORE_CHECKS],
            "outcomes",
            {"effect_id": "e2", "replayed": 1},
            "only an INTERRUPTED outcome can be replayed",
            id="replayed-not-interrupted",
        ),
        pytest.param(
            [IGNORE_CHECKS],
            "outcomes",
            {"effect_id": "e2", "execution": "interrupted", "impact": "none"},
            "INTERRUPTED outcome must have impact POSSIBLE",
            id="interrupted-impact-none",
        ),
        pytest.param(
            [IGNORE_CHECKS],
            "observations",
            {"resource_exists": 2},
            "resource_exists holds 2",
            id="resource-exists-2",
        ),
        pytest.param(
            [IGNORE_CHECKS],
            "observations",
            {"coverage": "total"},
            "'total' is not a valid Coverage",
            id="unknown-coverage",
        ),
        pytest.param(
            [IGNORE_CHECKS],
            "observations",
            {"sha256": "g" * 64},
            f"observation at seq {NEXT}",
            id="malformed-sha256",
        ),
        pytest.param(
            [
                "outcomes_guard_settled",
                "DROP INDEX uq_outcomes_terminal",
            ],
            "outcomes",
            {"effect_id": "e1"},
            # Opening for writing restores the dropped index first, which the forged row forbids.
            "uq_outcomes_terminal and its rows forbid restoring them",
            id="duplicate-terminal",
        ),
        pytest.param(
            [],
            "observations",
            {"seq": NEXT + 2},
            f"seq {NEXT + 2} of observation where {NEXT} was due",
            id="seq-gap",
        ),
        pytest.param(
            ["observations_guard_seq"],
            "observations",
            {"seq": 2},
            "without gap or repeat",
            id="seq-repeat",
        ),
        pytest.param(
            ["scope_index_guard_claim"],
            "scope_index",
            {"effect_id": "nobody"},
            "scope_index does not match the claims' impact scopes",
            id="scope-index-of-no-claim",
        ),
        pytest.param(
            ["claims_guard_obligations"],
            "claims",
            {"obligation_count": 1, "obligations": _entries(OBLIGATION, predicate="contains")},
            f"claim at seq {NEXT}.*'contains' is not a valid Predicate",
            id="obligation-predicate",
        ),
        pytest.param(
            ["claims_guard_impact_scope"],
            "claims",
            {"scope_count": 2, "impact_scope": _SCOPE_GOOD},
            f"claim at seq {NEXT}.*scope_count is 2 but impact_scope holds 1",
            id="scope-count",
        ),
        pytest.param(
            ["claims_guard_impact_scope"],
            "claims",
            {"scope_count": 1, "impact_scope": _entries(SCOPE, role=...)},
            f"claim at seq {NEXT}.*impact_scope must be an array of objects with the keys",
            id="scope-keys",
        ),
        pytest.param(
            ["claims_guard_impact_scope"],
            "claims",
            {"scope_count": 1, "impact_scope": _SCOPE_TWICE},
            f"claim at seq {NEXT}.*an object repeats a key",
            id="scope-key-twice",
        ),
        pytest.param(
            [IGNORE_CHECKS],
            "outcomes",
            {"effect_id": "e2", "recorded_at": "yesterday"},
            "recorded_at is not an ISO-8601 timestamp",
            id="recorded-at",
        ),
    ],
)
def test_a_row_slipped_past_the_schema_makes_load_fail_closed(
    built: Built, statements: list[str], table: str, values: dict[str, Any], message: str
) -> None:
    """A row the disarmed schema let in (checks ignored, guards dropped) makes load raise."""
    with attacker(built) as conn:
        for statement in statements:  # SQL, or the name of a guard to take out
            if " " in statement:
                conn.execute(statement)
            else:
                drop_guards(conn, statement)
        insert(conn, table, **row(built, table, **values))
    with pytest.raises(EffectPersistenceError, match=message):
        EffectLog.load(built.run_id, built.directory)


def test_an_outcome_before_its_claim_makes_load_fail_closed(built: Built) -> None:
    """An outcome written before a claim with a later seq is refused on load."""
    with attacker(built) as conn:
        for guard in ("guard_order", "guard_seq", "guard_settled", "guard_claim"):
            drop_guards(conn, f"outcomes_{guard}")
        insert(conn, "outcomes", **row(built, "outcomes", seq=NEXT, effect_id="e9"))
        insert(conn, "claims", **row(built, "claims", seq=NEXT + 1, effect_id="e9"))
    with pytest.raises(
        EffectPersistenceError, match=f"outcome at seq {NEXT} precedes the claim of 'e9'"
    ):
        EffectLog.load(built.run_id, built.directory)


def test_outcome_before_its_claim_is_refused_without_fks(built: Built) -> None:
    """Without FKs, writing the outcome before its claim is still refused by a guard trigger."""
    with (
        attacker(built) as conn,
        pytest.raises(sqlite3.IntegrityError, match="an outcome needs its claim"),
    ):
        insert(conn, "outcomes", **row(built, "outcomes", seq=NEXT, effect_id="e9"))


# e2 is unsettled; widening its scope to a.txt in the index would make e1's evidence stale
# in the views. (Its scope and obligations themselves are in its row: UPDATE is refused.)
WIDENED = {"effect_id": "e2", "position": 2, "locator": A}


def test_a_scope_index_row_that_is_no_scope_entry_is_refused(built: Built) -> None:
    """A row added to scope_index by hand must be an entry of its claim's scope."""
    with attacker(built) as conn:
        before = snapshot(conn, "scope_index")
        with pytest.raises(sqlite3.IntegrityError, match="its rows are the scopes of the claims"):
            insert(conn, "scope_index", **row(built, "scope_index", **WIDENED))
        assert snapshot(conn, "scope_index") == before


def test_a_scope_index_row_past_the_guard_fails_load(built: Built) -> None:
    """With the guard dropped, an extra scope_index row makes load fail closed."""
    with attacker(built) as conn:
        drop_guards(conn, "scope_index_guard_claim")
        insert(conn, "scope_index", **row(built, "scope_index", **WIDENED))
    with pytest.raises(EffectPersistenceError, match=r"scope_index does not match .* refusing"):
        EffectLog.load(built.run_id, built.directory)


def test_the_untouched_store_loads(built: Built) -> None:
    """The built store loads as written, so every fail-closed test fails for its forged row."""
    with EffectLog.load(built.run_id, built.directory) as log:
        assert [r.seq for r in log.history().records()] == list(range(1, NEXT))
        assert log.assess("e1").verdict is fx.EffectVerdict.VERIFIED


# --------------------------------------------------------------------------- views


def test_effect_status_view_has_the_documented_columns_and_rows(built: Built) -> None:
    """effect_status has one row per claim with the documented columns, agreeing with assess."""
    with attacker(built) as conn:
        cursor = conn.execute("SELECT * FROM effect_status ORDER BY seq")
        columns = [d[0] for d in cursor.description]
        rows = [dict(zip(columns, r, strict=True)) for r in cursor.fetchall()]
    documented = [
        "run_id",
        "effect_id",
        "operation",
        "execution",
        "impact",
        "verdict",
        "unresolved_impact",
        "kind",
        "retry_of",
        "resolution",
        "next_step",
    ]
    assert set(documented) <= set(columns)
    assert [{k: r[k] for k in documented} for r in rows] == [
        {
            "run_id": built.run_id,
            "effect_id": "e1",
            "operation": "write_file",
            "execution": "reported_success",
            "impact": "certain",
            "verdict": "verified",
            "unresolved_impact": 0,
            "kind": "write",
            "retry_of": None,
            "resolution": None,
            "next_step": "done",
        },
        {
            "run_id": built.run_id,
            "effect_id": "e2",
            "operation": "delete_file",
            "execution": "running",
            "impact": "possible",
            "verdict": "pending",
            "unresolved_impact": 0,  # a person resolved it
            "kind": "write",
            "retry_of": None,
            "resolution": "not_applied",
            "next_step": "retry",
        },
        {
            "run_id": built.run_id,
            "effect_id": "e3",
            "operation": "write_file",
            "execution": None,
            "impact": None,
            "verdict": "pending",
            "unresolved_impact": 1,
            "kind": "write",
            "retry_of": None,
            "resolution": None,
            "next_step": "wait",
        },
        {
            "run_id": built.run_id,
            "effect_id": "refund-1",  # claimed under its grant
            "operation": "refund",
            "execution": None,
            "impact": None,
            "verdict": "pending",
            "unresolved_impact": 1,
            "kind": "irreversible",
            "retry_of": None,
            "resolution": None,
            "next_step": "wait",
        },
    ]
    with EffectLog.load(built.run_id, built.directory) as log:
        for r in rows:
            assessment = log.assess(r["effect_id"])
            assert r["verdict"] == assessment.verdict.value
            assert r["unresolved_impact"] == int(assessment.unresolved_impact)
            assert r["resolution"] == assessment.resolution
            assert r["next_step"] == log.decide(r["effect_id"]).step.value
            assert r["idempotency_key"] == log.history().claim(r["effect_id"]).idempotency_key


def test_unsettled_claims_view_lists_claims_without_a_terminal_outcome(built: Built) -> None:
    """unsettled_claims lists the claims with no terminal outcome, flagging the running ones."""
    with attacker(built) as conn:
        cursor = conn.execute("SELECT * FROM unsettled_claims ORDER BY seq")
        columns = [d[0] for d in cursor.description]
        rows = [dict(zip(columns, r, strict=True)) for r in cursor.fetchall()]
    assert {"run_id", "effect_id", "operation", "running"} <= set(columns)
    assert [(r["run_id"], r["effect_id"], r["operation"], r["running"]) for r in rows] == [
        (built.run_id, "e2", "delete_file", 1),
        (built.run_id, "e3", "write_file", 0),
        (built.run_id, "refund-1", "refund", 0),
    ]


@pytest.mark.parametrize(
    ("table", "column", "enum_cls"),
    [
        ("outcomes", "execution", fx.ExecutionOutcome),
        ("outcomes", "impact", fx.Impact),
        ("observations", "mechanism", fx.ObservationMechanism),
        ("observations", "coverage", fx.Coverage),
        ("obligations", "predicate", fx.Predicate),
        ("effect_status", "verdict", fx.EffectVerdict),
    ],
)
def test_enum_columns_hold_the_lowercase_words(
    built: Built, table: str, column: str, enum_cls: type[Any]
) -> None:
    """Enum columns hold the lowercase words of ledger.effects, never names or numbers."""
    with attacker(built) as conn:
        stored = {
            v for (v,) in conn.execute(f"SELECT DISTINCT {column} FROM {table}") if v is not None
        }
    assert stored
    assert stored <= {m.value for m in enum_cls}
    assert all(v == v.lower() for v in stored)


# --------------------------------------------------------------------------- pragmas

PRAGMAS = {"journal_mode": "wal", "synchronous": 2, "foreign_keys": 1}


def read_pragmas(cursor: Any) -> dict[str, Any]:
    """The durability pragmas as a DB-API cursor reads them back."""
    return {name: cursor.execute(f"PRAGMA {name}").fetchone()[0] for name in PRAGMAS}


def test_every_pooled_connection_has_the_durability_pragmas(tmp_path: Path) -> None:
    """Every connection of the library's engine, pooled or overflow, is WAL, FULL and FKs on."""
    store = Store(tmp_path / "store")
    store.open_for_writing()
    engine = store._engine()
    try:
        connections = [engine.raw_connection() for _ in range(7)]  # beyond pool_size=4
        try:
            for raw in connections:
                cursor = raw.cursor()
                assert read_pragmas(cursor) == PRAGMAS
                cursor.close()
        finally:
            for raw in connections:
                raw.close()
    finally:
        store.dispose()


def test_a_write_transaction_runs_with_the_durability_pragmas(log: EffectLog) -> None:
    """The connection a log write uses is WAL, synchronous FULL, with foreign keys on."""
    log.claim(effect_id="e1", action_id="a1", operation=op(), impact_scope=[])
    store = log._journal.store
    assert store is not None
    readings: dict[str, Any] = {}
    # Inside the transaction every log write runs in, on the connection it writes on.
    job = store.commit(
        "read pragmas", [], before=lambda cursor: readings.update(read_pragmas(cursor))
    )
    assert job.error is None
    assert readings == PRAGMAS


def test_a_connection_where_wal_does_not_take_is_refused() -> None:
    """The pragmas are read back: a connection that cannot be WAL (in-memory) is refused."""
    conn = sqlite3.connect(":memory:")
    with pytest.raises(EffectPersistenceError, match="PRAGMA journal_mode is 'memory'"):
        _on_connect(conn, None)  # type: ignore[arg-type]  # the pool entry is unused
    with pytest.raises(sqlite3.ProgrammingError):
        conn.execute("SELECT 1")  # the refused connection was closed
