"""A PostgreSQL store at a schema revision the library cannot use: refused, unchanged.

The same refusals as on SQLite (tests/sqlite/test_migrations.py): a revision this version
does not ship is refused by reads and writes, naming both revisions; a revision set back
below what the tables are is refused by the next write, naming the repair.
"""

from __future__ import annotations

import pytest

from ledger import _inspect
from ledger._sql.revisions import head_revision
from ledger.effect_log import EffectLog, new_run_id
from ledger.errors import SchemaTooNewError, StoreCorruptError
from tests.builders import fs_ref, ledger, op
from tests.postgresql import driver

RUN = "7a1f0c2a9b3d4e6f8a0b1c2d3e4f5a6b"


def _snapshot(url: str) -> list[object]:
    """The version, the tables' columns and every record row: what a refusal must not change."""
    query = driver.POSTGRESQL.query
    found: list[object] = [query(url, "SELECT version_num FROM alembic_version")]
    found.append(
        query(
            url,
            "SELECT table_name, column_name, data_type FROM information_schema.columns"
            " WHERE table_schema = current_schema() ORDER BY table_name, column_name",
        )
    )
    found.extend(
        query(url, f"SELECT * FROM {table} ORDER BY 1, 2")
        for table in ("runs", "claims", "outcomes", "observations", "resolutions")
    )
    return found


def _store(url: str) -> None:
    with EffectLog(RUN, url) as log:
        log.claim(effect_id="e1", action_id="a1", operation=op(), impact_scope=[fs_ref("/a")])


def test_a_store_of_a_newer_version_is_refused_by_reads_and_writes(url: str) -> None:
    """Load, claim, the forensic reads and the CLI: SchemaTooNewError naming both revisions."""
    _store(url)
    driver.execute(url, "UPDATE alembic_version SET version_num = '0099'")
    before = _snapshot(url)
    said = (
        r"is at schema revision 0099, which this version of the library does not know "
        rf"\(the newest it knows is {head_revision()}\): a newer version wrote it; upgrade "
        r"the tool-ledger package"
    )
    with pytest.raises(SchemaTooNewError, match=said):
        EffectLog.load(RUN, url)
    with EffectLog(new_run_id(), url) as other, pytest.raises(SchemaTooNewError, match=said):
        other.claim(effect_id="e1", action_id="a1", operation=op(), impact_scope=[])
    for read in (_inspect.list_runs, _inspect.verify, _inspect.run_count):
        with pytest.raises(SchemaTooNewError, match=said):
            read(url)
    result = ledger("status", "--store", url)
    assert result.returncode == 1, result
    assert result.stderr.count("\n") == 1, result.stderr
    assert "revision 0099" in result.stderr
    assert _snapshot(url) == before


def test_a_store_set_back_to_an_old_revision_is_refused_unchanged_with_its_repair(
    url: str,
) -> None:
    """Set back to 0009, the store's migration meets its own columns: refused, rolled back whole.

    The error names the recorded revision and the statement that records the tables' own;
    with it run, writes go on.
    """
    head = head_revision()
    _store(url)
    driver.execute(url, "UPDATE alembic_version SET version_num = '0009'")
    before = _snapshot(url)
    with (
        EffectLog(new_run_id(), url) as other,
        pytest.raises(StoreCorruptError) as refused,
    ):
        other.claim(effect_id="e1", action_id="a1", operation=op(), impact_scope=[])
    said = str(refused.value)
    assert "\n" not in said
    assert "records schema revision 0009 but its tables do not match it" in said
    assert f"(migrating it to {head} failed: " in said
    repair = f"UPDATE alembic_version SET version_num = '{head}'"
    assert f"its tables are revision {head}'s" in said
    assert f"(with psql: {repair}) and writes go on" in said
    assert "nothing was changed" in said
    assert _snapshot(url) == before

    driver.execute(url, repair)
    with EffectLog.load(RUN, url) as log:
        log.claim(effect_id="e2", action_id="a2", operation=op(), impact_scope=[])
        assert [c.effect_id for c in log.history().claims] == ["e1", "e2"]
