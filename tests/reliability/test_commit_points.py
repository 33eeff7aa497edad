"""Commit points: the writer is SIGKILLed just before and just after each kind of write commits.

A child Python process sets up the write (continuing a run the test prepared, with
``EffectLog.load``), then makes it with a fault injected in the child itself: SQLAlchemy's
wrapper around the connection that records are written on kills it when ``COMMIT`` is
about to be sent (*before* the commit), and a wrapper around ``ledger.sqlite.store.Store.commit``
kills it right *after* the transaction has committed, before the call returns. A new
store's schema is created through SQLAlchemy: its ``commit`` event marks that point. Only the record
transaction is armed: the migrations that create a new store commit normally.

After each kill the store must hold exactly one side of the commit: before, none of the
write's records (for a new run, not even the run); after, all of them. ``verify`` finds no
problem, the run's chain verifies up to an anchor taken before the write, and a recovery
then appends exactly the outcomes still missing (a second one appending nothing).
"""

from __future__ import annotations

import dataclasses
import json
import signal
import textwrap
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from ledger import effects as fx
from ledger._inspect import Head, list_runs, run_head, verify
from ledger.effect_log import EffectLog, new_run_id
from tests.builders import claim_small, run_python, see
from tests.reliability.figures import report

DB = "ledger.sqlite3"
CHILD_TIMEOUT = 60

CHILD = textwrap.dedent(
    r"""
    import contextlib, json, os, signal, sys
    from pathlib import Path
    from sqlalchemy import event
    from ledger import effects as fx
    from ledger.sqlite import store as _store
    from ledger.effect_log import EffectLog

    store, run_id, kind, side = Path(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4]
    OP = fx.OperationRef("write_file", "test/1", "0" * 64)
    REF = fx.ResourceRef("fs", "/sandbox/a.txt", "target")
    armed = False  # set just before the write under test
    inside = False  # inside the armed write's transaction, up to its commit
    inserted = []  # the tables the armed transaction inserted into, once per row
    hooked = set()

    def die(point):
        os.write(1, (json.dumps({"point": point, "inserted": inserted}) + "\n").encode())
        os.kill(os.getpid(), signal.SIGKILL)

    def on_commit(conn):  # SQLAlchemy fires it before it sends COMMIT
        if inside and inserted and side == "before":  # not the read that looks at the schema
            die("before")

    def on_execute(conn, cursor, statement, parameters, context, executemany):
        if inside and statement.lstrip().upper().startswith("INSERT"):
            rows = len(parameters) if executemany else 1
            inserted.extend([statement.split()[2].strip('"')] * rows)

    def hook(engine):
        if id(engine) not in hooked:
            hooked.add(id(engine))
            event.listen(engine, "commit", on_commit)
            event.listen(engine, "before_cursor_execute", on_execute)

    class Cursor:  # the records' cursor, watched: what it inserts, and its COMMIT
        def __init__(self, cursor):
            self._cursor = cursor

        def execute(self, sql, parameters=()):
            self._note(sql, 1)
            if inside and inserted and side == "before" and sql.strip().upper() == "COMMIT":
                die("before")
            return self._cursor.execute(sql, parameters)

        def executemany(self, sql, rows):
            rows = list(rows)
            self._note(sql, len(rows))
            return self._cursor.executemany(sql, rows)

        def __getattr__(self, name):  # rowcount, fetchall, close: the cursor's own
            return getattr(self._cursor, name)

        def _note(self, sql, rows):
            if inside and sql.lstrip().upper().startswith("INSERT"):
                inserted.extend([sql.split()[2].strip('"')] * rows)

    class Connection:
        def __init__(self, connection):
            self._connection = connection

        def cursor(self):
            return Cursor(self._connection.cursor())

        def __getattr__(self, name):
            return getattr(self._connection, name)

    original_connection = _store.Store._connection

    original_commit = _store.Store.commit

    def commit(self, action, steps, before=None, **keywords):
        global inside
        self.group._connection = lambda: Connection(original_connection(self))
        inside = armed and kind != "create_store"
        try:
            result = original_commit(self, action, steps, before, **keywords)
        finally:
            inside = False  # it returned: the transaction is committed
        if armed and kind != "create_store" and side == "after":
            die("after")
        return result

    original_open = _store.Store.open_for_writing

    def open_for_writing(self):  # creates the schema of a new store, in its own transaction
        global inside
        creating = armed and kind == "create_store" and not self._ready
        if not creating:
            return original_open(self)
        hook(self._engine())
        inside = True
        try:
            original_open(self)
        finally:
            inside = False
        if side == "after":
            die("after")

    _store.Store.commit = commit
    _store.Store.open_for_writing = open_for_writing

    def claim(log, effect_id):
        return log.claim(effect_id=effect_id, action_id="a-" + effect_id, operation=OP,
                         impact_scope=[REF])

    def observe(log, observation_id):
        return log.observe(observation_id=observation_id, resource=REF,
                           mechanism=fx.ObservationMechanism.FILESYSTEM_READ,
                           coverage=fx.Coverage.COMPLETE, source_action_id="a-read",
                           exists=True, sha256="1" * 64)

    if kind in ("create_store", "first_claim", "claim_with_observations"):
        log = EffectLog(run_id, store)
    else:
        log = EffectLog.load(run_id, store)
    if kind == "claim_with_observations":
        observe(log, "o1")
        observe(log, "o2")  # kept in memory: written in the first claim's transaction
    next_seq = len(log.history().records()) + 1
    armed = True
    if kind in ("create_store", "first_claim", "claim", "claim_with_observations"):
        claim(log, f"e{next_seq}")
    elif kind == "outcome":
        log.outcome(effect_id="e1", execution=fx.ExecutionOutcome.REPORTED_SUCCESS,
                    impact=fx.Impact.CERTAIN)
    elif kind == "observation":
        observe(log, f"o{next_seq}")
    elif kind == "recover_interrupted":
        log.recover_interrupted()
    os.write(1, b'{"point": "returned"}\n')  # never reached: the write is killed
    """
)


# --------------------------------------------------------------------------- the writes

TABLES = {"claim": "claims", "outcome": "outcomes", "observation": "observations"}
Key = tuple[str, str, int]  # kind, id (an outcome's is "effect:execution"), seq


def key(record: fx.EffectClaim | fx.EffectOutcome | fx.Observation) -> Key:
    """What the test compares of a record: its kind, its id, its seq."""
    if isinstance(record, fx.EffectClaim):
        return ("claim", record.effect_id, record.seq)
    if isinstance(record, fx.EffectOutcome):
        return ("outcome", f"{record.effect_id}:{record.execution.value}", record.seq)
    return ("observation", record.observation_id, record.seq)


def outcome(log: EffectLog, effect_id: str, execution: fx.ExecutionOutcome) -> None:
    """Record an outcome of ``effect_id`` (impact POSSIBLE fits every execution)."""
    log.outcome(effect_id=effect_id, execution=execution, impact=fx.Impact.POSSIBLE)


def nothing(log: EffectLog) -> None:
    """No setup: the run is new."""


def claimed(log: EffectLog) -> None:
    """A run with a claim, its RUNNING outcome, and an observation."""
    claim_small(log, "e1")
    outcome(log, "e1", fx.ExecutionOutcome.RUNNING)
    see(log, "o3")


def claimed_and_observed(log: EffectLog) -> None:
    """A run with one claim and one observation."""
    claim_small(log, "e1")
    see(log, "o2")


def just_claimed(log: EffectLog) -> None:
    """A run with one claim."""
    claim_small(log, "e1")


def half_settled(log: EffectLog) -> None:
    """Claims without an outcome (e1, e4), RUNNING (e2), terminal (e3), and an observation."""
    claim_small(log, "e1")
    claim_small(log, "e2")
    outcome(log, "e2", fx.ExecutionOutcome.RUNNING)
    claim_small(log, "e3")
    outcome(log, "e3", fx.ExecutionOutcome.FAILED)
    claim_small(log, "e4")
    see(log, "o8")


@dataclasses.dataclass(frozen=True)
class Kind:
    """One kind of write: how its run is prepared, and the records its commit adds."""

    name: str
    doc: str
    setup: Callable[[EffectLog], None]
    written: tuple[Key, ...]  # the records the write's transaction adds
    tables: tuple[str, ...]  # the tables its transaction inserts into (at least)
    new_store: bool = False  # the write creates the store
    new_run: bool = False  # the write creates the run
    run_after: bool = True  # the run exists after the commit


KINDS = [
    Kind(
        "create_store",
        "The first claim of a new store first commits the store's schema, on its own.",
        nothing,
        (),
        ("alembic_version",),
        new_store=True,
        new_run=True,
        run_after=False,
    ),
    Kind(
        "first_claim",
        "The first claim of a new store creates the run and the claim in one transaction.",
        nothing,
        (("claim", "e1", 1),),
        ("runs", "claims"),
        new_store=True,
        new_run=True,
    ),
    Kind(
        "claim",
        "A claim in a loaded run adds the claim, its impact scope in its row.",
        claimed,
        (("claim", "e4", 4),),
        ("claims",),
    ),
    Kind(
        "claim_with_observations",
        "A new run's first claim also writes the observations made before it.",
        nothing,
        (("observation", "o1", 1), ("observation", "o2", 2), ("claim", "e3", 3)),
        ("runs", "observations", "claims"),
        new_run=True,
    ),
    Kind(
        "outcome",
        "An outcome settles a claim of a loaded run.",
        claimed_and_observed,
        (("outcome", "e1:reported_success", 3),),
        ("outcomes",),
    ),
    Kind(
        "observation",
        "An observation in a loaded run.",
        just_claimed,
        (("observation", "o2", 2),),
        ("observations",),
    ),
    Kind(
        "recover_interrupted",
        "Recovery appends the INTERRUPTED outcomes of every claim without one, together.",
        half_settled,
        (("outcome", "e1:interrupted", 8), ("outcome", "e4:interrupted", 9)),
        ("outcomes",),
    ),
]


# --------------------------------------------------------------------------- the test


def prepare(kind: Kind, store: Path, run_id: str) -> tuple[tuple[Key, ...], Head | None]:
    """Set up the run in this process; return its records and its head (None if none)."""
    if not kind.new_store:
        with EffectLog(new_run_id(), store) as other:  # the store exists, with another run
            claim_small(other, "e1")
    if kind.new_run:
        return (), None
    with EffectLog(run_id, store) as log:
        kind.setup(log)
        records = tuple(key(r) for r in log.history().records())
    return records, run_head(store, run_id)


def kill_at(store: Path, run_id: str, kind: Kind, side: str) -> dict[str, Any]:
    """Run the write in a child that SIGKILLs itself at the commit point; return its report."""
    result = run_python(CHILD, store, run_id, kind.name, side, timeout=CHILD_TIMEOUT)
    assert result.returncode == -signal.SIGKILL, (result.returncode, result.stderr[-3000:])
    lines = result.stdout.splitlines()
    assert len(lines) == 1, result.stdout
    return json.loads(lines[0])


@pytest.mark.parametrize("side", ["before", "after"])
@pytest.mark.parametrize("kind", KINDS, ids=lambda k: k.name)
def test_kill_at_commit_point_leaves_one_side(tmp_path: Path, kind: Kind, side: str) -> None:
    """A writer SIGKILLed just before (after) a write's commit leaves none (all) of its records."""
    started = time.monotonic()
    store = tmp_path / "store"
    run_id = new_run_id()
    setup, anchor = prepare(kind, store, run_id)
    figures: dict[str, Any] = {
        "test": f"commit_points[{kind.name}-{side}]",
        "iterations": 1,
        "kills": 0,
        "acknowledged": len(setup),
        "lost": None,
        "committed": None,
        "expected_committed": 0 if side == "before" else len(kind.written),
        "inserted_before_kill": None,
        "recovered_after": None,
        "passed": False,
    }
    try:
        died = kill_at(store, run_id, kind, side)
        figures.update(kills=1, inserted_before_kill=len(died["inserted"]))
        assert died["point"] == side, died
        assert set(kind.tables) <= set(died["inserted"]), (kind.doc, died)
        # The killed transaction held every record of the write, whichever side it died on.
        records = Counter(t for t in died["inserted"] if t in TABLES.values())
        assert records == Counter(TABLES[k[0]] for k in kind.written), (kind.doc, died)

        # First verify, on the files exactly as the kill left them (a load may migrate).
        verified = verify(store, anchors=() if anchor is None else (anchor,))
        assert verified.problems == (), verified.problems
        with EffectLog.load(run_id, store) as loaded:
            history = loaded.history()
        found = tuple(key(r) for r in history.records())
        figures.update(
            lost=len([k for k in setup if k not in found]), committed=len(found) - len(setup)
        )
        expected = setup if side == "before" else setup + kind.written
        assert found == expected, kind.doc
        run_exists = run_id in {r.run_id for r in list_runs(store)}
        assert run_exists == (kind.run_after if side == "after" else not kind.new_run), kind.doc
        if found:
            head = run_head(store, run_id)  # the whole chain verifies, up to the last record
            assert head.seq == found[-1][2]
            if side == "before" and anchor is not None:
                assert head == anchor, "the run's head did not move"

        # The store stays usable: recovery appends exactly the outcomes still missing, once.
        with EffectLog.load(run_id, store) as loaded:
            with_outcome = {o.effect_id for o in history.outcomes}
            missing = [c.effect_id for c in history.claims if c.effect_id not in with_outcome]
            recovered = loaded.recover_interrupted()
            figures["recovered_after"] = len(recovered)
            assert [o.effect_id for o in recovered] == missing
        with EffectLog.load(run_id, store) as again:
            assert again.recover_interrupted() == ()
            claim_small(again, "later")  # and the dead writer left no lock behind
            assert again.history().records()[-1].seq == len(found) + len(recovered) + 1
        assert verify(store).problems == ()
        figures["passed"] = True
    finally:
        figures["seconds"] = round(time.monotonic() - started, 2)
        report(figures)
