"""The roles script of docs/postgresql.md: the writer cannot change history, guards or not."""

from __future__ import annotations

import itertools
import os
import re
from pathlib import Path

import psycopg
import pytest

from ledger.effect_log import EffectLog, new_run_id
from tests.builders import REPO, ledger, write_five_approvals, write_five_records
from tests.postgresql.server import server

DOC = REPO / "docs" / "postgresql.md"
_names = itertools.count(1)


def _sql_blocks() -> list[str]:
    return re.findall(r"```sql\n(.*?)```", DOC.read_text(), re.DOTALL)


def _url(user: str, database: str) -> str:
    return f"postgresql://{user}@/{database}?host={server().socket_dir}"


@pytest.fixture
def roles() -> tuple[str, str]:
    """The doc's roles and database, made on the test server under names of their own."""
    n = f"{os.getpid()}_{next(_names)}"
    owner, writer, database = f"owner_{n}", f"writer_{n}", f"ledger_roles_{n}"

    def named(sql: str) -> str:
        sql = sql.replace("ledger_owner", owner).replace("ledger_writer", writer)
        return re.sub(r"\bDATABASE ledger\b", f"DATABASE {database}", sql)

    superuser, granting = _sql_blocks()
    with server().connect(autocommit=True) as admin:
        for statement in named(superuser).split(";"):
            if statement.strip():
                admin.execute(statement)
    owner_url = _url(owner, database)
    migrated = ledger("migrate", "--store", owner_url)  # the doc's migration step, as the owner
    assert migrated.returncode == 0, migrated.stderr
    with psycopg.connect(host=str(server().socket_dir), dbname=database, user=owner) as conn:
        conn.execute(named(granting))
    return _url(owner, database), _url(writer, database)


def _as(url: str, sql: str) -> None:
    parts = re.match(r"postgresql://(\w+)@/(\w+)\?host=(.*)", url)
    assert parts is not None
    with psycopg.connect(host=parts[3], dbname=parts[2], user=parts[1], autocommit=True) as conn:
        conn.execute(sql)


def test_the_writer_role_records_runs(roles: tuple[str, str]) -> None:
    """A worker connected as the writer claims, settles, reloads and recovers as usual."""
    _owner, writer = roles
    run_id = new_run_id()
    with EffectLog(run_id, writer) as log:
        write_five_records(log)
    with EffectLog.load(run_id, writer) as log:
        assert [o.effect_id for o in log.recover_interrupted()] == ["e2"]


def test_the_writer_role_records_approvals(roles: tuple[str, str], tmp_path: Path) -> None:
    """Requests, people's answers (from another process) and a claim under a grant, as the writer.

    The run exports and imports (as a new run) as the writer too.
    """
    _owner, writer = roles
    run_id = new_run_id()
    with EffectLog(run_id, writer) as log:
        write_five_records(log)
    asked, seq = write_five_approvals(run_id, writer)
    with EffectLog.load(run_id, writer) as log:
        states = {view.approval_id: view.state for view in log.approvals()}
        assert log.history().records()[-1].seq == seq
    assert states[asked["refund"].approval_id] == "used"
    assert states[asked["wipe"].approval_id] == "denied"
    exported = tmp_path / "run.jsonl"
    done = ledger("export", run_id, "--store", writer, "-o", str(exported))
    assert done.returncode == 0, done.stderr
    done = ledger("import", str(exported), "--store", writer, "--run", new_run_id())
    assert done.returncode == 0, done.stderr
    verified = ledger("verify", "--store", writer)
    assert verified.returncode == 0, verified.stderr


@pytest.mark.parametrize(
    "sql",
    [
        "UPDATE claims SET operation = 'forged'",
        "DELETE FROM outcomes",
        "TRUNCATE observations",
        # Only the claims' trigger, running as the owner, writes the scope index.
        (
            "INSERT INTO scope_index SELECT run_id, kind, '/elsewhere', effect_id, position"
            " FROM scope_index"
        ),
        "DELETE FROM scope_index",
        # A person's answer stands as it was given.
        "UPDATE approval_decisions SET decision = 'granted'",
        "DELETE FROM approval_requests",
    ],
)
def test_the_writer_cannot_change_history_even_with_the_guards_dropped(
    roles: tuple[str, str], sql: str
) -> None:
    """With every trigger dropped by the owner, the writer's UPDATE, DELETE and TRUNCATE are denied."""
    owner, writer = roles
    with EffectLog(new_run_id(), writer) as log:
        write_five_records(log)
    for table in ("claims", "outcomes", "observations", "scope_index"):
        for event in ("update", "delete", "truncate"):
            _as(owner, f"DROP TRIGGER {table}_no_{event} ON {table}")
    with pytest.raises(psycopg.errors.InsufficientPrivilege):
        _as(writer, sql)
