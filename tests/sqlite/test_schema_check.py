"""The schema checked whole: normalised comparison, what writers restore, refuse, and re-check."""

from __future__ import annotations

import dataclasses
import random
import re
import sqlite3
import subprocess
import threading
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ledger import _chain
from ledger import effects as fx
from ledger.effect_log import EffectLog, EffectPersistenceError, new_run_id
from ledger.errors import StoreTamperedError
from ledger.sqlite import schema_check as _schema_check
from ledger.sqlite.commit import GroupCommit, Job
from ledger.sqlite.engine import prepare as prepare_connection
from ledger.sqlite.errors import translate
from ledger.sqlite.rows import _TABLES, prepare
from ledger.sqlite.schema import SQLITE_TRIGGERS, VIEWS
from tests.builders import fs_ref, op
from tests.sqlite.driver import execute, migrate

# Where a record's hash is among its insert's parameters (the table's columns, in order).
HASH_AT = {kind: [c.name for c in table.columns].index("hash") for kind, table in _TABLES.items()}

DB = "ledger.sqlite3"


def _master(path: Path) -> list[tuple[str, str, str | None]]:
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        return conn.execute(_schema_check.MASTER_SQL).fetchall()
    finally:
        conn.close()


def _claim(log: EffectLog, effect_id: str = "e1") -> fx.EffectClaim:
    return log.claim(
        effect_id=effect_id, action_id="a", operation=op(), impact_scope=[fs_ref("/a")]
    )


@pytest.fixture
def store(store_dir: Path) -> Path:
    """A store with one run of one claim, closed; its database file."""
    with EffectLog(new_run_id(), store_dir) as log:
        _claim(log)
    return store_dir / DB


# --------------------------------------------------------------------------- normalising


def test_spelling_does_not_matter_but_literals_do() -> None:
    """Case, quotes around the library's names, white space and comments are not meaning."""
    a = _schema_check.definition(
        "view", "CREATE VIEW unsettled_claims AS SELECT run_id FROM claims WHERE kind = 'A'"
    )
    b = _schema_check.definition(
        "view",
        'create  view "UNSETTLED_CLAIMS" as\n  select [run_id] -- why\n'
        " from `Claims` where KIND = 'A'",
    )
    c = _schema_check.definition(
        "view", "CREATE VIEW unsettled_claims AS SELECT run_id FROM claims WHERE kind = 'a'"
    )
    assert a == b
    assert a != c


@pytest.mark.parametrize(
    ("bare", "quoted"),
    [
        ("NULL", '"NULL"'),
        ("TRUE", '"TRUE"'),
        ("FALSE", '"FALSE"'),
        ("NULL", "[NULL]"),
        ("TRUE", "`TRUE`"),
        ("x", '"x"'),  # not a name of the library's: a string where no column x exists
        ("'kind'", '"kind"'),  # a string literal and a column
        ("'x'", '"x"'),
    ],
)
def test_a_quoted_word_is_not_the_keyword_nor_the_literal(bare: str, quoted: str) -> None:
    """SQLite reads a double-quoted word as a column or a string, never as a keyword.

    So a guard comparing with ``"NULL"`` compares with the text NULL: it is not the
    library's guard, and the check says so.
    """
    sql = "CREATE TRIGGER claims_guard_retry BEFORE INSERT ON claims WHEN NEW.retry_of IS NOT {}"
    assert _schema_check.definition("trigger", sql.format(bare)) != _schema_check.definition(
        "trigger", sql.format(quoted)
    )


def test_sqlite_reads_double_quoted_null_and_true_as_text() -> None:
    """What the check must follow: to SQLite, "NULL" and "TRUE" are the texts, and false."""
    conn = sqlite3.connect(":memory:")
    try:
        row = conn.execute(
            'SELECT "NULL", NULL IS "NULL", "TRUE", CASE WHEN "TRUE" THEN 1 ELSE 0 END'
        ).fetchone()
    finally:
        conn.close()
    assert row == ("NULL", 0, "TRUE", 0)


@pytest.mark.parametrize(
    ("a", "b"),
    [
        ("x'00'", "x '00'"),  # a blob; the column x aliased '00'
        ("0x10", "0 x10"),  # sixteen; zero aliased x10
        ('"\u00c9"', '"\u00e9"'),  # SQLite folds the case of ASCII letters only
        ("1.5", "1.50"),
    ],
)
def test_tokens_are_read_as_sqlite_reads_them(a: str, b: str) -> None:
    sql = "CREATE VIEW unsettled_claims AS SELECT {} FROM claims"
    assert _schema_check.definition("view", sql.format(a)) != _schema_check.definition(
        "view", sql.format(b)
    )


def test_a_table_s_constraints_compare_as_a_set_and_its_columns_in_order() -> None:
    """A rebuilt table lists its constraints in another order: same table; columns swapped: not."""
    one = "CREATE TABLE t (a TEXT, b TEXT, CONSTRAINT x CHECK (a > 1), CONSTRAINT y UNIQUE (b))"
    two = "CREATE TABLE t (a TEXT, b TEXT, CONSTRAINT y UNIQUE (b), CONSTRAINT x CHECK (a > 1))"
    swapped = "CREATE TABLE t (b TEXT, a TEXT, CONSTRAINT x CHECK (a > 1), CONSTRAINT y UNIQUE (b))"
    assert _schema_check.definition("table", one) == _schema_check.definition("table", two)
    assert _schema_check.definition("table", one) != _schema_check.definition("table", swapped)


def test_a_columns_not_null_and_default_compare_in_any_order_and_parentheses() -> None:
    """ADD COLUMN, CREATE TABLE and a batch rebuild spell one column three ways: one column.

    Another default, or a column that lost NOT NULL, is another column.
    """

    def column(spec: str) -> object:
        return _schema_check.definition("table", f"CREATE TABLE t (a TEXT, {spec}, b TEXT)")

    same = [
        "step TEXT DEFAULT '' NOT NULL",
        "step TEXT NOT NULL DEFAULT ''",
        "step TEXT DEFAULT ('') NOT NULL",
        "step TEXT NOT NULL DEFAULT ('')",
    ]
    assert len({column(spec) for spec in same}) == 1  # type: ignore[arg-type]
    for other in ("step TEXT DEFAULT 'x' NOT NULL", "step TEXT DEFAULT ''", "step TEXT NOT NULL"):
        assert column(other) != column(same[0]), other


@pytest.mark.parametrize(
    "steps",
    [("head",), ("0001", "head"), ("0001", "0002", "0003", "head"), ("0011", "head")],
)
def test_a_store_at_head_matches_whatever_revisions_it_came_through(
    tmp_path: Path, steps: tuple[str, ...]
) -> None:
    """A new store and one migrated step by step both hold exactly the library's schema."""
    path = tmp_path / DB
    for step in steps:
        migrate(path, step)
    assert _schema_check.compare(_master(path)) == []


def test_every_object_the_library_installs_is_expected(store: Path) -> None:
    """Every trigger, view, index and table in a new store is one the check knows."""
    names = {(kind, name) for kind, name, _ in _master(store)}
    expected = set(_schema_check.expected())
    assert {("trigger", n) for n in SQLITE_TRIGGERS} <= expected
    assert {("view", n) for n in VIEWS} <= expected
    assert {n for n in names if not n[1].startswith("sqlite_autoindex_")} == expected


# --------------------------------------------------------------------------- writers


def test_a_writer_refuses_a_store_with_a_foreign_trigger_and_names_it(store: Path) -> None:
    """A trigger the library did not install makes the next writer refuse, naming it."""
    execute(store, "CREATE TRIGGER spy AFTER INSERT ON claims BEGIN SELECT 1; END;")
    with (
        EffectLog(new_run_id(), store.parent) as log,
        pytest.raises(StoreTamperedError, match=r"trigger spy is not the library's"),
    ):
        _claim(log)


def test_the_refusal_says_what_to_do(store: Path) -> None:
    """The refusal tells the user to check with verify and to drop what is not the library's."""
    execute(store, "CREATE VIEW extra AS SELECT 1;")
    with EffectLog(new_run_id(), store.parent) as log:
        with pytest.raises(EffectPersistenceError) as caught:
            _claim(log)
        assert log.degraded  # a store that may lie gets nothing more from this log
    message = str(caught.value)
    assert "view extra is not the library's" in message
    assert "ledger verify" in message
    assert "DROP TRIGGER/VIEW/INDEX" in message


def test_a_writer_restores_a_replaced_view_and_a_dropped_guard(store: Path) -> None:
    """A same-named lying view and a dropped trigger are put back by the next writer."""
    execute(
        store,
        "DROP VIEW unsettled_claims;"
        " CREATE VIEW unsettled_claims AS SELECT * FROM claims WHERE 0;"
        " DROP TRIGGER claims_guard;",
    )
    assert {str(p) for p in _schema_check.compare(_master(store))} == {
        "view unsettled_claims is not the library's definition",
        "trigger claims_guard is missing",
    }
    with EffectLog(new_run_id(), store.parent) as log:
        _claim(log)
    assert _schema_check.compare(_master(store)) == []


def test_a_table_in_place_of_a_view_is_refused_until_dropped(store: Path) -> None:
    """A table holding a view's name keeps the view from coming back: refused, saying what to do."""
    execute(store, "DROP VIEW unsettled_claims; CREATE TABLE unsettled_claims (x);")
    with (
        EffectLog(new_run_id(), store.parent) as log,
        pytest.raises(StoreTamperedError) as caught,
    ):
        _claim(log)
    message = str(caught.value)
    assert "table unsettled_claims is not the library's" in message
    assert "DROP TRIGGER/VIEW/INDEX/TABLE name" in message
    assert "ledger export" not in message
    execute(store, "DROP TABLE unsettled_claims;")
    with EffectLog(new_run_id(), store.parent) as log:
        _claim(log)
    assert _schema_check.compare(_master(store)) == []


def test_a_foreign_table_of_another_name_is_left_alone(store: Path) -> None:
    """A table of the user's own, named like no object of the library, does not stop writes."""
    execute(store, "CREATE TABLE my_notes (x);")
    with EffectLog(new_run_id(), store.parent) as log:
        _claim(log)
    assert [str(p) for p in _schema_check.compare(_master(store))] == [
        "table my_notes is not the library's"
    ]


def test_a_live_writer_meets_a_trigger_planted_after_it_opened_the_store(store_dir: Path) -> None:
    """A trigger planted while a log is open is found before that log's next write."""
    with EffectLog(new_run_id(), store_dir) as log:
        _claim(log, "e1")
        execute(
            store_dir / DB,
            "CREATE TRIGGER drop_claims BEFORE INSERT ON claims BEGIN SELECT RAISE(IGNORE); END;",
        )
        with pytest.raises(StoreTamperedError, match="trigger drop_claims is not the library's"):
            _claim(log, "e2")
        assert [c.effect_id for c in log.history().claims] == ["e1"]


def test_a_changed_guard_is_refused_not_restored(store: Path) -> None:
    """A guard rewritten in place (writable_schema) is refused: the store says it was tampered."""
    execute(
        store,
        "PRAGMA writable_schema = ON;"
        " UPDATE sqlite_master SET sql = replace(sql, 'WHERE EXISTS', 'WHERE 0 AND EXISTS')"
        " WHERE name = 'claims_guard';"
        " PRAGMA writable_schema = OFF;",
    )
    with (
        EffectLog(new_run_id(), store.parent) as log,
        pytest.raises(
            StoreTamperedError, match="trigger claims_guard is not the library's definition"
        ),
    ):
        _claim(log)


def test_a_changed_check_is_refused_naming_the_constraint(store: Path) -> None:
    """A CHECK rewritten to CHECK (1) is named, and the writer points to export and import."""
    execute(
        store,
        "PRAGMA writable_schema = ON;"
        " UPDATE sqlite_master SET sql = replace(sql,"
        " 'CHECK (execution IN (''running'', ''reported_success'', ''failed'', ''interrupted''))',"
        " 'CHECK (1)') WHERE name = 'outcomes';"
        " PRAGMA writable_schema = OFF;",
    )
    with (
        EffectLog(new_run_id(), store.parent) as log,
        pytest.raises(StoreTamperedError) as caught,
    ):
        _claim(log)
    assert "table outcomes is not the library's definition" in str(caught.value)
    assert "constraint ck_outcomes_execution differs" in str(caught.value)
    assert "ledger export" in str(caught.value)


# --------------------------------------------------------------------------- rows that land


def test_a_row_dropped_by_a_trigger_is_never_acknowledged(tmp_path: Path) -> None:
    """With the schema check out of the way, counting rows alone refuses a claim a trigger ate."""
    run_id = new_run_id()
    conn = sqlite3.connect(tmp_path / DB, isolation_level=None, check_same_thread=False)
    migrate(tmp_path / DB, "head")
    conn.create_function("sha3", 2, _chain.sha3)
    conn.execute("INSERT INTO runs VALUES (?, ?)", (run_id, fx.utc_now()))
    conn.execute("CREATE TRIGGER eat BEFORE INSERT ON claims BEGIN SELECT RAISE(IGNORE); END")
    claim = fx.EffectClaim("e1", 1, "a", op(), (), (), fx.utc_now())
    steps, _ = prepare(run_id, [claim], _chain.GENESIS)
    group = GroupCommit(lambda: conn, threading.RLock(), translate, lambda _cursor: None)
    job = group.submit(Job("claim 'e1'", steps))
    assert isinstance(job.error, StoreTamperedError)
    assert "1 of 1 row(s) given to claims did not land" in str(job.error)
    assert conn.execute("SELECT count(*) FROM claims").fetchone() == (0,)
    conn.close()


def test_the_guard_refuses_a_row_whose_hash_does_not_match_its_fields(store: Path) -> None:
    """An outcome correctly linked but hashed over other fields is refused by the schema itself."""
    conn = sqlite3.connect(store, isolation_level=None)
    conn.create_function("sha3", 2, _chain.sha3)  # as the stock shell has it
    try:
        run_id, prev = conn.execute("SELECT run_id, hash FROM claims").fetchone()
        outcome = fx.EffectOutcome(
            "e1", 2, fx.ExecutionOutcome.FAILED, fx.Impact.NONE, recorded_at=fx.utc_now()
        )
        forged = fx.EffectOutcome(
            "e1",
            2,
            fx.ExecutionOutcome.REPORTED_SUCCESS,
            fx.Impact.CERTAIN,
            recorded_at=fx.utc_now(),
        )
        steps, _ = prepare(run_id, [forged], prev)
        (sql, rows), *_ = steps
        good, _ = prepare(run_id, [outcome], prev)
        at = HASH_AT["outcome"]
        wrong = list(rows[0])
        wrong[at] = good[0][1][0][at]  # the hash of another outcome
        with pytest.raises(sqlite3.IntegrityError, match="hash does not match its fields"):
            conn.execute(sql, tuple(wrong))
        conn.execute(sql, rows[0])  # the right hash is accepted
    finally:
        conn.close()


def test_only_the_librarys_writers_skip_the_hash_guard_and_load_still_checks(
    store: Path, store_dir: Path
) -> None:
    """Its writers hash in Python and the guard skips them; the shell is checked; load is too."""
    shell = subprocess.run(
        [
            "sqlite3",
            "-readonly",
            str(store),
            "SELECT sqlite_source_id() NOT LIKE 'ledger-writer %'",
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    assert shell.stdout.strip() == "1"  # to the stock shell every hash guard applies
    conn = sqlite3.connect(store, isolation_level=None)
    prepare_connection(conn)  # as the library's writers open it
    try:
        assert conn.execute("SELECT sqlite_source_id()").fetchone()[0].startswith("ledger-writer ")
        run_id, prev = conn.execute("SELECT run_id, hash FROM claims").fetchone()
        outcome = fx.EffectOutcome(
            "e1", 2, fx.ExecutionOutcome.FAILED, fx.Impact.NONE, recorded_at=fx.utc_now()
        )
        (sql, rows), *_ = prepare(run_id, [outcome], prev)[0]
        wrong = list(rows[0])
        wrong[HASH_AT["outcome"]] = "0" * 64  # a hash no record has
        conn.execute(sql, tuple(wrong))
    finally:
        conn.close()
    with pytest.raises(EffectPersistenceError, match="hash does not match"):
        EffectLog.load(run_id, store_dir)


# --------------------------------------------------------------------------- rewrites, fuzzed

# The test's own reading of SQL, to find where to rewrite: literals, quoted words, bare
# words, numbers, and the rest; white space and comments between them.
_PIECE = re.compile(
    r"""(?P<gap>\s+|--[^\n]*\n|/\*.*?\*/)
      | (?P<string>'(?:[^']|'')*')
      | (?P<quoted>"[^"]*"|`[^`]*`|\[[^\]]*\])
      | (?P<word>[A-Za-z_][A-Za-z0-9_$]*)
      | (?P<number>\d+(?:\.\d+)?)
      | (?P<op>\|\||<=|>=|<>|!=|==|\S)""",
    re.VERBOSE | re.DOTALL,
)
_SWAPPED_OPS = {"=": "<>", "<>": "=", "<": "<=", "<=": "<", ">": ">=", ">=": ">", "||": "+"}
_SWAPPED_WORDS = {"and": "OR", "or": "AND", "not": "", "exists": "", "is": "IS NOT"}
_KEYWORDS = sorted(_schema_check.KEYWORDS | {"true", "false"})


@dataclasses.dataclass(frozen=True)
class _Piece:
    kind: str
    text: str


def _pieces(sql: str) -> list[_Piece]:
    found = [_Piece(m.lastgroup or "op", m.group()) for m in _PIECE.finditer(sql)]
    assert "".join(p.text for p in found) == sql
    return found


def _join(pieces: list[_Piece]) -> str:
    return "".join(p.text for p in pieces)


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> list[tuple[str, str, str | None]]:
    """``sqlite_master`` of a store the library made, as it installed it."""
    path = tmp_path_factory.mktemp("installed") / DB
    migrate(path, "head")
    return _master(path)


def _objects(installed: list[tuple[str, str, str | None]]) -> list[int]:
    return [i for i, (_, _, sql) in enumerate(installed) if sql]


def _changed(rows: list[tuple[str, str, str | None]], at: int, sql: str) -> list[Any]:
    kind, name, _ = rows[at]
    return _schema_check.compare([*rows[:at], (kind, name, sql), *rows[at + 1 :]])


def _parses(rows: list[tuple[str, str, str | None]], at: int, sql: str) -> None:
    """SQLite accepts the rewritten object in place of the library's, beside all the others."""
    conn = sqlite3.connect(":memory:")
    try:
        for i, (_, _, original) in enumerate(rows):
            if original:
                conn.execute(sql if i == at else original)
    finally:
        conn.close()


def _meaning_kept(rng: random.Random, sql: str) -> str:
    """``sql`` respelt: white space, comments, the case of words, quotes around the library's names."""
    out: list[_Piece] = []
    for piece in _pieces(sql):
        text = piece.text
        if piece.kind == "gap":
            text = rng.choice([" ", "\n", "\t ", " /* c */ ", " --c\n"])
        elif piece.kind == "word":
            text = "".join(rng.choice([c.lower(), c.upper()]) for c in text)
            if piece.text.lower() in _schema_check._library_names() and rng.random() < 0.5:
                text = rng.choice(['"{}"', "[{}]", "`{}`"]).format(text)
        elif piece.kind == "op" and text in "(),":
            text = rng.choice(["", " ", "/**/"]).join(["", text, ""])
        out.append(_Piece(piece.kind, text))
    return _join(out)


@st.composite
def _meaning_changed(draw: st.DrawFn, sql: str) -> tuple[str, str]:
    """``sql`` with one token rewritten, and what: SQLite reads another program, or may.

    A string literal double-quoted or a number quoted may still mean the same where no
    column of that name exists or the column's affinity converts it back: the check
    does not follow such reasoning, and reports them (when in doubt, a difference).
    """
    pieces = _pieces(sql)
    places = [i for i, p in enumerate(pieces) if p.kind != "gap"]
    while True:
        i = draw(st.sampled_from(places))
        piece = pieces[i]
        word = piece.text.lower()
        if piece.kind == "word" and word in _KEYWORDS:
            quote = draw(st.sampled_from(['"{}"', "[{}]", "`{}`"]))
            options = [quote.format(piece.text)]
            if word in _SWAPPED_WORDS:
                options.append(_SWAPPED_WORDS[word])
        elif piece.kind == "word":
            other = draw(st.sampled_from(sorted(_schema_check._library_names())))
            options = [piece.text + "x", other] if other != word else [piece.text + "x"]
        elif piece.kind == "string":
            inner = piece.text[1:-1]
            options = [f"'{inner}x'", f'"{inner}"', "''" if inner else "' '"]
            if inner.lower() != inner.upper():
                options.append(f"'{inner.swapcase()}'")
        elif piece.kind == "number":
            options = [str(int(float(piece.text)) + 1), f"'{piece.text}'", f'"{piece.text}"']
        elif piece.text in _SWAPPED_OPS:
            options = [_SWAPPED_OPS[piece.text]]
        else:
            continue
        text = draw(st.sampled_from(options))
        rewritten = [*pieces[:i], _Piece("new", f" {text} "), *pieces[i + 1 :]]
        return _join(rewritten), f"{piece.text!r} -> {text!r}"


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_a_rewrite_that_keeps_the_meaning_is_not_reported(
    installed: list[tuple[str, str, str | None]], data: st.DataObject
) -> None:
    """Spelling SQLite ignores — white space, comments, case, quotes on a name — is no change."""
    at = data.draw(st.sampled_from(_objects(installed)))
    sql = _meaning_kept(data.draw(st.randoms(use_true_random=False)), str(installed[at][2]))
    _parses(installed, at, sql)
    assert _changed(installed, at, sql) == []


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_a_rewrite_that_changes_the_meaning_is_reported(
    installed: list[tuple[str, str, str | None]], data: st.DataObject
) -> None:
    """A quoted keyword, another literal, number, operator or name: the object is named.

    (``"NULL"`` and ``"TRUE"`` among them went unseen: the check read them as keywords.)
    """
    at = data.draw(st.sampled_from(_objects(installed)))
    kind, name, original = installed[at]
    sql, what = data.draw(_meaning_changed(str(original)))
    problems = _changed(installed, at, sql)
    assert [(p.kind, p.name, p.what) for p in problems] == [(kind, name, "changed")], what


def test_the_installed_guards_quoted_null_and_true_are_reported(
    installed: list[tuple[str, str, str | None]],
) -> None:
    """Every NULL and TRUE of every installed object, double-quoted one at a time, is seen."""
    cases = 0
    for at in _objects(installed):
        _, name, sql = installed[at]
        pieces = _pieces(str(sql))
        for i, piece in enumerate(pieces):
            if piece.kind == "word" and piece.text.lower() in ("null", "true", "false"):
                quoted = _join([*pieces[:i], _Piece("new", f'"{piece.text}"'), *pieces[i + 1 :]])
                problems = _changed(installed, at, quoted)
                assert [(p.name, p.what) for p in problems] == [(name, "changed")], (name, i)
                cases += 1
    assert cases > 100
