"""Every field of every stored record is covered by the chain: change one, and it is caught.

Independent of the ``sqlite3`` shell. One run is written in which every column of every
record table is set in some row (a recovered outcome has ``replayed`` set, an
observation has every optional field, claims and outcomes record steps, arguments and
results, a JSON null among them, approvals are asked for, granted and denied, and a claim
is made under a grant), and every field of every record type is shown
to land in some column. Then, one at a time on a copy of the store, each column of
each row — chain columns included — is given another value of its type with Python's
``sqlite3`` (guards dropped and put back around the edit, constraints off):
``EffectLog.load`` must refuse the run naming the record's seq, and ``ledger verify``
(the library call behind it) must report the run at that seq.

The columns come from the store (``PRAGMA table_info``) and the fields from the record
types (``dataclasses.fields``), so a new field or column is covered without editing
this test — or makes it fail until the run below sets it.
"""

from __future__ import annotations

import dataclasses
import enum
import json
import shutil
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from ledger import _inspect
from ledger import effects as fx
from ledger.effect_log import EffectLog, EffectPersistenceError, new_run_id
from ledger.sqlite import rows as _records
from tests.builders import write_every_column

DB = "ledger.sqlite3"
TABLES = (
    "claims",
    "outcomes",
    "observations",
    "resolutions",
    "approval_requests",
    "approval_decisions",
    "scope_index",
)
# A claim's impact scope and obligations: JSON arrays, edited entry by entry and field by
# field as well as whole.
JSON_COLUMNS = ("impact_scope", "obligations")
# Recorded values (migration 0012): canonical JSON text, edited into other canonical JSON
# as well as into text that is not JSON.
RECORDED_COLUMNS = ("args", "result")
SCOPE_INDEX_KEY = ("run_id", "kind", "locator", "effect_id", "position")
SEQ_TABLES = (
    "claims",
    "outcomes",
    "observations",
    "resolutions",
    "approval_requests",
    "approval_decisions",
)
# The id each table's errors name a row by (the others: its effect_id).
KEY_COLUMN = {
    "observations": "observation_id",
    "approval_requests": "approval_id",
    "approval_decisions": "approval_id",
}
BOOLEANS = ("replayed", "resource_exists", "applied")


@dataclasses.dataclass(frozen=True)
class Base:
    directory: Path
    run_id: str
    other: str  # a run no edit touches


@pytest.fixture(scope="module")
def base(tmp_path_factory: pytest.TempPathFactory) -> Base:
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("LEDGER_DIR", str(tmp_path_factory.mktemp("default") / "ledger"))
        directory = tmp_path_factory.mktemp("fields") / "store"
        run_id, other = new_run_id(), new_run_id()
        write_every_column(directory, run_id, recorded=True)
        write_every_column(directory, other, recorded=True)
    return Base(directory, run_id, other)


def _connect(directory: Path) -> sqlite3.Connection:
    conn = sqlite3.connect(directory / DB, isolation_level=None)
    conn.row_factory = sqlite3.Row
    return conn


def _columns(conn: sqlite3.Connection, table: str) -> list[str]:
    return [row[1] for row in conn.execute(f"PRAGMA table_info({table})")]


@dataclasses.dataclass(frozen=True)
class Edit:
    table: str
    where: tuple[str, tuple[Any, ...]]  # which row: an SQL condition and its parameters
    column: str
    value: object
    seq: int  # the record the row belongs to (a child row: its claim)
    key: str  # its effect_id, observation_id or approval_id

    def named_by(self, message: str) -> bool:
        """Whether an error names the record: its seq, the seq it left vacant, or its id."""
        return any(
            token in message
            for token in (
                f"seq {self.seq}",
                f"{self.seq} was due",
                f"'{self.key}'",
                f"'{self.value}'",
            )
        )

    def __str__(self) -> str:
        return f"{self.table}.{self.column} of seq {self.seq} = {self.value!r}"


def _other_value(value: object, column: str) -> object:
    if isinstance(value, int):  # a flag flipped, a number moved past every one in use
        return 1 - value if column in BOOLEANS else value + 1000
    text = str(value)
    if len(text) in (32, 64) and all(c in "0123456789abcdef" for c in text):  # digest, hash, key
        return ("1" if text[0] != "1" else "2") + text[1:]
    return text + "x"


def _edits(base: Base) -> Iterator[Edit]:
    with _connect(base.directory) as conn:
        for table in TABLES:
            seq = (
                "t.seq"
                if table in SEQ_TABLES
                else "(SELECT c.seq FROM claims AS c"
                " WHERE c.run_id = t.run_id AND c.effect_id = t.effect_id)"
            )
            rowid = "NULL" if table == "scope_index" else "t.rowid"  # scope_index: WITHOUT ROWID
            rows = conn.execute(
                f"SELECT {rowid} AS _rowid, {seq} AS _seq, t.* FROM {table} AS t WHERE run_id = ?",
                (base.run_id,),
            ).fetchall()
            for column in _columns(conn, table):
                for row in rows:
                    if row[column] is None:
                        continue
                    where = (
                        (
                            " AND ".join(f"{c} = ?" for c in SCOPE_INDEX_KEY),
                            tuple(row[c] for c in SCOPE_INDEX_KEY),
                        )
                        if table == "scope_index"
                        else ("rowid = ?", (row["_rowid"],))
                    )
                    key = row[KEY_COLUMN.get(table, "effect_id")]
                    for value in _other_values(row[column], column):
                        yield Edit(table, where, column, value, row["_seq"], key)


def _other_values(value: object, column: str) -> Iterator[object]:
    """Other values for a column: the whole value, and each field of a JSON array's entries."""
    yield _other_value(value, column)
    if column in RECORDED_COLUMNS:
        yield from _other_recorded(json.loads(str(value)))
        return
    if column not in JSON_COLUMNS:
        return
    entries = json.loads(str(value))
    for i, entry in enumerate(entries):
        for key, field in entry.items():
            if field is not None:
                changed = [dict(e) for e in entries]
                changed[i][key] = _other_value(field, key)
                yield json.dumps(changed, separators=(",", ":"))


def _other_recorded(value: object) -> Iterator[str]:
    """Recorded values as the library would have written others: valid, canonical JSON."""
    yield fx.recorded_json(None if value is not None else {"forged": True})
    if isinstance(value, dict):
        for key, field in value.items():
            yield fx.recorded_json({**value, key: _other_json(field)})
    elif isinstance(value, list):
        yield fx.recorded_json([*value, 0])
    else:
        yield fx.recorded_json(_other_json(value))


def _other_json(value: object) -> object:
    if isinstance(value, bool) or value is None:
        return not value
    if isinstance(value, int | float):
        return value + 1
    if isinstance(value, str):
        return value + "x"
    return None


def test_every_column_is_set_in_some_row(base: Base) -> None:
    """The run sets every column somewhere, so every column is edited below."""
    with _connect(base.directory) as conn:
        unset = [
            f"{table}.{column}"
            for table in TABLES
            for column in _columns(conn, table)
            if conn.execute(
                f"SELECT count(*) FROM {table} WHERE run_id = ? AND {column} IS NOT NULL",
                (base.run_id,),
            ).fetchone()[0]
            == 0
        ]
    assert not unset


def _candidates(old: object) -> list[object]:
    """Other values a field holding ``old`` might accept, most likely first."""
    if isinstance(old, bool):
        return [not old]
    if isinstance(old, int):
        return [old + 1]
    if isinstance(old, enum.Enum):
        return [m for m in type(old) if m != old]
    if dataclasses.is_dataclass(old) or isinstance(old, tuple):
        return []  # handled field by field
    return [
        "set" if old is None else str(_other_value(old, "")),
        True,
        *fx.RESOURCE_KINDS,
        "2001-02-03T04:05:06.000007+00:00",
        "2999-02-03T04:05:06.000007+00:00",  # after a request was made: a later expiry
        "granted",  # an approval's answer, the other way
        "denied",
        "a" * 64,
        "a" * 32,
        f"00-{'a' * 32}-{'b' * 16}-01",  # a W3C traceparent
    ]


def _variants(value: Any, path: str = "") -> Iterator[tuple[str, Any]]:
    """(field path, ``value`` with that field changed) for every field, nested ones too.

    Each field gets the first other value the record accepts as a whole, or ``None``
    when the record's state allows no other (``replayed`` of an outcome that is not
    interrupted): another record, in another state, must change it.
    """
    for f in dataclasses.fields(value):
        old = getattr(value, f.name)
        where = f"{path}{type(value).__name__}.{f.name}"
        if dataclasses.is_dataclass(old):
            for p, v in _variants(old, where + "/"):
                yield p, _replaced(value, f.name, v)
            continue
        if isinstance(old, tuple):
            if old and dataclasses.is_dataclass(old[0]):
                for p, v in _variants(old[0], where + "[0]/"):
                    yield p, _replaced(value, f.name, None if v is None else (v, *old[1:]))
            continue
        for candidate in _candidates(old):
            if candidate == old:
                continue
            try:
                changed = dataclasses.replace(value, **{f.name: candidate})
            except (ValueError, TypeError):
                continue
            yield where, changed
            break
        else:
            yield where, None  # this record's state gives the field one value only


def _replaced(value: Any, name: str, new: object) -> Any:
    """``value`` with field ``name`` set to ``new``, or ``None`` if it refuses (or no ``new``)."""
    if new is None:
        return None
    try:
        return dataclasses.replace(value, **{name: new})
    except (ValueError, TypeError):
        return None


def test_every_field_of_every_record_type_is_stored(base: Base) -> None:
    """Changing any field of a record changes its rows: no field lives outside the columns."""
    with EffectLog.load(base.run_id, base.directory) as log:
        records = log.history().records()
    kinds = {type(r) for r in records}
    assert kinds == {
        fx.EffectClaim,
        fx.EffectOutcome,
        fx.Observation,
        fx.Resolution,
        fx.ApprovalRequest,
        fx.ApprovalDecision,
    }
    fields, changed = set(), set()
    for record in records:
        rows = _records.rows_of(base.run_id, record)
        for path, variant in _variants(record):
            fields.add(path)
            if variant is not None:
                changed.add(path)
                assert _records.rows_of(base.run_id, variant) != rows, (path, record, variant)
    assert fields - changed == set(), "fields no record of the run could change"
    assert len(fields) > 25, sorted(fields)


def _tamper(directory: Path, edit: Edit) -> bool:
    conn = _connect(directory)
    try:
        triggers = conn.execute(
            "SELECT name, sql FROM sqlite_master WHERE type = 'trigger'"
        ).fetchall()
        conn.execute("PRAGMA foreign_keys = OFF")
        conn.execute("PRAGMA ignore_check_constraints = ON")
        conn.execute("BEGIN IMMEDIATE")
        for name, _ in triggers:
            conn.execute(f'DROP TRIGGER "{name}"')
        try:
            changed = conn.execute(
                f"UPDATE {edit.table} SET {edit.column} = ? WHERE {edit.where[0]}",
                (edit.value, *edit.where[1]),
            ).rowcount
        except sqlite3.IntegrityError:  # a unique index refuses it: no store can hold it
            conn.execute("ROLLBACK")
            return False
        for _, sql in triggers:
            conn.execute(sql)
        conn.execute("COMMIT")
    finally:
        conn.close()
    assert changed == 1, edit
    return True


def test_every_changed_field_fails_load_and_verify_at_its_record(
    base: Base, tmp_path: Path
) -> None:
    edits = list(_edits(base))
    assert len(edits) > 60
    head = _inspect.run_head(base.directory, base.run_id)
    missed: list[str] = []
    refused: list[Edit] = []
    truncations = 0
    for i, edit in enumerate(edits):
        directory = tmp_path / str(i)
        shutil.copytree(base.directory, directory)
        if not _tamper(directory, edit):
            refused.append(edit)
            continue
        if edit.column == "run_id" and edit.table in SEQ_TABLES and edit.seq == head.seq:
            # The run's last record moved away: the run is truncated, and a chain cannot
            # show that alone. The anchor taken before must.
            truncations += 1
            report = _inspect.verify(directory, anchors=(head,))
            if not any(base.run_id in p and "anchor" in p for p in report.problems):
                missed.append(f"{edit}: the anchor did not catch it: {report.problems}")
            shutil.rmtree(directory)
            continue
        try:
            EffectLog.load(base.run_id, directory).close()
        except EffectPersistenceError as e:
            if not edit.named_by(str(e)):
                missed.append(f"{edit}: load said {e}")
        else:
            missed.append(f"{edit}: load accepted it")
        report = _inspect.verify(directory)
        ours = [p for p in report.problems if base.run_id in p]
        if not ours:
            missed.append(f"{edit}: verify said nothing of the run")
        if any(base.other in p for p in report.problems):
            missed.append(f"{edit}: verify blamed the untouched run")
        shutil.rmtree(directory)
    assert not missed, "\n".join(missed)
    assert len(refused) <= len(edits) // 20, refused
    assert truncations == 1
