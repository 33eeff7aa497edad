"""One set of rules for a run's history, however it is read: load, ``ledger verify``, import.

A row appended from outside the library (the stock ``sqlite3`` shell, or SQL on
PostgreSQL as the writer role may) with a hash that matches its fields passes every
guard of the store. What no ledger writes must still be refused by ``EffectLog.load``
and ``ledger verify``, naming the row, as ``ledger import`` refuses it in a file: an
outcome recorded before its claim, a ``recorded_at`` in another form than the
library's. And the library's own writes keep those rules when the clock steps back:
an outcome is never dated before its claim.
"""

from __future__ import annotations

import json
import subprocess
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from ledger import _inspect, _jsonl
from ledger import effects as fx
from ledger.effect_log import EffectLog, new_run_id
from ledger.errors import EffectPersistenceError
from ledger.sqlite import rows
from tests.backends import Backend
from tests.builders import fs_ref, ledger, ledger_all, op, sql_literal
from tests.postgresql import driver

RECORDS = " UNION ALL ".join(
    f"SELECT seq, hash FROM {t} WHERE run_id = ?"
    for t in ("claims", "outcomes", "observations", "resolutions")
)


def _append(
    backend: Backend, store: Path | str, run_id: str, record: fx.Record, *, wrong_hash: bool = False
) -> None:
    """Append ``record`` to the run, chained to its last record, from outside the library.

    On SQLite through the stock ``sqlite3`` shell, on PostgreSQL as plain SQL. Its hash
    matches its fields, unless ``wrong_hash``: then SQLite's guard that checks it on
    insert is dropped for the write, as the file's owner can (PostgreSQL checks hashes
    on load only: one INSERT of the writer role does it).
    """
    found = backend.query(
        store, f"SELECT hash FROM ({RECORDS}) AS r ORDER BY seq DESC", (run_id,) * 4
    )
    row, _scope, _duties = rows.rows_of(run_id, record)
    row["prev_hash"] = found[0][0]
    row["hash"] = "f" * 64 if wrong_hash else rows.chain_hash(run_id, record, found[0][0])
    table = {"outcome": "outcomes", "observation": "observations"}[record.record_type]
    insert = (
        f"INSERT INTO {table} ({', '.join(row)}) "
        f"VALUES ({', '.join(sql_literal(v) for v in row.values())})"
    )
    if backend.name == "sqlite":
        assert isinstance(store, Path)
        if wrong_hash:
            guard = f"{table}_guard"  # the table's guards, the hash's among them
            ((ddl,),) = backend.query(
                store, "SELECT sql FROM sqlite_master WHERE name = ?", (guard,)
            )
            insert = f"BEGIN; DROP TRIGGER {guard}; {insert}; {ddl}; COMMIT;"
        subprocess.run(
            ["sqlite3", str(store / "ledger.sqlite3"), insert], check=True, capture_output=True
        )
    else:
        driver.execute(store, insert)


def _open_claim(store: Path | str) -> tuple[str, fx.EffectClaim]:
    run_id = new_run_id()
    with EffectLog(run_id, store) as log:
        claim = log.claim(
            effect_id="e1",
            action_id="act-1",
            operation=op(),
            impact_scope=(fs_ref("/srv/app/out.txt"),),
        )
    return run_id, claim


def _shifted(stamp: str, seconds: float) -> datetime:
    return datetime.fromisoformat(stamp) + timedelta(seconds=seconds)


def _utc_now_form(moment: datetime) -> str:
    return moment.astimezone(UTC).isoformat(timespec="microseconds")


# Each case: the forged record's recorded_at, from its claim's, and what the refusal says.
FORGED = {
    "outcome-dated-before-its-claim": (
        lambda claimed: _utc_now_form(_shifted(claimed, -1)),
        "is before the recorded_at",
    ),
    "outcome-dated-with-z": (
        lambda claimed: _utc_now_form(_shifted(claimed, 1)).replace("+00:00", "Z"),
        "is not in the form the library writes",
    ),
    "outcome-dated-without-microseconds": (
        lambda claimed: _shifted(claimed, 1).replace(microsecond=0).isoformat(),
        "is not in the form the library writes",
    ),
    "outcome-dated-with-a-space": (
        lambda claimed: _utc_now_form(_shifted(claimed, 1)).replace("T", " "),
        "is not in the form the library writes",
    ),
}


@pytest.mark.program
@pytest.mark.parametrize("case", list(FORGED))
def test_a_row_no_ledger_writes_is_refused_by_load_and_verify_naming_it(
    backend: Backend, location: Path | str, case: str
) -> None:
    """An outcome with a matching hash but a time import refuses: load and verify refuse it too."""
    run_id, claim = _open_claim(location)
    when, says = FORGED[case]
    forged = fx.EffectOutcome(
        "e1",
        2,
        fx.ExecutionOutcome.REPORTED_SUCCESS,
        fx.Impact.CERTAIN,
        recorded_at=when(claim.recorded_at),
    )
    _append(backend, location, run_id, forged)
    assert backend.query(location, "SELECT count(*) FROM outcomes")[0][0] == 1  # it landed

    with pytest.raises(EffectPersistenceError) as refused:
        EffectLog.load(run_id, location)
    assert f"run {run_id} does not validate" in str(refused.value)
    assert "outcome at seq 2" in str(refused.value)
    assert says in str(refused.value)

    checked = ledger("verify", "--store", str(location), "--json")
    assert checked.returncode == 1, checked.stderr
    (problem,) = json.loads(checked.stdout)["problems"]
    assert problem.startswith(f"run {run_id}: ")
    assert "outcome at seq 2" in problem
    assert says in problem


def test_an_observation_in_another_form_is_refused_by_load(
    backend: Backend, location: Path | str
) -> None:
    """Not only outcomes: every record's recorded_at is held to the library's form."""
    run_id, claim = _open_claim(location)
    seen = fx.Observation(
        "o1",
        2,
        fs_ref("/srv/app/out.txt"),
        fx.ObservationMechanism.FILESYSTEM_STAT,
        fx.Coverage.COMPLETE,
        "look",
        True,
        None,
        None,
        recorded_at=claim.recorded_at.replace("+00:00", "Z"),
    )
    _append(backend, location, run_id, seen)
    with pytest.raises(EffectPersistenceError, match=r"observation at seq 2: recorded_at .* form"):
        EffectLog.load(run_id, location)


def _imported_claim(store: Path | str, tmp_path: Path, ahead: timedelta) -> tuple[str, str]:
    """A run of one open claim written on a host whose clock is ``ahead`` of this one's.

    Its id, and its claim's recorded_at.
    """
    claim = fx.EffectClaim(
        "e1",
        1,
        "act-1",
        op(),
        (fs_ref("/srv/app/out.txt"),),
        (),
        _utc_now_form(datetime.now(UTC) + ahead),
    )
    run_id = new_run_id()
    path = tmp_path / f"{run_id}.jsonl"
    line = {"v": 1, "type": "claim", "record": claim.to_dict()}
    path.write_text(json.dumps(line) + "\n", encoding="utf-8")
    _jsonl.import_file(store, path)
    return run_id, claim.recorded_at


@pytest.mark.program
@pytest.mark.parametrize("how", ["outcome", "recovery"])
def test_an_outcome_is_never_dated_before_its_claim_when_the_clock_is_behind(
    location: Path | str, tmp_path: Path, how: str
) -> None:
    """A claim dated an hour ahead (another host's clock): its outcome carries the claim's time.

    Recorded at this host's time, the outcome would precede its claim, and the run
    would no longer load.
    """
    run_id, claimed_at = _imported_claim(location, tmp_path, timedelta(hours=1))
    with EffectLog.load(run_id, location) as log:
        if how == "outcome":
            outcome = log.outcome(
                effect_id="e1",
                execution=fx.ExecutionOutcome.REPORTED_SUCCESS,
                impact=fx.Impact.CERTAIN,
            )
        else:
            (outcome,) = log.recover_interrupted()
    assert outcome.recorded_at == claimed_at
    with EffectLog.load(run_id, location) as again:
        assert again.history().outcomes == (outcome,)
    assert ledger("verify", "--store", str(location)).returncode == 0


# --------------------------------------------------------------------------- the incident list


def _incidents_with_one_hidden(backend: Backend, store: Path | str) -> tuple[str, str]:
    """Two runs, each with an effect of possible impact; a forged row settles one of them.

    The forged outcome (FAILED, no impact) has a hash that does not match: its run does
    not validate, and the view no longer counts its effect among the unresolved ones.
    Returns the forged run and the other.
    """
    runs = []
    for _ in range(2):
        run_id = new_run_id()
        with EffectLog(run_id, store) as log:
            log.claim(
                effect_id="e1",
                action_id="act-1",
                operation=op(),
                impact_scope=(fs_ref("/srv/app/out.txt"),),
            )
            log.outcome(  # still running: it may have changed the world
                effect_id="e1",
                execution=fx.ExecutionOutcome.RUNNING,
                impact=fx.Impact.POSSIBLE,
            )
        runs.append(run_id)
    forged, other = runs
    settled = fx.EffectOutcome(
        "e1", 3, fx.ExecutionOutcome.FAILED, fx.Impact.NONE, recorded_at=fx.utc_now()
    )
    _append(backend, store, forged, settled, wrong_hash=True)
    return forged, other


def test_the_incident_list_names_a_run_whose_forged_row_settled_its_last_open_effect(
    backend: Backend, location: Path | str
) -> None:
    """Its effect is shown with its run's problem, the problem is named, the others still shown."""
    forged, other = _incidents_with_one_hidden(backend, location)
    # What the forged row did: the view holds the effect settled.
    (state,) = backend.query(
        location,
        "SELECT unresolved_impact FROM effect_status WHERE run_id = ?",
        (forged,),
    )
    assert not state[0]

    found = _inspect.effect_statuses(location, unresolved=True)
    assert set(found.problems) == {forged}
    assert f"run {forged} does not validate" in found.problems[forged]
    by_run = {row.run_id: row for row in found}
    assert set(by_run) == {forged, other}
    assert by_run[other].unresolved_impact
    assert by_run[other].run_problem is None
    assert by_run[forged].run_problem == found.problems[forged]
    # One run asked for: the same.
    assert _inspect.effect_statuses(location, forged, unresolved=True).problems.keys() == {forged}
    assert not _inspect.effect_statuses(location, other, unresolved=True).problems


@pytest.mark.program
def test_status_unresolved_and_report_exit_1_naming_the_run(
    backend: Backend, location: Path | str, tmp_path: Path
) -> None:
    """`status --unresolved` (text and JSON) and `report --unresolved` warn, name it, exit 1."""
    forged, other = _incidents_with_one_hidden(backend, location)
    page = tmp_path / "page.html"
    store = ("--store", str(location))
    text, as_json, reported = ledger_all(
        ("status", "--unresolved", *store),
        ("status", "--unresolved", "--json", *store),
        ("report", "--unresolved", "-o", str(page), *store),
    )
    for result in (text, as_json, reported):
        assert result.returncode == 1, result.stderr
        assert "Traceback" not in result.stderr
        (warning,) = result.stderr.splitlines()
        assert warning.startswith(f"warning: run {forged} does not validate")
        assert "hash" in warning
    assert other in text.stdout
    assert forged in text.stdout
    rows = {row["run_id"]: row for row in json.loads(as_json.stdout)}
    assert rows.keys() == {forged, other}
    assert rows[other]["run_problem"] is None
    assert rows[other]["unresolved_impact"] is True
    assert f"run {forged} does not validate" in rows[forged]["run_problem"]
    html = page.read_text(encoding="utf-8")
    assert other in html
    assert forged in html
    assert "its run does not validate" in html
