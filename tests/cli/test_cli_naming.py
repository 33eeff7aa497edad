"""How the command line names stores and effects.

Its help describes a store as either backend's; ``--store`` given the database file
names the directory to give instead; ``ledger resolve`` takes a unique prefix of an
effect id, and says which effects an ambiguous one matches.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from ledger import effects as fx
from ledger._paths import DB_NAME
from ledger.effect_log import EffectLog, new_run_id
from tests.builders import claim_write, ledger, settle

pytestmark = pytest.mark.program

STORE_COMMANDS = (
    "runs",
    "show",
    "status",
    "report",
    "recover",
    "resolve",
    "verify",
    "head",
    "export",
    "import",
    "path",
    "migrate",
    "sql",
    "mcp-proxy",
    "demo",
)


# --------------------------------------------------------------------------- help


def test_the_help_describes_both_kinds_of_store() -> None:
    """`ledger --help` names a store directory and a PostgreSQL URL, and `ledger migrate`."""
    said = " ".join(ledger("--help").stdout.split())
    assert "a directory holding one SQLite database" in said
    assert "a PostgreSQL database named by its URL (postgresql://...)" in said
    assert "ledger migrate creates it" in said


@pytest.mark.parametrize("command", STORE_COMMANDS)
def test_every_store_option_takes_a_directory_or_a_url(command: str) -> None:
    """Each command's --store is DIR|URL, explained as a directory or a PostgreSQL URL."""
    done = ledger(command, "--help")
    assert done.returncode == 0, done.stderr
    said = " ".join(done.stdout.split())
    assert "--store DIR|URL" in said
    assert "a directory (SQLite), or a PostgreSQL URL postgresql://..." in said


def test_sql_and_recover_describe_both_backends() -> None:
    """`sql` opens either shell; `recover` says how a run is held on either backend."""
    sql = " ".join(ledger("sql", "--help").stdout.split())
    assert "Usage: ledger sql [OPTIONS] [ARG]..." in sql
    assert "sqlite3 in its safe mode, or psql" in sql
    recover = " ".join(ledger("recover", "--help").stdout.split())
    assert "a session's advisory lock on PostgreSQL" in recover


# --------------------------------------------------------------------------- --store FILE


@pytest.mark.parametrize("command", ["runs", "status", "verify", "migrate"])
def test_store_given_the_database_file_names_its_directory(tmp_path: Path, command: str) -> None:
    """A usage mistake (exit 2) that names the directory to give instead."""
    assert ledger("migrate", "--store", str(tmp_path)).returncode == 0
    done = ledger(command, "--store", str(tmp_path / DB_NAME))
    assert done.returncode == 2
    assert done.stdout == ""
    assert (
        f"{tmp_path / DB_NAME} is the store's database file: give the directory that holds "
        f"it: {tmp_path}"
    ) in " ".join(done.stderr.split())


def test_store_given_another_file_is_still_a_file(tmp_path: Path) -> None:
    """Any other file is refused as before, naming no directory."""
    other = tmp_path / "notes.txt"
    other.write_text("x")
    done = ledger("runs", "--store", str(other))
    assert done.returncode == 2
    assert "is a file" in done.stderr


# --------------------------------------------------------------------------- effect prefixes

FIRST = "3f9c0a1b2c3d4e5f60718293a4b5c6d7"
SECOND = "3f9c77aa2c3d4e5f60718293a4b5c6d7"
THIRD = "8a01bb2c3d4e5f60718293a4b5c6d7e8"


@pytest.fixture
def run(tmp_path: Path) -> tuple[Path, str]:
    """A store with one run of six write effects, none settled; three ids share a prefix."""
    run_id = new_run_id()
    with EffectLog(run_id, tmp_path) as log:
        for effect_id in (FIRST, SECOND, THIRD, f"{FIRST}-retry", "3f9c-other", "3f9c-last"):
            claim_write(log, effect_id, action_id=f"a-{effect_id}")
            settle(log, effect_id, fx.ExecutionOutcome.INTERRUPTED, fx.Impact.POSSIBLE)
    return tmp_path, run_id


def _resolve(directory: Path, run_id: str, effect: str) -> subprocess.CompletedProcess[str]:
    return ledger(
        "resolve", run_id[:6], effect, "--not-applied", "--by", "ops", "--json",
        "--store", str(directory),
    )  # fmt: skip


def test_resolve_takes_a_unique_prefix_of_an_effect_id(run: tuple[Path, str]) -> None:
    """The one effect the prefix names is resolved, by its whole id."""
    directory, run_id = run
    done = _resolve(directory, run_id, "8a01")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["effect_id"] == THIRD
    with EffectLog.load(run_id, directory) as log:
        assert [r.effect_id for r in log.history().resolutions] == [THIRD]


def test_a_whole_effect_id_wins_over_the_longer_ids_it_begins(run: tuple[Path, str]) -> None:
    """FIRST is itself a prefix of FIRST-retry: given whole, it names FIRST."""
    directory, run_id = run
    done = _resolve(directory, run_id, FIRST)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["effect_id"] == FIRST


def test_an_ambiguous_effect_prefix_is_a_usage_mistake_naming_candidates(
    run: tuple[Path, str],
) -> None:
    """Exit 2, one line naming a few of the matches and how many more; nothing written."""
    directory, run_id = run
    done = _resolve(directory, run_id, "3f9c")
    assert done.returncode == 2
    assert done.stdout == ""
    assert done.stderr == (
        f"Error: '3f9c' matches 5 effects of run {run_id} ({FIRST}, {SECOND}, {FIRST}-retry, "
        "3f9c-other and 1 more); give more characters\n"
    )
    with EffectLog.load(run_id, directory) as log:
        assert log.history().resolutions == ()


def test_an_unknown_effect_is_a_usage_mistake(run: tuple[Path, str]) -> None:
    """Exit 2, one line naming the run; nothing written."""
    directory, run_id = run
    done = _resolve(directory, run_id, "ffff")
    assert done.returncode == 2
    assert done.stderr == f"Error: no effect of run {run_id} matches 'ffff'\n"
    with EffectLog.load(run_id, directory) as log:
        assert log.history().resolutions == ()
