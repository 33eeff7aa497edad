"""`ledger status` judges every run whose records it could show, listed in `runs` or not.

A run whose row in `runs` was removed from outside keeps its records, and
`effect_status` reads them: the run does not validate ("records but no row in runs"),
so `status --unresolved` names it and exits 1 even when none of its effects is
unresolved, as for any run a forged row settled.
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

from ledger import effects as fx
from ledger.effect_log import EffectLog, new_run_id
from tests.builders import fs_ref, ledger, op

pytestmark = pytest.mark.program


def _settled_run(store: Path) -> str:
    """A run of one effect that failed and did nothing: nothing unresolved in it."""
    run_id = new_run_id()
    with EffectLog(run_id, store) as log:
        log.claim(
            effect_id="e1", action_id="act-1", operation=op(), impact_scope=(fs_ref("/srv/x"),)
        )
        log.outcome(effect_id="e1", execution=fx.ExecutionOutcome.FAILED, impact=fx.Impact.NONE)
    return run_id


def _remove_from_runs(store: Path, run_id: str) -> None:
    """Delete the run's row in `runs` as the file's owner can: guards dropped, keys off."""
    conn = sqlite3.connect(store / "ledger.sqlite3", isolation_level=None)
    try:
        triggers = conn.execute(
            "SELECT name, sql FROM sqlite_master WHERE type = 'trigger'"
        ).fetchall()
        conn.execute("PRAGMA foreign_keys = OFF")
        conn.execute("BEGIN IMMEDIATE")
        for name, _ in triggers:
            conn.execute(f'DROP TRIGGER "{name}"')
        for table in ("run_writers", "runs"):
            conn.execute(f"DELETE FROM {table} WHERE run_id = ?", (run_id,))
        for _, sql in triggers:
            conn.execute(sql)
        conn.execute("COMMIT")
    finally:
        conn.close()


def test_a_run_missing_from_runs_is_named_with_nothing_unresolved(tmp_path: Path) -> None:
    store = tmp_path / "store"
    kept, orphan = _settled_run(store), _settled_run(store)
    _remove_from_runs(store, orphan)
    for args in (("status", "--unresolved"), ("status", "--unresolved", "--json")):
        result = ledger(*args, "--store", str(store))
        assert result.returncode == 1, result.stderr
        assert "Traceback" not in result.stderr
        (warning,) = result.stderr.splitlines()
        assert f"run {orphan} does not validate" in warning
        assert "no row in runs" in warning
        assert kept not in result.stderr
    rows = json.loads(result.stdout)
    # Its verdicts are not believed: its effect is shown, carrying why.
    assert [(r["run_id"], r["effect_id"]) for r in rows] == [(orphan, "e1")]
    assert "no row in runs" in rows[0]["run_problem"]
