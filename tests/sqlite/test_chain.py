"""The hash chain as the SQLite backend stores it: rows, guards, SQL, and a store made before it.

Each stored hash is the library's hash of the record's row after the one before; a
record changed, removed or relinked with the stock ``sqlite3`` module (guards dropped) is
refused by load, by the schema itself, or by ``ledger verify --anchor``; the SQL the
guards run gives the Python encoding; a store at revision 0002 is chained when opened.
The chain on any backend is in ``tests/contract/test_chain.py``.
"""

from __future__ import annotations

import dataclasses
import json
import sqlite3
import subprocess
from json.encoder import encode_basestring
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ledger import _chain, _inspect
from ledger import effects as fx
from ledger._sql import rows as shared_rows
from ledger.effect_log import EffectLog, EffectPersistenceError, new_run_id
from ledger.sqlite import rows
from ledger.sqlite.engine import head_revision
from ledger.sqlite.rows import chain_hash, rows_of
from ledger.sqlite.schema import claims, outcomes
from tests.builders import claim_bare, ledger, write_every_column, write_five_records
from tests.sqlite.driver import at_revision


def _links(db: Path, run_id: str) -> list[tuple[int, str, str]]:
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        return conn.execute(
            " UNION ALL ".join(
                f"SELECT seq, prev_hash, hash FROM {t} WHERE run_id = ?"
                for t in ("claims", "outcomes", "observations")
            )
            + " ORDER BY seq",
            (run_id,) * 3,
        ).fetchall()
    finally:
        conn.close()


def test_every_record_extends_its_runs_chain(store_dir: Path, run_id: str) -> None:
    """Each stored hash is SHA3-256 of the previous hash and the record; the first follows the genesis value."""
    with EffectLog(run_id, store_dir) as log:
        write_five_records(log)
        records = log.history().records()
        db = log.path
    prev = _chain.GENESIS
    links = _links(db, run_id)
    assert [seq for seq, _, _ in links] == [r.seq for r in records] == [1, 2, 3, 4, 5]
    for record, (_seq, stored_prev, stored_hash) in zip(records, links, strict=True):
        assert stored_prev == prev
        assert stored_hash == chain_hash(run_id, record, prev)
        prev = stored_hash


def test_a_changed_field_fails_load_naming_the_record(store_dir: Path, run_id: str) -> None:
    """Changing one field of a stored record (triggers dropped) makes load fail at that record's seq."""
    with EffectLog(run_id, store_dir) as log:
        write_five_records(log)
    conn = sqlite3.connect(store_dir / "ledger.sqlite3", isolation_level=None)
    # A scope entry of the claim at seq 2, and its scope_index row to match (which alone
    # would already make load fail): only the chain can tell.
    conn.execute("DROP TRIGGER claims_no_update")
    conn.execute("DROP TRIGGER scope_index_no_update")
    conn.execute(
        "UPDATE claims SET impact_scope = json_set(impact_scope, '$[1].locator', '/elsewhere')"
        " WHERE run_id = ? AND seq = 2",
        (run_id,),
    )
    assert (
        conn.execute(
            "UPDATE scope_index SET locator = '/elsewhere' WHERE run_id = ? AND position = 1",
            (run_id,),
        ).rowcount
        == 1
    )
    conn.close()
    with pytest.raises(
        EffectPersistenceError, match="chain broken at seq 2: its hash does not match"
    ):
        EffectLog.load(run_id, store_dir)


def test_a_removed_record_in_the_middle_fails_load(store_dir: Path, run_id: str) -> None:
    """Deleting a record and renumbering the ones after it breaks the chain at the first renumbered one."""
    with EffectLog(run_id, store_dir) as log:
        write_five_records(log)
    conn = sqlite3.connect(store_dir / "ledger.sqlite3", isolation_level=None)
    for table in ("outcomes", "claims"):
        conn.execute(f"DROP TRIGGER {table}_no_update")
        conn.execute(f"DROP TRIGGER {table}_no_delete")
    conn.execute("DELETE FROM outcomes WHERE run_id = ? AND seq = 3", (run_id,))
    conn.execute("UPDATE outcomes SET seq = 3 WHERE run_id = ? AND seq = 4", (run_id,))
    conn.execute("UPDATE claims SET seq = 4 WHERE run_id = ? AND seq = 5", (run_id,))
    conn.close()
    with pytest.raises(EffectPersistenceError, match="chain broken at seq 3: its prev_hash"):
        EffectLog.load(run_id, store_dir)


def test_load_refuses_records_each_hashed_right_but_not_linked(
    store_dir: Path, run_id: str
) -> None:
    """A record given another predecessor, its own hash recomputed over it, is refused.

    Each record's hash then matches its own fields and prev_hash: only checking that
    prev_hash is the previous record's hash can catch it, so this fails if load does not.
    """
    with EffectLog(run_id, store_dir) as log:
        write_five_records(log)
        records = log.history().records()
    conn = sqlite3.connect(store_dir / "ledger.sqlite3", isolation_level=None)
    conn.execute("DROP TRIGGER outcomes_no_update")
    other = "ab" * 32
    conn.execute(
        "UPDATE outcomes SET prev_hash = ?, hash = ? WHERE run_id = ? AND seq = 3",
        (other, chain_hash(run_id, records[2], other), run_id),
    )
    conn.close()
    for seq, prev, digest in _links(store_dir / "ledger.sqlite3", run_id):
        assert digest == chain_hash(run_id, records[seq - 1], prev)  # every hash is right
    with pytest.raises(EffectPersistenceError):
        EffectLog.load(run_id, store_dir)
    assert not _inspect.verify(store_dir).ok


def test_the_database_refuses_a_record_that_does_not_extend_the_chain(
    store_dir: Path, run_id: str
) -> None:
    """Inserting a record whose prev_hash is not the hash before it is refused by the schema itself."""
    with EffectLog(run_id, store_dir) as log:
        write_five_records(log)
    conn = sqlite3.connect(store_dir / "ledger.sqlite3", isolation_level=None)
    row, _, _ = rows_of(
        run_id,
        fx.EffectOutcome(
            "e2", 6, fx.ExecutionOutcome.FAILED, fx.Impact.NONE, recorded_at=fx.utc_now()
        ),
    )
    row |= {"prev_hash": "1" * 64, "hash": "2" * 64}
    conn.create_function("sha3", 2, _chain.sha3)  # as the stock shell has it
    with pytest.raises(sqlite3.IntegrityError, match="does not extend the chain"):
        conn.execute(
            f"INSERT INTO outcomes ({', '.join(row)}) VALUES ({', '.join('?' * len(row))})",
            tuple(row.values()),
        )
    conn.close()


def _verify(store: list[str], anchor: str) -> subprocess.CompletedProcess[str]:
    return ledger("verify", "--anchor", anchor, *store)


def _head(run_id: str, store: list[str]) -> str:
    result = ledger("head", run_id, *store)
    assert result.returncode == 0, result.stderr
    return result.stdout.strip()


@pytest.mark.program
def test_head_and_anchor_detect_a_recomputed_chain(store_dir: Path, run_id: str) -> None:
    """A forger who changes a record and recomputes every later hash passes load, but not the anchor."""
    with EffectLog(run_id, store_dir) as log:
        write_five_records(log)
        records = log.history().records()
    store = ["--store", str(store_dir)]
    anchor = _head(run_id, store)
    assert anchor.startswith(f"{run_id}:5:")
    assert _verify(store, anchor).returncode == 0
    forged = [dataclasses.replace(r, action_id="forged") if r.seq == 2 else r for r in records]
    conn = sqlite3.connect(store_dir / "ledger.sqlite3", isolation_level=None)
    for table in ("claims", "outcomes", "observations"):
        conn.execute(f"DROP TRIGGER {table}_no_update")
    conn.execute("UPDATE claims SET action_id = 'forged' WHERE run_id = ? AND seq = 2", (run_id,))
    prev = _chain.GENESIS
    for record in forged:
        digest = chain_hash(run_id, record, prev)
        table = {"claim": "claims", "outcome": "outcomes", "observation": "observations"}[
            record.record_type
        ]
        conn.execute(
            f"UPDATE {table} SET prev_hash = ?, hash = ? WHERE run_id = ? AND seq = ?",
            (prev, digest, run_id, record.seq),
        )
        prev = digest
    conn.close()
    with EffectLog.load(run_id, store_dir) as log:  # the rewritten chain is consistent
        assert log.history().claims[0].action_id == "forged"
    result = _verify(store, anchor)
    assert result.returncode == 1
    assert "anchor at seq 5: the hash differs" in result.stdout


@pytest.mark.program
def test_anchor_detects_a_truncated_run(store_dir: Path, run_id: str) -> None:
    """Removing a run's last record leaves a consistent chain, and the anchor still catches it."""
    with EffectLog(run_id, store_dir) as log:
        write_five_records(log)
    store = ["--store", str(store_dir)]
    anchor = _head(run_id, store)
    conn = sqlite3.connect(store_dir / "ledger.sqlite3", isolation_level=None)
    conn.execute("DROP TRIGGER claims_no_delete")
    conn.execute("DELETE FROM claims WHERE run_id = ? AND seq = 5", (run_id,))
    conn.close()
    with EffectLog.load(run_id, store_dir) as log:
        assert len(log.history().records()) == 4
    result = _verify(store, anchor)
    assert result.returncode == 1
    assert "anchor at seq 5: the record is gone (the run was truncated)" in result.stdout


def rows_before_0009(run_id: str, record: fx.Record, head: str) -> list[tuple[str, dict]]:
    """The rows of ``record`` as the library wrote them before migration 0009, chained after ``head``.

    A claim's impact scope and obligations were rows of two tables of their own, and no
    record had a step, recorded arguments or a result (migration 0012), nor a resolution
    its writing process (0013), nor a claim its trace context (0015) or its approval
    (0016).
    """
    row, scope, duties = rows_of(run_id, record)
    assert not row.get("step")
    assert row.get("args") is None
    assert row.get("result") is None
    assert row.get("origin") is None
    assert row.get("traceparent") is None
    later = (
        "impact_scope",
        "obligations",
        "step",
        "args",
        "result",
        *_chain.RESOLUTION_COLUMNS_4,
        *_chain.CLAIM_COLUMNS_5,
        *_chain.CLAIM_COLUMNS_6,
    )
    row = {k: v for k, v in row.items() if k not in later}
    row["prev_hash"], row["hash"] = head, chain_hash(run_id, record, head)
    table = {
        "claim": "claims",
        "outcome": "outcomes",
        "observation": "observations",
        "resolution": "resolutions",
    }[record.record_type]
    key = {"run_id": run_id, "effect_id": row.get("effect_id")}
    return [
        (table, row),
        *(("impact_scope", {**key, "position": i, **e}) for i, e in enumerate(scope)),
        *(("obligations", {**key, "position": i, **e}) for i, e in enumerate(duties)),
    ]


def _plant_old_rows(db: Path, run_id: str, records: tuple[fx.Record, ...]) -> None:
    """Insert ``records`` with the stock sqlite3 module, in the columns the store has.

    Its connection is not one of the library's writers: the guards hash every record.
    """
    conn = sqlite3.connect(db, isolation_level=None)
    conn.create_function("sha3", 2, _chain.sha3, deterministic=True)
    columns = {
        table: {c for (c,) in conn.execute(f"SELECT name FROM pragma_table_info('{table}')")}
        for table in (
            "claims",
            "outcomes",
            "observations",
            "resolutions",
            "impact_scope",
            "obligations",
        )
    }
    conn.execute("INSERT INTO runs VALUES (?, ?)", (run_id, fx.utc_now()))
    head = _chain.GENESIS
    for record in records:
        for name, every in rows_before_0009(run_id, record, head):
            values = {k: v for k, v in every.items() if k in columns[name]}
            conn.execute(
                f"INSERT INTO {name} ({', '.join(values)}) VALUES ({', '.join('?' * len(values))})",
                tuple(values.values()),
            )
        head = chain_hash(run_id, record, head)
    conn.close()


def test_a_store_made_before_the_chain_is_chained_when_opened(tmp_path: Path) -> None:
    """A store at revision 0002 (no chain columns) with records is chained by migration 0003, guards intact."""
    db = tmp_path / "store" / "ledger.sqlite3"
    run_id = new_run_id()
    with EffectLog(new_run_id(), tmp_path / "model") as model:  # records as the library makes them
        write_five_records(model)
        records = model.history().records()
    at_revision(db, "0002")
    # No chain at 0002: the store's guards are those its columns allow, the chain's not.
    _plant_old_rows(db, run_id, records)
    with EffectLog.load(run_id, db.parent) as log:
        # Migration 0006 gives each claim the key its run and effect id derive.
        assert log.history().records() == tuple(
            dataclasses.replace(r, idempotency_key=fx.idempotency_key(run_id, r.effect_id))
            if isinstance(r, fx.EffectClaim)
            else r
            for r in records
        )
    links = _links(db, run_id)
    assert links[0][1] == _chain.GENESIS
    assert [prev for _, prev, _ in links[1:]] == [h for _, _, h in links[:-1]]
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        names = {
            n for (n,) in conn.execute("SELECT name FROM sqlite_master WHERE type = 'trigger'")
        }
        assert {"claims_guard", "outcomes_no_update", "claims_no_delete"} <= names
        assert conn.execute("SELECT version_num FROM alembic_version").fetchall() == [
            (head_revision(),)
        ]
        strict = {r[1]: r[5] for r in conn.execute("PRAGMA table_list")}
        assert strict["claims"] == strict["outcomes"] == strict["observations"] == 1
    finally:
        conn.close()


@pytest.mark.program
def test_a_store_with_scope_and_obligation_tables_moves_them_into_its_claims(
    tmp_path: Path,
) -> None:
    """Migration 0009: a store at 0008 with records, scopes and obligations in their tables.

    After the upgrade every claim is one row, the records load unchanged, every hash is
    the one written before, and the views of the old tables' names show the same rows.
    """
    db = tmp_path / "store" / "ledger.sqlite3"
    run_id = new_run_id()
    model = new_run_id()
    write_every_column(
        tmp_path / "model", model, before_0013=True
    )  # version 1 and 2 claims, a resolution
    with EffectLog.load(model, tmp_path / "model") as log:
        records = log.history().records()
    claims = [r for r in records if isinstance(r, fx.EffectClaim)]
    assert any(len(c.impact_scope) > 1 for c in claims)
    assert any(c.obligations for c in claims)
    at_revision(db, "0008")
    _plant_old_rows(db, run_id, records)  # the shell is checked in full: every hash is right
    before = _links(db, run_id)
    with EffectLog.load(run_id, db.parent) as log:
        assert log.history().records() == records
    assert _links(db, run_id) == before
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        assert conn.execute("SELECT version_num FROM alembic_version").fetchall() == [
            (head_revision(),)
        ]
        tables = {n for (n,) in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        assert {"impact_scope", "obligations"}.isdisjoint(tables)
        scope = conn.execute(
            "SELECT effect_id, position, kind, locator, role, revision FROM impact_scope"
            " WHERE run_id = ? ORDER BY effect_id, position",
            (run_id,),
        ).fetchall()
        assert scope == sorted(
            (c.effect_id, i, r.kind, r.locator, r.role, r.revision)
            for c in claims
            for i, r in enumerate(c.impact_scope)
        )
        duties = conn.execute(
            "SELECT effect_id, position, target_locator, predicate, expected FROM obligations"
            " WHERE run_id = ? ORDER BY effect_id, position",
            (run_id,),
        ).fetchall()
        assert duties == sorted(
            (c.effect_id, i, p.target.locator, p.predicate.value, p.expected)
            for c in claims
            for i, p in enumerate(c.obligations)
        )
        assert conn.execute(
            "SELECT count(*) FROM scope_index WHERE run_id = ?", (run_id,)
        ).fetchone() == (len(scope),)
    finally:
        conn.close()
    result = ledger("verify", "--store", str(db.parent))
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_sql_encoding_and_hash_equal_the_python_ones_for_every_record(
    store_dir: Path,
) -> None:
    """The SQL the guards and the shell recipe run gives each record's encoding and hash.

    Built and evaluated here, in-process (sha3 registered as the shell has it), for a run
    that sets every column: a changed SQL builder breaks it at once.
    """
    run_id = new_run_id()
    # Every column is set somewhere; claims and outcomes of chain version 3 among them.
    write_every_column(store_dir, run_id, recorded=True)
    with EffectLog.load(run_id, store_dir) as log:
        records = {r.seq: r for r in log.history().records()}
    tags = {
        _chain.encode(r.record_type, run_id, rows_of(run_id, r)[0], *rows_of(run_id, r)[1:])[:9]
        for r in records.values()
    }
    assert tags == {
        _chain.VERSION,
        _chain.VERSION_2,
        _chain.VERSION_3,
        _chain.VERSION_4,
        _chain.VERSION_5,
        _chain.VERSION_6,
    }
    assert any(
        isinstance(r, fx.EffectOutcome) and r.result_recorded and r.result is None
        for r in records.values()
    )  # a recorded JSON null: 'null', not NULL
    conn = sqlite3.connect(f"file:{store_dir / 'ledger.sqlite3'}?mode=ro", uri=True)
    conn.create_function("sha3", 2, _chain.sha3)
    try:
        seen = 0
        for kind, table in (
            ("claim", "claims"),
            ("outcome", "outcomes"),
            ("observation", "observations"),
            ("resolution", "resolutions"),
            ("approval_request", "approval_requests"),
            ("approval_decision", "approval_decisions"),
        ):
            rows = conn.execute(
                f"SELECT t.seq, t.prev_hash, t.hash, {_chain.sql_encoding(kind, 't')},"
                f" {_chain.sql_hash(kind, 't')} FROM {table} AS t WHERE t.run_id = ?",
                (run_id,),
            ).fetchall()
            for seq, prev, stored, encoding, digest in rows:
                row, scope, duties = rows_of(run_id, records[seq])
                assert encoding == _chain.encode(kind, run_id, row | {"seq": seq}, scope, duties)
                assert digest == stored == chain_hash(run_id, records[seq], prev)
                seen += 1
        assert seen == len(records) >= 15
    finally:
        conn.close()


def _json_as_written_before(entries: list[dict[str, str | None]]) -> str:
    """A claim's arrays as the library wrote them in Python, before the C encoder: the reference."""

    def value(v: str | None) -> str:
        return "null" if v is None else encode_basestring(v)

    if not entries:
        return "[]"
    return (
        "["
        + ",".join(
            "{" + ",".join(f"{encode_basestring(k)}:{value(v)}" for k, v in e.items()) + "}"
            for e in entries
        )
        + "]"
    )


_ENTRY_TEXT = st.none() | st.text() | st.sampled_from(("", "caf\u00e9", '"\\/\n\x7f', "\u2028"))


@settings(max_examples=300, deadline=None)
@given(
    st.lists(
        st.dictionaries(st.sampled_from(_chain.SCOPE_COLUMNS), _ENTRY_TEXT)
        | st.dictionaries(st.sampled_from(_chain.OBLIGATION_COLUMNS), _ENTRY_TEXT),
        max_size=4,
    )
)
def test_the_claims_json_is_what_json_dumps_writes(entries: list[dict[str, str | None]]) -> None:
    """A claim's arrays are written compactly, as json.dumps writes them (and loads reads them).

    Byte for byte the text the library wrote before: the chain hashes it, so rows written
    now must verify as those written then did.
    """
    text = shared_rows._json(entries)
    assert text == json.dumps(entries, ensure_ascii=False, separators=(",", ":"))
    assert text.encode("utf-8") == _json_as_written_before(entries).encode("utf-8")
    assert json.loads(text) == entries


def test_the_claims_json_refuses_what_is_not_a_string_or_null() -> None:
    """An entry holding anything else is a bug, refused rather than written some other way."""
    with pytest.raises(TypeError, match="only strings and nulls"):
        shared_rows._json([{"kind": b"fs"}])  # type: ignore[dict-item]


_JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**53), 2**53) | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner, max_size=3)
    ),
    max_leaves=6,
)


@settings(max_examples=150, deadline=None)
@given(
    step=st.sampled_from(("", "s", "plan/1", "caf\u00e9 \u2603", "x" * 300)),
    args=st.none() | _JSON,
    result=st.none() | _JSON,
    recorded=st.booleans(),
    kind=st.sampled_from(tuple(fx.EffectKind)),
)
def test_the_sql_encoding_of_steps_arguments_and_results_is_the_pythons(
    step: str, args: object, result: object, recorded: bool, kind: fx.EffectKind
) -> None:
    """Version 3 in SQL: a claim's step and arguments, an outcome's result (a JSON null too).

    Each record's row, as the library stores it, is put in a table of the store's columns
    in memory; the SQL encoding and hash the guards and recipe 9 run equal Python's.
    """
    run_id = "0123456789abcdef0123456789abcdef"
    ref = fx.ResourceRef("fs", "/w/\u00e9", "target")
    claim = fx.EffectClaim(
        "e1",
        1,
        "a1",
        fx.OperationRef("write_file", "test/1", "a" * 64),
        (ref,),
        (fx.Postcondition(ref, fx.Predicate.EXISTS),),
        "2024-01-01T00:00:00.000000+00:00",
        kind=kind,
        idempotency_key=fx.idempotency_key(run_id, "e1"),
        step=step,
        args=args,
    )
    outcome = fx.EffectOutcome(
        "e1",
        2,
        fx.ExecutionOutcome.REPORTED_SUCCESS,
        fx.Impact.CERTAIN,
        recorded_at="2024-01-01T00:00:01.000000+00:00",
        result=result,
        result_recorded=recorded or result is not None,
    )
    conn = sqlite3.connect(":memory:")
    conn.create_function("sha3", 2, _chain.sha3)
    try:
        prev = _chain.GENESIS
        for record, table in ((claim, claims), (outcome, outcomes)):
            row = rows_of(run_id, record)[0] | {"prev_hash": prev}
            names = [c.name for c in table.columns if c.name in row]
            conn.execute(f"CREATE TABLE t ({', '.join(names)})")
            conn.execute(
                f"INSERT INTO t VALUES ({', '.join('?' * len(names))})", [row[n] for n in names]
            )
            kind_name = record.record_type
            encoding, digest = conn.execute(
                f"SELECT {_chain.sql_encoding(kind_name, 't')}, {_chain.sql_hash(kind_name, 't')}"
                " FROM t"
            ).fetchone()
            scope, duties = rows_of(run_id, record)[1:]
            assert encoding == _chain.encode(kind_name, run_id, row, scope, duties)
            assert digest == chain_hash(run_id, record, prev)
            version_3 = (
                bool(step) or args is not None
                if kind_name == "claim"
                else (outcome.result_recorded)
            )
            assert encoding.startswith(_chain.VERSION_3) == version_3
            prev = digest
            conn.execute("DROP TABLE t")
    finally:
        conn.close()


def test_the_shells_hash_guard_refuses_a_hash_that_leaves_out_step_args_or_result(
    store_dir: Path, run_id: str
) -> None:
    """A record inserted by hand whose hash does not cover its step, arguments or result.

    The hash of the record as it would be without them (version 1) is refused by the
    store's guard for every other connection than the library's writers (here, as the
    stock shell, with sha3 registered); the hash covering them is accepted.
    """
    with EffectLog(run_id, store_dir) as log:
        first = claim_bare(log, "e0")
    conn = sqlite3.connect(store_dir / "ledger.sqlite3", isolation_level=None)
    conn.create_function("sha3", 2, _chain.sha3)
    try:
        head = conn.execute("SELECT hash FROM claims WHERE run_id = ?", (run_id,)).fetchone()[0]
        plain = fx.EffectClaim(
            "e1",
            2,
            "a1",
            first.operation,
            (),
            (),
            "2024-01-01T00:00:00.000000+00:00",
            idempotency_key=fx.idempotency_key(run_id, "e1"),
        )
        (_, (wrong,)), *_ = rows.prepare(run_id, [plain], head)[0]
        at = [c.name for c in claims.columns].index("hash")
        cases = [
            dataclasses.replace(plain, step="plan/1"),
            dataclasses.replace(plain, args={"path": "/w/a"}),
            dataclasses.replace(plain, args=[]),
            dataclasses.replace(plain, step="plan/1", args=None),
        ]
        for claim in cases:
            (sql, params), *_ = rows.prepare(run_id, [claim], head)[0]
            forged = list(params[0])
            forged[at] = wrong[at]  # the hash of the claim without its step and arguments
            with pytest.raises(sqlite3.IntegrityError, match="hash does not match its fields"):
                conn.execute(sql, tuple(forged))
        claim = cases[0]
        (sql, params), *_ = rows.prepare(run_id, [claim], head)[0]
        conn.execute(sql, params[0])  # the right hash is accepted
        head = conn.execute(
            "SELECT hash FROM claims WHERE run_id = ? AND seq = 2", (run_id,)
        ).fetchone()[0]
        outcome = fx.EffectOutcome(
            "e1",
            3,
            fx.ExecutionOutcome.REPORTED_SUCCESS,
            fx.Impact.CERTAIN,
            recorded_at="2024-01-01T00:00:01.000000+00:00",
        )
        at = [c.name for c in outcomes.columns].index("hash")
        (_, (wrong,)), *_ = rows.prepare(run_id, [outcome], head)[0]
        for result in ({"ok": True}, None):
            recorded = dataclasses.replace(outcome, result=result, result_recorded=True)
            (sql, params), *_ = rows.prepare(run_id, [recorded], head)[0]
            forged = list(params[0])
            forged[at] = wrong[at]  # the hash of the outcome with no result recorded
            with pytest.raises(sqlite3.IntegrityError, match="hash does not match its fields"):
                conn.execute(sql, tuple(forged))
        conn.execute(sql, params[0])  # 'null' with its own hash is accepted
        assert conn.execute(
            "SELECT result FROM outcomes WHERE run_id = ? AND seq = 3", (run_id,)
        ).fetchone() == ("null",)
    finally:
        conn.close()
    with EffectLog.load(run_id, store_dir) as log:
        loaded = log.history()
    assert loaded.claims[-1].step == "plan/1"
    assert (loaded.outcomes[-1].result, loaded.outcomes[-1].result_recorded) == (None, True)
