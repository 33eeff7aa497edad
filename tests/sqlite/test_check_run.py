"""The forensic reads' check of a run is ``EffectLog.load``'s, record for record.

``ledger status`` and ``ledger runs`` validate each run with ``rows.check_run``, which
lets each record go once it is checked instead of holding the run. It must refuse
exactly what ``rows.load_run`` refuses, saying the same: every edit of every column
of every record (the corpus of tests/sqlite/test_field_tamper.py) is read by both.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from sqlalchemy import Connection

from ledger.errors import EffectPersistenceError
from ledger.sqlite import rows
from ledger.sqlite.reads import read
from tests.sqlite.test_field_tamper import Base, _edits, _tamper, base

__all__ = ["base"]  # the fixture, shared with the tamper test


def _both(directory: Path, run_id: str) -> tuple[str, str]:
    """What load_run and check_run say of the run: its head and size, or the refusal."""

    def query(conn: Connection) -> tuple[str, str]:
        def loaded() -> tuple[str, int]:
            history, head = rows.load_run(conn, run_id)
            return head, len(history.records())

        said: list[str] = []
        for check in (loaded, lambda: rows.check_run(conn, run_id)):
            try:
                head, records = check()
            except EffectPersistenceError as e:
                said.append(f"{type(e).__name__}: {e}")
            else:
                said.append(f"valid, head {head}, {records} records")
        return said[0], said[1]

    return read(directory, query)


def test_a_valid_run_has_the_same_head(base: Base) -> None:
    loaded, checked = _both(base.directory, base.run_id)
    assert loaded == checked
    assert loaded.startswith("valid")


def test_every_changed_field_is_refused_alike(base: Base, tmp_path: Path) -> None:
    edits = list(_edits(base))
    assert len(edits) > 60
    differ: list[str] = []
    compared = 0
    for i, edit in enumerate(edits):
        directory = tmp_path / str(i)
        shutil.copytree(base.directory, directory)
        if _tamper(directory, edit):
            for run_id in (base.run_id, base.other):
                loaded, checked = _both(directory, run_id)
                compared += 1
                if loaded != checked:
                    differ.append(f"{edit}:\n  load_run:  {loaded}\n  check_run: {checked}")
        shutil.rmtree(directory)
    assert compared > 100
    assert not differ, "\n".join(differ)
