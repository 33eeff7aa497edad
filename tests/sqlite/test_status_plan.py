"""The status views read by index: one run or one effect never scans the store.

``EXPLAIN QUERY PLAN`` is SQLite's own account of how it will run a query: a ``SCAN`` of
a table reads all of it, a ``SEARCH`` follows an index. Asking the views about one run
or one effect must only ever search. A store made at revision 0003, whose
``effect_status`` computed every claim of the store first, gets the indexed view when
the library opens it.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from ledger import effects as fx
from ledger.effect_log import EffectLog, new_run_id
from ledger.sqlite import schema as _schema
from ledger.sqlite.engine import head_revision
from tests.builders import fs_ref, op
from tests.sqlite.driver import at_revision

QUERIES = {
    "effect_status of a run": "SELECT * FROM effect_status WHERE run_id = ?",
    "effect_status of an effect": (
        "SELECT verdict FROM effect_status WHERE run_id = ? AND effect_id = ?"
    ),
    "unresolved effects of a run": (
        "SELECT effect_id FROM effect_status WHERE run_id = ? AND unresolved_impact = 1"
    ),
    "unsettled_claims of a run": "SELECT * FROM unsettled_claims WHERE run_id = ?",
}
# Rows the plan may scan: the one-row SELECTs, the tiny CTE that lists a path's ancestors,
# the one that follows an effect's retries, and the entries of one claim's JSON array
# (json_each of a claim found by index).
ALLOWED_SCANS = (
    "SCAN CONSTANT ROW",
    "SCAN pos",
    "SCAN attempt",
    "SCAN j VIRTUAL TABLE INDEX 1:",
)


def plan(db: Path, query: str) -> list[str]:
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        params = ("0" * 32, "e1")[: query.count("?")]
        return [row[3] for row in conn.execute(f"EXPLAIN QUERY PLAN {query}", params)]
    finally:
        conn.close()


def fill(log: EffectLog) -> None:
    """A run where every rule of the view has rows to look at."""
    for i in range(6):
        ref = fs_ref(f"/w/d{i % 2}/f{i}")
        log.claim(
            effect_id=f"e{i}",
            action_id="a",
            operation=op(),
            impact_scope=[ref, fs_ref(f"/w/d{i % 2}")],
            obligations=[fx.Postcondition(ref, fx.Predicate.EXISTS)],
        )
        log.outcome(
            effect_id=f"e{i}",
            execution=fx.ExecutionOutcome.REPORTED_SUCCESS,
            impact=fx.Impact.CERTAIN,
        )
        log.observe(
            observation_id=f"o{i}",
            resource=ref,
            mechanism=fx.ObservationMechanism.FILESYSTEM_STAT,
            coverage=fx.Coverage.COMPLETE,
            source_action_id="s",
            exists=True,
        )


@pytest.mark.parametrize("name", list(QUERIES))
def test_one_run_or_effect_is_read_by_index(store_dir: Path, name: str) -> None:
    with EffectLog(new_run_id(), store_dir) as log:
        fill(log)
    steps = plan(store_dir / "ledger.sqlite3", QUERIES[name])
    scans = [s for s in steps if s.startswith("SCAN") and not s.startswith(ALLOWED_SCANS)]
    assert scans == [], steps
    assert any(s.startswith("SEARCH c ") for s in steps), steps  # claims by (run_id, ...)
    # A search can still read a whole run: observations go by resource, never by seq
    # alone; scopes go by locator, at it or above it, or in the range below it (for "/",
    # every path).
    observed = [s for s in steps if s.startswith("SEARCH ob ")]
    assert all("resource_locator=?" in s for s in observed), observed
    scopes = [s for s in steps if s.startswith("SEARCH sc ")]
    assert all("locator=?" in s or "locator>? AND locator<?" in s for s in scopes), scopes
    # A claim's retries go by the index of retries, never by the run's later claims (a
    # run's statuses would cost the square of its claims).
    walks = [s for s in steps if "seq>?" in s or s.startswith("SEARCH x USING INDEX sqlite_")]
    assert not [s for s in walks if "claims" in s], steps
    if QUERIES[name].startswith("SELECT * FROM effect_status"):  # next_step is asked for
        retries = "USING INDEX ix_claims_run_id_retry_of (run_id=? AND retry_of=?)"
        assert sum(retries in s for s in steps) == 2, steps  # has a retry; its newest one


def test_the_whole_store_may_be_scanned_once(store_dir: Path) -> None:
    """Without a WHERE the claims are read once, each verdict still by index."""
    with EffectLog(new_run_id(), store_dir) as log:
        fill(log)
    steps = plan(store_dir / "ledger.sqlite3", "SELECT * FROM effect_status")
    scans = [s for s in steps if s.startswith("SCAN") and not s.startswith(ALLOWED_SCANS)]
    assert len(scans) == 1, steps
    assert scans[0].startswith("SCAN c"), steps


def test_a_store_at_0003_gets_the_indexed_view_when_opened(tmp_path: Path) -> None:
    db = tmp_path / "store" / "ledger.sqlite3"
    at_revision(db, "0003")
    # A view as an older release shipped it (any other definition stands in for it).
    old = sqlite3.connect(db, isolation_level=None)
    old.execute("DROP VIEW IF EXISTS effect_status")
    old.execute(
        "CREATE VIEW effect_status AS SELECT run_id, effect_id, 'old' AS verdict FROM claims"
    )
    old.close()

    with EffectLog(new_run_id(), db.parent) as log:
        fill(log)
        run_id = log.run_id
        expected = {
            c.effect_id: log.assess(c.effect_id).verdict.value for c in log.history().claims
        }

    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        version = conn.execute("SELECT version_num FROM alembic_version").fetchall()
        view = conn.execute("SELECT sql FROM sqlite_master WHERE name = 'effect_status'").fetchone()
        verdicts = dict(
            conn.execute("SELECT effect_id, verdict FROM effect_status WHERE run_id = ?", (run_id,))
        )
    finally:
        conn.close()
    assert version == [(head_revision(),)]
    assert view[0].strip() == _schema.EFFECT_STATUS_VIEW.strip()
    assert verdicts == expected
    assert set(expected.values()) >= {"verified", "unverified"}
