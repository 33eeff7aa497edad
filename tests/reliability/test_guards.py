"""The schema's insert guards refuse forged rows written from outside the library.

A run is written through the storage contract; then one row is inserted by hand, as a
person with plain SQL access would: on SQLite with the stock ``sqlite3`` shell (whose
connections every guard checks in full, the record hash included), on PostgreSQL as
the writer role of docs/postgresql.md, through psycopg. Each forged row is well formed
and correctly hashed and chained unless the case is about the hash or the chain, so
that the guard under test is the one that refuses it; the same rows made honest are
accepted, so that no refusal comes from the attack's own mistake.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import os
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psycopg
import pytest

from ledger import _chain, storage
from ledger import effects as fx
from ledger._chain import GENESIS
from ledger.effect_log import EffectLog, EffectPersistenceError, new_run_id
from ledger.sqlite.rows import chain_hash, rows_of
from ledger.storage import Batch
from tests.backends import Backend
from tests.builders import REPO, fs_ref, op, sql_literal
from tests.postgresql import driver as pg_driver
from tests.postgresql.server import server
from tests.sqlite.driver import shell_script

NOW = "2024-01-01T00:00:00.000000+00:00"
A, B = fs_ref("/w/a.txt"), fs_ref("/w/b.txt")
_roles = itertools.count(1)

RETRY = "a retry must come after the claim it repeats and carry its idempotency key"
CHAIN = "the record does not extend the chain of its run"
SEQ_TAKEN = "that seq is already recorded in the run"


@dataclasses.dataclass(frozen=True)
class Run:
    """The run the forgeries are aimed at, as the store holds it.

    seq 1 claim e1 (write, on a.txt, postcondition a.txt exists); 2 claim e3 (write,
    on b.txt), never settled; 3 e1's outcome, reported success; 4 observation o1 of
    a.txt; 5 a person's resolution of e1 (applied). The next seq is 6.
    """

    run_id: str
    hashes: dict[int, str]  # seq -> the record's hash

    @property
    def key(self) -> str:
        """e1's idempotency key, which a retry of e1 must carry."""
        return fx.idempotency_key(self.run_id, "e1")


def _history(run_id: str) -> fx.History:
    e1 = fx.EffectClaim(
        "e1",
        1,
        "a1",
        op(),
        (A,),
        (fx.Postcondition(A, fx.Predicate.EXISTS),),
        NOW,
        idempotency_key=fx.idempotency_key(run_id, "e1"),
    )
    e3 = fx.EffectClaim(
        "e3", 2, "a3", op(), (B,), (), NOW, idempotency_key=fx.idempotency_key(run_id, "e3")
    )
    return fx.History(
        claims=(e1, e3),
        outcomes=(
            fx.EffectOutcome(
                "e1", 3, fx.ExecutionOutcome.REPORTED_SUCCESS, fx.Impact.CERTAIN, recorded_at=NOW
            ),
        ),
        observations=(_observation("o1", 4),),
        resolutions=(fx.Resolution("e1", 5, True, "ops", NOW),),
    )


def _observation(observation_id: str, seq: int) -> fx.Observation:
    return fx.Observation(
        observation_id,
        seq,
        A,
        fx.ObservationMechanism.FILESYSTEM_STAT,
        fx.Coverage.COMPLETE,
        "a2",
        exists=True,
        sha256=None,
        revision=None,
        recorded_at=NOW,
    )


def _claim(run: Run, effect_id: str, seq: int, **changes: Any) -> fx.EffectClaim:
    fields: dict[str, Any] = {"idempotency_key": fx.idempotency_key(run.run_id, effect_id)}
    fields.update(changes)
    return fx.EffectClaim(effect_id, seq, "a9", op(), (B,), (), NOW, **fields)


def _outcome(effect_id: str, seq: int) -> fx.EffectOutcome:
    return fx.EffectOutcome(
        effect_id, seq, fx.ExecutionOutcome.FAILED, fx.Impact.NONE, recorded_at=NOW
    )


def _resolution(effect_id: str, seq: int) -> fx.Resolution:
    return fx.Resolution(effect_id, seq, False, "ops", NOW)


_TABLES = {
    "claim": "claims",
    "outcome": "outcomes",
    "observation": "observations",
    "resolution": "resolutions",
}


def _row(
    run_id: str, record: fx.Record, prev_hash: str, **overrides: Any
) -> tuple[str, dict[str, Any]]:
    """The table and row of ``record``, linked after ``prev_hash`` and hashed right."""
    row, _, _ = rows_of(run_id, record)
    row |= {"prev_hash": prev_hash, "hash": chain_hash(run_id, record, prev_hash)}
    row |= overrides
    return _TABLES[record.record_type], row


def _next(run: Run, record: fx.Record, **overrides: Any) -> tuple[str, dict[str, Any]]:
    """``record`` (numbered 6) appended to the run, its prev_hash the head's."""
    return _row(run.run_id, record, run.hashes[5], **overrides)


# --------------------------------------------------------------------------- writing by hand


def _insert_sql(table: str, row: dict[str, Any], marks: Callable[[object], str]) -> str:
    columns = ", ".join(row)
    return f"INSERT INTO {table} ({columns}) VALUES ({', '.join(marks(v) for v in row.values())})"


_WRITERS: dict[str, str] = {}


def _writer(store: str) -> str:
    """The URL of docs/postgresql.md's writer role on the store's database, made once."""
    if store not in _WRITERS:
        database = pg_driver.database(store)
        # Apart from test_roles.py's writer_PID_N: one server serves a worker's every module.
        writer = f"guards_writer_{os.getpid()}_{next(_roles)}"
        granting = re.findall(
            r"```sql\n(.*?)```", (REPO / "docs/postgresql.md").read_text(), re.DOTALL
        )
        sql = granting[1].replace("ledger_writer", writer)
        sql = re.sub(r"\bDATABASE ledger\b", f"DATABASE {database}", sql)
        with server().connect(autocommit=True) as admin:
            admin.execute(f"CREATE ROLE {writer} LOGIN")
        with server().connect(database, autocommit=True) as owner:
            owner.execute(sql)
        _WRITERS[store] = server().url(database, user=writer)
    return _WRITERS[store]


def forge(backend: Backend, store: Path | str, table: str, row: dict[str, Any]) -> str | None:
    """Insert ``row`` into ``table`` by hand: the refusal's message, or None if it got in."""
    if backend.name == "sqlite":
        sql = _insert_sql(table, row, sql_literal) + ";\n"
        done = shell_script(Path(store) / "ledger.sqlite3", sql)
        if done.returncode == 0:
            return None
        return done.stderr or f"the shell exited {done.returncode}"
    with pg_driver.connect(_writer(str(store)), autocommit=True) as conn:
        try:
            conn.execute(_insert_sql(table, row, lambda _: "%s"), tuple(row.values()))
        except psycopg.Error as e:
            return str(e)
    return None


@pytest.fixture
def run(backend: Backend, location: Path | str) -> Run:
    """The run of :class:`Run`, written by the library into a new store."""
    run_id = new_run_id()
    served = storage.backend(location)
    store = served.acquire(location)
    try:
        store.open_for_writing()
        history = _history(run_id)
        batch = Batch(
            action="test: write the run",
            run_id=run_id,
            records=history.records(),
            head=GENESIS,
            now=NOW,
            start=True,
        )
        assert store.append(batch).error is None
    finally:
        served.release(store)
    found = backend.query(
        location,
        " UNION ALL ".join(f"SELECT seq, hash FROM {t} WHERE run_id = ?" for t in _TABLES.values()),
        [run_id] * len(_TABLES),
    )
    return Run(run_id, {int(seq): str(h) for seq, h in found})


# --------------------------------------------------------------------------- the guards

Forgery = Callable[[Run], tuple[str, dict[str, Any]]]


# Each insert guard (the SQLite trigger of that name, the PostgreSQL function
# ledger_<name>) and a forged row that it alone refuses: the triggers fire newest first
# on SQLite and by name on PostgreSQL, and every other guard passes the row.
GUARDS: dict[str, tuple[Forgery, str]] = {
    "claims_guard_retry (another key)": (
        lambda r: _next(r, _claim(r, "e2", 6, retry_of="e1")),
        RETRY,
    ),
    "claims_guard_retry (the derived key of an unclaimed effect)": (
        lambda r: _next(
            r, _claim(r, "e2", 6, retry_of="e9", idempotency_key=fx.idempotency_key(r.run_id, "e9"))
        ),
        RETRY,
    ),
    "claims_guard_key": (lambda r: _next(r, _claim(r, "e1", 6)), "that effect_id is already"),
    "claims_guard_run": (
        lambda r: _row(new_run_id(), _claim(r, "e1", 1), GENESIS),
        "claims rows need their run in runs",
    ),
    "claims_guard_impact_scope": (
        lambda r: _next(
            r,
            _claim(r, "e2", 6),
            scope_count=1,
            impact_scope=json.dumps(
                [{"kind": "http", "locator": "/w/b.txt", "role": "target", "revision": None}]
            ),
        ),
        "its impact_scope must be an array of scope_count valid entries",
    ),
    "claims_guard_obligations": (
        lambda r: _next(r, _claim(r, "e2", 6), obligation_count=1),
        "its obligations must be an array of obligation_count valid entries",
    ),
    "outcomes_guard_claim": (lambda r: _next(r, _outcome("e9", 6)), "an outcome needs its claim"),
    "outcomes_guard_settled": (
        lambda r: _next(r, _outcome("e1", 6)),
        "the effect already has a terminal outcome",
    ),
    "observations_guard_key": (
        lambda r: _next(r, _observation("o1", 6)),
        "that observation_id is already recorded",
    ),
    "observations_guard_run": (
        lambda r: _row(new_run_id(), _observation("o1", 1), GENESIS),
        "observations rows need their run in runs",
    ),
    "resolutions_guard_key": (
        lambda r: _next(r, _resolution("e1", 6)),
        "the effect is already resolved",
    ),
    "resolutions_guard_claim": (
        lambda r: _next(r, _resolution("e9", 6)),
        "a resolution must come after its claim",
    ),
    "runs_guard_key": (
        lambda r: ("runs", {"run_id": r.run_id, "created_at": NOW}),
        "that run_id is already recorded",
    ),
}

WRITTEN_BY = {"origin": "worker", "os_user": "u", "host": "h", "program": "agent.py", "pid": 7}


def _half_written(r: Run, **fields: object) -> tuple[str, dict[str, Any]]:
    """A resolution of e3 (numbered 6) whose writer is given in part or wrongly, hashed right."""
    row, _, _ = rows_of(r.run_id, _resolution("e3", 6))
    row |= WRITTEN_BY | fields
    encoding = _chain.encode("resolution", r.run_id, row)
    return "resolutions", row | {
        "prev_hash": r.hashes[5],
        "hash": _chain.link(r.hashes[5], encoding),
    }


WRITER = "a resolution records its origin and the process that wrote it, or none of them"
GUARDS |= {
    "resolutions_guard_origin (a writer without its origin)": (
        lambda r: _half_written(r, origin=None),
        WRITER,
    ),
    "resolutions_guard_origin (an origin without its host)": (
        lambda r: _half_written(r, host=None),
        WRITER,
    ),
    "resolutions_guard_origin (an origin of no kind)": (
        lambda r: _half_written(r, origin="robot"),
        WRITER,
    ),
    "resolutions_guard_origin (pid 0)": (lambda r: _half_written(r, pid=0), WRITER),
    "resolutions_guard_origin (an empty program)": (
        lambda r: _half_written(r, program=""),
        WRITER,
    ),
}
# Every record table: a seq the run holds (linked to the record before it, so that only
# the seq guard objects), and a gap (seq 7, linked to the head at 5). A gap is what a
# chain guard written with <> instead of IS DISTINCT FROM lets in on PostgreSQL: there
# is no record at seq 6, the guard's expected prev_hash is NULL, and x <> NULL is not true.
_SAMPLES: dict[str, Callable[[Run, int], fx.Record]] = {
    "claims": lambda r, seq: _claim(r, "e2", seq),
    "outcomes": lambda r, seq: _outcome("e3", seq),
    "observations": lambda r, seq: _observation("o2", seq),
    "resolutions": lambda r, seq: _resolution("e3", seq),
}


def _at(sample: Callable[[Run, int], fx.Record], seq: int, after: int) -> Forgery:
    """The sample record numbered ``seq``, its prev_hash the hash of the record at ``after``."""
    return lambda r: _row(r.run_id, sample(r, seq), r.hashes[after])


for _table, _sample in _SAMPLES.items():
    GUARDS[f"{_table}_guard_seq"] = (_at(_sample, 5, 4), SEQ_TAKEN)
    GUARDS[f"{_table}_guard_chain (a gap)"] = (_at(_sample, 7, 5), CHAIN)
    GUARDS[f"{_table}_guard_chain (another link)"] = (_at(_sample, 6, 4), CHAIN)


@pytest.mark.parametrize("guard", sorted(GUARDS))
def test_a_forged_row_is_refused_by_its_guard(
    backend: Backend, location: Path | str, run: Run, guard: str
) -> None:
    """The stock shell's or the writer role's INSERT of the row is refused, saying why."""
    forgery, message = GUARDS[guard]
    table, row = forgery(run)
    counts = backend.row_counts(location)
    refused = forge(backend, location, table, row)
    assert refused is not None, f"{guard}: the forged row got in"
    assert message in refused
    assert backend.row_counts(location) == counts


# The same rows, honest: a retry with its original's key, an outcome and a resolution of
# the unsettled e3, a new observation, each the run's next record.
HONEST: dict[str, Forgery] = {
    "a retry with its original's key": lambda r: _next(
        r, _claim(r, "e2", 6, retry_of="e1", idempotency_key=r.key)
    ),
    "a claim": lambda r: _next(r, _claim(r, "e2", 6)),
    "an outcome": lambda r: _next(r, _outcome("e3", 6)),
    "an observation": lambda r: _next(r, _observation("o2", 6)),
    "a resolution": lambda r: _next(r, _resolution("e3", 6)),
    "a resolution with its writer": _half_written,
}


@pytest.mark.parametrize("case", sorted(HONEST))
def test_the_same_rows_made_honest_are_accepted_and_load(
    backend: Backend, location: Path | str, run: Run, case: str
) -> None:
    """Every refusal above is its guard's: the honest row gets in by the same road and loads."""
    table, row = HONEST[case](run)
    assert forge(backend, location, table, row) is None
    with EffectLog.load(run.run_id, location) as log:
        assert [r.seq for r in log.history().records()] == [1, 2, 3, 4, 5, 6]


def test_a_first_record_at_seq_2_of_an_empty_run_is_refused(
    backend: Backend, location: Path | str, run: Run
) -> None:
    """A run's first record must be seq 1 after the genesis value: seq 2 is a gap.

    No record is at seq 1, so the chain guard expects no hash at all: only a comparison
    that treats a missing value as different (IS DISTINCT FROM) refuses it.
    """
    run_id = new_run_id()
    assert forge(backend, location, "runs", {"run_id": run_id, "created_at": NOW}) is None
    counts = backend.row_counts(location)
    for prev in (GENESIS, run.hashes[5]):
        table, row = _row(run_id, _observation("o1", 2), prev)
        refused = forge(backend, location, table, row)
        assert refused is not None, f"a first record at seq 2 after {prev[:8]} got in"
        assert CHAIN in refused
    assert backend.row_counts(location) == counts


def test_a_wrong_record_hash(backend: Backend, location: Path | str, run: Run) -> None:
    """SQLite's guards recompute the hash of a row from the shell and refuse a wrong one;
    PostgreSQL (no sha3 there) takes it, and loading the run refuses it."""
    table, row = _next(run, _claim(run, "e2", 6), hash="0" * 64)
    refused = forge(backend, location, table, row)
    if backend.name == "sqlite":
        assert refused is not None
        assert "the record hash does not match its fields" in refused
        return
    assert refused is None
    with pytest.raises(EffectPersistenceError, match="hash"):
        EffectLog.load(run.run_id, location)
