"""docs/forensics.md: every SQL recipe runs in the real ``sqlite3`` shell and agrees with the library.

A real store is built with :class:`EffectLog` (two runs, a crash and recovery, paths whose
names hold ``%`` and ``_``); each ```sql block of the guide is run read-only by the
``sqlite3`` binary with ``-json``, and its rows are compared with the runs' histories and
with ``log.assess``. The guide must also describe every column of every table and view.
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import gc
import hashlib
import json
import os
import re
import shutil
import sqlite3
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from ledger import effects as fx
from ledger.effect_log import EffectLog, new_run_id
from ledger.resources import FilesystemRoot, OwnedResource
from tests.builders import REPO, file_ref, op, require_tool, sha, write_every_column


@pytest.fixture(scope="module", autouse=True)
def _shell() -> None:
    require_tool("sqlite3")


DOC_PATH = REPO / "docs" / "forensics.md"
DOC = DOC_PATH.read_text()

# The guide's literal placeholders, replaced by the real values before a recipe runs.
RUN_PLACEHOLDER = "'RUN_ID'"
PATH_PLACEHOLDER = "/srv/work/data"
EFFECT_IN_DOC = "write-report"  # the scenario names its effect as the guide does

SQL_BLOCK = re.compile(r"```sql\n(.*?)```", re.DOTALL)
RECIPE = re.compile(
    r"^### (?P<number>\d+)\. (?P<title>[^\n]+)\n\n(?P<about>[^\n]+)\n\n```sql\n(?P<sql>.*?)```",
    re.DOTALL | re.MULTILINE,
)
ANCESTORS = re.compile(r"add this inside the parentheses:\n`(?P<fragment>OR [^`\n]+)`")


@dataclasses.dataclass(frozen=True)
class Recipe:
    number: int
    title: str
    sql: str


RECIPES = [Recipe(int(m["number"]), m["title"], m["sql"]) for m in RECIPE.finditer(DOC)]


# --------------------------------------------------------------------------- the store


@dataclasses.dataclass(frozen=True)
class Scenario:
    """A closed store, and what the library says about it."""

    db: Path
    data: str  # the real path the guide's /srv/work/data stands for
    main: str  # the run the guide's RUN_ID stands for
    other: str
    histories: dict[str, fx.History]
    assessments: dict[tuple[str, str], fx.Assessment]

    def claims(self) -> Iterator[tuple[str, fx.EffectClaim]]:
        for run_id, history in self.histories.items():
            for claim in history.claims:
                yield run_id, claim


def _observe(
    log: EffectLog,
    observation_id: str,
    resource: fx.ResourceRef,
    *,
    mechanism: fx.ObservationMechanism = fx.ObservationMechanism.FILESYSTEM_READ,
    coverage: fx.Coverage = fx.Coverage.COMPLETE,
    exists: bool | None = True,
    digest: str | None = None,
    revision: str | None = None,
) -> None:
    log.observe(
        observation_id=observation_id,
        resource=resource,
        mechanism=mechanism,
        coverage=coverage,
        source_action_id=f"look-{observation_id}",
        exists=exists,
        sha256=digest,
        revision=revision,
    )


def _effect(
    log: EffectLog,
    effect_id: str,
    operation: str,
    scope: list[fx.ResourceRef],
    obligations: tuple[fx.Postcondition, ...] = (),
    *,
    outcome: tuple[fx.ExecutionOutcome, fx.Impact] | None = None,
    execution_id: str | None = None,
) -> None:
    log.claim(
        effect_id=effect_id,
        action_id=f"step-{effect_id}",
        operation=op(operation, effect_id.encode()),
        impact_scope=scope,
        obligations=obligations,
    )
    if outcome is not None:
        log.outcome(
            effect_id=effect_id,
            execution=outcome[0],
            impact=outcome[1],
            execution_id=execution_id,
        )


SCENARIO_VERDICTS = {
    EFFECT_IN_DOC: "unverified",  # two postconditions hold, the third was never observed
    "copy-input": "verified",
    "delete-tmp": "contradicted",
    "write-sibling": "failed",
    "write-percent": "unverified",
    "update-ticket": "unverified",
    "sync-cache": "pending",
    "write-index": "verified",  # interrupted, then found in place
    "append-log": "unverified",
    "write-late": "pending",
    "chmod-data": "unverified",
    "archive-sandbox": "unverified",
    "write-big": "unverified",
    "write-other": "pending",
}


def build_store(base: Path) -> Scenario:
    """Write two runs with every kind of record, a crash and a recovery; close everything."""
    box = base / "sandbox"
    for directory in ("data/sub/cache", "data/logs", "data%"):
        (box / directory).mkdir(parents=True)
    root = FilesystemRoot.seal(box)
    store = base / "store"
    ok = fx.ExecutionOutcome.REPORTED_SUCCESS
    csv_content, input_content = b"a,b\n1,2\n", b"input\n"

    def ref(name: str, role: str = "target") -> fx.ResourceRef:
        return file_ref(root, name, role)

    csv, index = ref("data/100%_done.csv"), ref("data/sub/_index.txt")
    ticket = fx.resource_ref(
        OwnedResource("tickets", "alice", "acme", "issues", "42", "r7"), "target"
    )
    main, other = new_run_id(), new_run_id()

    log = EffectLog(main, store)
    _observe(
        log, "look-report", csv, mechanism=fx.ObservationMechanism.FILESYSTEM_STAT, exists=False
    )
    _effect(
        log,
        EFFECT_IN_DOC,
        "write_file",
        [csv, index],
        (
            fx.Postcondition(csv, fx.Predicate.SHA256, sha(csv_content)),
            fx.Postcondition(index, fx.Predicate.EXISTS),
            fx.Postcondition(ref("data/100%_done.csv.tmp"), fx.Predicate.ABSENT),
        ),
        outcome=(ok, fx.Impact.CERTAIN),
    )
    (box / "data" / "100%_done.csv").write_bytes(csv_content)
    _observe(log, "read-report-1", csv, digest=sha(b"half-written"))
    _observe(log, "read-report-2", csv, digest=sha(csv_content))
    _observe(
        log,
        "stat-report",
        csv,
        mechanism=fx.ObservationMechanism.FILESYSTEM_STAT,
        coverage=fx.Coverage.PARTIAL,
    )
    deep = ref("data/sub/deep_file.txt")
    _effect(
        log,
        "copy-input",
        "copy_file",
        [deep],
        (fx.Postcondition(deep, fx.Predicate.SHA256, sha(input_content)),),
        outcome=(ok, fx.Impact.POSSIBLE),
    )
    _observe(log, "read-input", deep, digest=sha(input_content))  # verifies copy-input
    tmp = ref("data/tmp_1.bin")
    _effect(
        log,
        "delete-tmp",
        "delete_file",
        [tmp],
        (fx.Postcondition(tmp, fx.Predicate.ABSENT),),
        outcome=(ok, fx.Impact.CERTAIN),
    )
    _observe(log, "stat-tmp", tmp, mechanism=fx.ObservationMechanism.FILESYSTEM_STAT)  # contradicts
    _effect(
        log,
        "write-sibling",
        "write_file",
        [ref("data_x")],
        (),
        outcome=(fx.ExecutionOutcome.FAILED, fx.Impact.NONE),
    )
    _effect(
        log,
        "write-percent",
        "write_file",
        [ref("data%/f.txt")],
        (),
        outcome=(ok, fx.Impact.POSSIBLE),
    )
    _effect(
        log,
        "update-ticket",
        "update_record",
        [ticket],
        (fx.Postcondition(ticket, fx.Predicate.REVISION, "r8"),),
        outcome=(fx.ExecutionOutcome.INTERRUPTED, fx.Impact.POSSIBLE),  # the worker's own word
        execution_id="req-9",
    )
    _effect(
        log,
        "sync-cache",
        "sync_dir",
        [ref("data/sub/cache")],
        (),
        outcome=(fx.ExecutionOutcome.RUNNING, fx.Impact.POSSIBLE),
    )
    _effect(
        log, "write-index", "write_file", [index], (fx.Postcondition(index, fx.Predicate.EXISTS),)
    )
    _effect(log, "append-log", "append_file", [ref("data/logs/run.log")])
    log.close()  # the worker dies with two claims without an outcome

    with EffectLog.load(main, store) as log:
        assert [o.effect_id for o in log.recover_interrupted()] == ["write-index", "append-log"]
        (box / "data" / "sub" / "_index.txt").write_bytes(b"")
        _observe(log, "read-index", index, mechanism=fx.ObservationMechanism.FILESYSTEM_STAT)
        log.resolve("append-log", applied=False, by="ops", note="run.log unchanged")
        _effect(log, "write-late", "write_file", [ref("data/sub/late.txt")])  # dies again

    with EffectLog(other, store) as log:
        _effect(log, "chmod-data", "chmod", [ref("data")], (), outcome=(ok, fx.Impact.NONE))
        _effect(
            log,
            "archive-sandbox",
            "archive",
            [ref(".", "source")],
            (),
            outcome=(ok, fx.Impact.NONE),
        )
        _effect(
            log,
            "write-big",
            "write_file",
            [ref("big.bin")],
            (),
            outcome=(fx.ExecutionOutcome.FAILED, fx.Impact.POSSIBLE),
        )
        _effect(log, "write-other", "write_file", [ref("other.txt")])

    histories: dict[str, fx.History] = {}
    assessments: dict[tuple[str, str], fx.Assessment] = {}
    for run_id in (main, other):
        with EffectLog.load(run_id, store) as log:
            histories[run_id] = log.history()
            for claim in log.history().claims:
                assessments[run_id, claim.effect_id] = log.assess(claim.effect_id)
    verdicts = {effect: a.verdict.value for (_, effect), a in assessments.items()}
    assert verdicts == SCENARIO_VERDICTS  # the scenario is the one the checks below expect
    return Scenario(
        db=store / "ledger.sqlite3",
        data=ref("data").locator,
        main=main,
        other=other,
        histories=histories,
        assessments=assessments,
    )


@pytest.fixture(scope="module")
def scenario(tmp_path_factory: pytest.TempPathFactory) -> Scenario:
    """The store every recipe reads, built once."""
    with pytest.MonkeyPatch.context() as mp:  # never the user's default store
        mp.setenv("LEDGER_DIR", str(tmp_path_factory.mktemp("default-store") / "ledger"))
        return build_store(tmp_path_factory.mktemp("forensics"))


# --------------------------------------------------------------------------- running recipes


def substitute(sql: str, s: Scenario) -> str:
    """The recipe with the guide's placeholders replaced by the scenario's values."""
    sql = sql.replace(RUN_PLACEHOLDER, f"'{s.main}'").replace(PATH_PLACEHOLDER, s.data)
    assert "RUN_ID" not in sql
    assert "/srv/" not in sql
    return sql


def shell(database: str, sql: str, *, uri: bool = False) -> list[dict[str, Any]]:
    """Run ``sql`` in the real sqlite3 shell, read-only, and return its JSON rows."""
    args = ["sqlite3", "-init", os.devnull, "-bail", "-json"]
    args += [f"file:{database}?mode=ro"] if uri else ["-readonly", database]
    result = subprocess.run([*args, sql], capture_output=True, text=True, timeout=60, check=False)
    assert result.returncode == 0, result.stderr
    assert result.stderr == ""
    return json.loads(result.stdout) if result.stdout.strip() else []


def run_recipe(number: int, s: Scenario) -> list[dict[str, Any]]:
    (recipe,) = [r for r in RECIPES if r.number == number]
    return shell(str(s.db), substitute(recipe.sql, s))


def status(s: Scenario, run_id: str, effect_id: str) -> fx.Assessment:
    return s.assessments[run_id, effect_id]


def under(locator: str, path: str) -> bool:
    return locator == path or locator.startswith(path + "/")


# --------------------------------------------------------------------------- the checks


def check_incident_list(s: Scenario, rows: list[dict[str, Any]]) -> None:
    """The incident list is exactly the effects whose assessment has unresolved impact."""
    expected = []
    for run_id, claim in s.claims():
        a = status(s, run_id, claim.effect_id)
        if a.unresolved_impact:
            expected.append(
                {
                    "run_id": run_id,
                    "seq": claim.seq,
                    "effect_id": claim.effect_id,
                    "action_id": claim.action_id,
                    "operation": claim.operation.name,
                    "execution": None if a.execution is None else a.execution.value,
                    "impact": None if a.impact is None else a.impact.value,
                    "verdict": a.verdict.value,
                    "claimed_at": claim.recorded_at,
                }
            )
    expected.sort(key=lambda r: (r["claimed_at"], r["run_id"], r["seq"]))
    assert rows == expected
    # Every unresolved verdict appears, and resolved ones do not (the scenario covers both).
    assert {r["verdict"] for r in rows} == {"pending", "unverified", "contradicted"}
    listed = {r["effect_id"] for r in rows}
    assert {"copy-input", "write-sibling", "chmod-data", "write-index"}.isdisjoint(listed)


def _what(record: fx.Record) -> tuple[str, str]:
    if isinstance(record, fx.Resolution):
        word = "applied" if record.applied else "not applied"
        return record.effect_id, f"{word}, checked by {record.by}"
    if isinstance(record, fx.EffectClaim):
        scope = ", ".join(r.locator for r in record.impact_scope) or "nothing"
        return record.effect_id, f"{record.operation.name} on {scope}"
    if isinstance(record, fx.EffectOutcome):
        replayed = " (appended by recovery)" if record.replayed else ""
        return record.effect_id, f"{record.execution.value} / {record.impact.value}{replayed}"
    seen = {True: "exists", False: "absent", None: "existence unknown"}[record.exists]
    return record.observation_id, (
        f"{record.coverage.value} {record.mechanism.value} of {record.resource.locator}: {seen}"
    )


def check_timeline(s: Scenario, rows: list[dict[str, Any]]) -> None:
    """The timeline lists the run's records, seq 1..n, with the kinds, ids and times of history().records()."""
    records = s.histories[s.main].records()
    assert [r["seq"] for r in rows] == list(range(1, len(records) + 1))
    expected = [
        {
            "seq": rec.seq,
            "recorded_at": rec.recorded_at,
            "kind": rec.record_type,
            "id": _what(rec)[0],
            "what": _what(rec)[1],
        }
        for rec in records
    ]
    assert rows == expected
    assert {r["kind"] for r in rows} == {"claim", "outcome", "observation", "resolution"}


def check_path(s: Scenario, rows: list[dict[str, Any]]) -> None:
    """The path recipe returns exactly the effects scoped to the path or below it, not its siblings."""
    expected = {
        (run_id, claim.effect_id, ref.locator)
        for run_id, claim in s.claims()
        for ref in claim.impact_scope
        if ref.kind == "fs" and under(ref.locator, s.data)
    }
    assert len(rows) == len(expected)
    assert {(r["run_id"], r["effect_id"], r["locator"]) for r in rows} == expected
    effects = {r["effect_id"] for r in rows}
    assert effects == {
        EFFECT_IN_DOC,
        "copy-input",
        "delete-tmp",
        "sync-cache",
        "write-index",
        "append-log",
        "write-late",
        "chmod-data",
    }
    siblings = {s.data + "_x", s.data + "%/f.txt"}
    assert siblings.isdisjoint(r["locator"] for r in rows)
    for row in rows:
        a = status(s, row["run_id"], row["effect_id"])
        assert row["verdict"] == a.verdict.value
        assert row["unresolved_impact"] == int(a.unresolved_impact)
    # The scenario is one where LIKE goes wrong: a prefix LIKE catches both siblings.
    with sqlite3.connect(f"file:{s.db}?mode=ro", uri=True) as conn:
        liked = {
            loc
            for (loc,) in conn.execute(
                "SELECT locator FROM impact_scope WHERE locator LIKE ?", (s.data + "%",)
            )
        }
    conn.close()
    assert siblings <= liked


def check_by_operation(s: Scenario, rows: list[dict[str, Any]]) -> None:
    """The counts per operation and verdict are those of log.assess over every run."""
    effects: collections.Counter[tuple[str, str]] = collections.Counter()
    unresolved: collections.Counter[tuple[str, str]] = collections.Counter()
    for run_id, claim in s.claims():
        a = status(s, run_id, claim.effect_id)
        key = (claim.operation.name, a.verdict.value)
        effects[key] += 1
        unresolved[key] += a.unresolved_impact
    expected = [
        {"operation": k[0], "verdict": k[1], "effects": effects[k], "unresolved": unresolved[k]}
        for k in sorted(effects)
    ]
    assert rows == expected
    assert {r["verdict"] for r in rows} == {v.value for v in fx.EffectVerdict}


def check_interrupted(s: Scenario, rows: list[dict[str, Any]]) -> None:
    """The interrupted claims are the outcomes recovery appended, with their claim and current verdict."""
    expected = []
    for run_id, history in s.histories.items():
        for outcome in history.outcomes:
            if outcome.replayed:
                claim = history.claim(outcome.effect_id)
                assert claim is not None
                a = status(s, run_id, claim.effect_id)
                expected.append(
                    {
                        "run_id": run_id,
                        "effect_id": claim.effect_id,
                        "action_id": claim.action_id,
                        "operation": claim.operation.name,
                        "claimed_at": claim.recorded_at,
                        "recovered_at": outcome.recorded_at,
                        "verdict": a.verdict.value,
                        "unresolved_impact": int(a.unresolved_impact),
                    }
                )
    assert rows == expected
    # Recovery's two, one found in place afterwards; not the worker's own "interrupted".
    assert [(r["effect_id"], r["verdict"]) for r in rows] == [
        ("write-index", "verified"),
        ("append-log", "unverified"),
    ]


def check_recoverable(s: Scenario, rows: list[dict[str, Any]]) -> None:
    """The claims recovery would mark interrupted are exactly those without any outcome."""
    expected = []
    for run_id, history in s.histories.items():
        with_outcome = {o.effect_id for o in history.outcomes}
        expected.extend(
            {
                "run_id": run_id,
                "seq": c.seq,
                "effect_id": c.effect_id,
                "action_id": c.action_id,
                "operation": c.operation.name,
                "claimed_at": c.recorded_at,
            }
            for c in history.claims
            if c.effect_id not in with_outcome
        )
    expected.sort(key=lambda r: (r["run_id"], r["seq"]))
    assert rows == expected
    assert {r["effect_id"] for r in rows} == {"write-late", "write-other"}  # not sync-cache


def check_postconditions(s: Scenario, rows: list[dict[str, Any]]) -> None:
    """Each postcondition comes with the newest complete observation of its exact target, or NULLs."""
    history = s.histories[s.main]
    claim = history.claim(EFFECT_IN_DOC)
    assert claim is not None
    expected = []
    for position, p in enumerate(claim.obligations):
        seen = [
            o
            for o in history.observations
            if o.coverage is fx.Coverage.COMPLETE and o.resource.same_target(p.target)
        ]
        newest = max(seen, key=lambda o: o.seq) if seen else None
        expected.append(
            {
                "position": position,
                "predicate": p.predicate.value,
                "expected": p.expected,
                "target_kind": p.target.kind,
                "target_locator": p.target.locator,
                "observed_seq": newest and newest.seq,
                "observation_id": newest and newest.observation_id,
                "resource_exists": None
                if newest is None or newest.exists is None
                else int(newest.exists),
                "sha256": newest and newest.sha256,
                "revision": newest and newest.revision,
                "observed_at": newest and newest.recorded_at,
            }
        )
    assert rows == expected
    # The newer partial stat is skipped; the third target was never seen.
    assert [r["observation_id"] for r in rows] == ["read-report-2", "read-index", None]


def check_runs(s: Scenario, rows: list[dict[str, Any]]) -> None:
    """Each run comes with its first and last record time, record and claim counts, and unresolved count."""
    with sqlite3.connect(f"file:{s.db}?mode=ro", uri=True) as conn:
        created_at = dict(conn.execute("SELECT run_id, created_at FROM runs").fetchall())
    conn.close()
    expected = []
    for run_id, history in s.histories.items():
        times = [r.recorded_at for r in history.records()]
        expected.append(
            {
                "run_id": run_id,
                "created_at": created_at[run_id],
                "first_record_at": min(times),
                "last_record_at": max(times),
                "records": len(times),
                "claims": len(history.claims),
                "unresolved": sum(
                    status(s, run_id, c.effect_id).unresolved_impact for c in history.claims
                ),
            }
        )
    expected.sort(key=lambda r: (r["first_record_at"], r["run_id"]))
    assert rows == expected
    assert [r["run_id"] for r in rows] == [s.main, s.other]
    for row in rows:
        assert row["first_record_at"] <= row["created_at"] <= row["last_record_at"]
    # The main run observed before its first claim: that record is older than the run row.
    assert rows[0]["first_record_at"] < rows[0]["created_at"]


def check_chain(s: Scenario, rows: list[dict[str, Any]]) -> None:
    """The chain of the main run, as the library wrote it, verifies: no broken record."""
    assert rows == []


def test_chain_recipe_names_the_first_tampered_record(tmp_path: Path) -> None:
    """After a field is changed with the shell (triggers dropped), the chain recipe names that record."""
    s = build_store(tmp_path)
    (recipe,) = [r for r in RECIPES if r.number == 9]
    conn = sqlite3.connect(s.db, isolation_level=None)
    try:
        conn.execute("DROP TRIGGER outcomes_no_update")
        seq = conn.execute("SELECT min(seq) FROM outcomes WHERE run_id = ?", (s.main,)).fetchone()[
            0
        ]
        conn.execute(
            "UPDATE outcomes SET impact = 'possible' WHERE run_id = ? AND seq = ?", (s.main, seq)
        )
    finally:
        conn.close()
    rows = shell(str(s.db), substitute(recipe.sql, s))
    assert rows == [{"seq": seq, "kind": "outcome", "problem": "hash does not match the fields"}]


@pytest.mark.parametrize(
    ("table", "column", "value"),
    [
        ("claims", "step", "'plan/1: write c'"),
        ("claims", "args", """'{"n":[1,2.5,null,true],"path":"/w/c","text":"caf\u00e9 \u2603"}'"""),
        ("outcomes", "result", "'true'"),  # r2's recorded JSON null, made true
    ],
)
def test_chain_recipe_verifies_steps_arguments_and_results(
    tmp_path: Path, table: str, column: str, value: str
) -> None:
    """Recipe 9 verifies records of chain version 3 and names one whose recorded value changed."""
    store, run_id = tmp_path / "store", new_run_id()
    write_every_column(store, run_id, recorded=True)
    (recipe,) = [r for r in RECIPES if r.number == 9]
    sql = recipe.sql.replace(RUN_PLACEHOLDER, f"'{run_id}'")
    db = store / "ledger.sqlite3"
    assert shell(str(db), sql) == []
    conn = sqlite3.connect(db, isolation_level=None)
    try:
        conn.execute(f"DROP TRIGGER {table}_no_update")
        seq = conn.execute(
            f"SELECT min(seq) FROM {table} WHERE run_id = ? AND {column} IS NOT NULL"
            f" AND {column} <> ''",
            (run_id,),
        ).fetchone()[0]
        if column == "result":
            seq = conn.execute(
                "SELECT seq FROM outcomes WHERE run_id = ? AND result = 'null'", (run_id,)
            ).fetchone()[0]
        conn.execute(
            f"UPDATE {table} SET {column} = {value} WHERE run_id = ? AND seq = ?", (run_id, seq)
        )
    finally:
        conn.close()
    kind = {"claims": "claim", "outcomes": "outcome"}[table]
    assert shell(str(db), sql) == [
        {"seq": seq, "kind": kind, "problem": "hash does not match the fields"}
    ]


CHECKS: dict[int, Callable[[Scenario, list[dict[str, Any]]], None]] = {
    1: check_incident_list,
    2: check_timeline,
    3: check_path,
    4: check_by_operation,
    5: check_interrupted,
    6: check_recoverable,
    7: check_postconditions,
    8: check_runs,
    9: check_chain,
}


# --------------------------------------------------------------------------- tests


def test_every_sql_block_is_a_checked_recipe() -> None:
    """Every ```sql block of the guide is a numbered recipe with a one-line description and a check."""
    blocks = SQL_BLOCK.findall(DOC)
    assert len(blocks) == len(RECIPES) == len(CHECKS) == 9
    assert [r.sql for r in RECIPES] == blocks
    assert [r.number for r in RECIPES] == sorted(CHECKS)
    assert "LIKE" not in RECIPES[2].sql.upper()
    assert sum(RUN_PLACEHOLDER in r.sql for r in RECIPES) == 3
    assert sum(PATH_PLACEHOLDER in r.sql for r in RECIPES) == 1
    assert sum(f"'{EFFECT_IN_DOC}'" in r.sql for r in RECIPES) == 1


@pytest.mark.parametrize("recipe", RECIPES, ids=[f"{r.number}-{r.title}" for r in RECIPES])
def test_recipe(recipe: Recipe, scenario: Scenario) -> None:
    """The recipe, run by the sqlite3 shell read-only on a real store, returns what the library says."""
    check = CHECKS.get(recipe.number)
    assert check is not None, f"recipe {recipe.number} has no check"
    check(scenario, run_recipe(recipe.number, scenario))


def test_path_recipe_with_ancestors(scenario: Scenario) -> None:
    """The guide's clause for ancestor directories adds the effects scoped above the path, and no sibling."""
    match = ANCESTORS.search(DOC)
    assert match is not None
    (recipe,) = [r for r in RECIPES if r.number == 3]
    anchor = f"= '{PATH_PLACEHOLDER}' || '/')"
    assert recipe.sql.count(anchor) == 1
    sql = recipe.sql.replace(anchor, anchor[:-1] + " " + match["fragment"] + ")")
    rows = shell(str(scenario.db), substitute(sql, scenario))
    effects = {r["effect_id"] for r in rows}
    assert "archive-sandbox" in effects
    assert {"write-sibling", "write-percent", "write-big", "update-ticket"}.isdisjoint(effects)
    base = {r["effect_id"] for r in run_recipe(3, scenario)}
    assert effects == base | {"archive-sandbox"}


def _files(store: Path) -> dict[str, str]:
    # Not ledger.lock: it holds no data, and opening and closing it here would drop the
    # locks this process's logs hold on it.
    return {
        p.name: hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(store.iterdir())
        if p.name != "ledger.lock"
    }


def _run_all(db: Path, s: Scenario, *, uri: bool) -> list[list[dict[str, Any]]]:
    return [shell(str(db), substitute(r.sql, s), uri=uri) for r in RECIPES]


@contextlib.contextmanager
def _live_claim(store: Path, data: str) -> Iterator[None]:
    """While the block runs, a live writer's claim "live" is committed but only in the WAL."""
    with EffectLog(new_run_id(), store) as log:
        log.claim(
            effect_id="live",
            action_id="step-live",
            operation=op("write_file"),
            impact_scope=[fx.ResourceRef("fs", data + "/live.txt", "target")],
        )
        yield


def test_recipes_leave_the_store_unchanged(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Running every recipe read-only leaves the database and its WAL byte-identical, closed or live."""
    monkeypatch.setenv("LEDGER_DIR", str(tmp_path / "default"))
    s = build_store(tmp_path)
    store = s.db.parent
    db, wal, shm = (s.db.name + suffix for suffix in ("", "-wal", "-shm"))
    closed = _files(store)
    assert set(closed) == {db}  # every writer closed: SQLite removed its -wal and -shm

    _run_all(s.db, s, uri=True)
    after = _files(store)
    assert after[db] == closed[db]
    # The first reader creates an empty -wal and the -shm index, and nothing else.
    assert set(after) == {db, wal, shm}
    assert after[wal] == hashlib.sha256(b"").hexdigest()

    first = _run_all(s.db, s, uri=False)
    assert _files(store) == after  # now every file, -shm included, is byte-identical

    # A live writer with committed records still in the WAL: readers see them, and leave the
    # database and the WAL as they are (the -shm index is shared memory: readers mark it).
    with _live_claim(store, s.data):
        live = _files(store)
        assert live[db] == closed[db]  # the claim is only in the WAL
        assert live[wal] != after[wal]
        rows = _run_all(s.db, s, uri=False)
        now = _files(store)
        assert (now[db], now[wal]) == (live[db], live[wal])
    assert "live" in {r["effect_id"] for r in rows[0]}
    assert len(rows[0]) == len(first[0]) + 1


def _backup(db: Path, copy: Path) -> None:
    result = subprocess.run(
        ["sqlite3", "-init", os.devnull, "-readonly", str(db), f".backup {copy}"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr


def test_backup_copy_reads_the_same(tmp_path: Path, scenario: Scenario) -> None:
    """The guide's `.backup` from a read-only shell copies every record, closed store or live,
    and leaves the database and its WAL as they were."""
    assert '".backup /tmp/incident.sqlite3"' in DOC
    # A store of its own, closed: no log of this process may write or checkpoint it meanwhile.
    gc.collect()
    store = shutil.copytree(scenario.db.parent, tmp_path / "store")
    db = store / scenario.db.name
    wal, shm = (scenario.db.name + suffix for suffix in ("-wal", "-shm"))
    with sqlite3.connect(db) as conn:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.close()  # the last connection closed: SQLite removes the -wal and -shm
    closed = _files(store)
    assert set(closed) == {db.name}

    copy = tmp_path / "closed.sqlite3"
    _backup(db, copy)
    after = _files(store)
    # As for every reader (the guide says so): the database keeps its bytes, and an empty
    # -wal and the -shm index appear.
    assert after[db.name] == closed[db.name]
    assert set(after) == {db.name, wal, shm}
    assert after[wal] == hashlib.sha256(b"").hexdigest()
    assert _run_all(copy, scenario, uri=False) == _run_all(db, scenario, uri=False)

    # A live writer whose last claim is only in the WAL: the copy has it, the files keep theirs.
    with _live_claim(store, scenario.data):
        live = _files(store)
        assert live[db.name] == closed[db.name]
        assert live[wal] != after[wal]
        copy = tmp_path / "live.sqlite3"
        _backup(db, copy)
        now = _files(store)
        assert (now[db.name], now[wal]) == (live[db.name], live[wal])
        copied = _run_all(copy, scenario, uri=False)
        assert copied == _run_all(db, scenario, uri=False)
    assert "live" in {r["effect_id"] for r in copied[0]}


# --------------------------------------------------------------------------- the reference


def _sections() -> dict[str, str]:
    """The text of each ``### `name` `` section of the guide, by name."""
    parts = re.split(r"^(#{2,3} .*)$", DOC, flags=re.MULTILINE)
    sections = {}
    for heading, body in zip(parts[1::2], parts[2::2], strict=True):
        named = re.fullmatch(r"### `(\w+)`", heading)
        if named:
            sections[named[1]] = body
    return sections


def _documented_columns(section: str) -> set[str]:
    cells = re.findall(r"^\| ([^|]+) \|", section, flags=re.MULTILINE)
    return {name for cell in cells for name in re.findall(r"`(\w+)`", cell)}


def _schema(db: Path) -> dict[str, list[str]]:
    with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as conn:
        names = [
            name
            for (name,) in conn.execute(
                "SELECT name FROM sqlite_master WHERE type IN ('table', 'view')"
                " AND name NOT LIKE 'sqlite!_%' ESCAPE '!' ORDER BY name"
            )
        ]
        columns = {
            name: [row[1] for row in conn.execute(f'PRAGMA table_info("{name}")')] for name in names
        }
    conn.close()
    return columns


def test_every_table_and_view_column_is_documented(scenario: Scenario) -> None:
    """Every table and view of a real store has a section in the guide describing exactly its columns."""
    schema = _schema(scenario.db)
    assert {"runs", "claims", "impact_scope", "obligations", "outcomes", "observations"} <= set(
        schema
    )
    assert {"alembic_version", "effect_status", "unsettled_claims"} <= set(schema)
    sections = _sections()
    assert set(sections) == set(schema)
    for name, columns in schema.items():
        assert _documented_columns(sections[name]) == set(columns), name


ENUM_COLUMNS = {
    ("impact_scope", "kind"): fx.RESOURCE_KINDS,
    ("obligations", "predicate"): [m.value for m in fx.Predicate],
    ("outcomes", "execution"): [m.value for m in fx.ExecutionOutcome],
    ("outcomes", "impact"): [m.value for m in fx.Impact],
    ("observations", "mechanism"): [m.value for m in fx.ObservationMechanism],
    ("observations", "coverage"): [m.value for m in fx.Coverage],
    ("effect_status", "verdict"): [m.value for m in fx.EffectVerdict],
    ("resolutions", "origin"): [m.value for m in fx.ResolutionOrigin],
    ("approval_decisions", "decision"): ["granted", "denied"],
    ("approval_decisions", "source"): [m.value for m in fx.ApprovalSource],
    ("approval_status", "state"): list(fx.APPROVAL_STATES),
}


def test_every_enum_word_is_documented_with_its_column() -> None:
    """Each enum column's row in the guide names every word the column can hold."""
    sections = _sections()
    for (table, column), words in ENUM_COLUMNS.items():
        (row,) = [
            line for line in sections[table].splitlines() if line.startswith(f"| `{column}` |")
        ]
        for word in words:
            assert f"`{word}`" in row, (table, column, word)
