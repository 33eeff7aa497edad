"""What only a PostgreSQL store has: URLs, its settings read back, migrations, its guards."""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import pytest
from alembic import command
from alembic.config import Config
from alembic.util import CommandError
from sqlalchemy import create_engine

from ledger import _chain
from ledger import effects as fx
from ledger._sql.revisions import alembic_config, head_revision
from ledger._sql.rows import chain_hash
from ledger.effect_log import EffectLog, EffectPersistenceError, new_run_id
from ledger.postgresql.engine import parse
from tests.builders import (
    claim_bare,
    ledger,
    run_python,
    write_every_column,
    write_five_records,
    write_recorded_values,
)
from tests.postgresql import driver
from tests.postgresql.server import SUPERUSER, server
from tests.sqlite.test_chain import rows_before_0009


def _with_password(url: str, password: str) -> str:
    parts = urlsplit(url)
    return urlunsplit(parts._replace(netloc=f"{SUPERUSER}:{password}@"))


def test_a_log_names_its_store_by_url_without_the_password(url: str) -> None:
    """log.path is None and log.store is the URL with its password removed."""
    secret = _with_password(url, "s3cret")
    with EffectLog(new_run_id(), secret) as log:
        assert log.path is None
        assert "s3cret" not in log.store
        assert log.store == url
        assert "s3cret" not in repr(log)


def test_postgresql_psycopg_urls_name_the_same_store(url: str) -> None:
    """postgresql+psycopg:// is accepted as well as postgresql://."""
    run_id = new_run_id()
    with EffectLog(run_id, url) as log:
        claim_bare(log)
    explicit = url.replace("postgresql://", "postgresql+psycopg://")
    with EffectLog.load(run_id, explicit) as again:
        assert [c.effect_id for c in again.history().claims] == ["e1"]


def test_ledger_url_is_the_default_store_and_wins_over_ledger_dir(
    url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With both set, a log given no store writes to $LEDGER_URL, and $LEDGER_DIR stays empty."""
    monkeypatch.setenv("LEDGER_DIR", str(tmp_path / "dir"))
    monkeypatch.setenv("LEDGER_URL", url)
    run_id = new_run_id()
    with EffectLog(run_id) as log:
        claim_bare(log)
    assert not (tmp_path / "dir").exists()
    assert driver.POSTGRESQL.query(url, "SELECT run_id FROM runs") == [(run_id,)]


def test_without_psycopg_a_url_names_the_extra_to_install(url: str) -> None:
    """A PostgreSQL URL without the driver installed raises EffectPersistenceError naming the extra."""
    script = (
        "import sys\n"
        "sys.modules['psycopg'] = None  # as if it were not installed\n"
        "from ledger.effect_log import EffectLog, EffectPersistenceError\n"
        "try:\n"
        "    EffectLog('0' * 32, sys.argv[1])\n"
        "except EffectPersistenceError as e:\n"
        "    print(e)\n"
    )
    done = run_python(script, url)
    assert done.returncode == 0, done.stderr
    assert "tool-ledger[postgresql]" in done.stdout


@pytest.mark.parametrize(
    ("setting", "value"), [("synchronous_commit", "off"), ("synchronous_commit", "local")]
)
def test_a_session_whose_commits_are_not_durable_is_refused(
    url: str, setting: str, value: str
) -> None:
    """A database that sets synchronous_commit weaker than on is refused, naming the setting."""
    name = driver.database(url)
    with server().connect(autocommit=True) as admin:
        admin.execute(f"ALTER DATABASE {name} SET {setting} = {value}")
    with EffectLog(new_run_id(), url) as log, pytest.raises(EffectPersistenceError) as refused:
        claim_bare(log)
    assert setting in str(refused.value)
    assert not driver.POSTGRESQL.exists(url)


def test_many_workers_opening_a_new_store_at_once_migrate_it_once(url: str) -> None:
    """Eight processes' first claims on an empty database all land; the schema is migrated once."""
    script = (
        "import sys\n"
        "from ledger.effect_log import EffectLog, new_run_id\n"
        "from tests.builders import claim_bare\n"
        "with EffectLog(new_run_id(), sys.argv[1]) as log:\n"
        "    claim_bare(log)\n"
    )
    with ThreadPoolExecutor(8) as pool:
        done = list(pool.map(lambda _: run_python(script, url), range(8)))
    assert [d.returncode for d in done] == [0] * 8, [d.stderr[-500:] for d in done]
    assert driver.POSTGRESQL.query(url, "SELECT count(*) FROM runs") == [(8,)]
    assert driver.POSTGRESQL.query(url, "SELECT version_num FROM alembic_version") == [
        (head_revision(),)
    ]


def _alembic(step: Callable[[Config, str], None], url: str, revision: str) -> None:
    """Run an Alembic command (upgrade, downgrade) on the database at ``url``, to ``revision``."""
    engine = create_engine(parse(url))
    try:
        with engine.begin() as conn:
            step(alembic_config(conn), revision)
    finally:
        engine.dispose()


# What PostgreSQL reads of a store's schema, from its catalogs.
_CATALOG = {
    "columns": "SELECT table_name, ordinal_position, column_name, data_type, is_nullable,"
    " column_default FROM information_schema.columns WHERE table_schema = current_schema()"
    " ORDER BY 1, 2",
    "constraints": "SELECT conrelid::regclass::text, conname, pg_get_constraintdef(oid)"
    " FROM pg_constraint WHERE connamespace = current_schema()::regnamespace ORDER BY 1, 2",
    "indexes": "SELECT tablename, indexname, indexdef FROM pg_indexes"
    " WHERE schemaname = current_schema() ORDER BY 1, 2",
    "triggers": "SELECT tgrelid::regclass::text, tgname, pg_get_triggerdef(oid), tgenabled"
    " FROM pg_trigger WHERE NOT tgisinternal ORDER BY 1, 2",
    "functions": "SELECT proname, pg_get_functiondef(oid) FROM pg_proc"
    " WHERE pronamespace = current_schema()::regnamespace ORDER BY 1",
    "views": "SELECT viewname, definition FROM pg_views WHERE schemaname = current_schema()"
    " ORDER BY 1",
    "grants": "SELECT table_name, grantee, privilege_type FROM information_schema.role_table_grants"
    " WHERE table_schema = current_schema() ORDER BY 1, 2, 3",
    "version": "SELECT version_num FROM alembic_version",
}


def test_a_new_store_is_created_as_the_migrations_leave_it(url: str) -> None:
    """A new store is created at head in one step, with the schema the whole history builds."""
    with EffectLog(new_run_id(), url) as log:
        claim_bare(log)
    replayed = server().new_database()
    _alembic(command.upgrade, replayed, "head")
    created = {what: driver.POSTGRESQL.query(url, sql) for what, sql in _CATALOG.items()}
    assert created == {
        what: driver.POSTGRESQL.query(replayed, sql) for what, sql in _CATALOG.items()
    }
    assert all(created.values())


def test_alembic_check_finds_no_drift_between_the_tables_and_the_migrations(url: str) -> None:
    """The same Alembic history builds on PostgreSQL exactly the tables the library declares."""
    engine = create_engine(parse(url))
    try:
        with engine.begin() as conn:
            command.upgrade(alembic_config(conn), "head")
        with engine.begin() as conn:
            command.check(alembic_config(conn))  # raises when autogenerate finds a difference
    except CommandError as e:  # pragma: no cover - the failure's message is the finding
        pytest.fail(str(e))
    finally:
        engine.dispose()


@pytest.mark.parametrize(
    "sql",
    [
        "UPDATE claims SET operation = 'forged'",
        "DELETE FROM outcomes",
        "TRUNCATE observations",
        "UPDATE runs SET created_at = created_at WHERE false",
        "INSERT INTO claims SELECT * FROM claims ON CONFLICT (run_id, seq) DO UPDATE SET operation = 'x'",
    ],
)
def test_history_is_append_only_in_plain_sql(url: str, sql: str) -> None:
    """UPDATE, DELETE, TRUNCATE and upserts of record tables are refused, saying append-only."""
    with EffectLog(new_run_id(), url) as log:
        write_five_records(log)
    counts = driver.POSTGRESQL.row_counts(url)
    with pytest.raises(Exception, match="append-only"):
        driver.execute(url, sql)
    assert driver.POSTGRESQL.row_counts(url) == counts


def test_a_record_that_does_not_extend_its_chain_is_refused(url: str) -> None:
    """An inserted claim whose prev_hash is not its predecessor's hash is refused by the guards."""
    run_id = new_run_id()
    with EffectLog(run_id, url) as log:
        claim_bare(log, "e1")
    with pytest.raises(Exception, match="does not extend the chain"):
        driver.execute(
            url,
            "INSERT INTO claims SELECT run_id, 2, 'e2', action_id, operation, backend,"
            " args_sha256, 0, 0, recorded_at, repeat('0', 64), hash, kind,"
            " idempotency_key, NULL FROM claims WHERE run_id = ?",
            (run_id,),
        )


def test_the_forensics_recipes_run_in_psql(url: str) -> None:
    """effect_status and unsettled_claims answer in the real psql, read-only."""
    with EffectLog(new_run_id(), url) as log:
        write_five_records(log)
    psql = [
        "psql",
        "--no-psqlrc",
        "-At",
        "-v",
        "ON_ERROR_STOP=1",
        url.replace("?", "?options=-c%20default_transaction_read_only%3Don&"),
    ]
    status = subprocess.run(
        [
            *psql,
            "-c",
            "SELECT effect_id, verdict, unresolved_impact FROM effect_status ORDER BY seq",
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    assert status.returncode == 0, status.stderr
    assert status.stdout.split() == ["e1|unverified|1", "e2|pending|1"]
    refused = subprocess.run(
        [*psql, "-c", "CREATE TABLE x (y int)"], capture_output=True, text=True, check=False
    )
    assert refused.returncode != 0
    assert "read-only transaction" in refused.stderr


@pytest.mark.parametrize(
    "given",
    [
        Path("postgresql://ledger@/db"),  # a URL made a Path: "//" folds to "/"
        "postgres://ledger@/db",  # another spelling of the scheme
        "postgresql+asyncpg://ledger@/db",  # another driver
    ],
    ids=["path", "postgres-scheme", "other-driver"],
)
def test_a_url_that_names_no_store_is_refused_not_made_a_directory(
    given: object, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A mangled or foreign PostgreSQL URL is a ValueError, never a SQLite store in the cwd."""
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ValueError, match="not a store directory"):
        EffectLog(new_run_id(), given)  # type: ignore[arg-type]
    assert list(tmp_path.iterdir()) == []


def test_verify_names_a_dropped_disabled_or_foreign_trigger(url: str) -> None:
    """ledger verify reports each guard dropped or disabled, and each trigger not the library's."""
    with EffectLog(new_run_id(), url) as log:
        write_five_records(log)
    assert ledger("verify", "--store", url).returncode == 0
    driver.execute(url, "DROP TRIGGER claims_no_update ON claims")
    driver.execute(url, "ALTER TABLE outcomes DISABLE TRIGGER outcomes_no_delete")
    driver.execute(
        url,
        "CREATE TRIGGER sneaky BEFORE INSERT ON claims FOR EACH ROW"
        " EXECUTE FUNCTION ledger_refuse()",
    )
    done = ledger("verify", "--store", url)
    assert done.returncode == 1
    assert "trigger claims_no_update on claims is missing" in done.stdout
    assert "trigger outcomes_no_delete is disabled" in done.stdout
    assert "trigger sneaky on claims is not the library's" in done.stdout


def test_a_store_with_scope_and_obligation_tables_moves_them_into_its_claims(
    url: str, tmp_path: Path
) -> None:
    """Migration 0009 on PostgreSQL: a store at 0008 with records keeps them, and their hashes."""
    model = new_run_id()
    write_every_column(
        tmp_path / "model", model, before_0013=True
    )  # version 1 and 2 claims, a resolution
    with EffectLog.load(model, tmp_path / "model") as log:
        records = log.history().records()
    _alembic(command.upgrade, url, "0008")
    run_id = new_run_id()
    with driver.connect(url) as conn:
        # The guards installed are the library's of today, written for revision 0009.
        conn.execute("ALTER TABLE claims DISABLE TRIGGER USER")
        conn.execute("INSERT INTO runs VALUES (%s, %s)", (run_id, fx.utc_now()))
        head = _chain.GENESIS
        for record in records:
            for table, row in rows_before_0009(run_id, record, head):
                columns = ", ".join(row)
                marks = ", ".join(["%s"] * len(row))
                conn.execute(
                    f"INSERT INTO {table} ({columns}) VALUES ({marks})", tuple(row.values())
                )
            head = chain_hash(run_id, record, head)
        conn.execute("ALTER TABLE claims ENABLE TRIGGER USER")
    with EffectLog.load(run_id, url) as log:
        assert log.history().records() == records
    claims = [r for r in records if isinstance(r, fx.EffectClaim)]
    assert driver.POSTGRESQL.query(
        url,
        "SELECT effect_id, position, locator FROM impact_scope WHERE run_id = ?"
        " ORDER BY effect_id, position",
        (run_id,),
    ) == sorted((c.effect_id, i, r.locator) for c in claims for i, r in enumerate(c.impact_scope))
    assert driver.POSTGRESQL.query(
        url, "SELECT count(*) FROM obligations WHERE run_id = ?", (run_id,)
    ) == [(sum(len(c.obligations) for c in claims),)]
    assert driver.POSTGRESQL.query(
        url,
        "SELECT count(*) FROM pg_tables WHERE tablename IN ('impact_scope', 'obligations')",
    ) == [(0,)]
    result = ledger("verify", "--store", url)
    assert result.returncode == 0, result.stdout + result.stderr


def test_a_store_at_0011_gains_steps_and_recorded_values_on_its_next_write(url: str) -> None:
    """Migration 0012 on PostgreSQL: a store at 0011 with records keeps their hashes.

    The next write upgrades it; new claims and outcomes hold a step, arguments and a
    result (a JSON null too), load back as written and show in the store's columns and
    in effect_status; ``ledger verify`` passes.
    """
    run_id = new_run_id()
    write_every_column(url, run_id, before_0013=True)  # type: ignore[arg-type]  # a URL names the store
    links = "SELECT seq, hash FROM claims WHERE run_id = ? UNION ALL SELECT seq, hash FROM outcomes WHERE run_id = ? ORDER BY 1"
    before = driver.POSTGRESQL.query(url, links, (run_id, run_id))
    _alembic(command.downgrade, url, "0011")
    assert driver.POSTGRESQL.query(
        url,
        "SELECT count(*) FROM information_schema.columns"
        " WHERE table_schema = current_schema() AND column_name IN ('step', 'args', 'result')",
    ) == [(0,)]
    with EffectLog.load(run_id, url) as log:
        old = log.history().records()
        write_recorded_values(log, fx.ResourceRef("fs", "/w/b", "target"))
        records = log.history().records()
    assert driver.POSTGRESQL.query(url, "SELECT version_num FROM alembic_version") == [
        (head_revision(),)
    ]
    assert driver.POSTGRESQL.query(url, links, (run_id, run_id))[: len(before)] == before
    assert driver.POSTGRESQL.query(
        url,
        "SELECT c.effect_id, c.step, c.args, o.result FROM claims AS c"
        " JOIN outcomes AS o ON o.run_id = c.run_id AND o.effect_id = c.effect_id"
        " WHERE c.run_id = ? AND c.seq > ? ORDER BY c.seq",
        (run_id, old[-1].seq),
    ) == [
        (
            "r1",
            "plan/1: write b",
            '{"n":[1,2.5,null,true],"path":"/w/b","text":"caf\u00e9 \u2603"}',
            '{"note":"\u00e9t\u00e9","written":6}',
        ),
        ("r2", "plan/2", None, "null"),
        ("r3", "", "[]", None),
        ("r4", "", "[]", '"done"'),
    ]
    assert driver.POSTGRESQL.query(
        url,
        "SELECT effect_id, step FROM effect_status WHERE run_id = ? AND seq > ? ORDER BY seq",
        (run_id, old[-1].seq),
    ) == [("r1", "plan/1: write b"), ("r2", "plan/2"), ("r3", ""), ("r4", "")]
    with EffectLog.load(run_id, url) as log:
        assert log.history().records() == records
    result = ledger("verify", "--store", url)
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.program
def test_every_read_command_answers_on_a_database_with_no_schema_yet(url: str) -> None:
    """An empty database holds no run: the reads say so, none fails on the schema it lacks.

    (A failed statement aborts a PostgreSQL transaction: the read must ask whether the
    schema is there, not try it and go on in a transaction that refuses everything after.)
    """
    for argv in (("runs",), ("status",), ("verify",), ("runs", "--json")):
        done = ledger(*argv, "--store", url)
        assert done.returncode == 0, (argv, done.stdout, done.stderr)
        assert "Traceback" not in done.stderr
