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

from ledger import _jsonl
from ledger import effects as fx
from ledger.effect_log import EffectLog, new_run_id
from ledger.errors import EffectPersistenceError
from ledger.sqlite import rows
from tests.backends import Backend
from tests.builders import fs_ref, ledger, op
from tests.postgresql import driver

RECORDS = " UNION ALL ".join(
    f"SELECT seq, hash FROM {t} WHERE run_id = ?"
    for t in ("claims", "outcomes", "observations", "resolutions")
)


def _literal(value: object) -> str:
    if value is None:
        return "NULL"
    if isinstance(value, int):
        return str(value)
    return "'" + str(value).replace("'", "''") + "'"


def _append(backend: Backend, store: Path | str, run_id: str, record: fx.Record) -> None:
    """Append ``record`` to the run with a hash that matches it, from outside the library.

    On SQLite through the stock ``sqlite3`` shell, on PostgreSQL as plain SQL.
    """
    found = backend.query(
        store, f"SELECT hash FROM ({RECORDS}) AS r ORDER BY seq DESC", (run_id,) * 4
    )
    row, _scope, _duties = rows.rows_of(run_id, record)
    row["prev_hash"] = found[0][0]
    row["hash"] = rows.chain_hash(run_id, record, found[0][0])
    table = {"outcome": "outcomes", "observation": "observations"}[record.record_type]
    insert = (
        f"INSERT INTO {table} ({', '.join(row)}) "
        f"VALUES ({', '.join(_literal(v) for v in row.values())})"
    )
    if backend.name == "sqlite":
        assert isinstance(store, Path)
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
    backend: Backend, store_dir: Path | str, case: str
) -> None:
    """An outcome with a matching hash but a time import refuses: load and verify refuse it too."""
    run_id, claim = _open_claim(store_dir)
    when, says = FORGED[case]
    forged = fx.EffectOutcome(
        "e1",
        2,
        fx.ExecutionOutcome.REPORTED_SUCCESS,
        fx.Impact.CERTAIN,
        recorded_at=when(claim.recorded_at),
    )
    _append(backend, store_dir, run_id, forged)
    assert backend.query(store_dir, "SELECT count(*) FROM outcomes")[0][0] == 1  # it landed

    with pytest.raises(EffectPersistenceError) as refused:
        EffectLog.load(run_id, store_dir)
    assert f"run {run_id} does not validate" in str(refused.value)
    assert "outcome at seq 2" in str(refused.value)
    assert says in str(refused.value)

    checked = ledger("verify", "--store", str(store_dir), "--json")
    assert checked.returncode == 1, checked.stderr
    (problem,) = json.loads(checked.stdout)["problems"]
    assert problem.startswith(f"run {run_id}: ")
    assert "outcome at seq 2" in problem
    assert says in problem


def test_an_observation_in_another_form_is_refused_by_load(
    backend: Backend, store_dir: Path | str
) -> None:
    """Not only outcomes: every record's recorded_at is held to the library's form."""
    run_id, claim = _open_claim(store_dir)
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
    _append(backend, store_dir, run_id, seen)
    with pytest.raises(EffectPersistenceError, match=r"observation at seq 2: recorded_at .* form"):
        EffectLog.load(run_id, store_dir)


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
    store_dir: Path | str, tmp_path: Path, how: str
) -> None:
    """A claim dated an hour ahead (another host's clock): its outcome carries the claim's time.

    Recorded at this host's time, the outcome would precede its claim, and the run
    would no longer load.
    """
    run_id, claimed_at = _imported_claim(store_dir, tmp_path, timedelta(hours=1))
    with EffectLog.load(run_id, store_dir) as log:
        if how == "outcome":
            outcome = log.outcome(
                effect_id="e1",
                execution=fx.ExecutionOutcome.REPORTED_SUCCESS,
                impact=fx.Impact.CERTAIN,
            )
        else:
            (outcome,) = log.recover_interrupted()
    assert outcome.recorded_at == claimed_at
    with EffectLog.load(run_id, store_dir) as again:
        assert again.history().outcomes == (outcome,)
    assert ledger("verify", "--store", str(store_dir)).returncode == 0
