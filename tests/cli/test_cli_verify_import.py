"""`ledger verify`, `ledger export` and `ledger import`, run as the installed console script.

Every test runs the real command in a child process against real stores and files.
Each invocation pays about a second of imports (SQLAlchemy, Alembic), so independent
invocations run side by side (:func:`_ledger_all`), and the many forged stores and
files are built from one template and checked in one batch per kind.
"""

from __future__ import annotations

import dataclasses
import json
import os
import random
import shutil
import sqlite3
import stat
import subprocess
import urllib.parse
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from ledger import effects as fx
from ledger._sql.guards import insert_guards
from ledger.effect_log import EffectLog, new_run_id
from tests.builders import fs_ref, ledger, ledger_all, op, sha
from tests.sqlite.driver import drop_guards

DB = "ledger.sqlite3"
T0 = "2026-03-01T12:00:00.000000+00:00"
# click prints a progress bar's label once when stderr is not a terminal; see
# test_an_import_refusal_is_the_only_line_on_stderr. Other tests look past it.
PROGRESS_LABELS = ("verifying runs", "importing")
RECORD_TABLES = (
    "runs",
    "claims",
    "scope_index",
    "outcomes",
    "observations",
    "run_writers",
)

Result = subprocess.CompletedProcess[str]


# --------------------------------------------------------------------------- running


def _error(result: Result, code: int = 1) -> str:
    """The one error line of a refused command: no traceback, nothing else said."""
    assert result.returncode == code, (result.stdout, result.stderr)
    assert "Traceback" not in result.stderr, result.stderr
    lines = [line for line in result.stderr.splitlines() if line not in PROGRESS_LABELS]
    if code == 2:  # click's usage errors come with the usage line and a hint
        lines = [line for line in lines if line.startswith("Error: ")]
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("Error: "), result.stderr
    return lines[0]


# --------------------------------------------------------------------------- stores


def _write_run(store: Path, run_id: str | None = None, *, settled: int = 1) -> str:
    """A run of ``settled`` claims with their outcomes, then a claim left open.

    It holds ``2 * settled + 1`` records: claim e0 at seq 1, its outcome at seq 2, …,
    and the open claim last.
    """
    run_id = run_id or new_run_id()
    with EffectLog(run_id, store) as log:
        for i in range(settled):
            log.claim(
                effect_id=f"e{i}",
                action_id=f"act-{i}",
                operation=op(),
                impact_scope=(fs_ref(f"/srv/app/f{i}"),),
            )
            log.outcome(
                effect_id=f"e{i}",
                execution=fx.ExecutionOutcome.REPORTED_SUCCESS,
                impact=fx.Impact.CERTAIN,
            )
        log.claim(effect_id="open", action_id="act-open", operation=op(), impact_scope=())
    return run_id


def _rich_run(store: Path, root: Path) -> str:
    """A run with every kind of record and both kinds of reference, recovered after a crash.

    Observations before the first claim, fs and owned references with a revision,
    every predicate, RUNNING then terminal, FAILED with no impact, an effect left
    RUNNING, and two claims recovery marked INTERRUPTED (replayed).
    """
    run_id = new_run_id()
    target = fs_ref(str(root / "report.txt"))
    parent = fs_ref(str(root), "parent")
    scratch = fs_ref(str(root / "tmp"))
    order = fx.ResourceRef("owned", "shop/orders/42 café", "target", "r7")
    with EffectLog(run_id, store) as log:
        log.observe(
            observation_id="before-file",
            resource=target,
            mechanism=fx.ObservationMechanism.FILESYSTEM_STAT,
            coverage=fx.Coverage.COMPLETE,
            source_action_id="look",
            exists=False,
        )
        log.observe(
            observation_id="before-order",
            resource=order,
            mechanism=fx.ObservationMechanism.RECORD_READ,
            coverage=fx.Coverage.PARTIAL,
            source_action_id="look",
            exists=True,
            revision="r7",
        )
        log.claim(
            effect_id="write-report",
            action_id="act-1",
            operation=op("write_file", b'{"path": "report.txt"}'),
            impact_scope=(target, parent),
            obligations=(
                fx.Postcondition(target, fx.Predicate.SHA256, sha(b"hello")),
                fx.Postcondition(target, fx.Predicate.EXISTS),
            ),
        )
        log.outcome(
            effect_id="write-report",
            execution=fx.ExecutionOutcome.RUNNING,
            impact=fx.Impact.POSSIBLE,
            execution_id="call-1",
        )
        log.outcome(
            effect_id="write-report",
            execution=fx.ExecutionOutcome.REPORTED_SUCCESS,
            impact=fx.Impact.CERTAIN,
            execution_id="call-1",
        )
        log.observe(
            observation_id="after-file",
            resource=target,
            mechanism=fx.ObservationMechanism.FILESYSTEM_READ,
            coverage=fx.Coverage.COMPLETE,
            source_action_id="check",
            exists=True,
            sha256=sha(b"hello"),
        )
        log.claim(
            effect_id="update-order",
            action_id="act-2",
            operation=fx.OperationRef("update_order", "", sha(b"{}")),
            impact_scope=(order,),
            obligations=(fx.Postcondition(order, fx.Predicate.REVISION, "r8"),),
        )
        log.outcome(
            effect_id="update-order", execution=fx.ExecutionOutcome.FAILED, impact=fx.Impact.NONE
        )
        log.claim(effect_id="slow-fetch", action_id="act-3", operation=op("fetch"), impact_scope=())
        log.outcome(
            effect_id="slow-fetch",
            execution=fx.ExecutionOutcome.RUNNING,
            impact=fx.Impact.POSSIBLE,
        )
        log.claim(
            effect_id="delete-scratch",
            action_id="act-4",
            operation=op("delete"),
            impact_scope=(scratch,),
            obligations=(fx.Postcondition(scratch, fx.Predicate.ABSENT),),
        )
        log.claim(
            effect_id="crashed-write",
            action_id="act-5",
            operation=op("write_file", b"{}"),
            impact_scope=(target,),
        )
    with EffectLog.load(run_id, store) as log:
        recovered = log.recover_interrupted()
    assert [(o.effect_id, o.replayed) for o in recovered] == [
        ("delete-scratch", True),
        ("crashed-write", True),
    ]
    return run_id


def _history(store: Path, run_id: str) -> fx.History:
    with EffectLog.load(run_id, store) as log:
        return log.history()


def _snapshot(store: Path) -> dict[str, str] | None:
    """Every file of the store with its sha256 (-shm only by name); None if there is no store."""
    if not store.exists():
        return None
    return {p.name: "" if p.name.endswith("-shm") else sha(p.read_bytes()) for p in store.iterdir()}


def _read_only(store: Path) -> sqlite3.Connection:
    db = store / DB
    wal = db.with_name(DB + "-wal").exists()
    uri = f"file:{urllib.parse.quote(str(db))}?mode=ro" + ("" if wal else "&immutable=1")
    return sqlite3.connect(uri, uri=True)


def _run_ids(store: Path) -> set[str]:
    """Every run id any table of the store mentions, read with plain sqlite3, read-only."""
    if not (store / DB).exists():
        return set()
    conn = _read_only(store)
    try:
        return {row[0] for t in RECORD_TABLES for row in conn.execute(f"SELECT run_id FROM {t}")}
    finally:
        conn.close()


def _forge(store: Path, *statements: str, past: tuple[str, ...] = ()) -> None:
    """Write with plain sqlite3 as a forger would: CHECKs ignored, foreign keys off.

    The guards and indexes named in ``past`` are taken out for the write; the guards
    are put back afterwards (an index may no longer fit the rows). The chain guards
    are always among them: forged rows carry made-up chain columns (CHAIN).
    """
    every = insert_guards("sqlite")
    guards = (
        *(name for name in past if name in every),
        *(f"{t}_guard_chain" for t in ("claims", "outcomes", "observations")),
        *(f"{t}_guard_hash" for t in ("claims", "outcomes", "observations")),
    )
    indexes = [name for name in past if name not in every]
    conn = sqlite3.connect(store / DB, isolation_level=None)
    try:
        conn.execute("PRAGMA foreign_keys = OFF")
        conn.execute("PRAGMA ignore_check_constraints = ON")
        saved = [
            conn.execute(
                "SELECT name, sql FROM sqlite_master WHERE type = 'trigger' AND name = ?",
                (name,),
            ).fetchone()
            for name in {f"{every[guard].table}_guard" for guard in guards}
        ]
        drop_guards(conn, *guards)
        for name in indexes:
            conn.execute(f'DROP INDEX "{name}"')
        for statement in statements:
            conn.execute(statement)
        for name, ddl in filter(None, saved):  # unless the trigger was dropped whole
            if conn.execute("SELECT 1 FROM sqlite_master WHERE name = ?", (name,)).fetchone():
                conn.execute(f'DROP TRIGGER "{name}"')
                conn.execute(ddl)
    finally:
        conn.close()


# Well-formed but made-up chain columns of a forged row.
CHAIN = f"'{'0' * 64}', '{'f' * 64}'"


def _outcome_sql(run_id: str, seq: int, effect_id: str, execution: str, impact: str) -> str:
    return (
        "INSERT INTO outcomes (run_id, seq, effect_id, execution, impact, execution_id,"
        f" replayed, recorded_at, prev_hash, hash) VALUES ('{run_id}', {seq}, '{effect_id}',"
        f" '{execution}', '{impact}', NULL, 0, '{T0}', {CHAIN})"
    )


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """A store holding one run of three records (e0, its outcome, an open claim), to copy."""
    store = tmp_path_factory.mktemp("template") / "store"
    return store, _write_run(store, settled=1)


def _copy(template: tuple[Path, str], store: Path) -> str:
    """Copy the template store to ``store`` (0700, its file 0600); return its run id."""
    store.parent.mkdir(parents=True, exist_ok=True)
    shutil.copytree(template[0], store)
    return template[1]


# --------------------------------------------------------------------------- files


def _base_entries() -> list[dict[str, Any]]:
    """A valid six-line file: an observation before the first claim, RUNNING then success."""
    target = fs_ref("/srv/app/out.txt")
    records: list[fx.EffectClaim | fx.EffectOutcome | fx.Observation] = [
        fx.Observation(
            "o1",
            1,
            target,
            fx.ObservationMechanism.FILESYSTEM_STAT,
            fx.Coverage.COMPLETE,
            "look",
            False,
            None,
            None,
            T0,
        ),
        fx.EffectClaim(
            "e1", 2, "act-1", op(), (target,), (fx.Postcondition(target, fx.Predicate.EXISTS),), T0
        ),
        fx.EffectOutcome(
            "e1", 3, fx.ExecutionOutcome.RUNNING, fx.Impact.POSSIBLE, "call-1", False, T0
        ),
        fx.EffectOutcome(
            "e1", 4, fx.ExecutionOutcome.REPORTED_SUCCESS, fx.Impact.CERTAIN, "call-1", False, T0
        ),
        fx.EffectClaim("e2", 5, "act-2", op("delete"), (target,), (), T0),
        fx.Observation(
            "o2",
            6,
            target,
            fx.ObservationMechanism.FILESYSTEM_STAT,
            fx.Coverage.COMPLETE,
            "check",
            True,
            None,
            None,
            T0,
        ),
    ]
    return [{"v": 1, "type": r.record_type, "record": r.to_dict()} for r in records]


def _jsonl(entries: list[dict[str, Any]]) -> bytes:
    return b"".join(json.dumps(e, ensure_ascii=False).encode() + b"\n" for e in entries)


def _write_file(directory: Path, entries: list[dict[str, Any]], run_id: str | None = None) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{run_id or new_run_id()}.jsonl"
    path.write_bytes(_jsonl(entries))
    return path


Mutation = Callable[[list[dict[str, Any]]], bytes]


def _setting(line: int, key: str, value: object) -> Mutation:
    """Set ``key`` (dotted, inside the entry) of line ``line`` to ``value``."""

    def mutate(entries: list[dict[str, Any]]) -> bytes:
        *parents, last = key.split(".")
        node = entries[line - 1]
        for part in parents:
            node = node[part]
        node[last] = value
        return _jsonl(entries)

    return mutate


def _replacing(line: int, raw: bytes) -> Mutation:
    def mutate(entries: list[dict[str, Any]]) -> bytes:
        lines = _jsonl(entries).split(b"\n")
        lines[line - 1] = raw
        return b"\n".join(lines)

    return mutate


def _appending(raw: bytes) -> Mutation:
    return lambda entries: _jsonl(entries) + raw


# --------------------------------------------------------------------------- verify


def test_verify_a_clean_store_reports_its_runs_and_records(store_dir: Path) -> None:
    """A clean store of three runs verifies: exit 0 with the run and record counts, also in JSON."""
    for settled in (0, 1, 2):
        _write_run(store_dir, settled=settled)
    before = _snapshot(store_dir)
    human, as_json = ledger_all(
        ("verify", "--store", str(store_dir)), ("verify", "--store", str(store_dir), "--json")
    )
    assert human.returncode == 0, human.stderr
    assert human.stdout.startswith("ok: 3 runs, 9 records")
    assert len(human.stdout.splitlines()) == 1
    assert as_json.returncode == 0, as_json.stderr
    assert json.loads(as_json.stdout) == {"ok": True, "runs": 3, "records": 9, "problems": []}
    assert _snapshot(store_dir) == before


def test_verify_leaves_a_live_store_byte_identical(store_dir: Path, run_id: str) -> None:
    """Verify reads a store a writer holds open (with a -wal) and changes neither file."""
    with EffectLog(run_id, store_dir) as log:
        log.claim(effect_id="e1", action_id="a1", operation=op(), impact_scope=())
        log.outcome(effect_id="e1", execution=fx.ExecutionOutcome.FAILED, impact=fx.Impact.POSSIBLE)
        assert (store_dir / f"{DB}-wal").exists()
        before = _snapshot(store_dir)
        result = ledger("verify", "--store", str(store_dir))
        after = _snapshot(store_dir)
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("ok: 1 runs, 2 records")
    assert after == before


# Every damage below is done to one store, each forged row in a run of its own:
# verify must report them all, each naming its run, and not stop at the first.


def _verified_outcome(store: Path, run_id: str) -> tuple[str, tuple[str, ...]]:
    _forge(store, _outcome_sql(run_id, 4, "open", "verified", "certain"))
    return f"run {run_id}: ", ("outcome at seq 4", "'verified'")


def _seq_gap(store: Path, run_id: str) -> tuple[str, tuple[str, ...]]:
    _forge(
        store,
        "INSERT INTO observations (run_id, seq, observation_id, resource_kind,"
        " resource_locator, resource_role, resource_revision, mechanism, coverage,"
        " source_action_id, resource_exists, sha256, revision, recorded_at, prev_hash, hash)"
        f" VALUES ('{run_id}', 5, 'late', 'fs', '/srv/app/f0', 'target', NULL,"
        f" 'filesystem_stat', 'complete', 'act-9', 1, NULL, NULL, '{T0}', {CHAIN})",
    )
    return f"run {run_id}: ", ("seq 5 of observation where 4 was due",)


def _second_terminal(store: Path, run_id: str) -> tuple[str, tuple[str, ...]]:
    _forge(
        store,
        _outcome_sql(run_id, 4, "e0", "failed", "none"),
        past=("outcomes_guard_settled", "uq_outcomes_terminal"),
    )
    return f"run {run_id}: ", ("outcome at seq 4 comes after 'e0' settled",)


def _dropped_trigger(store: Path, run_id: str) -> tuple[str, tuple[str, ...]]:
    _forge(store, "DROP TRIGGER outcomes_guard")
    return "schema: trigger outcomes_guard is missing", ()


def _dropped_view(store: Path, run_id: str) -> tuple[str, tuple[str, ...]]:
    _forge(store, "DROP VIEW effect_status")
    return "schema: view effect_status is missing", ()


def _set_back_revision(store: Path, run_id: str) -> tuple[str, tuple[str, ...]]:
    # A newer revision is refused whole (test_cli_versions.py); one set back by hand is
    # a finding among others, with the UPDATE that repairs it.
    _forge(store, "UPDATE alembic_version SET version_num = '0009'")
    return "schema: revision 0009 recorded, but its tables are already revision ", (
        "UPDATE alembic_version SET version_num",
    )


def _records_without_a_run(store: Path, run_id: str) -> tuple[str, tuple[str, ...]]:
    orphan = new_run_id()
    _forge(
        store,
        "INSERT INTO claims (run_id, seq, effect_id, action_id, operation, backend,"
        " args_sha256, scope_count, obligation_count, recorded_at, prev_hash, hash,"
        " kind, idempotency_key, impact_scope, obligations)"
        f" VALUES ('{orphan}', 1, 'ghost', 'act-1', 'write_file', 'test/1',"
        f" '{sha(b'{}')}', 0, 0, '{T0}', {CHAIN}, 'write', '', '[]', '[]')",
        past=("claims_guard_run",),
    )
    return f"run {orphan}: records without a row in runs", ()


DAMAGES: dict[str, Callable[[Path, str], tuple[str, tuple[str, ...]]]] = {
    "forged-execution-word": _verified_outcome,
    "seq-gap": _seq_gap,
    "second-terminal-outcome": _second_terminal,
    "dropped-trigger": _dropped_trigger,
    "dropped-view": _dropped_view,
    "set-back-schema-revision": _set_back_revision,
    "records-without-a-run": _records_without_a_run,
}


@dataclasses.dataclass
class Damaged:
    store: Path
    expected: dict[str, tuple[str, tuple[str, ...]]]
    before: dict[str, str] | None
    human: Result
    as_json: Result


@pytest.fixture(scope="module")
def damaged(tmp_path_factory: pytest.TempPathFactory, template: tuple[Path, str]) -> Damaged:
    """The template store with every damage of DAMAGES done to it, verified in words and in JSON."""
    store = tmp_path_factory.mktemp("damaged") / "store"
    _copy(template, store)
    # All runs first: the library re-installs dropped triggers when it opens a store.
    run_ids = {name: _write_run(store) for name in DAMAGES}
    expected = {name: damage(store, run_ids[name]) for name, damage in DAMAGES.items()}
    before = _snapshot(store)
    human, as_json = ledger_all(
        ("verify", "--store", str(store)), ("verify", "--store", str(store), "--json")
    )
    return Damaged(store, expected, before, human, as_json)


def test_verify_fails_a_damaged_store_with_every_problem(damaged: Damaged) -> None:
    """A damaged store fails verify (exit 1, ok false) with one problem per damage and a count."""
    assert damaged.as_json.returncode == 1, damaged.as_json.stderr
    report = json.loads(damaged.as_json.stdout)
    assert report["ok"] is False
    # The template's run and one run per damage, of three records each; the three
    # runs with a forged row do not validate, the orphan records have no run.
    assert (report["runs"], report["records"]) == (8, 15)
    problems = report["problems"]
    heads = [head for head, _ in damaged.expected.values()]
    others = [p for p in problems if not any(p.startswith(head) for head in heads)]
    # The forger of the second terminal outcome dropped its unique index too.
    assert all(p.startswith("schema: index uq_outcomes_terminal") for p in others), others
    assert len(problems) == len(DAMAGES) + len(others)

    assert damaged.human.returncode == 1, damaged.human.stderr
    lines = damaged.human.stdout.splitlines()
    assert lines[:-1] == problems
    assert lines[-1] == f"{len(problems)} problem(s) in {damaged.store / DB}"
    assert _snapshot(damaged.store) == damaged.before


@pytest.mark.parametrize("damage", list(DAMAGES))
def test_verify_names_each_damage_precisely(damaged: Damaged, damage: str) -> None:
    """Each damage is reported once, naming its run (or schema object) and what is wrong."""
    head, fragments = damaged.expected[damage]
    for problems in (
        json.loads(damaged.as_json.stdout)["problems"],
        damaged.human.stdout.splitlines(),
    ):
        matching = [p for p in problems if p.startswith(head)]
        assert len(matching) == 1, problems
        assert all(fragment in matching[0] for fragment in fragments), matching[0]


def test_verify_reports_a_dropped_terminal_outcome_index(
    tmp_path: Path, template: tuple[Path, str]
) -> None:
    """The unique index allowing one terminal outcome per claim is a guard: its loss is reported."""
    store = tmp_path / "store"
    _copy(template, store)
    _forge(store, "DROP INDEX uq_outcomes_terminal")
    result = ledger("verify", "--store", str(store), "--json")
    assert result.returncode == 1, result.stdout
    assert json.loads(result.stdout)["problems"] == [
        "schema: index uq_outcomes_terminal is missing"
    ]


def test_verify_of_a_corrupt_database_is_one_line(store_dir: Path) -> None:
    """A database file of random bytes fails verify with exit 1 and one line, never a traceback."""
    store_dir.mkdir(mode=0o700)
    (store_dir / DB).write_bytes(random.Random(7).randbytes(64 * 1024))
    (store_dir / DB).chmod(0o600)
    before = _snapshot(store_dir)
    result = ledger("verify", "--store", str(store_dir), "--json")
    assert "not a database" in _error(result)
    assert result.stdout == ""
    assert _snapshot(store_dir) == before


def test_an_import_refusal_is_the_only_line_on_stderr(tmp_path: Path) -> None:
    """Off a terminal no progress bar is drawn: a refused import writes exactly one line."""
    bad = tmp_path / "not-a-run-id.jsonl"
    bad.write_bytes(_jsonl(_base_entries()))
    result = ledger("import", str(bad), "--store", str(tmp_path / "store"))
    assert result.returncode == 1
    assert len(result.stderr.splitlines()) == 1, result.stderr


# --------------------------------------------------------------------------- export


@dataclasses.dataclass
class Exported:
    store: Path
    run_id: str
    history: fx.History
    text: str


@pytest.fixture(scope="module")
def exported(tmp_path_factory: pytest.TempPathFactory) -> Exported:
    """The rich run, written by the library and exported with ``ledger export -o``."""
    root = tmp_path_factory.mktemp("exported")
    store = root / "store"
    run_id = _rich_run(store, root / "work")
    out = root / f"{run_id}.jsonl"
    result = ledger("export", run_id, "--store", str(store), "-o", str(out))
    assert result.returncode == 0, result.stderr
    return Exported(store, run_id, _history(store, run_id), out.read_text(encoding="utf-8"))


def test_export_prints_one_line_per_record_in_seq_order(exported: Exported, tmp_path: Path) -> None:
    """Export prints each record as {"v", "type", "record"} in seq order; -o writes the same, 0600."""
    out = tmp_path / "out.jsonl"
    printed, written = ledger_all(
        ("export", exported.run_id, "--store", str(exported.store)),
        ("export", exported.run_id[:8], "--store", str(exported.store), "-o", str(out)),
    )
    assert printed.returncode == 0, printed.stderr
    records = exported.history.records()
    lines = printed.stdout.splitlines()
    assert printed.stdout.endswith("\n")
    assert len(lines) == len(records) == 14
    entries = [json.loads(line) for line in lines]
    assert all(list(e) == ["v", "type", "record"] for e in entries)
    assert [e["v"] for e in entries] == [1] * len(records)
    assert [e["record"]["seq"] for e in entries] == list(range(1, len(records) + 1))
    assert [(e["type"], e["record"]) for e in entries] == [
        (r.record_type, r.to_dict()) for r in records
    ]

    assert written.returncode == 0, written.stderr
    assert written.stdout == ""
    assert out.read_text(encoding="utf-8") == printed.stdout == exported.text
    assert stat.S_IMODE(out.stat().st_mode) == 0o600


def test_export_replaces_a_symlink_never_writing_through_it(
    exported: Exported, tmp_path: Path
) -> None:
    """Export -o onto a symlink, as `ledger export --help` says: a new 0600 file takes its place."""
    target = tmp_path / "elsewhere.txt"
    target.write_text("not to be touched\n", encoding="utf-8")
    out = tmp_path / "out.jsonl"
    out.symlink_to(target)
    result = ledger("export", exported.run_id, "--store", str(exported.store), "-o", str(out))
    assert result.returncode == 0, result.stderr
    assert not out.is_symlink()
    assert out.read_text(encoding="utf-8") == exported.text
    assert stat.S_IMODE(out.stat().st_mode) == 0o600
    assert target.read_text(encoding="utf-8") == "not to be touched\n"
    shown = ledger("export", "--help")
    assert "symlink's too, never written through" in " ".join(shown.stdout.split())
    assert sorted(p.name for p in tmp_path.iterdir()) == ["elsewhere.txt", "out.jsonl"]


def test_export_into_a_missing_directory_is_one_line(exported: Exported, tmp_path: Path) -> None:
    """Export -o into a directory that does not exist fails in one line, exit 1, no traceback."""
    out = tmp_path / "missing" / "out.jsonl"
    result = ledger("export", exported.run_id, "--store", str(exported.store), "-o", str(out))
    assert str(out.parent) in _error(result)
    assert not out.parent.exists()


# --------------------------------------------------------------------------- import


def test_export_then_import_gives_an_identical_history(exported: Exported, tmp_path: Path) -> None:
    """The rich run exported and imported into a fresh store loads as the very same history."""
    path = tmp_path / f"{exported.run_id}.jsonl"
    path.write_text(exported.text, encoding="utf-8")
    fresh = tmp_path / "fresh"
    result = ledger("import", str(path), "--store", str(fresh))
    assert result.returncode == 0, result.stderr
    assert result.stdout == f"{path}: run {exported.run_id}, 14 records\n"
    assert _history(fresh, exported.run_id) == exported.history
    assert _run_ids(fresh) == {exported.run_id}


def test_import_with_run_uses_that_id(exported: Exported, tmp_path: Path) -> None:
    """--run imports a file under the id given, whatever the file is called."""
    path = tmp_path / "from-elsewhere.jsonl"
    path.write_text(exported.text, encoding="utf-8")
    other = new_run_id()
    store = tmp_path / "store"
    result = ledger("import", str(path), "--run", other, "--store", str(store))
    assert result.returncode == 0, result.stderr
    assert _history(store, other) == exported.history
    assert _run_ids(store) == {other}


def test_run_with_two_files_is_a_usage_error(tmp_path: Path) -> None:
    """--run with two files is a usage mistake: exit 2, and no store is created."""
    first = _write_file(tmp_path / "in", _base_entries())
    second = _write_file(tmp_path / "in", _base_entries())
    store = tmp_path / "store"
    result = ledger("import", str(first), str(second), "--run", new_run_id(), "--store", str(store))
    assert "--run" in _error(result, code=2)
    assert not store.exists()


def test_a_file_not_named_after_a_run_id_is_refused(tmp_path: Path) -> None:
    """Without --run, a file not named <32 lowercase hex>.jsonl is refused in one line."""
    run_id = new_run_id()
    names = ("run.jsonl", f"{run_id.upper()}.jsonl")
    paths = []
    for name in names:
        path = tmp_path / "in" / name
        path.parent.mkdir(exist_ok=True)
        path.write_bytes(_jsonl(_base_entries()))
        paths.append(path)
    store = tmp_path / "store"
    results = ledger_all(*(("import", str(p), "--store", str(store)) for p in paths))
    for path, result in zip(paths, results, strict=True):
        message = _error(result)
        assert str(path) in message
        assert "<run_id>.jsonl" in message
    assert not store.exists()


def test_a_bare_run_id_without_the_jsonl_suffix_is_refused(tmp_path: Path) -> None:
    """A file named just <run_id>, without .jsonl, is not taken for a <run_id>.jsonl log."""
    run_id = new_run_id()
    path = tmp_path / run_id
    path.write_bytes(_jsonl(_base_entries()))
    store = tmp_path / "store"
    result = ledger("import", str(path), "--store", str(store))
    assert "<run_id>.jsonl" in _error(result)
    assert _run_ids(store) == set()


def test_a_torn_final_line_is_ignored_and_reported(tmp_path: Path) -> None:
    """A final line cut mid-JSON is dropped and said so; every complete line before it is imported."""
    entries = _base_entries()
    extra = _base_entries()[5]
    extra["record"] |= {"seq": 7, "observation_id": "o3", "source_action_id": "naïve"}
    cut_line = json.dumps(extra, ensure_ascii=False).encode()
    tails = {
        "mid-json": cut_line[: len(cut_line) // 2],
        "inside-a-character": cut_line[: cut_line.index("ï".encode()) + 1],
    }
    files = {name: tmp_path / "in" / f"{new_run_id()}.jsonl" for name in tails}
    (tmp_path / "in").mkdir()
    for name, tail in tails.items():
        files[name].write_bytes(_jsonl(entries) + tail)
    stores = {name: tmp_path / name for name in tails}
    human, as_json = ledger_all(
        ("import", str(files["mid-json"]), "--store", str(stores["mid-json"])),
        (
            "import",
            str(files["inside-a-character"]),
            "--store",
            str(stores["inside-a-character"]),
            "--json",
        ),
    )
    assert human.returncode == 0, human.stderr
    assert human.stdout.splitlines() == [
        f"{files['mid-json']}: run {files['mid-json'].stem}, 6 records (torn final line ignored)"
    ]
    assert as_json.returncode == 0, as_json.stderr
    assert json.loads(as_json.stdout) == [
        {
            "file": str(files["inside-a-character"]),
            "run_id": files["inside-a-character"].stem,
            "records": 6,
            "torn_tail_ignored": True,
        }
    ]
    for name, store in stores.items():
        history = _history(store, files[name].stem)
        assert [
            {"v": 1, "type": r.record_type, "record": r.to_dict()} for r in history.records()
        ] == (keyed(entries, files[name].stem))


def keyed(entries: list[dict[str, Any]], run_id: str) -> list[dict[str, Any]]:
    """The entries as an import stores them: a claim without a key gets its run's."""
    out = []
    for entry in entries:
        record = entry["record"]
        if entry["type"] == "claim" and not record.get("idempotency_key"):
            key = fx.idempotency_key(run_id, record["effect_id"])
            entry = {**entry, "record": {**record, "idempotency_key": key}}  # noqa: PLW2901
        out.append(entry)
    return out


def test_a_complete_final_line_without_newline_is_imported(tmp_path: Path) -> None:
    """A last line that is whole but lacks its newline is a record, not a torn tail."""
    run_id = new_run_id()
    path = tmp_path / f"{run_id}.jsonl"
    path.write_bytes(_jsonl(_base_entries()).rstrip(b"\n"))
    store = tmp_path / "store"
    result = ledger("import", str(path), "--store", str(store), "--json")
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)[0]["records"] == 6
    assert json.loads(result.stdout)[0]["torn_tail_ignored"] is False
    assert len(_history(store, run_id).records()) == 6


FORGED: dict[str, tuple[Mutation, int, str]] = {
    "execution-word-that-is-no-state": (
        _setting(4, "record.execution", "verified"),
        4,
        "'verified' is not one of",
    ),
    "malformed-args-digest": (
        _setting(2, "record.operation.args_sha256", "AB" * 32),
        2,
        "args_sha256 must be 64 lowercase hex",
    ),
    "duplicate-effect": (_setting(5, "record.effect_id", "e1"), 5, "claimed again"),
    "outcome-before-its-claim": (_setting(3, "record.effect_id", "e2"), 3, "precedes the claim"),
    "unknown-record-type": (_setting(6, "type", "observed"), 6, "unknown record type 'observed'"),
    "not-json-in-the-middle": (
        _replacing(3, b'{"v": 1, "type": "outcome", "record": {'),
        3,
        "not JSON",
    ),
    "garbage-final-line-with-newline": (_appending(b"garbage\n"), 7, "not JSON"),
    "version-2": (_setting(3, "v", 2), 3, "format version 2 is not 1"),
    "extra-key": (_setting(2, "note", "x"), 2, 'exactly "v", "type", "record"'),
    "seq-gap": (_setting(6, "record.seq", 7), 6, "seq 7 where 6 was due"),
    **{
        f"recorded-at-{name}": (
            _setting(line, "record.recorded_at", value),
            line,
            f"{kind} at seq {line}: recorded_at {value!r} is not in the form the library writes",
        )
        for name, line, kind, value in (
            ("with-z", 1, "observation", "2026-03-01T12:00:00Z"),
            ("without-microseconds", 2, "claim", "2026-03-01T12:00:00+00:00"),
            ("with-milliseconds", 3, "outcome", "2026-03-01T12:00:00.000+00:00"),
            ("with-a-space", 4, "outcome", "2026-03-01 12:00:00.000000+00:00"),
            ("minus-zero", 5, "claim", "2026-03-01T12:00:00.000000-00:00"),
            ("basic-format", 6, "observation", "20260301T120000.000000+00:00"),
        )
    },
    "outcome-dated-before-its-claim": (
        _setting(4, "record.recorded_at", "2026-03-01T11:59:59.999999+00:00"),
        4,
        (
            "outcome at seq 4: recorded_at 2026-03-01T11:59:59.999999+00:00 is before the"
            f" recorded_at {T0} of its claim (seq 2)"
        ),
    ),
}


@dataclasses.dataclass
class ForgedCase:
    store: Path
    path: Path
    existing: str
    before: dict[str, str] | None
    result: Result


@pytest.fixture(scope="module")
def forged_imports(
    tmp_path_factory: pytest.TempPathFactory, template: tuple[Path, str]
) -> dict[str, ForgedCase]:
    """Each file of FORGED imported into a copy of the template store."""
    root = tmp_path_factory.mktemp("forged")
    prepared = {}
    for name, (mutate, _line, _fragment) in FORGED.items():
        store = root / name / "store"
        existing = _copy(template, store)
        path = root / name / f"{new_run_id()}.jsonl"
        path.write_bytes(mutate(_base_entries()))
        prepared[name] = (store, path, existing, _snapshot(store))
    results = ledger_all(*(("import", str(p[1]), "--store", str(p[0])) for p in prepared.values()))
    return {
        name: ForgedCase(*prep, result=result)
        for (name, prep), result in zip(prepared.items(), results, strict=True)
    }


@pytest.mark.parametrize("case", list(FORGED))
def test_a_forged_or_malformed_file_is_refused_whole(
    forged_imports: dict[str, ForgedCase], case: str
) -> None:
    """A forged or malformed line refuses the whole file: exit 1, one line naming it, no run left."""
    forged = forged_imports[case]
    _mutation, line, fragment = FORGED[case]
    message = _error(forged.result)
    assert str(forged.path) in message
    assert f"line {line}:" in message
    assert fragment in message
    assert _run_ids(forged.store) == {forged.existing}
    assert _snapshot(forged.store) == forged.before


def test_an_outcome_without_recorded_at_creates_no_store(tmp_path: Path) -> None:
    """An outcome with a null recorded_at, which the store refuses, is refused naming its line."""
    path = tmp_path / f"{new_run_id()}.jsonl"
    path.write_bytes(_setting(3, "record.recorded_at", None)(_base_entries()))
    store = tmp_path / "store"
    result = ledger("import", str(path), "--store", str(store))
    assert "line 3:" in _error(result)
    assert not store.exists()


def test_importing_a_run_already_in_the_store_changes_nothing(
    tmp_path: Path, template: tuple[Path, str]
) -> None:
    """A file whose run id the store already holds is refused, and the store is byte-identical."""
    store = tmp_path / "store"
    run_id = _copy(template, store)
    history = _history(store, run_id)
    path = _write_file(tmp_path / "in", _base_entries(), run_id)
    before = _snapshot(store)
    result = ledger("import", str(path), "--store", str(store))
    assert "already in the store" in _error(result)
    assert _snapshot(store) == before
    assert _history(store, run_id) == history


def test_a_hard_linked_file_is_refused(tmp_path: Path) -> None:
    """An input file with a second hard link is refused in one line and nothing is written."""
    path = _write_file(tmp_path / "in", _base_entries())
    os.link(path, tmp_path / "second-name")
    store = tmp_path / "store"
    result = ledger("import", str(path), "--store", str(store))
    assert "hard links" in _error(result)
    assert not store.exists()


def test_a_symlinked_file_is_refused(tmp_path: Path) -> None:
    """An input file that is a symlink is refused in one line and nothing is written."""
    target = _write_file(tmp_path / "elsewhere", _base_entries())
    link = tmp_path / target.name
    link.symlink_to(target)
    store = tmp_path / "store"
    result = ledger("import", str(link), "--store", str(store))
    assert "symlink" in _error(result)
    assert not store.exists()


def test_a_missing_file_is_one_line(tmp_path: Path) -> None:
    """An input file that does not exist is refused in one line, exit 1, no traceback."""
    path = tmp_path / f"{new_run_id()}.jsonl"
    store = tmp_path / "store"
    result = ledger("import", str(path), "--store", str(store))
    assert str(path) in _error(result)
    assert not store.exists()


def test_several_files_are_each_imported_all_or_nothing(tmp_path: Path) -> None:
    """With several files each is atomic: a forged second one is named, the first stays imported."""
    good = _write_file(tmp_path / "in", _base_entries())
    forged = tmp_path / "in" / f"{new_run_id()}.jsonl"
    forged.write_bytes(_setting(4, "record.execution", "verified")(_base_entries()))
    also_good = _write_file(tmp_path / "in", _base_entries())
    mixed, both = tmp_path / "mixed", tmp_path / "both"
    failed, as_json = ledger_all(
        ("import", str(good), str(forged), "--store", str(mixed)),
        ("import", str(good), str(also_good), "--store", str(both), "--json"),
    )
    message = _error(failed)
    assert str(forged) in message
    assert "line 4:" in message
    good_id = good.name.removesuffix(".jsonl")
    assert _run_ids(mixed) == {good_id}
    assert len(_history(mixed, good_id).records()) == 6

    assert as_json.returncode == 0, as_json.stderr
    also_id = also_good.name.removesuffix(".jsonl")
    assert json.loads(as_json.stdout) == [
        {"file": str(good), "run_id": good_id, "records": 6, "torn_tail_ignored": False},
        {"file": str(also_good), "run_id": also_id, "records": 6, "torn_tail_ignored": False},
    ]
    assert _run_ids(both) == {good_id, also_id}
