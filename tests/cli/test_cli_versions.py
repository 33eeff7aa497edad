"""A store at a schema revision the library cannot use: one line from every command, exit 1.

A store written by a newer version of the library (its revision is one this version does
not ship) is refused by the reading commands and by the writing ones alike, naming both
revisions and saying to upgrade the package. A store whose recorded revision was set back
by hand below what its tables are is refused by the next write (the migration would apply
again what is there), naming the recorded revision, the one its tables are and the
statement that records it; ``ledger verify`` names its revision. Nothing is changed.
"""

from __future__ import annotations

import shutil
import sqlite3
from pathlib import Path

import pytest

from ledger.effect_log import EffectLog
from ledger.sqlite.engine import head_revision
from tests.builders import fs_ref, ledger, ledger_all, op, sha

DB = "ledger.sqlite3"
RUN = "5e1f0c2a9b3d4e6f8a0b1c2d3e4f5a6b"


@pytest.fixture(scope="module")
def made(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A store with one run of one claim, and that run exported; the store's directory first."""
    base = tmp_path_factory.mktemp("versions")
    store = base / "store"
    with EffectLog(RUN, store) as log:
        log.claim(effect_id="e1", action_id="a1", operation=op(), impact_scope=[fs_ref("/a")])
    exported = base / "other.jsonl"
    result = ledger("export", RUN, "-o", str(exported), "--store", str(store))
    assert result.returncode == 0, result.stderr
    return store, exported


def _at(made: tuple[Path, Path], tmp_path: Path, revision: str) -> Path:
    store = tmp_path / "store"
    shutil.copytree(made[0], store)
    conn = sqlite3.connect(store / DB)
    try:
        with conn:
            conn.execute("UPDATE alembic_version SET version_num = ?", (revision,))
    finally:
        conn.close()
    return store


def _contents(store: Path) -> dict[str, str]:
    """Every file of the store and the digest of its bytes (a writer that opens and is
    refused may create and remove its lock and WAL files: the directory's time moves)."""
    return {path.name: sha(path.read_bytes()) for path in sorted(store.iterdir())}


def _one_line(stderr: str) -> str:
    assert stderr.count("\n") == 1, stderr
    assert "Traceback" not in stderr, stderr
    return stderr


def test_every_command_refuses_a_store_of_a_newer_version_in_one_line(
    made: tuple[Path, Path], tmp_path: Path
) -> None:
    """status, runs, show, verify, export and import: exit 1, both revisions, upgrade the package."""
    store = _at(made, tmp_path, "0099")
    before = _contents(store)
    at = ("--store", str(store))
    results = ledger_all(
        ("status", *at),
        ("runs", *at),
        ("show", RUN[:8], *at),
        ("verify", *at),
        ("export", RUN, *at),
        ("import", "--run", "f" * 32, str(made[1]), *at),
    )
    for result in results:
        assert result.returncode == 1, (result.args, result.stdout, result.stderr)
        said = _one_line(result.stderr)
        assert "is at schema revision 0099, which this version of the library does not know" in (
            said
        ), result.args
        assert f"(the newest it knows is {head_revision()})" in said, result.args
        assert "upgrade the tool-ledger package" in said, result.args
    assert _contents(store) == before


def test_a_write_to_a_store_set_back_to_an_old_revision_says_what_its_tables_are(
    made: tuple[Path, Path], tmp_path: Path
) -> None:
    """import (a writer): exit 1, one line naming both revisions and the repair; verify names it.

    Before, the import failed with the migration's raw "duplicate column name".
    """
    head = head_revision()
    store = _at(made, tmp_path, "0009")
    before = _contents(store)
    imported, verified = ledger_all(
        ("import", "--run", "f" * 32, str(made[1]), "--store", str(store)),
        ("verify", "--store", str(store)),
    )
    assert imported.returncode == 1, imported
    said = _one_line(imported.stderr)
    assert "records schema revision 0009 but its tables do not match it" in said
    assert f"its tables are revision {head}'s" in said
    assert f"UPDATE alembic_version SET version_num = '{head}'" in said
    assert "nothing was changed" in said
    assert verified.returncode == 1, verified
    assert "schema: revision 0009 " in verified.stdout, verified.stdout
    assert _contents(store) == before
