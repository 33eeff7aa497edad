"""Forensic reads: one consistent snapshot, no file created or changed when it can be avoided."""

from __future__ import annotations

import hashlib
from pathlib import Path

from sqlalchemy import Connection

from ledger.effect_log import EffectLog, new_run_id
from ledger.sqlite.reads import read
from tests.builders import op, python_stdout

WRITER = """
import sys
from ledger import effects as fx
from ledger.effect_log import EffectLog
with EffectLog.load(sys.argv[2], sys.argv[1]) as log:
    for i in range(50, 400):
        log.claim(effect_id=f"e{i}", action_id="a", operation=fx.OperationRef("w", "", "0" * 64),
                  impact_scope=[fx.ResourceRef("fs", f"/w/{i}", "target")])
"""


def _files(directory: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(directory.iterdir())}


def _store(store_dir: Path, claims: int = 50) -> str:
    run_id = new_run_id()
    with EffectLog(run_id, store_dir) as log:
        for i in range(claims):
            log.claim(effect_id=f"e{i}", action_id="a", operation=op(), impact_scope=[])
    return run_id


def _count(conn: Connection) -> int:
    return int(conn.exec_driver_sql("SELECT count(*) FROM claims").scalar_one())


def test_a_read_of_a_quiet_store_creates_and_changes_no_file(store_dir: Path) -> None:
    """Reading a closed store leaves exactly the same files with exactly the same bytes."""
    _store(store_dir)
    before = _files(store_dir)
    assert read(store_dir, _count) == 50
    assert _files(store_dir) == before


def test_a_checkpoint_during_an_immutable_read_makes_it_read_again(store_dir: Path) -> None:
    """When a writer commits and checkpoints while an immutable read runs, the read is redone safely."""
    run_id = _store(store_dir)
    calls: list[int] = []

    def query(conn: Connection) -> int:
        first = _count(conn)
        if not calls:
            python_stdout(WRITER, store_dir, run_id, timeout=120)
        calls.append(first)
        return _count(conn)

    assert read(store_dir, query) == 400
    assert calls == [50, 400]


def test_a_store_with_a_wal_is_read_with_its_wal(store_dir: Path) -> None:
    """Commits still in the WAL of an open writer are seen."""
    run_id = _store(store_dir, claims=3)
    with EffectLog.load(run_id, store_dir) as log:
        log.claim(effect_id="late", action_id="a", operation=op(), impact_scope=[])
        assert (store_dir / "ledger.sqlite3-wal").exists()
        assert read(store_dir, _count) == 4
