"""The tamper matrix on PostgreSQL, as the owner role: every column of every record table.

The owner of the tables (here the server's superuser, who owns the database) can do
what the writer role cannot: with ``session_replication_role = replica`` no trigger
fires, the append-only, JSON and chain guards included, and foreign keys are not
checked. In one such transaction per case, one column of one row of a run (claims,
outcomes, observations, resolutions, approval_requests, approval_decisions,
scope_index) is given another valid-looking value of its type (the values of
``tests/reliability/test_tamper.py``), or one field of one
entry of a claim's ``impact_scope`` or ``obligations`` JSON array is (the array written
as the library writes it; scope_index set to match an impact-scope edit, so that only
the claim's hash is wrong), or a row is deleted, or two rows' seqs are swapped. Every
case must be caught both by ``ledger verify`` (the console script: exit 1, a problem
naming the run) and by ``EffectLog.load`` of the run; a run no case touched must stay
clean.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

from ledger.effect_log import EffectLog, EffectPersistenceError, new_run_id
from tests.builders import ledger
from tests.postgresql import driver
from tests.reliability.test_tamper import (
    ARRAYS,
    RECORD_TABLES,
    SEQ_TABLES,
    _forged_values,
    _json,
    _write_run,
    _write_runs,
)

# PostgreSQL's names for the types of the record tables' columns, as the SQLite matrix
# knows them.
PARKED = 1_000_000  # a seq no run reaches, where a swapped row waits (seq > 0 is checked)
DECLARED = {"integer": "INTEGER", "bigint": "INTEGER", "smallint": "INTEGER", "text": "TEXT"}


@dataclasses.dataclass(frozen=True)
class Head:
    """What ``_forged_values`` needs of a run: its last seq."""

    head: int


@dataclasses.dataclass
class Case:
    name: str
    run_id: str
    candidates: list[list[tuple[str, tuple[object, ...]]]]  # the first the schema accepts


def _columns(url: str, table: str) -> list[tuple[str, str]]:
    rows = driver.POSTGRESQL.query(
        url,
        "SELECT column_name, data_type FROM information_schema.columns"
        " WHERE table_schema = 'public' AND table_name = ? ORDER BY ordinal_position",
        (table,),
    )
    return [(str(name), DECLARED.get(str(kind), "TEXT")) for name, kind in rows]


def _rows(url: str, table: str, run_id: str) -> list[dict[str, Any]]:
    with driver.connect(url) as conn, conn.cursor() as cur:
        cur.execute(f"SELECT ctid::text AS _ctid, * FROM {table} WHERE run_id = %s", (run_id,))
        names = [d.name for d in cur.description or ()]
        return [dict(zip(names, row, strict=True)) for row in cur.fetchall()]


def _record_seq(url: str, table: str, row: dict[str, Any]) -> int:
    if table in SEQ_TABLES:
        return int(row["seq"])
    ((seq,),) = driver.POSTGRESQL.query(
        url,
        "SELECT seq FROM claims WHERE run_id = ? AND effect_id = ?",
        (row["run_id"], row["effect_id"]),
    )
    return int(seq)


def _tamper(url: str, case: Case) -> None:
    """One transaction as the owner, with no trigger firing: the first edit the schema takes."""
    refused = []
    for statements in case.candidates:
        with driver.connect(url) as conn:
            try:
                conn.execute("SET LOCAL session_replication_role = replica")
                for sql, params in statements:
                    done = conn.execute(sql, params)
                    assert done.rowcount >= 1, sql
            except psycopg.errors.IntegrityError as e:  # a CHECK or a unique index refused it
                refused.append(str(e).splitlines()[0])
                continue
            conn.commit()
            return
    pytest.fail(f"{case.name}: no edit was accepted: {refused}")


def _values(head: int, table: str, column: str, declared: str, old: object) -> list[object]:
    """The SQLite matrix's forged values, and for a hex text (a key, a hash) one more of it."""
    values = _forged_values(Head(head), table, column, declared, old)  # type: ignore[arg-type]
    if isinstance(old, str) and old and all(c in "0123456789abcdef" for c in old):
        values.append(old[:-1] + ("0" if old[-1] != "0" else "1"))
    return values


# scope_index set to a claim's impact scope as it now is, as the claim's trigger writes it.
_INDEX = (
    "INSERT INTO scope_index (run_id, kind, locator, effect_id, position)"
    " SELECT c.run_id, j.value ->> 'kind', j.value ->> 'locator', c.effect_id, j.n - 1"
    " FROM claims AS c,"
    " jsonb_array_elements(c.impact_scope::jsonb) WITH ORDINALITY AS j(value, n)"
    " WHERE c.run_id = %s AND c.effect_id = %s"
)
REINDEX = ("DELETE FROM scope_index WHERE run_id = %s AND effect_id = %s", _INDEX)


def _reindex(row: dict[str, Any]) -> list[tuple[str, tuple[object, ...]]]:
    return [(sql, (row["run_id"], row["effect_id"])) for sql in REINDEX]


def _fields(url: str, head: int, free: Iterator[str]) -> list[Case]:
    """One case per key of the entries of a claim's arrays: one entry's field changed."""
    cases = []
    for array, (keys, _) in ARRAYS.items():
        for key in keys:
            run_id = next(free)
            entries = [
                (row, position, json.loads(row[array]))
                for row in _rows(url, "claims", run_id)
                for position in range(len(json.loads(row[array])))
            ]
            entries.sort(key=lambda e: e[2][e[1]][key] is None)  # a value first
            candidates: list[list[tuple[str, tuple[object, ...]]]] = []
            for row, position, old in entries:
                for value in _values(head, array, key, "TEXT", old[position][key]):
                    new = [dict(e) for e in old]
                    new[position][key] = value
                    statements: list[tuple[str, tuple[object, ...]]] = [
                        (
                            f"UPDATE claims SET {array} = %s WHERE ctid = %s::tid",
                            (_json(new), row["_ctid"]),
                        )
                    ]
                    if array == "impact_scope":
                        statements += _reindex(row)
                    candidates.append(statements)
            cases.append(Case(f"UPDATE claims.{array}[].{key}", run_id, candidates))
    return cases


def _cases(url: str, head: int, runs: list[str]) -> list[Case]:
    """One case per column of every record table and per key of a claim array's entries,
    then a DELETE per record table and a SWAP per seq table."""
    cases: list[Case] = []
    free = iter(runs)
    for table in RECORD_TABLES:
        for column, declared in _columns(url, table):
            run_id = next(free)
            rows = [r for r in _rows(url, table, run_id) if _record_seq(url, table, r) != head]
            rows.sort(key=lambda r: r[column] is None)  # a value first: subtler than a NULL
            candidates = [
                [
                    (f"UPDATE {table} SET {column} = %s WHERE ctid = %s::tid", (v, row["_ctid"])),
                    # an impact scope forged whole: scope_index to match
                    *(_reindex(row) if (table, column) == ("claims", "impact_scope") else []),
                ]
                for row in rows
                for v in _values(head, table, column, declared, row[column])
            ]
            cases.append(Case(f"UPDATE {table}.{column}", run_id, candidates))
    cases += _fields(url, head, free)
    run_id = next(free)
    rows = _rows(url, "scope_index", run_id)
    middle = rows[len(rows) // 2]
    cases.append(
        Case(
            f"DELETE scope_index (record seq {_record_seq(url, 'scope_index', middle)})",
            run_id,
            [[("DELETE FROM scope_index WHERE ctid = %s::tid", (middle["_ctid"],))]],
        )
    )
    for table in SEQ_TABLES:
        run_id = next(free)
        rows = sorted(
            (r for r in _rows(url, table, run_id) if r["seq"] != head), key=lambda r: r["seq"]
        )
        middle = rows[len(rows) // 2]
        cases.append(
            Case(
                f"DELETE {table} (record seq {middle['seq']})",
                run_id,
                [[(f"DELETE FROM {table} WHERE ctid = %s::tid", (middle["_ctid"],))]],
            )
        )
        if len(rows) >= 2:
            run_id = next(free)
            x, y = sorted(
                (r for r in _rows(url, table, run_id) if r["seq"] != head),
                key=lambda r: r["seq"],
            )[:2]
            cases.append(
                Case(
                    f"SWAP {table}.seq ({x['seq']} <-> {y['seq']})",
                    run_id,
                    [
                        [
                            (
                                f"UPDATE {table} SET seq = %s WHERE ctid = %s::tid",
                                (PARKED, x["_ctid"]),
                            ),
                            (
                                f"UPDATE {table} SET seq = %s WHERE run_id = %s AND seq = %s",
                                (x["seq"], run_id, y["seq"]),
                            ),
                            (
                                f"UPDATE {table} SET seq = %s WHERE run_id = %s AND seq = %s",
                                (y["seq"], run_id, PARKED),
                            ),
                        ]
                    ],
                )
            )
    return cases


def _load_error(url: str, run_id: str) -> str | None:
    try:
        with EffectLog.load(run_id, url) as log:
            log.history()
    except EffectPersistenceError as e:
        return str(e)
    return None


def test_every_column_changed_and_rows_deleted_or_swapped_as_the_owner_are_detected(
    url: str,
) -> None:
    """As the owner, with every trigger off: each edit is caught by verify and by load."""
    control = new_run_id()
    head = _write_run(url, control)  # type: ignore[arg-type]
    needed = (
        sum(len(_columns(url, t)) for t in RECORD_TABLES)
        + sum(len(keys) for keys, _ in ARRAYS.values())
        + 1
        + 2 * len(SEQ_TABLES)
    )
    runs = [new_run_id() for _ in range(needed)]
    assert _write_runs(url, runs) == head
    clean = ledger("verify", "--json", "--store", url)
    assert clean.returncode == 0, clean.stdout + clean.stderr

    cases = _cases(url, head, runs)
    assert len(cases) == len(runs) > 70
    for case in cases:
        _tamper(url, case)

    done = ledger("verify", "--json", "--store", url)
    assert done.returncode == 1, done.stderr
    problems = json.loads(done.stdout)["problems"]
    missed = []
    for case in cases:
        by_verify = any(p.startswith(f"run {case.run_id}:") for p in problems)
        by_load = _load_error(url, case.run_id) is not None
        if not (by_verify and by_load):
            missed.append(f"{case.name}: verify {by_verify}, load {by_load}")
    assert missed == []
    assert not any(p.startswith(f"run {control}:") for p in problems)
    assert _load_error(url, control) is None
    print(f"reliability: postgresql tamper cases={len(cases)} detected={len(cases) - len(missed)}")


@pytest.fixture(autouse=True)
def _default_store(
    tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    # _write_run names no default store, but nothing here may reach the user's.
    monkeypatch.setenv("LEDGER_DIR", str(tmp_path_factory.mktemp("default") / "ledger"))
    monkeypatch.delenv("LEDGER_URL", raising=False)
