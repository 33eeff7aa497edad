"""The tamper matrix: every column of every record table, edited from the sqlite3 shell, is caught.

One store is built with the library. Its run shape — claims with impact scope and
obligations, outcomes RUNNING then terminal and one recovered after a crash,
observations (one made before the first claim), resolutions, steps, recorded arguments
and results (a JSON null among them), approval requests answered by another process (one
granted and claimed under, one denied) — is written once per case,
plus one more such run no case touches and a second run of another shape. Each case
edits its own run, on a copy of the store, with the real ``sqlite3`` shell: every
trigger dropped, ``PRAGMA ignore_check_constraints = ON`` and ``foreign_keys = OFF``,
then one of: one column of one row set to another valid-looking value of its type (for
every column ``PRAGMA table_info`` lists of claims, outcomes, observations, resolutions,
approval_requests, approval_decisions and scope_index); one field of one entry of a claim's ``impact_scope`` or
``obligations`` JSON array set with ``json_set`` (for every key of either); a row
deleted, a crafted row inserted (a copy with a new seq and new ids), two rows' seq (or
position) swapped; an array entry removed, added or two swapped, with the claim's count
to match. scope_index rows (a table WITHOUT ROWID) are keyed by their primary key. An
edit of a claim's impact scope also sets scope_index to match it, so that only the
claim's hash is wrong; scope_index, not hashed, is caught by load's check that it equals
the claims' scopes. The triggers are put back in the same transaction, so the edits are
the only thing wrong with the copy: a control copy, dropped and restored without an
edit, verifies clean.

Every case must be caught both by ``ledger verify`` (the installed console script,
run once over the copy: exit 1, a problem naming the case's run, none naming an
untouched run) and by ``EffectLog.load`` of its run (:class:`EffectPersistenceError`).
An edit that changes no record would be exempt: none is expected, and every case
checks that its edit changed the tables.

A record changed with its own hash recomputed (``ledger.sqlite.rows.chain_hash``) —
an array entry's included, scope_index set to match — breaks the link of the next
record. A chain recomputed after a change, and a run truncated at its end, stay
consistent: load accepts them, and only an anchor taken before (``ledger head``)
catches them. docs/forensics.md recipe 9, run by the shell, names the first broken seq
of every changed-field case (scope_index is not in the chain: not its cases).

Figures go to stdout as one ``reliability:`` line, and as a JSON line to the file
named by ``LEDGER_RELIABILITY_REPORT`` when it is set.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import hashlib
import json
import re
import shutil
import sqlite3
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.sdk.trace import TracerProvider

from ledger import _chain
from ledger import effects as fx
from ledger.effect_log import EffectLog, EffectPersistenceError, new_run_id
from ledger.sqlite.rows import chain_hash
from tests.builders import (
    REPO,
    answer_elsewhere,
    approval_answers,
    ask_approvals,
    claim_approved,
    fs_ref,
    ledger,
    op,
    require_tool,
    sha,
    sql_literal,
)
from tests.reliability.figures import report
from tests.sqlite.driver import shell_script


@pytest.fixture(scope="module", autouse=True)
def _shell() -> None:
    require_tool("sqlite3")


DB = "ledger.sqlite3"

SEQ_TABLES = (
    "claims",
    "outcomes",
    "observations",
    "resolutions",
    "approval_requests",
    "approval_decisions",
)
# scope_index holds each claim's scope entries by resource, written from the claim by a
# trigger; it is not hashed, but load and verify require it to equal the claims' scopes.
RECORD_TABLES = (*SEQ_TABLES, "scope_index")
# A table without rowid (scope_index is WITHOUT ROWID): its rows are keyed by these.
KEYS = {"scope_index": ("run_id", "kind", "locator", "effect_id", "position")}
# A claim's impact scope and obligations, JSON arrays in columns of its row (migration
# 0009): each entry's keys, in their order, and the claim's column that counts them.
ARRAYS = {
    "impact_scope": (_chain.SCOPE_COLUMNS, "scope_count"),
    "obligations": (_chain.OBLIGATION_COLUMNS, "obligation_count"),
}
TABLE_OF = {
    "claim": "claims",
    "outcome": "outcomes",
    "observation": "observations",
    "resolution": "resolutions",
    "approval_request": "approval_requests",
    "approval_decision": "approval_decisions",
}
ROW_EDITS = ("DELETE", "INSERT", "SWAP", "REHASH")
# The row edits: of every record table's rows (scope_index holds no hash to recompute)
# and of the entries of each claim array (removed, added, two swapped, one forged with
# the claim's hash recomputed).
ROW_CASES = (
    *((table, edit) for table in SEQ_TABLES for edit in ROW_EDITS),
    *(("scope_index", edit) for edit in ("DELETE", "INSERT", "SWAP")),
    *((f"claims.{array}", edit) for array in ARRAYS for edit in ROW_EDITS),
)
# The columns each table's rows contribute to the chain's encoding (ledger._chain).
ENCODED = {
    # (a claim's arrays: each field of each entry, read from the JSON)
    "claims": {
        *_chain.CLAIM_COLUMNS,
        *_chain.CLAIM_COLUMNS_2,
        *_chain.CLAIM_COLUMNS_3,
        *_chain.CLAIM_COLUMNS_5,
        *_chain.CLAIM_COLUMNS_6,
        *ARRAYS,
        "prev_hash",
        "hash",
    },
    "outcomes": {*_chain.OUTCOME_COLUMNS, *_chain.OUTCOME_COLUMNS_3, "prev_hash", "hash"},
    "observations": {*_chain.OBSERVATION_COLUMNS, "prev_hash", "hash"},
    "resolutions": {*_chain.RESOLUTION_COLUMNS, *_chain.RESOLUTION_COLUMNS_4, "prev_hash", "hash"},
    "approval_requests": {*_chain.APPROVAL_REQUEST_COLUMNS, "prev_hash", "hash"},
    "approval_decisions": {*_chain.APPROVAL_DECISION_COLUMNS, "prev_hash", "hash"},
    # Not in the chain: its edits are caught by the scope_index check, not by recipe 9.
    "scope_index": set(),
}
# Enum columns get another word of their enum: a value the schema would accept.
WORDS: dict[str, tuple[str, ...]] = {
    "claims.kind": tuple(m.value for m in fx.EffectKind),
    "kind": fx.RESOURCE_KINDS,
    "target_kind": fx.RESOURCE_KINDS,
    "resource_kind": fx.RESOURCE_KINDS,
    "predicate": tuple(m.value for m in fx.Predicate),
    "execution": tuple(m.value for m in fx.ExecutionOutcome),
    "impact": tuple(m.value for m in fx.Impact),
    "mechanism": tuple(m.value for m in fx.ObservationMechanism),
    "coverage": tuple(m.value for m in fx.Coverage),
    # A worker's resolution passed off as a person's (or the reverse).
    "origin": tuple(m.value for m in fx.ResolutionOrigin),
    # A denial passed off as a grant (or the reverse), and a person's command as an MCP
    # client's answer relayed by the proxy that asked (or the reverse).
    "decision": ("granted", "denied"),
    "source": tuple(m.value for m in fx.ApprovalSource),
}
BOOLEANS = ("replayed", "resource_exists", "applied")
# Times, forged a second later: still a time, in the form the library writes.
TIMES = ("recorded_at", "requested_at", "expires_at", "decided_at")
# Recorded values (migration 0012): canonical JSON text, forged into other canonical JSON.
RECORDED = ("args", "result")
# The ids a crafted copy of a row must change to be insertable next to the original.
NEW_ID = {
    "claims": ("effect_id",),
    "observations": ("observation_id",),
    "resolutions": ("effect_id",),
    "approval_requests": ("approval_id", "effect_id"),
    "approval_decisions": ("approval_id",),
}
HEX64 = re.compile(r"[0-9a-f]{64}")
TRACEPARENT = f"00-{'1' * 32}-{'2' * 16}-01"
# Edits that change no record, and so need not be detected: none is expected.
EXEMPT: frozenset[str] = frozenset()

FIGURES: dict[str, Any] = {
    "cases": 0,
    "detected": 0,
    "missed": 0,
    "verify_detected": 0,
    "load_detected": 0,
    "unchanged_edits": 0,
    "untouched_runs_flagged": 0,
    "anchor_cases": 0,
    "anchor_detected": 0,
    "recipe9_cases": 0,
    "recipe9_named": 0,
    "missed_cases": [],
}


@pytest.fixture(scope="module", autouse=True)
def _report() -> Iterator[None]:
    started = time.monotonic()
    yield
    figures = {"test": "tamper", **FIGURES, "seconds": round(time.monotonic() - started, 1)}
    report(
        figures,
        f"tamper cases={figures['cases']} detected={figures['detected']} "
        f"missed={figures['missed']} (verify {figures['verify_detected']}, "
        f"load {figures['load_detected']}; unchanged edits {figures['unchanged_edits']}, "
        f"untouched runs flagged {figures['untouched_runs_flagged']}) "
        f"anchor {figures['anchor_detected']}/{figures['anchor_cases']} "
        f"recipe9 {figures['recipe9_named']}/{figures['recipe9_cases']} "
        f"in {figures['seconds']}s",
    )


# --------------------------------------------------------------------------- the store


@dataclasses.dataclass(frozen=True)
class Base:
    """The store every case copies, and what the tests need to know of it."""

    directory: Path
    runs: tuple[str, ...]  # one run of the shape below per case
    control: str  # a run of the same shape no case edits
    other: str  # a run of another shape no case edits
    head: int  # the last seq of a run of that shape
    triggers: tuple[tuple[str, str], ...]  # (name, CREATE TRIGGER sql)
    columns: dict[str, tuple[tuple[str, str], ...]]  # table -> (name, declared type)


def _write_run(directory: Path, run_id: str) -> int:
    """The run every case edits; return its last seq."""
    return _write_runs(directory, [run_id])


def _write_runs(directory: Path | str, run_ids: Sequence[str]) -> int:
    """Runs of the shape every case edits; return their last seq (the same in each).

    Each run's records, then its approval requests (refund and wipe), answered by one
    other process for all the runs (a person's ``ledger approve`` and ``ledger deny``),
    then refund claimed under its grant and done.
    """
    asked = {}
    for run_id in run_ids:
        _write_records(directory, run_id)
        asked[run_id] = ask_approvals(run_id, directory)
    answer_elsewhere(directory, [a for r in run_ids for a in approval_answers(r, asked[r])])
    (head,) = {claim_approved(run_id, directory, asked[run_id]) for run_id in run_ids}
    return head


def _write_records(directory: Path | str, run_id: str) -> None:
    """The records of the run every case edits, before its approvals."""
    a, b, c, d = (fs_ref(f"/w/{name}") for name in "abcd")
    user = fx.ResourceRef("owned", "db/users/1", "record", "r1")
    # An SDK's tracer: the first claim stores the trace context of the span around it
    # (chain version 5); the others, made outside any span, store none.
    tracer_provider = TracerProvider()
    with EffectLog(run_id, directory, tracer_provider=tracer_provider) as log:
        log.observe(
            observation_id="o0",
            resource=a,
            mechanism=fx.ObservationMechanism.FILESYSTEM_STAT,
            coverage=fx.Coverage.COMPLETE,
            source_action_id="s0",
            exists=False,
        )
        with tracer_provider.get_tracer("test").start_as_current_span("the worker's turn"):
            log.claim(
                effect_id="c1",
                action_id="a1",
                operation=op("write_file", b"1"),
                step="plan/1: write a",
                args={"path": "/w/a", "text": "caf\u00e9"},
                impact_scope=[a, user],
                obligations=[
                    fx.Postcondition(a, fx.Predicate.SHA256, sha(b"a")),
                    fx.Postcondition(user, fx.Predicate.REVISION, "r2"),
                ],
            )
        log.outcome(
            effect_id="c1",
            execution=fx.ExecutionOutcome.RUNNING,
            impact=fx.Impact.POSSIBLE,
            execution_id="x-1",
        )
        log.claim(
            effect_id="c2",
            action_id="a2",
            operation=op("touch", b"2"),
            step="plan/2",
            impact_scope=[b],
            obligations=[fx.Postcondition(b, fx.Predicate.EXISTS)],
        )
        log.outcome(
            effect_id="c1",
            execution=fx.ExecutionOutcome.REPORTED_SUCCESS,
            impact=fx.Impact.CERTAIN,
            execution_id="x-1",
            result={"written": 1},
        )
        log.observe(
            observation_id="o1",
            resource=a,
            mechanism=fx.ObservationMechanism.FILESYSTEM_READ,
            coverage=fx.Coverage.COMPLETE,
            source_action_id="s1",
            exists=True,
            sha256=sha(b"a"),
        )
        log.claim(
            effect_id="c3",
            action_id="a3",
            operation=op("remove", b"3"),
            impact_scope=[c],
            obligations=[fx.Postcondition(c, fx.Predicate.ABSENT)],
        )
        log.outcome(  # a recorded JSON null: the text 'null'
            effect_id="c2",
            execution=fx.ExecutionOutcome.FAILED,
            impact=fx.Impact.NONE,
            result=None,
            result_recorded=True,
        )
        log.observe(
            observation_id="o2",
            resource=user,
            mechanism=fx.ObservationMechanism.BACKEND_QUERY,
            coverage=fx.Coverage.COMPLETE,
            source_action_id="s2",
            exists=True,
            revision="r2",
        )
    # The worker crashed with c3 claimed and no outcome; after a restart it is recovered,
    # people say it and c2 did not land, and c3 is retried (a claim of chain version 2, as
    # is the idempotent c5, and the resolution).
    with EffectLog.load(run_id, directory) as log:
        assert len(log.recover_interrupted()) == 1
        log.resolve("c2", applied=False, by="bob")
        log.resolve("c3", applied=False, by="alice", note="checked /w/c: still there")
        log.retry("c3", new_effect_id="c3-retry")
        log.claim(
            effect_id="c5",
            action_id="a5",
            operation=op("upsert", b"5"),
            impact_scope=[user],
            kind=fx.EffectKind.IDEMPOTENT,
        )
        log.claim(effect_id="c4", action_id="a4", operation=op(), impact_scope=[d])
        log.observe(
            observation_id="o3",
            resource=d,
            mechanism=fx.ObservationMechanism.FILESYSTEM_STAT,
            coverage=fx.Coverage.PARTIAL,
            source_action_id="s3",
        )
        log.outcome(
            effect_id="c4",
            execution=fx.ExecutionOutcome.REPORTED_SUCCESS,
            impact=fx.Impact.POSSIBLE,
        )


def _write_other_run(directory: Path, run_id: str) -> None:
    a = fs_ref("/w/a")
    with EffectLog(run_id, directory) as log:
        log.claim(effect_id="c1", action_id="a1", operation=op(), impact_scope=[a])
        log.outcome(
            effect_id="c1", execution=fx.ExecutionOutcome.REPORTED_SUCCESS, impact=fx.Impact.CERTAIN
        )
        log.observe(
            observation_id="o1",
            resource=a,
            mechanism=fx.ObservationMechanism.FILESYSTEM_READ,
            coverage=fx.Coverage.COMPLETE,
            source_action_id="s1",
            exists=True,
            sha256=sha(b"b"),
        )


def _build(directory: Path) -> Base:
    control, other = new_run_id(), new_run_id()
    head = _write_run(directory, control)
    _write_other_run(directory, other)
    with _connect(directory) as conn:
        triggers = tuple(
            (str(name), str(sql))
            for name, sql in conn.execute(
                "SELECT name, sql FROM sqlite_master WHERE type = 'trigger' ORDER BY name"
            )
        )
        columns = {
            table: tuple(
                (str(row[1]), str(row[2]))
                for row in conn.execute(f"PRAGMA table_info({table})").fetchall()
            )
            for table in RECORD_TABLES
        }
        for table, key in KEYS.items():  # the primary key, in its order
            info = conn.execute(f"PRAGMA table_info({table})").fetchall()
            assert tuple(str(r[1]) for r in sorted(info, key=lambda r: r[5]) if r[5]) == key
            assert conn.execute(
                "SELECT 1 FROM pragma_table_list WHERE name = ? AND wr = 1", (table,)
            ).fetchone()  # WITHOUT ROWID
    assert triggers
    cases = (
        sum(len(columns[t]) for t in RECORD_TABLES)
        + sum(len(keys) for keys, _ in ARRAYS.values())
        + len(ROW_CASES)
    )
    runs = tuple(new_run_id() for _ in range(cases))
    assert _write_runs(directory, runs) == head
    return Base(directory, runs, control, other, head, triggers, columns)


@pytest.fixture(scope="module")
def base(tmp_path_factory: pytest.TempPathFactory) -> Base:
    """The store built once, closed."""
    with pytest.MonkeyPatch.context() as mp:  # never the user's default store
        mp.setenv("LEDGER_DIR", str(tmp_path_factory.mktemp("default-store") / "ledger"))
        return _build(tmp_path_factory.mktemp("tamper-base") / "store")


class _Connection:
    """A read-only plain sqlite3 connection, closed on exit."""

    def __init__(self, directory: Path) -> None:
        self.conn = sqlite3.connect(f"file:{directory / DB}?mode=ro", uri=True)
        self.conn.row_factory = sqlite3.Row

    def __enter__(self) -> sqlite3.Connection:
        return self.conn

    def __exit__(self, *exc: object) -> None:
        self.conn.close()


def _connect(directory: Path) -> _Connection:
    return _Connection(directory)


def _snapshot(directory: Path) -> dict[str, list[str]]:
    """Every row of every record table, as text, in a canonical order."""
    with _connect(directory) as conn:
        return {
            table: sorted(repr(tuple(row)) for row in conn.execute(f"SELECT * FROM {table}"))
            for table in ("runs", *RECORD_TABLES)
        }


def _rows(directory: Path, table: str, run_id: str) -> list[dict[str, Any]]:
    """A run's rows of ``table`` with their rowid if any, in seq (claim seq, position) order."""
    claim_seq = (
        "(SELECT c.seq FROM claims AS c WHERE c.run_id = t.run_id AND c.effect_id = t.effect_id)"
    )
    if table in ("observations", "approval_decisions"):
        claim_seq = "NULL"
    order = "t.seq" if table in SEQ_TABLES else f"{claim_seq}, t.position"
    rowid = "" if table in KEYS else "t.rowid AS _rowid, "
    with _connect(directory) as conn:
        rows = conn.execute(
            f"SELECT {rowid}t.*, {claim_seq} AS _claim_seq"
            f" FROM {table} AS t WHERE t.run_id = ? ORDER BY {order}",
            (run_id,),
        ).fetchall()
    return [dict(row) for row in rows]


def _record_seq(table: str, row: dict[str, Any]) -> int:
    """The seq of the record a row belongs to (a scope_index row belongs to its claim)."""
    return int(row["seq"] if table in SEQ_TABLES else row["_claim_seq"])


def _where(table: str, row: dict[str, Any]) -> str:
    """The row, by its rowid, or by its primary key in a table without rowid."""
    if table in KEYS:
        return " AND ".join(f"{c} = {sql_literal(row[c])}" for c in KEYS[table])
    return f"rowid = {row['_rowid']}"


def _reindex(run_id: str, effect_id: str) -> list[str]:
    """scope_index set to the claim's impact scope as it now is, as the claim's trigger writes it.

    An edit of a claim's scope that does this too is caught by the chain alone.
    """
    claim = f"run_id = '{run_id}' AND effect_id = {sql_literal(effect_id)}"
    insert = (
        "INSERT INTO scope_index (run_id, kind, locator, effect_id, position)"
        " SELECT c.run_id, json_extract(j.value, '$.kind'), json_extract(j.value, '$.locator'),"
        f" c.effect_id, j.key FROM claims AS c, json_each(c.impact_scope) AS j"
        f" WHERE c.run_id = '{run_id}' AND c.effect_id = {sql_literal(effect_id)};"
    )
    return [f"DELETE FROM scope_index WHERE {claim};", insert]


def _json(value: object) -> str:
    """JSON as the library writes a claim's arrays: compact, keys in their order."""
    return json.dumps(value, separators=(",", ":"))


def _tamper_script(base: Base, statements: list[str]) -> str:
    """One transaction: drop every trigger, edit, put the triggers back."""
    return "\n".join(
        [
            "PRAGMA foreign_keys = OFF;",
            "PRAGMA ignore_check_constraints = ON;",
            "BEGIN IMMEDIATE;",
            *(f'DROP TRIGGER "{name}";' for name, _ in base.triggers),
            *statements,
            *(f"{sql};" for _, sql in base.triggers),
            "COMMIT;",
            "",
        ]
    )


def _copy(base: Base, directory: Path) -> Path:
    shutil.copytree(base.directory, directory)
    return directory


def _tamper(base: Base, directory: Path, statements: list[str]) -> None:
    result = shell_script(directory / DB, _tamper_script(base, statements))
    assert result.returncode == 0, (statements, result.stderr)


def _load_error(directory: Path, run_id: str) -> str | None:
    try:
        with EffectLog.load(run_id, directory) as log:
            log.history()
    except EffectPersistenceError as e:
        return str(e)
    return None


def _verify(directory: Path, *anchors: str) -> tuple[int, dict[str, Any]]:
    args = ["verify", "--json", "--store", str(directory)]
    for anchor in anchors:
        args += ["--anchor", anchor]
    result = ledger(*args)
    assert result.returncode in (0, 1), result.stderr
    return result.returncode, json.loads(result.stdout)


def _names(problems: list[str], run_id: str) -> bool:
    return any(p.startswith(f"run {run_id}:") for p in problems)


# --------------------------------------------------------------------------- the cases


@dataclasses.dataclass
class Case:
    """One edit of one run, and what ``verify`` and ``load`` said of it."""

    name: str
    run_id: str
    statements: list[str]
    first_broken: int | None = None  # the first seq the chain recipe must name, if known
    changed: bool = False
    verify_ok: bool = False
    load_error: str | None = None


def _forged_values(base: Base, table: str, column: str, declared: str, old: object) -> list[object]:
    """Other values of the column's type that look valid, most plausible first."""
    if column == "run_id":
        return [new_run_id()]
    if column == "seq":
        return [base.head + 1]  # where the run's next record would go
    if column == "position":
        return [int(str(old)) + 10]
    if table == "claims" and column in ARRAYS:
        return _forged_array(base, column, str(old))
    words = WORDS.get(f"{table}.{column}", WORDS.get(column))
    if words is not None:
        return [w for w in words if w != old]
    if column in BOOLEANS:
        return [1] if old is None else [1 - int(str(old))]
    if table in SEQ_TABLES and column in RECORDED:
        return [_forged_json(old)]
    if declared.upper() == "INTEGER":
        return [0 if old is None else int(str(old)) + 1]
    if column in TIMES:
        moment = dt.datetime.fromisoformat(str(old)) + dt.timedelta(seconds=1)
        return [moment.isoformat(timespec="microseconds")]
    if column == "traceparent":  # another valid trace context: only the chain tells
        return [TRACEPARENT if old != TRACEPARENT else TRACEPARENT.replace("-01", "-00")]
    if isinstance(old, str) and HEX64.fullmatch(old):
        return [hashlib.sha256(old.encode() + b"forged").hexdigest()]
    if old is None:
        return [sha(b"forged") if "sha" in column else "forged"]
    return [f"{old}-forged"]


def _forged_json(old: object) -> str:
    """A recorded value as the library would write another: canonical JSON, or one recorded."""
    if old is None:
        return fx.recorded_json({"forged": True})
    value = json.loads(str(old))
    if isinstance(value, dict) and value:
        key = min(value)
        return fx.recorded_json({**value, key: f"{value[key]}-forged"})
    return fx.recorded_json([value, "forged"])


def _forged_array(base: Base, array: str, old: str) -> list[object]:
    """A claim's array with its first entry replaced by one of another resource."""
    entries = json.loads(old)
    if not entries:
        return []
    keys, _ = ARRAYS[array]
    first = {
        # The predicate and its expected value are kept: they agree with each other.
        key: value
        if key in ("predicate", "expected")
        else _forged_values(base, array, key, "TEXT", value)[0]
        for key, value in entries[0].items()
    }
    assert tuple(first) == keys
    return [_json([first, *entries[1:]])]


def _update(
    base: Base, directory: Path, run_id: str, table: str, spec: tuple[str, str]
) -> Iterator[Case]:
    column, declared = spec  # from PRAGMA table_info
    rows = [r for r in _rows(directory, table, run_id) if _record_seq(table, r) != base.head]
    # A row holding a value first: changing a value is subtler than filling a NULL.
    rows.sort(key=lambda r: r[column] is None)
    if table == "claims" and column in ARRAYS:  # an empty array last: it has no entry to forge
        rows.sort(key=lambda r: json.loads(r[column]) == [])
    for row in rows:
        for value in _forged_values(base, table, column, declared, row[column]):
            statements = [
                f"UPDATE {table} SET {column} = {sql_literal(value)} WHERE {_where(table, row)};"
            ]
            if table == "claims" and column == "impact_scope":  # and scope_index to match
                statements += _reindex(run_id, row["effect_id"])
            yield Case(
                name=f"UPDATE {table}.{column} (record seq {_record_seq(table, row)}: "
                f"{str(row[column])[:16]!r} -> {str(value)[:16]!r})",
                run_id=run_id,
                statements=statements,
                first_broken=_record_seq(table, row) if column in ENCODED[table] else None,
            )


def _field(base: Base, directory: Path, run_id: str, array: str, key: str) -> Iterator[Case]:
    """One field of one entry of a claim's array changed in the shell, with ``json_set``."""
    entries = [
        (row, position, entry)
        for row in _rows(directory, "claims", run_id)
        for position, entry in enumerate(json.loads(row[array]))
    ]
    entries.sort(key=lambda e: e[2][key] is None)  # a value first, as for a column
    for row, position, entry in entries:
        for value in _forged_values(base, array, key, "TEXT", entry[key]):
            new = f"json_set({array}, '$[{position}].{key}', {sql_literal(value)})"
            statements = [f"UPDATE claims SET {array} = {new} WHERE {_where('claims', row)};"]
            if array == "impact_scope":  # scope_index to match: the chain alone must catch it
                statements += _reindex(run_id, row["effect_id"])
            yield Case(
                name=f"UPDATE claims.{array}[].{key} (record seq {row['seq']}, entry {position}: "
                f"{str(entry[key])[:16]!r} -> {str(value)[:16]!r})",
                run_id=run_id,
                statements=statements,
                first_broken=row["seq"],
            )


def _middle_first(items: list[Any]) -> list[Any]:
    middle = len(items) // 2
    return items[middle:] + items[:middle][::-1]


def _delete(base: Base, directory: Path, run_id: str, table: str) -> Iterator[Case]:
    # Not the run's last record: removing the end of a run is truncation (the anchor's job).
    rows = [r for r in _rows(directory, table, run_id) if _record_seq(table, r) != base.head]
    for row in _middle_first(rows):
        yield Case(
            name=f"DELETE {table} (record seq {_record_seq(table, row)})",
            run_id=run_id,
            statements=[f"DELETE FROM {table} WHERE {_where(table, row)};"],
        )


def _copy_row(base: Base, table: str, changes: dict[str, str], where: str) -> str:
    names = [name for name, _ in base.columns[table]]
    values = [changes.get(name, name) for name in names]
    return (
        f"INSERT INTO {table} ({', '.join(names)}) SELECT {', '.join(values)} "
        f"FROM {table} WHERE {where};"
    )


def _insert(base: Base, directory: Path, run_id: str, table: str) -> Iterator[Case]:
    rows = _rows(directory, table, run_id)
    for row in _middle_first(rows):
        if table in SEQ_TABLES:
            changes = {"seq": str(base.head + 1)}
            for column in NEW_ID.get(table, ()):
                changes[column] = f"{column} || '-copy'"
            statements = [_copy_row(base, table, changes, _where(table, row))]
            if table == "claims":  # the crafted claim comes whole, with its scope_index rows
                statements.append(
                    _copy_row(
                        base,
                        "scope_index",
                        {"effect_id": "effect_id || '-copy'"},
                        f"run_id = '{run_id}' AND effect_id = {sql_literal(row['effect_id'])}",
                    )
                )
        else:
            last = max(r["position"] for r in rows if r["effect_id"] == row["effect_id"])
            changes = {"position": str(last + 1)}
            statements = [_copy_row(base, table, changes, _where(table, row))]
        yield Case(
            name=f"INSERT {table} (a copy of record seq {_record_seq(table, row)})",
            run_id=run_id,
            statements=statements,
        )


def _swap(base: Base, directory: Path, run_id: str, table: str) -> Iterator[Case]:
    rows = [r for r in _rows(directory, table, run_id) if _record_seq(table, r) != base.head]
    key = "seq" if table in SEQ_TABLES else "position"
    pairs = [
        (x, y)
        for i, x in enumerate(rows)
        for y in rows[i + 1 :]
        if key == "seq" or x["effect_id"] == y["effect_id"]
    ]
    for x, y in _middle_first(pairs):
        parked = {**x, key: -1}  # (a key column of a table without rowid changes with it)
        yield Case(
            name=f"SWAP {table} ({key} {x[key]} <-> {y[key]}, record seq {_record_seq(table, x)})",
            run_id=run_id,
            statements=[
                f"UPDATE {table} SET {key} = -1 WHERE {_where(table, x)};",
                f"UPDATE {table} SET {key} = {x[key]} WHERE {_where(table, y)};",
                f"UPDATE {table} SET {key} = {y[key]} WHERE {_where(table, parked)};",
            ],
        )


# --------------------------------------------------------------------------- array entries


def _entries(directory: Path, run_id: str, array: str) -> list[tuple[dict[str, Any], int]]:
    """Every entry of ``array`` of the run's claims: (claim row, position)."""
    return [
        (row, position)
        for row in _rows(directory, "claims", run_id)
        for position in range(len(json.loads(row[array])))
    ]


def _entry_case(
    run_id: str, edit: str, array: str, row: dict[str, Any], *, what: str, new: str, counted: str
) -> Case:
    """A claim's ``array`` set to ``new`` and its count to ``counted``; scope_index to match.

    Everything but the claim's hash agrees with the edit: the chain alone must catch it.
    """
    _, count = ARRAYS[array]
    statements = [
        f"UPDATE claims SET {array} = {new}, {count} = {counted} WHERE {_where('claims', row)};"
    ]
    if array == "impact_scope":
        statements += _reindex(run_id, row["effect_id"])
    return Case(
        name=f"{edit} claims.{array} entry ({what}, record seq {row['seq']})",
        run_id=run_id,
        statements=statements,
        first_broken=row["seq"],
    )


def _entry_delete(base: Base, directory: Path, run_id: str, array: str) -> Iterator[Case]:
    """An entry removed from a claim's array, its count one less."""
    _, count = ARRAYS[array]
    for row, position in _middle_first(_entries(directory, run_id, array)):
        new = f"json_remove({array}, '$[{position}]')"
        yield _entry_case(
            run_id, "DELETE", array, row, what=f"entry {position}", new=new, counted=f"{count} - 1"
        )


def _entry_insert(base: Base, directory: Path, run_id: str, array: str) -> Iterator[Case]:
    """An entry added at the end of a claim's array (a copy of one, of another resource)."""
    keys, count = ARRAYS[array]
    locator = next(k for k in keys if k.endswith("locator"))
    for row, position in _middle_first(_entries(directory, run_id, array)):
        entry = json.loads(row[array])[position]
        entry[locator] = f"{entry[locator]}-copy"
        new = f"json_insert({array}, '$[#]', json({sql_literal(_json(entry))}))"
        what = f"a copy of entry {position}"
        yield _entry_case(run_id, "INSERT", array, row, what=what, new=new, counted=f"{count} + 1")


def _entry_swap(base: Base, directory: Path, run_id: str, array: str) -> Iterator[Case]:
    """Two different entries of a claim's array swapped."""
    _, count = ARRAYS[array]
    pairs = []
    for row in _rows(directory, "claims", run_id):
        entries = json.loads(row[array])
        pairs += [
            (row, i, j)
            for i in range(len(entries))
            for j in range(i + 1, len(entries))
            if entries[i] != entries[j]
        ]
    for row, i, j in _middle_first(pairs):
        new = (
            f"json_set({array}, '$[{i}]', json(json_extract({array}, '$[{j}]')),"
            f" '$[{j}]', json(json_extract({array}, '$[{i}]')))"
        )
        yield _entry_case(run_id, "SWAP", array, row, what=f"{i} <-> {j}", new=new, counted=count)


# The field _forge changes in an entry of a claim's array (its first entry's).
_FORGED = {"claims.impact_scope": "locator", "claims.obligations": "target_locator"}


def _forge(record: Any, table: str) -> tuple[Any, str]:
    """``record`` with one field of ``table`` changed: (record, SQL assignment doing it)."""
    if table == "claims":
        value = f"{record.action_id}-forged"
        return dataclasses.replace(record, action_id=value), f"action_id = {sql_literal(value)}"
    if table == "outcomes":
        value = "x-forged"
        return dataclasses.replace(
            record, execution_id=value
        ), f"execution_id = {sql_literal(value)}"
    if table == "observations":
        value = f"{record.source_action_id}-forged"
        forged = dataclasses.replace(record, source_action_id=value)
        return forged, f"source_action_id = {sql_literal(value)}"
    if table == "resolutions":
        value = f"{record.by}-forged"
        return dataclasses.replace(record, by=value), f"resolved_by = {sql_literal(value)}"
    if table == "approval_requests":  # another reason shown to the person asked
        value = f"{record.reason}-forged"
        return dataclasses.replace(record, reason=value), f"reason = {sql_literal(value)}"
    if table == "approval_decisions":  # another person named
        value = f"{record.by}-forged"
        return dataclasses.replace(record, by=value), f"decided_by = {sql_literal(value)}"
    # An entry of a claim's array: its first entry's resource moved elsewhere.
    if table == "claims.impact_scope":
        first, *rest = record.impact_scope
        ref = dataclasses.replace(first, locator=f"{first.locator}-forged")
        forged = dataclasses.replace(record, impact_scope=(ref, *rest))
        array, value = "impact_scope", ref.locator
    else:
        first, *rest = record.obligations
        target = dataclasses.replace(first.target, locator=f"{first.target.locator}-forged")
        post = dataclasses.replace(first, target=target)
        forged = dataclasses.replace(record, obligations=(post, *rest))
        array, value = "obligations", target.locator
    path = f"$[0].{_FORGED[table]}"
    return forged, f"{array} = json_set({array}, '{path}', {sql_literal(value)})"


def _rehash(base: Base, directory: Path, run_id: str, table: str) -> Iterator[Case]:
    """One field changed, and the record's own hash recomputed (not the later ones')."""
    with EffectLog.load(run_id, directory) as log:
        records = log.history().records()
    links = _links(directory, run_id)
    array = table.removeprefix("claims.") if table.startswith("claims.") else None
    kind = "claim" if array else next(k for k, t in TABLE_OF.items() if t == table)
    candidates = [
        r
        for r in records
        if r.seq != base.head and r.record_type == kind and (array is None or getattr(r, array))
    ]
    for record in _middle_first(candidates):
        forged, assignment = _forge(record, table)
        digest = chain_hash(run_id, forged, links[record.seq][0])
        where = f"run_id = '{run_id}' AND seq = {record.seq}"
        statements = [f"UPDATE {TABLE_OF[kind]} SET {assignment}, hash = '{digest}' WHERE {where};"]
        if array == "impact_scope":  # scope_index set to match the forged entry
            statements += _reindex(run_id, record.effect_id)
        field = assignment.split(" = ")[0]
        if table in _FORGED:
            field += f"[0].{_FORGED[table]}"
        yield Case(
            name=f"REHASH {table} (record seq {record.seq}: {field} forged,"
            " its own hash recomputed)",
            run_id=run_id,
            first_broken=record.seq + 1,  # the next record no longer links to it
            statements=statements,
        )


EDITS = {"DELETE": _delete, "INSERT": _insert, "SWAP": _swap, "REHASH": _rehash}
ENTRY_EDITS = {
    "DELETE": _entry_delete,
    "INSERT": _entry_insert,
    "SWAP": _entry_swap,
    "REHASH": _rehash,
}


def _row_edit(base: Base, directory: Path, run_id: str, target: str, edit: str) -> Iterator[Case]:
    """The candidate edits of one row case: of a table's rows, or of a claim array's entries."""
    if target.startswith("claims."):
        array = target.removeprefix("claims.")
        return ENTRY_EDITS[edit](base, directory, run_id, target if edit == "REHASH" else array)
    return EDITS[edit](base, directory, run_id, target)


def _apply(base: Base, directory: Path, candidates: Iterator[Case]) -> Case:
    """Apply the first candidate edit the database accepts (a unique index may refuse one)."""
    refused = []
    before = _snapshot(directory)
    for case in candidates:
        result = shell_script(directory / DB, _tamper_script(base, case.statements))
        after = _snapshot(directory)
        if result.returncode == 0:
            case.changed = after != before
            return case
        assert after == before, f"a refused edit left changes: {case.name}"
        refused.append((case.name, result.stderr.strip()))
    pytest.fail(f"no candidate edit was accepted: {refused}")


@dataclasses.dataclass(frozen=True)
class Batch:
    """A copy of the store with every case's edit, each in its own run."""

    directory: Path
    update: list[Case]
    fields: list[Case]
    rows: list[Case]
    problems: list[str]


@pytest.fixture(scope="module")
def batch(base: Base, tmp_path_factory: pytest.TempPathFactory) -> Batch:
    """Every case applied to its run of one copy, then judged by one verify and a load each."""
    directory = _copy(base, tmp_path_factory.mktemp("tamper-cases") / "store")
    runs = iter(base.runs)
    update = [
        _apply(base, directory, _update(base, directory, next(runs), table, column))
        for table in RECORD_TABLES
        for column in base.columns[table]
    ]
    fields = [
        _apply(base, directory, _field(base, directory, next(runs), array, key))
        for array, (keys, _) in ARRAYS.items()
        for key in keys
    ]
    rows = [
        _apply(base, directory, _row_edit(base, directory, next(runs), target, edit))
        for target, edit in ROW_CASES
    ]
    assert next(runs, None) is None
    code, report = _verify(directory)
    assert code == 1
    for case in update + fields + rows:
        case.verify_ok = _names(report["problems"], case.run_id)
        case.load_error = _load_error(directory, case.run_id)
    return Batch(directory, update, fields, rows, report["problems"])


def _tally(cases: list[Case], problems: list[str]) -> list[str]:
    """Add the cases to the figures; return a line for each case not caught by both."""
    missed = []
    for case in cases:
        FIGURES["cases"] += 1
        FIGURES["unchanged_edits"] += not case.changed
        FIGURES["verify_detected"] += case.verify_ok
        FIGURES["load_detected"] += case.load_error is not None
        caught = case.verify_ok and case.load_error is not None
        if caught or (case.name in EXEMPT and not case.changed):
            FIGURES["detected"] += 1
        else:
            FIGURES["missed"] += 1
            FIGURES["missed_cases"].append(case.name)
            mine = [p for p in problems if p.startswith(f"run {case.run_id}:")]
            missed.append(
                f"{case.name}: verify {'caught' if case.verify_ok else 'MISSED'} {mine}; "
                f"load {'caught' if case.load_error else 'MISSED'}"
            )
    return missed


def _check_untouched(base: Base, batch: Batch) -> None:
    """The runs no case edited are named by no problem and still load."""
    untouched = [base.control, base.other]
    flagged = [
        r
        for r in untouched
        if _names(batch.problems, r) or _load_error(batch.directory, r) is not None
    ]
    FIGURES["untouched_runs_flagged"] += len(flagged)
    assert flagged == [], batch.problems


# --------------------------------------------------------------------------- tests


def test_a_copy_with_its_triggers_dropped_and_restored_verifies_clean(
    base: Base, tmp_path: Path
) -> None:
    """The harness's own edit (drop every trigger, put it back) leaves a store that verifies and loads."""
    copy = _copy(base, tmp_path / "control")
    _tamper(base, copy, [])
    assert _snapshot(copy) == _snapshot(base.directory)
    code, report = _verify(copy)
    assert (code, report["problems"]) == (0, [])
    assert report["runs"] == len(base.runs) + 2
    assert _load_error(copy, base.control) is None
    assert _load_error(copy, base.runs[0]) is None


def test_every_column_of_every_record_table_changed_is_detected(base: Base, batch: Batch) -> None:
    """Setting any column of any record table to another valid-looking value fails both verify and load."""
    covered = [case.name.split()[1] for case in batch.update]
    assert covered == [f"{t}.{c}" for t in RECORD_TABLES for c, _ in base.columns[t]]
    assert [case.name for case in batch.update if not case.changed] == [], "no-op edits"
    missed = _tally(batch.update, batch.problems)
    _check_untouched(base, batch)
    assert missed == []


def test_every_field_of_every_entry_of_a_claims_arrays_changed_is_detected(
    base: Base, batch: Batch
) -> None:
    """Setting any key of an entry of a claim's impact_scope or obligations (json_set) fails both.

    An impact-scope edit sets scope_index to match: only the claim's hash is wrong.
    """
    covered = [case.name.split()[1] for case in batch.fields]
    assert covered == [f"claims.{a}[].{k}" for a, (keys, _) in ARRAYS.items() for k in keys]
    assert len(covered) == 10
    assert [case.name for case in batch.fields if not case.changed] == [], "no-op edits"
    missed = _tally(batch.fields, batch.problems)
    _check_untouched(base, batch)
    assert missed == []


def test_deleted_crafted_and_swapped_rows_are_detected(base: Base, batch: Batch) -> None:
    """Deleting a row or an array entry, inserting a crafted one, swapping two, or re-hashing a changed record fails both."""
    # 4 edits of each of the 6 seq tables, 3 of scope_index, 4 of each of the 2 arrays.
    assert [c.name.split()[:2] for c in batch.rows] == [[e, t] for t, e in ROW_CASES]
    assert len(batch.rows) == len(ROW_CASES) == 4 * 6 + 3 + 4 * 2
    assert [case.name for case in batch.rows if not case.changed] == [], "no-op edits"
    missed = _tally(batch.rows, batch.problems)
    _check_untouched(base, batch)
    assert missed == []


def _recipe_9() -> str:
    text = (REPO / "docs" / "forensics.md").read_text(encoding="utf-8")
    match = re.search(r"^### 9\. [^\n]*\n.*?```sql\n(.*?)```", text, re.DOTALL | re.MULTILINE)
    assert match is not None, "docs/forensics.md has no recipe 9 with an sql block"
    return match.group(1)


def _chain_recipe(directory: Path, run_id: str) -> list[dict[str, Any]]:
    sql = _recipe_9()
    assert "'RUN_ID'" in sql
    result = shell_script(
        directory / DB, sql.replace("'RUN_ID'", sql_literal(run_id)), json_rows=True
    )
    assert result.returncode == 0, result.stderr
    assert result.stderr == ""
    return json.loads(result.stdout) if result.stdout.strip() else []


def test_the_chain_recipe_names_the_first_broken_seq_of_every_changed_field(
    base: Base, batch: Batch
) -> None:
    """docs/forensics.md recipe 9, run by the sqlite3 shell, names the first record a changed field broke."""
    assert _chain_recipe(batch.directory, base.control) == []
    changed_fields = [
        case for case in batch.update + batch.fields + batch.rows if case.first_broken is not None
    ]
    assert len(changed_fields) >= 60
    wrong = []
    for case in changed_fields:
        rows = _chain_recipe(batch.directory, case.run_id)
        FIGURES["recipe9_cases"] += 1
        if rows and rows[0]["seq"] == case.first_broken:
            FIGURES["recipe9_named"] += 1
        else:
            wrong.append((case.name, rows))
    assert wrong == []


def _head(directory: Path, run_id: str) -> str:
    result = ledger("head", run_id, "--store", str(directory))
    assert result.returncode == 0, result.stderr
    anchor = result.stdout.strip()
    assert re.fullmatch(rf"{run_id}:\d+:[0-9a-f]{{64}}", anchor), anchor
    return anchor


def _links(directory: Path, run_id: str) -> dict[int, tuple[str, str]]:
    with _connect(directory) as conn:
        rows = conn.execute(
            " UNION ALL ".join(
                f"SELECT seq, prev_hash, hash FROM {t} WHERE run_id = ?" for t in SEQ_TABLES
            ),
            (run_id,) * len(SEQ_TABLES),
        ).fetchall()
    return {row[0]: (row[1], row[2]) for row in rows}


def _anchor_case(base: Base, directory: Path, anchors: list[str], expected: str) -> None:
    """Verify with the anchors: exactly one problem, the control run's anchor, saying ``expected``."""
    FIGURES["anchor_cases"] += 1
    code, report = _verify(directory, *anchors)
    problems = report["problems"]
    prefix = f"run {base.control}: anchor at seq {base.head}: {expected}"
    caught = code == 1 and len(problems) == 1 and problems[0].startswith(prefix)
    FIGURES["anchor_detected"] += caught
    if not caught:
        FIGURES["missed_cases"].append(f"anchor: {expected}")
    assert caught, (code, problems)


def test_a_recomputed_chain_passes_load_but_not_the_anchor_taken_before(
    base: Base, tmp_path: Path
) -> None:
    """A changed outcome with every later hash recomputed loads, but verify --anchor with the earlier head fails."""
    copy = _copy(base, tmp_path / "recomputed")
    anchors = [_head(copy, base.control), _head(copy, base.other)]
    with EffectLog.load(base.control, copy) as log:
        records = log.history().records()
    target = next(
        r
        for r in records
        if isinstance(r, fx.EffectOutcome) and r.execution is fx.ExecutionOutcome.REPORTED_SUCCESS
    )
    # The effect that happened is rewritten as one that failed with no impact.
    forged = dataclasses.replace(
        target, execution=fx.ExecutionOutcome.FAILED, impact=fx.Impact.NONE
    )
    prev = _links(copy, base.control)[target.seq][0]
    statements = []
    for record in records[target.seq - 1 :]:
        changes: dict[str, str] = {}
        rewritten = record
        if record.seq == target.seq:
            rewritten, changes = forged, {"execution": "failed", "impact": "none"}
        digest = chain_hash(base.control, rewritten, prev)
        changes |= {"prev_hash": prev, "hash": digest}
        sets = ", ".join(f"{k} = {sql_literal(v)}" for k, v in changes.items())
        statements.append(
            f"UPDATE {TABLE_OF[record.record_type]} SET {sets}"
            f" WHERE run_id = '{base.control}' AND seq = {record.seq};"
        )
        prev = digest
    _tamper(base, copy, statements)
    with EffectLog.load(base.control, copy) as log:  # the forged history is believed
        assert log.assess(target.effect_id).verdict is fx.EffectVerdict.FAILED
    assert _chain_recipe(copy, base.control) == []  # and its chain is consistent
    _anchor_case(base, copy, anchors, "the hash differs")


def test_a_truncated_run_passes_load_but_not_the_anchor_taken_before(
    base: Base, tmp_path: Path
) -> None:
    """A run whose last records were deleted loads, but verify --anchor with the earlier head fails."""
    copy = _copy(base, tmp_path / "truncated")
    anchors = [_head(copy, base.control), _head(copy, base.other)]
    cut = base.head - 1  # the last two records go
    run = f"run_id = '{base.control}'"
    claims = f"SELECT effect_id FROM claims WHERE {run} AND seq >= {cut}"
    statements = [
        f"DELETE FROM scope_index WHERE {run} AND effect_id IN ({claims});",
        *(f"DELETE FROM {t} WHERE {run} AND seq >= {cut};" for t in SEQ_TABLES),
    ]
    _tamper(base, copy, statements)
    with EffectLog.load(base.control, copy) as log:
        assert log.history().records()[-1].seq == cut - 1
    assert _chain_recipe(copy, base.control) == []
    _anchor_case(base, copy, anchors, "the record is gone")


@pytest.mark.parametrize(
    ("array", "key"), [("obligations", "expected"), ("impact_scope", "locator")]
)
def test_a_key_given_twice_in_an_entry_is_caught_by_load_verify_and_the_recipe(
    base: Base, tmp_path: Path, array: str, key: str
) -> None:
    """An entry whose key is given twice: forged first (what SQLite reads), the original last.

    Python's json reads the last value, so the record and its hash look untouched there;
    SQLite's json_extract reads the first, so the views would give another verdict. Load
    refuses an object that repeats a key, verify reports it, and recipe 9 (the shell's
    reading) finds the hash wrong.
    """
    copy = _copy(base, tmp_path / "twice")
    row = next(
        r
        for r in _rows(copy, "claims", base.control)
        if any(e.get(key) is not None for e in json.loads(r[array]))
    )
    entries = json.loads(row[array])
    position = next(i for i, e in enumerate(entries) if e.get(key) is not None)
    original = _json(entries)
    entry = _json([entries[position]])[1:-1]
    forged_value = json.dumps(f"{entries[position][key]}-forged")
    twice = entry.replace(f'"{key}":', f'"{key}":{forged_value},"{key}":', 1)
    text = original.replace(entry, twice, 1)
    assert text != original
    _tamper(
        base,
        copy,
        [f"UPDATE claims SET {array} = {sql_literal(text)} WHERE {_where('claims', row)};"],
    )
    error = _load_error(copy, base.control)
    assert error is not None
    assert f"seq {row['seq']}" in error
    assert "repeats a key" in error
    code, report = _verify(copy)
    assert code == 1
    assert _names(report["problems"], base.control)
    assert [r["seq"] for r in _chain_recipe(copy, base.control)][:1] == [row["seq"]]
