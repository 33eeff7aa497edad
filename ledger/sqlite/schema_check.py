"""The schema checked whole: every table, index, trigger and view against what the library installs.

A store's guards are only worth something if they are the library's. A trigger added
from the ``sqlite3`` shell (``BEFORE INSERT ... RAISE(IGNORE)`` drops every claim
silently), a view replaced by a same-named one that calls every effect verified, or a
CHECK rewritten through ``PRAGMA writable_schema`` would otherwise pass unnoticed. So
the definition of every object in ``sqlite_master`` is compared, after normalising its
SQL, with the definition the library's schema gives it (the tables of ``ledger._sql``, the
triggers and views ``ledger.sqlite.schema`` renders from it): anything missing, changed or
not the library's is a :class:`Problem`.

Normalising makes the comparison about what SQLite reads rather than spelling: comments
and white space go, keywords and identifiers are folded to lower case (ASCII only, as
SQLite folds), quotes are dropped around the library's own names only, and a table's
constraints are compared as a set (a table rebuilt by a migration lists them in
another order). Anything else quoted keeps its quotes: ``"NULL"`` is a string or a
column to SQLite, never the keyword. Literals are kept exactly: they hold the words
CHECK constraints allow and the messages guards raise. When in doubt, a difference in
spelling is reported as a difference.
"""

from __future__ import annotations

import dataclasses
import re
import sqlite3
from collections.abc import Iterable, Mapping
from functools import cache, lru_cache
from sqlite3 import Cursor
from typing import Any, Literal

from sqlalchemy import Column, MetaData, PrimaryKeyConstraint, String, Table
from sqlalchemy.dialects import sqlite
from sqlalchemy.schema import CreateIndex, CreateTable

from ledger._sql.tables import metadata
from ledger._sql.views import VIEWS
from ledger.errors import StoreCorruptError, StoreTamperedError
from ledger.sqlite.schema import SQLITE_TRIGGERS

Kind = Literal["table", "index", "trigger", "view"]
What = Literal["missing", "changed", "foreign"]

# Tables SQLite makes itself: statistics from ANALYZE (plans only) and AUTOINCREMENT's.
_SQLITE_OWN = re.compile(r"sqlite_(stat\d|sequence)")

# SQLite's keywords (https://sqlite.org/lang_keywords.html): bare, each is read as the
# keyword where the grammar has one; quoted, never.
_KEYWORD_LIST = """
    abort action add after all alter always analyze and as asc attach autoincrement
    before begin between by cascade case cast check collate column commit conflict
    constraint create cross current current_date current_time current_timestamp
    database default deferrable deferred delete desc detach distinct do drop each else
    end escape except exclude exclusive exists explain fail filter first following for
    foreign from full generated glob group groups having if ignore immediate in index
    indexed initially inner insert instead intersect into is isnull join key last left
    like limit match materialized natural no not nothing notnull null nulls of offset on
    or order others outer over partition plan pragma preceding primary query raise range
    recursive references regexp reindex release rename replace restrict returning right
    rollback row rows savepoint select set table temp temporary then ties to transaction
    trigger unbounded union unique update using vacuum values view virtual when where
    window with without
"""
KEYWORDS = frozenset(_KEYWORD_LIST.split())

# Characters SQLite takes into an identifier: ASCII letters, digits, "_", "$" (not
# first) and every character beyond ASCII.
_ID_START = r"A-Za-z_\u0080-\U0010ffff"
_ID = _ID_START + r"0-9$"

_TOKEN = re.compile(
    rf"""
      (?P<space>\s+|--[^\n]*|/\*.*?(?:\*/|\Z))
    | (?P<string>'(?:[^']|'')*')
    | (?P<blob>[xX]'[^']*')
    | (?P<quoted>"(?:[^"]|"")*"|`(?:[^`]|``)*`|\[[^\]]*\])
    | (?P<word>[{_ID_START}][{_ID}]*)
    | (?P<number>0[xX][0-9A-Fa-f_]+
        |(?:\d[\d_]*(?:\.[\d_]*)?|\.\d[\d_]*)(?:[eE][+-]?\d[\d_]*)?)
    | (?P<op>\|\||<<|>>|<=|>=|==|!=|<>|->>|->|\S)
    """,
    re.VERBOSE | re.DOTALL,
)

Token = tuple[str, str]

# SQLite folds the case of ASCII letters only: "É" and "é" are two identifiers.
_ASCII_LOWER = str.maketrans("ABCDEFGHIJKLMNOPQRSTUVWXYZ", "abcdefghijklmnopqrstuvwxyz")


def _fold(text: str) -> str:
    return text.translate(_ASCII_LOWER)


def tokens(sql: str) -> tuple[Token, ...]:
    """The SQL's tokens as SQLite reads them: ``(kind, text)``, spelling aside.

    A bare word is a ``name`` (a keyword or an identifier, as the grammar places it),
    case folded. A quoted word is the same ``name`` only when it is one of the
    library's own tables, columns, indexes, constraints, triggers or views: one that
    resolves, quoted or not, to the same object. Any other quoted word keeps its
    quotes and its case (``quoted``): a double-quoted word that names no column is a
    string to SQLite (``"NULL"`` is the text NULL, ``"TRUE"`` the text TRUE, neither
    the keyword), and one in brackets or backquotes an identifier that may not exist.
    String, blob and number literals keep their exact spelling.
    """
    names = _library_names()
    out: list[Token] = []
    for match in _TOKEN.finditer(sql):
        kind = match.lastgroup
        text = match.group()
        if kind == "space":
            continue
        if kind == "word":
            out.append(("name", _fold(text)))
        elif kind == "quoted":
            inner = text[1:-1]
            if text[0] != "[":
                inner = inner.replace(text[0] * 2, text[0])
            if _fold(inner) in names:
                out.append(("name", _fold(inner)))
            else:
                out.append(("quoted", text))
        elif kind == "number":
            out.append(("number", text.replace("_", "")))
        else:
            out.append((kind or "op", text))
    return tuple(out)


@cache
def _library_names() -> frozenset[str]:
    """The identifiers whose quoting changes nothing: the library's own objects' names.

    A keyword among them would be read as the keyword bare and as the name quoted,
    and ``true``/``false`` are the booleans only bare: neither is ever folded.
    """
    found: set[str] = {"alembic_version", "version_num", "alembic_version_pkc"}
    for table in metadata.tables.values():
        found.add(table.name)
        found.update(column.name for column in table.columns)
        found.update(str(index.name) for index in table.indexes)
        found.update(str(c.name) for c in table.constraints if c.name)
    found.update(SQLITE_TRIGGERS)
    found.update(VIEWS)
    folded = {_fold(name) for name in found}
    return frozenset(folded - KEYWORDS - {"true", "false"})


@dataclasses.dataclass(frozen=True, slots=True)
class _Table:
    """A table's definition: its columns in order, its constraints as a set."""

    head: tuple[Token, ...]
    columns: tuple[tuple[Token, ...], ...]
    constraints: frozenset[tuple[Token, ...]]
    tail: tuple[Token, ...]


_CONSTRAINT_WORDS = {"constraint", "primary", "unique", "check", "foreign"}

Definition = _Table | tuple[Token, ...]


def _split_items(body: tuple[Token, ...]) -> list[tuple[Token, ...]]:
    items: list[tuple[Token, ...]] = []
    depth = 0
    start = 0
    for i, token in enumerate(body):
        if token == ("op", "("):
            depth += 1
        elif token == ("op", ")"):
            depth -= 1
        elif token == ("op", ",") and depth == 0:
            items.append(body[start:i])
            start = i + 1
    items.append(body[start:])
    return items


_NOT_NULL = (("name", "not"), ("name", "null"))


def _column(item: tuple[Token, ...]) -> tuple[Token, ...]:
    """A column's definition with its NOT NULL moved to the end, a default unparenthesised.

    ``ALTER TABLE ... ADD COLUMN`` (migration 0012) and ``CREATE TABLE`` may spell a column
    ``TEXT DEFAULT '' NOT NULL`` or ``TEXT NOT NULL DEFAULT ''``, and a batch migration,
    which rebuilds the table from what it reads of it, ``TEXT DEFAULT ('') NOT NULL``: one
    meaning.
    """
    for i in range(len(item) - 3):
        if (
            item[i] == ("name", "default")
            and item[i + 1] == ("op", "(")
            and item[i + 2][0] in ("string", "number")
            and item[i + 3] == ("op", ")")
        ):
            item = (*item[: i + 1], item[i + 2], *item[i + 4 :])
            break
    depth = 0
    for i, token in enumerate(item):
        if token == ("op", "("):
            depth += 1
        elif token == ("op", ")"):
            depth -= 1
        elif depth == 0 and item[i : i + 2] == _NOT_NULL:
            return item[:i] + item[i + 2 :] + _NOT_NULL
    return item


def _table(toks: tuple[Token, ...]) -> Definition:
    try:
        open_at = toks.index(("op", "("))
    except ValueError:
        return toks
    depth = 0
    for close_at in range(open_at, len(toks)):
        if toks[close_at] == ("op", "("):
            depth += 1
        elif toks[close_at] == ("op", ")"):
            depth -= 1
            if depth == 0:
                break
    else:
        return toks
    items = _split_items(toks[open_at + 1 : close_at])
    columns = tuple(_column(i) for i in items if i and i[0][1] not in _CONSTRAINT_WORDS)
    constraints = frozenset(i for i in items if i and i[0][1] in _CONSTRAINT_WORDS)
    return _Table(toks[:open_at], columns, constraints, toks[close_at + 1 :])


@lru_cache(maxsize=512)
def definition(kind: str, sql: str) -> Definition:
    """The normalised definition of one schema object.

    Kept by its text: every store this library made holds the same definitions, so after
    the first store a check reads them instead of tokenising them again (most of the
    time of opening a store). A store whose text differs only adds entries, at most 512.
    """
    toks = tokens(sql)
    return _table(toks) if kind == "table" else toks


@dataclasses.dataclass(frozen=True, slots=True)
class Problem:
    """One object of the schema that is not as the library installs it."""

    kind: Kind
    name: str
    what: What
    detail: str = ""

    def __str__(self) -> str:
        if self.what == "missing":
            text = f"{self.kind} {self.name} is missing"
        elif self.what == "changed":
            text = f"{self.kind} {self.name} is not the library's definition"
        else:
            text = f"{self.kind} {self.name} is not the library's"
        return f"{text} ({self.detail})" if self.detail else text


def _alembic_version() -> Table:
    # Alembic's own bookkeeping table, as alembic creates it (VARCHAR(32), named key).
    return Table(
        "alembic_version",
        MetaData(),
        Column("version_num", String(32), nullable=False),
        PrimaryKeyConstraint("version_num", name="alembic_version_pkc"),
    )


@cache
def expected() -> Mapping[tuple[str, str], Definition]:
    """Every object the library's schema installs, by (type, name), normalised."""
    dialect = sqlite.dialect()
    objects: dict[tuple[str, str], Definition] = {}
    for table in (*metadata.tables.values(), _alembic_version()):
        ddl = str(CreateTable(table).compile(dialect=dialect))
        objects["table", table.name] = definition("table", ddl)
        for index in table.indexes:
            ddl = str(CreateIndex(index).compile(dialect=dialect))
            objects["index", str(index.name)] = definition("index", ddl)
    for name, ddl in SQLITE_TRIGGERS.items():
        objects["trigger", name] = definition("trigger", ddl)
    for name, ddl in VIEWS.items():
        objects["view", name] = definition("view", ddl)
    return objects


def _table_detail(want: _Table, got: Definition) -> str:
    if not isinstance(got, _Table):
        return "it is not a table definition"
    parts = []
    if got.columns != want.columns:
        parts.append("its columns differ")
    lacks = {_name_of(item) for item in want.constraints - got.constraints}
    extra = {_name_of(item) for item in got.constraints - want.constraints}
    parts.extend(f"{name} differs" for name in sorted(lacks & extra))
    parts.extend(f"{name} is missing" for name in sorted(lacks - extra))
    parts.extend(f"{name} is not the library's" for name in sorted(extra - lacks))
    if got.head != want.head or got.tail != want.tail:
        parts.append("its options differ")
    return "; ".join(parts)


def _name_of(item: tuple[Token, ...]) -> str:
    if len(item) > 1 and item[0] == ("name", "constraint"):
        return f"constraint {item[1][1]}"
    return " ".join(text for _, text in item[:6])


def compare(rows: Iterable[Any]) -> list[Problem]:
    """Compare ``sqlite_master``'s ``(type, name, sql)`` rows with the library's schema."""
    want = expected()
    seen: set[tuple[str, str]] = set()
    problems: list[Problem] = []
    for kind, name, sql in rows:
        if sql is None:
            # Indexes SQLite makes for PRIMARY KEY and UNIQUE constraints carry no SQL;
            # they follow from the table's definition, which is compared.
            if kind == "index" and name.startswith("sqlite_autoindex_"):
                continue
            if kind == "table" and _SQLITE_OWN.fullmatch(name):
                continue
        if kind == "table" and _SQLITE_OWN.fullmatch(name):
            continue
        key = (kind, name)
        seen.add(key)
        got = definition(kind, sql or "")
        if key not in want:
            problems.append(Problem(_kind(kind), name, "foreign"))
        elif got != want[key]:
            wanted = want[key]
            detail = _table_detail(wanted, got) if isinstance(wanted, _Table) else ""
            problems.append(Problem(_kind(kind), name, "changed", detail))
    problems.extend(
        Problem(_kind(kind), name, "missing") for kind, name in sorted(set(want) - seen)
    )
    return problems


def _kind(kind: str) -> Kind:
    if kind in ("table", "index", "trigger", "view"):
        return kind  # type: ignore[return-value]  # narrowed by the test above
    return "table"


MASTER_SQL = "SELECT type, name, sql FROM sqlite_master"


def restorable(problem: Problem) -> bool:
    """Whether a writer puts the object back: a missing guard, view or index, a changed view.

    Views hold no data and guards no state: re-creating them from the library's schema
    loses nothing, and every row is validated when it is read anyway.
    """
    if problem.what == "missing":
        return problem.kind != "table"
    return problem.what == "changed" and problem.kind == "view"


def refused(problem: Problem) -> bool:
    """Whether a writer refuses to write into a store with this problem.

    A trigger or view that is not the library's can drop, add or misreport rows; a
    changed guard, index or table no longer enforces what the library relies on. A
    foreign table or index cannot change what the library writes or reads: it is
    reported by ``ledger verify`` and left alone, unless it holds the name of one of the
    library's views or indexes, which it then keeps the writer from putting back.
    """
    if problem.what == "foreign":
        return problem.kind in ("trigger", "view") or problem.name in _names_taken()
    return not restorable(problem)


@cache
def _names_taken() -> frozenset[str]:
    # Tables, indexes and views share one namespace in SQLite; triggers have their own.
    return frozenset(name for kind, name in expected() if kind != "trigger")


def _advice(problems: list[Problem]) -> str:
    if any(p.kind == "table" and p.what != "foreign" for p in problems):
        return (
            "the tables were rebuilt or edited: export its runs (ledger export) and import "
            "them into a new store, after ledger verify"
        )
    return (
        "check it with ledger verify, then drop these objects with the sqlite3 shell "
        "(DROP TRIGGER/VIEW/INDEX/TABLE name): the next write puts the library's back"
    )


def refusal(store: str, problems: list[Problem]) -> StoreTamperedError:
    """The error a writer raises for a schema it will not write into."""
    listed = "; ".join(map(str, problems))
    return StoreTamperedError(
        f"refusing to write to the store {store}: its schema is not the library's ({listed}); "
        + _advice(problems)
    )


def restore_sql(problem: Problem) -> list[str]:
    """The statements that put back what a :func:`restorable` problem names."""
    if problem.kind == "view":
        return [f'DROP VIEW IF EXISTS "{problem.name}"', VIEWS[problem.name]]
    if problem.kind == "trigger":
        return [SQLITE_TRIGGERS[problem.name]]
    return [_index_ddl()[problem.name]]


@cache
def _index_ddl() -> Mapping[str, str]:
    dialect = sqlite.dialect()
    return {
        str(index.name): str(CreateIndex(index).compile(dialect=dialect))
        for table in metadata.tables.values()
        for index in table.indexes
    }


def guard(cursor: Cursor, store: str) -> list[Problem]:
    """Check the schema inside a write transaction: restore what may be, refuse the rest.

    Returns the problems it restored (for the caller to log); raises
    :class:`StoreTamperedError` naming every object it will not write past.
    """
    problems = compare(cursor.execute(MASTER_SQL).fetchall())
    bad = [p for p in problems if refused(p)]
    if bad:
        raise refusal(store, bad)
    restored = [p for p in problems if restorable(p)]
    for problem in restored:
        try:
            for statement in restore_sql(problem):
                cursor.execute(statement)
        except sqlite3.IntegrityError as e:
            raise StoreCorruptError(
                f"the store {store} lacks {problem.name} and its rows forbid restoring them: "
                "it was forged or damaged (see ledger verify)"
            ) from e
    return restored
