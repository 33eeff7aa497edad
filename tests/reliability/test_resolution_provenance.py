"""A resolution's writing process, in the store: it upgrades from 0012, and it cannot be edited.

On each backend: a store at revision 0012 holding a resolution (written before
resolutions recorded their writer) upgrades on its next write, keeps every hash, reads
the old resolution as one whose writer is unknown, records the next one's, and passes
``ledger verify``. A worker's resolution whose origin the store's owner rewrites to
``person`` (guards bypassed, as the owner can) breaks the run's chain at that record:
load refuses the run and ``ledger verify`` names it.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from alembic import command
from sqlalchemy import create_engine

from ledger import effects as fx
from ledger.effect_log import EffectLog, EffectPersistenceError, new_run_id
from ledger.postgresql.engine import parse
from ledger.sqlite.engine import alembic_config, head_revision
from tests.backends import Backend
from tests.builders import claim_small, ledger, settle, write_every_column
from tests.postgresql import driver as pg_driver
from tests.sqlite.driver import migrate, shell_script

WRITER = ("origin", "os_user", "host", "program", "pid")


def _downgrade(backend: Backend, location: Path | str, revision: str) -> None:
    if backend.name == "sqlite":
        migrate(Path(location) / "ledger.sqlite3", revision, down=True)
        return
    engine = create_engine(parse(str(location)))
    try:
        with engine.begin() as conn:
            command.downgrade(alembic_config(conn), revision)
    finally:
        engine.dispose()


def _links(backend: Backend, location: Path | str, run_id: str) -> list[tuple[object, ...]]:
    tables = ("claims", "outcomes", "observations", "resolutions")
    return backend.query(
        location,
        " UNION ALL ".join(f"SELECT seq, prev_hash, hash FROM {t} WHERE run_id = ?" for t in tables)
        + " ORDER BY 1",
        [run_id] * len(tables),
    )


def _verify(location: Path | str) -> tuple[int, str]:
    done = ledger("verify", "--store", str(location))
    return done.returncode, done.stdout + done.stderr


def test_a_store_at_0012_with_a_resolution_upgrades_and_verifies(
    backend: Backend, location: Path | str
) -> None:
    run_id = new_run_id()
    write_every_column(location, run_id, before_0013=True)  # type: ignore[arg-type]  # e2 resolved
    _downgrade(backend, location, "0012")
    assert backend.query(location, "SELECT version_num FROM alembic_version") == [("0012",)]
    before = _links(backend, location, run_id)
    with EffectLog.load(run_id, location) as log:  # upgrades the store
        (old,) = log.history().resolutions
        claim_small(log, "later")
        settle(log, "later", fx.ExecutionOutcome.INTERRUPTED, fx.Impact.POSSIBLE)
        new = log.resolve("later", applied=True, by="ops")
    assert backend.query(location, "SELECT version_num FROM alembic_version") == [
        (head_revision(),)
    ]
    assert _links(backend, location, run_id)[: len(before)] == before  # every hash kept
    assert [getattr(old, f) for f in WRITER] == [None] * len(WRITER)
    assert old.by_person  # unknown: taken as it was before
    assert new.origin is fx.ResolutionOrigin.WORKER
    columns = ", ".join(WRITER)
    assert backend.query(
        location,
        f"SELECT effect_id, {columns} FROM resolutions WHERE run_id = ? ORDER BY seq",
        [run_id],
    ) == [
        ("e2", None, None, None, None, None),
        ("later", "worker", new.os_user, new.host, new.program, new.pid),
    ]
    with EffectLog.load(run_id, location) as log:
        assert log.history().resolutions == (old, new)
    code, said = _verify(location)
    assert code == 0, said


def _pass_off_as_a_person(backend: Backend, location: Path | str, run_id: str) -> None:
    """The store's owner rewrites a worker's resolution as a person's, guards bypassed."""
    update = f"UPDATE resolutions SET origin = 'person' WHERE run_id = '{run_id}'"
    if backend.name == "sqlite":
        done = shell_script(
            Path(location) / "ledger.sqlite3",
            f"DROP TRIGGER resolutions_no_update;\n{update};\n",
        )
        assert done.returncode == 0, done.stderr
        return
    with pg_driver.connect(str(location), autocommit=True) as conn:
        conn.execute("ALTER TABLE resolutions DISABLE TRIGGER USER")
        conn.execute(update)
        conn.execute("ALTER TABLE resolutions ENABLE TRIGGER USER")


@pytest.mark.parametrize("allow_self", [False, True])
def test_a_resolution_passed_off_as_a_persons_breaks_the_chain(
    backend: Backend, location: Path | str, allow_self: bool
) -> None:
    run_id = new_run_id()
    with EffectLog(run_id, location) as log:
        claim_small(log, "e1")
        settle(log, "e1", fx.ExecutionOutcome.INTERRUPTED, fx.Impact.POSSIBLE)
        written = log.resolve("e1", applied=True, by="alice (on-call)", allow_self=allow_self)
    assert not written.by_person
    _pass_off_as_a_person(backend, location, run_id)
    assert backend.query(location, "SELECT origin FROM resolutions") == [("person",)]
    with pytest.raises(EffectPersistenceError, match=f"chain broken at seq {written.seq}"):
        EffectLog.load(run_id, location).close()
    code, said = _verify(location)
    assert code == 1
    assert run_id in said
