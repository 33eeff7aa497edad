"""``ledger migrate``: create a store or bring its schema to head, on either backend.

Run twice it changes nothing; a store a newer version wrote, and a database that holds
other tables, are refused in one line with exit 1 and left as they were.
"""

from __future__ import annotations

import json
import re
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
import sqlalchemy as sa
from alembic import command

from ledger._paths import DB_NAME
from ledger.effect_log import EffectLog, new_run_id
from ledger.sqlite.engine import alembic_config, head_revision, revisions
from tests.builders import CHILD_TIMEOUT, fs_ref, ledger, op, subprocess_env
from tests.postgresql import driver
from tests.postgresql.server import server

pytestmark = pytest.mark.program


def _revision(db: Path) -> str:
    with sqlite3.connect(db) as conn:
        return str(conn.execute("SELECT version_num FROM alembic_version").fetchone()[0])


def test_migrate_creates_a_store_then_finds_it_current(tmp_path: Path) -> None:
    """A new directory becomes a store at head; the second run says so and changes nothing."""
    store = tmp_path / "store"
    done = ledger("migrate", "--store", str(store))
    assert done.returncode == 0, done.stderr
    assert done.stdout == f"created the store {store} at schema revision {head_revision()}\n"
    assert _revision(store / DB_NAME) == head_revision()
    again = ledger("migrate", "--store", str(store), "--json")
    assert again.returncode == 0, again.stderr
    assert json.loads(again.stdout) == {
        "store": str(store),
        "action": "current",
        "from": head_revision(),
        "revision": head_revision(),
    }
    plain = ledger("migrate", "--store", str(store))
    assert plain.stdout == f"the store {store} is already at schema revision {head_revision()}\n"
    listed = ledger("runs", "--store", str(store), "--json")  # a store the readers accept
    assert (listed.returncode, listed.stdout) == (0, "[]\n")


def test_migrate_upgrades_a_store_of_an_older_revision(tmp_path: Path) -> None:
    """A store left at the revision before head is upgraded, its runs kept."""
    older = revisions()[-2]
    tmp_path.chmod(0o700)
    engine = sa.create_engine(f"sqlite:///{tmp_path / DB_NAME}")
    try:
        with engine.begin() as conn:
            command.upgrade(alembic_config(conn), older)
    finally:
        engine.dispose()
    (tmp_path / DB_NAME).chmod(0o600)
    done = ledger("migrate", "--store", str(tmp_path))
    assert done.returncode == 0, done.stderr
    assert done.stdout == (
        f"upgraded the store {tmp_path} from schema revision {older} to {head_revision()}\n"
    )
    assert _revision(tmp_path / DB_NAME) == head_revision()
    again = ledger("migrate", "--store", str(tmp_path), "--json")
    assert json.loads(again.stdout)["action"] == "current"


def test_migrate_refuses_a_store_of_a_newer_version(tmp_path: Path) -> None:
    """A revision this version does not know: one line naming both, exit 1, nothing changed."""
    run_id = new_run_id()
    with EffectLog(run_id, tmp_path) as log:
        log.claim(effect_id="e1", action_id="a1", operation=op(), impact_scope=[fs_ref("/a")])
    with sqlite3.connect(tmp_path / DB_NAME) as conn:
        conn.execute("UPDATE alembic_version SET version_num = '0099'")
    done = ledger("migrate", "--store", str(tmp_path))
    assert done.returncode == 1
    assert done.stdout == ""
    assert done.stderr.count("\n") == 1
    assert "is at schema revision 0099, which this version of the library does not know" in (
        done.stderr
    )
    assert _revision(tmp_path / DB_NAME) == "0099"


def test_migrate_refuses_a_database_that_is_not_a_store(tmp_path: Path) -> None:
    """A database of other tables is not made a store: one line, exit 1, its tables alone."""
    tmp_path.chmod(0o700)
    with sqlite3.connect(tmp_path / DB_NAME) as conn:
        conn.execute("CREATE TABLE customers (name TEXT)")
    (tmp_path / DB_NAME).chmod(0o600)
    done = ledger("migrate", "--store", str(tmp_path))
    assert done.returncode == 1
    assert done.stderr == (
        f"Error: {tmp_path / DB_NAME} holds tables but no ledger schema: it is not a store; "
        "nothing was changed\n"
    )
    with sqlite3.connect(tmp_path / DB_NAME) as conn:
        tables = conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'").fetchall()
    assert tables == [("customers",)]


def test_migrate_creates_and_upgrades_a_postgresql_store() -> None:
    """The same on PostgreSQL: created, then current; another database's tables refused."""
    url = server().new_database()
    done = ledger("migrate", "--store", url, "--json")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["action"] == "created"
    assert driver.POSTGRESQL.query(url, "SELECT version_num FROM alembic_version") == [
        (head_revision(),)
    ]
    again = ledger("migrate", "--store", url)
    assert again.returncode == 0, again.stderr
    assert again.stdout.endswith(f"is already at schema revision {head_revision()}\n")
    with EffectLog(new_run_id(), url) as log:  # a store the library writes
        log.claim(effect_id="e1", action_id="a1", operation=op(), impact_scope=[fs_ref("/a")])
    # A reader of it needs no Alembic (it never migrates).
    read = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "ledger", "runs", "--store", url],
        capture_output=True,
        text=True,
        env=subprocess_env(),
        timeout=CHILD_TIMEOUT,
        check=False,
    )
    assert read.returncode == 0, read.stderr[-2000:]
    assert re.search(r"\|\s*psycopg$", read.stderr, re.MULTILINE)
    assert not re.search(r"\|\s*alembic(\.\S*)?$", read.stderr, re.MULTILINE)

    other = server().new_database()
    driver.execute(other, "CREATE TABLE customers (name text)")
    refused = ledger("migrate", "--store", other)
    assert refused.returncode == 1
    assert "holds tables but no ledger schema: it is not a store" in refused.stderr
    assert refused.stderr.count("\n") == 1
    assert driver.POSTGRESQL.query(
        other,
        "SELECT table_name FROM information_schema.tables WHERE table_schema = current_schema()",
    ) == [("customers",)]
