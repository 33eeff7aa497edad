"""The schema tamper matrix: every object the stock shell can plant or rewrite is caught.

One store is built with the library: a settled run (claims with impact scope and
obligations, outcomes, observations, a call waiting for a person's approval) and a run whose writer died with a claim
unsettled. Each case copies it and, with the real ``sqlite3`` shell, does one of:

- plants a foreign trigger on a table: ``RAISE(IGNORE)`` before inserts into each of
  the nine tables the library writes, or one that inserts rows of its own;
- replaces a view with a same-named one of the same columns that lies (no rows; every
  verdict ``verified``);
- rewrites, with ``PRAGMA writable_schema``, one of the library's guard triggers to
  ``WHEN 0`` or one CHECK constraint to ``CHECK (1)``, or a guard's ``NULL``, ``TRUE`` or
  ``FALSE`` to the double-quoted word (to SQLite a text, not the keyword);
- appends a row whose hash is wrong (refused by the guards), or one whose hash is
  right (accepted: the stock shell has ``sha3()``), or a wrong one with every trigger
  dropped for the time of the insert.

``ledger verify`` must name the object (or the run) of every case; a writer must refuse
to write past a foreign trigger or view or a rewritten guard or CHECK — with nothing
it acknowledged missing from the store — and must put a lying view back; ``status``,
``runs`` and ``recover --dead`` must report the truth whatever the views say. A foreign
trigger planted while a log is open is caught at its next write: that write raises,
its record is not in the store, and the log degrades.

Figures go to stdout as one ``reliability:`` line, and as a JSON line to the file
named by ``LEDGER_RELIABILITY_REPORT`` when it is set.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import re
import shutil
import sqlite3
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy.dialects import sqlite
from sqlalchemy.schema import CreateTable

from ledger import _chain, _inspect
from ledger import effects as fx
from ledger.effect_log import EffectLog, EffectPersistenceError, new_run_id
from ledger.errors import ApprovalPending
from ledger.sqlite import schema as _schema
from tests.builders import (
    REPO,
    fs_ref,
    ledger,
    op,
    python_stdout,
    require_tool,
    see,
    sha,
)
from tests.reliability.figures import report
from tests.sqlite.driver import shell_script

DB = "ledger.sqlite3"

# Every table the library writes, and the write that reaches it.
# (A claim's impact scope and obligations are JSON columns of its row since migration
# 0009; the claim's own statement writes its scope_index rows, by a trigger.)
WRITTEN = (
    "runs",
    "run_writers",
    "claims",
    "scope_index",
    "outcomes",
    "observations",
    "resolutions",
    "approval_requests",
    "approval_decisions",
)
RECORD_TABLES = (
    "runs",
    "claims",
    "scope_index",
    "outcomes",
    "observations",
    "resolutions",
    "approval_requests",
    "approval_decisions",
)
# The call the settled run asked a person's approval of: its request waits for an answer.
GATED = {
    "effect_id": "g1",
    "action_id": "a-g",
    "operation": op("refund", b"g"),
    "impact_scope": [],
    "kind": fx.EffectKind.IRREVERSIBLE,
}

FIGURES: dict[str, Any] = {
    "cases": 0,
    "verify_named": 0,
    "cli_verify_named": 0,
    "writer_refused": 0,
    "writer_restored": 0,
    "reports_truthful": 0,
    "planted_while_open_refused": 0,
    "acknowledged_lost": 0,
    "missed": [],
}


@pytest.fixture(scope="module", autouse=True)
def _report() -> Iterator[None]:
    require_tool("sqlite3")
    started = time.monotonic()
    yield
    figures = {
        "test": "schema_tamper",
        **FIGURES,
        "seconds": round(time.monotonic() - started, 1),
    }
    report(
        figures,
        f"schema tamper cases={figures['cases']} "
        f"verify named {figures['verify_named']} (cli {figures['cli_verify_named']}), "
        f"writer refused {figures['writer_refused']} restored {figures['writer_restored']}, "
        f"planted while open refused {figures['planted_while_open_refused']}, "
        f"reports truthful {figures['reports_truthful']}, "
        f"acknowledged lost {figures['acknowledged_lost']}, missed {len(figures['missed'])} "
        f"in {figures['seconds']}s",
    )


# --------------------------------------------------------------------------- the store


@dataclasses.dataclass(frozen=True)
class Base:
    """The store every case copies."""

    directory: Path
    settled: str  # a run whose claims are all settled
    dead: str  # a run whose writer died with a claim unsettled
    master: dict[tuple[str, str], str]  # (type, name) -> sql, as the library installed it


_DIE_AFTER_CLAIM = """
import os, sys
from ledger.effect_log import EffectLog
from ledger import effects as fx
log = EffectLog(sys.argv[2], sys.argv[1])
log.claim(
    effect_id="d1", action_id="a1",
    operation=fx.OperationRef("write_file", "test/1", "0" * 64),
    impact_scope=[fx.ResourceRef("fs", "/w/dead", "target")],
)
os._exit(0)  # the worker dies between its claim and the outcome
"""


def _write_settled(directory: Path, run_id: str) -> None:
    a, b = fs_ref("/w/a"), fs_ref("/w/b")
    with EffectLog(run_id, directory) as log:
        log.claim(
            effect_id="c1",
            action_id="a1",
            operation=op("write_file", b"1"),
            impact_scope=[a, b],
            obligations=[fx.Postcondition(a, fx.Predicate.SHA256, sha(b"a"))],
        )
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
            sha256=sha(b"a"),
        )
        with pytest.raises(ApprovalPending):
            log.claim(**GATED, approval=fx.ApprovalPolicy())


@pytest.fixture(scope="module")
def base(tmp_path_factory: pytest.TempPathFactory) -> Base:
    with pytest.MonkeyPatch.context() as mp:  # never the user's default store
        mp.setenv("LEDGER_DIR", str(tmp_path_factory.mktemp("default-store") / "ledger"))
        directory = tmp_path_factory.mktemp("schema-tamper") / "store"
        settled, dead = new_run_id(), new_run_id()
        _write_settled(directory, settled)
        python_stdout(_DIE_AFTER_CLAIM, directory, dead)
    with _read_only(directory) as conn:
        master = {
            (str(t), str(n)): str(s)
            for t, n, s in conn.execute("SELECT type, name, sql FROM sqlite_master")
            if s is not None
        }
    return Base(directory, settled, dead, master)


@contextlib.contextmanager
def _read_only(directory: Path) -> Iterator[sqlite3.Connection]:
    """A plain read-only connection to the store's database, closed afterwards."""
    conn = sqlite3.connect(f"file:{directory / DB}?mode=ro", uri=True)
    try:
        yield conn
    finally:
        conn.close()


def _copy(base: Base, directory: Path) -> Path:
    shutil.copytree(base.directory, directory)
    return directory


def _plant(directory: Path, script: str) -> None:
    result = shell_script(directory / DB, script)
    assert result.returncode == 0, (script, result.stderr)


def _rows(directory: Path) -> dict[str, list[tuple[Any, ...]]]:
    with _read_only(directory) as conn:
        return {
            table: sorted(conn.execute(f"SELECT * FROM {table}").fetchall(), key=repr)
            for table in RECORD_TABLES
        }


def _verify_names(directory: Path, name: str, *, cli: bool = False) -> bool:
    """Whether verify fails and one of its problems names ``name``."""
    if cli:
        result = ledger("verify", "--json", "--store", str(directory), cwd=REPO)
        assert result.returncode in (0, 1), result.stderr
        problems = json.loads(result.stdout)["problems"]
        named = result.returncode == 1 and any(name in p for p in problems)
        FIGURES["cli_verify_named"] += named
        return named
    report = _inspect.verify(directory)
    return not report.ok and any(name in p for p in report.problems)


def _claim(log: EffectLog, effect_id: str) -> None:
    a = fs_ref("/w/x")
    log.claim(
        effect_id=effect_id,
        action_id="a-x",
        operation=op(),
        impact_scope=[a],
        obligations=[fx.Postcondition(a, fx.Predicate.EXISTS)],
    )


def _write_reaching(base: Base, directory: Path, table: str) -> None:
    """One write by the library that inserts into ``table``."""
    if table in ("runs", "run_writers"):  # a new run's first claim writes both
        with EffectLog(new_run_id(), directory) as log:
            _claim(log, "c-new")
        return
    with EffectLog.load(base.settled, directory) as log:
        if table == "outcomes":
            log.outcome(effect_id="c1", execution=fx.ExecutionOutcome.FAILED, impact=fx.Impact.NONE)
        elif table == "observations":
            see(log, "o-x", fs_ref("/w/a"))
        elif table == "resolutions":
            log.resolve("c1", applied=True, by="x")
        elif table == "approval_requests":  # another call: a request of its own
            with contextlib.suppress(ApprovalPending):
                log.claim(**{**GATED, "args": {"n": 2}}, approval=fx.ApprovalPolicy())
        elif table == "approval_decisions":  # an MCP client's answer, relayed by the proxy
            (pending,) = log.approvals(state="pending")
            log.answer_approval(
                pending.approval_id,
                granted=True,
                by="client",
                source=fx.ApprovalSource.ELICITATION,
            )
        else:  # claims, and scope_index by the claim's own statement
            _claim(log, "c-x")


def _key(record: Any) -> str:
    """What names a record in its run: its observation, approval or effect id."""
    for name in ("observation_id", "approval_id"):
        if hasattr(record, name) and record.record_type != "claim":
            return str(getattr(record, name))
    return str(record.effect_id)


@dataclasses.dataclass
class Outcome:
    """What happened to one case."""

    name: str
    failures: list[str] = dataclasses.field(default_factory=list)

    def check(self, ok: bool, what: str) -> bool:
        if not ok:
            self.failures.append(what)
        return ok


def _done(outcome: Outcome) -> None:
    FIGURES["cases"] += 1
    if outcome.failures:
        FIGURES["missed"].append(f"{outcome.name}: {', '.join(outcome.failures)}")
    assert not outcome.failures, outcome


def _refused(base: Base, directory: Path, table: str, name: str, outcome: Outcome) -> None:
    """A writer reaching ``table`` refuses, names ``name``, and writes nothing."""
    before = _rows(directory)
    try:
        _write_reaching(base, directory, table)
    except EffectPersistenceError as e:
        if outcome.check(name in str(e), f"the refusal does not name {name}: {e}"):
            FIGURES["writer_refused"] += 1
    else:
        outcome.check(False, f"a write reaching {table} was accepted")
    outcome.check(_rows(directory) == before, "the refused write changed the records")


# --------------------------------------------------------------------------- foreign triggers


@pytest.mark.parametrize("table", WRITTEN)
def test_a_foreign_trigger_that_drops_inserts_is_named_and_refused(
    base: Base, tmp_path: Path, table: str
) -> None:
    directory = _copy(base, tmp_path / "store")
    name = f"evil_ignore_{table}"
    _plant(
        directory,
        f"CREATE TRIGGER {name} BEFORE INSERT ON {table} BEGIN SELECT RAISE(IGNORE); END;",
    )
    outcome = Outcome(f"RAISE(IGNORE) on {table}")
    if outcome.check(_verify_names(directory, name, cli=table == "claims"), "verify"):
        FIGURES["verify_named"] += 1
    _refused(base, directory, table, name, outcome)
    _done(outcome)


@pytest.mark.parametrize("table", ["claims", "outcomes", "observations"])
def test_a_foreign_trigger_that_inserts_is_named_and_refused(
    base: Base, tmp_path: Path, table: str
) -> None:
    directory = _copy(base, tmp_path / "store")
    name = f"evil_insert_{table}"
    _plant(
        directory,
        f"CREATE TRIGGER {name} AFTER INSERT ON {table} BEGIN "
        f"INSERT INTO {table} SELECT * FROM {table} WHERE rowid = new.rowid; END;",
    )
    outcome = Outcome(f"inserting trigger on {table}")
    if outcome.check(_verify_names(directory, name), "verify"):
        FIGURES["verify_named"] += 1
    _refused(base, directory, table, name, outcome)
    _done(outcome)


@pytest.mark.parametrize("table", ["claims", "scope_index", "outcomes", "observations"])
def test_a_trigger_planted_while_a_log_is_open_fails_its_next_write(
    base: Base, tmp_path: Path, table: str, caplog: pytest.LogCaptureFixture
) -> None:
    """The issue's attack: the trigger arrives after the worker has loaded its run."""
    directory = _copy(base, tmp_path / "store")
    name = f"evil_late_{table}"
    outcome = Outcome(f"RAISE(IGNORE) on {table} planted while a log is open")
    with EffectLog.load(base.settled, directory) as log:
        _claim(log, "c-before")
        acknowledged = log.history().records()
        _plant(
            directory,
            f"CREATE TRIGGER {name} BEFORE INSERT ON {table} BEGIN SELECT RAISE(IGNORE); END;",
        )
        before = _rows(directory)
        caplog.clear()
        try:
            # An outcome or observation that cannot be persisted degrades the log, which
            # says why in its log record; a claim raises.
            if table == "outcomes":
                log.outcome(
                    effect_id="c-before",
                    execution=fx.ExecutionOutcome.FAILED,
                    impact=fx.Impact.NONE,
                )
            elif table == "observations":
                see(log, "o-late", fs_ref("/w/a"))
            else:
                _claim(log, "c-late")
        except EffectPersistenceError as e:
            said = str(e)
            outcome.check(table not in ("outcomes", "observations"), f"{table} raised")
        else:
            said = caplog.text
            outcome.check(table in ("outcomes", "observations"), "the claim was acknowledged")
        if outcome.check(name in said, f"nothing names {name}: {said}"):
            FIGURES["planted_while_open_refused"] += 1
        outcome.check(log.degraded, "the log is not degraded")
        outcome.check(_rows(directory) == before, "the refused write changed the records")
        with pytest.raises(EffectPersistenceError):  # degraded: no new effect may start
            _claim(log, "c-after")
    with _read_only(directory) as conn:
        stored = {
            (kind, key)
            for kind, sql in (
                ("claim", "SELECT effect_id FROM claims WHERE run_id = ?"),
                ("outcome", "SELECT effect_id FROM outcomes WHERE run_id = ?"),
                ("observation", "SELECT observation_id FROM observations WHERE run_id = ?"),
                ("approval_request", "SELECT approval_id FROM approval_requests WHERE run_id = ?"),
                (
                    "approval_decision",
                    "SELECT approval_id FROM approval_decisions WHERE run_id = ?",
                ),
            )
            for (key,) in conn.execute(sql, (base.settled,))
        }
    lost = [r for r in acknowledged if (r.record_type, _key(r)) not in stored]
    FIGURES["acknowledged_lost"] += len(lost)
    outcome.check(not lost, f"acknowledged records missing: {lost}")
    _done(outcome)


# --------------------------------------------------------------------------- lying views


def _lying_view(base: Base, view: str, lie: str) -> str:
    """A view named ``view`` with the library's columns that returns a lie."""
    query = _schema.VIEW_QUERIES[view]
    if lie == "empty":
        return f"CREATE VIEW {view} AS SELECT * FROM ({query}) WHERE 0"
    with _read_only(base.directory) as conn:
        columns = [row[1] for row in conn.execute(f"PRAGMA table_info({view})")]
    assert "verdict" in columns
    chosen = ", ".join("'verified' AS verdict" if c == "verdict" else c for c in columns)
    return f"CREATE VIEW {view} AS SELECT {chosen} FROM ({query})"


VIEW_CASES = [
    ("effect_status", "empty"),
    ("effect_status", "verified"),
    ("unsettled_claims", "empty"),
]


@pytest.mark.parametrize(("view", "lie"), VIEW_CASES)
def test_a_lying_view_is_named_ignored_by_reports_and_put_back_by_a_writer(
    base: Base, tmp_path: Path, view: str, lie: str
) -> None:
    truth = _copy(base, tmp_path / "truth")
    directory = _copy(base, tmp_path / "store")
    _plant(directory, f"DROP VIEW {view}; {_lying_view(base, view, lie)};")
    outcome = Outcome(f"{view} lying ({lie})")
    if outcome.check(_verify_names(directory, view, cli=lie == "verified"), "verify"):
        FIGURES["verify_named"] += 1

    # Reports compute from the library's queries, never from the store's views.
    truthful = [
        outcome.check(
            [r.to_dict() for r in _inspect.list_runs(directory)]
            == [r.to_dict() for r in _inspect.list_runs(truth)],
            "runs",
        ),
        outcome.check(
            [r.to_dict() for r in _inspect.effect_statuses(directory)]
            == [r.to_dict() for r in _inspect.effect_statuses(truth)],
            "status",
        ),
    ]
    if lie == "verified":  # and the console script says the same
        lied = ledger("status", "--json", "--store", str(directory), cwd=REPO)
        told = ledger("status", "--json", "--store", str(truth), cwd=REPO)
        truthful.append(outcome.check(lied.stdout == told.stdout, "ledger status"))
    recovered = [r.run_id for r in _inspect.recover_dead(directory) if r.outcomes]
    truthful.append(outcome.check(recovered == [base.dead], f"recover --dead: {recovered}"))
    FIGURES["reports_truthful"] += all(truthful)

    # Recovery wrote through the library: the view is the library's again.
    with _read_only(directory) as conn:
        (sql,) = conn.execute(
            "SELECT sql FROM sqlite_master WHERE type = 'view' AND name = ?", (view,)
        ).fetchone()
    if outcome.check(sql == base.master[("view", view)], "the writer did not restore the view"):
        FIGURES["writer_restored"] += 1
    outcome.check(_inspect.verify(directory).ok, "verify after the writer restored it")
    _done(outcome)


# --------------------------------------------------------------------------- writable_schema


def _split_head(sql: str) -> tuple[str, str]:
    """A trigger's text before its body, and the body (from BEGIN)."""
    match = re.search(r"\bBEGIN\b", sql, re.IGNORECASE)
    assert match, sql
    return sql[: match.start()], sql[match.start() :]


def _disabled(sql: str) -> str:
    """The trigger ``sql`` with a ``WHEN 0`` that makes it never fire."""
    head, body = _split_head(sql)
    when = re.search(r"\bWHEN\b", head, re.IGNORECASE)
    if when:
        head = f"{head[: when.end()]} 0 AND ({head[when.end() :].rstrip()})\n"
    else:
        head = head.rstrip() + "\nWHEN 0\n"
    return head + body


def _checks(sql: str) -> list[tuple[int, int]]:
    """The spans of every ``CHECK (...)`` in a CREATE TABLE statement."""
    spans = []
    for match in re.finditer(r"\bCHECK\s*\(", sql, re.IGNORECASE):
        depth, i, quote = 0, match.end() - 1, ""
        while True:
            ch = sql[i]
            if quote:
                if ch == quote:
                    quote = ""
            elif ch in "'\"":
                quote = ch
            elif ch == "(":
                depth += 1
            elif ch == ")":
                depth -= 1
                if depth == 0:
                    break
            i += 1
        spans.append((match.start(), i + 1))
    return spans


def _rewrite_script(kind: str, name: str, sql: str) -> str:
    literal = "'" + sql.replace("'", "''") + "'"
    return (
        "PRAGMA writable_schema = ON;\n"
        f"UPDATE sqlite_master SET sql = {literal} WHERE type = '{kind}' AND name = '{name}';\n"
        "PRAGMA writable_schema = OFF;\n"
    )


def _guard_cases() -> list[str]:
    return sorted(_schema.SQLITE_TRIGGERS)


def _check_cases() -> list[tuple[str, int]]:
    cases = []
    for table in _schema.metadata.tables:
        cases += [(table, i) for i in range(len(_checks(_table_sql(table))))]
    return cases


def _table_sql(table: str) -> str:
    return str(CreateTable(_schema.metadata.tables[table]).compile(dialect=sqlite.dialect()))


@pytest.mark.parametrize("trigger", _guard_cases())
def test_a_guard_rewritten_to_when_0_is_named_and_refused(
    base: Base, tmp_path: Path, trigger: str
) -> None:
    directory = _copy(base, tmp_path / "store")
    sql = base.master[("trigger", trigger)]
    _plant(directory, _rewrite_script("trigger", trigger, _disabled(sql)))
    outcome = Outcome(f"guard {trigger} WHEN 0")
    cli = trigger == "claims_guard"
    if outcome.check(_verify_names(directory, trigger, cli=cli), "verify"):
        FIGURES["verify_named"] += 1
    _refused(base, directory, "observations", trigger, outcome)
    _done(outcome)


@pytest.mark.parametrize(("table", "index"), _check_cases())
def test_a_check_rewritten_to_check_1_is_named_and_refused(
    base: Base, tmp_path: Path, table: str, index: int
) -> None:
    directory = _copy(base, tmp_path / "store")
    sql = base.master[("table", table)]
    spans = _checks(sql)
    assert len(spans) > index, (table, len(spans))
    start, end = spans[index]
    rewritten = sql[:start] + "CHECK (1)" + sql[end:]
    _plant(directory, _rewrite_script("table", table, rewritten))
    outcome = Outcome(f"{table} CHECK #{index} rewritten to CHECK (1): {sql[start:end][:60]}")
    cli = table == "claims" and index == 0
    if outcome.check(_verify_names(directory, table, cli=cli), "verify"):
        FIGURES["verify_named"] += 1
    _refused(base, directory, "observations", table, outcome)
    _done(outcome)


# A guard rewritten to compare with "NULL" or "TRUE": to SQLite the texts, not the
# keywords. The retry guard then refuses every claim (NULL IS NOT 'NULL'); the scope
# guard no longer refuses malformed scope ('TRUE' is false).
QUOTED_CASES = [
    ("claims_guard_retry", "IS NOT NULL", 'IS NOT "NULL"', "claims"),
    ("claims_guard_impact_scope", "ELSE TRUE END", 'ELSE "TRUE" END', "observations"),
    ("claims_guard_obligations", "ELSE FALSE END", 'ELSE "FALSE" END', "claims"),
]


@pytest.mark.parametrize("case", QUOTED_CASES, ids=[c[0] for c in QUOTED_CASES])
def test_a_guard_rewritten_with_a_double_quoted_keyword_is_named_and_refused(
    base: Base, tmp_path: Path, case: tuple[str, str, str, str]
) -> None:
    guard, word, quoted, table = case
    trigger = f"{guard.split('_guard_')[0]}_guard"  # the trigger of the table's guards
    directory = _copy(base, tmp_path / "store")
    sql = base.master[("trigger", trigger)]
    line = _schema.guard_check(_schema.insert_guards("sqlite")[guard])
    assert line in sql, guard
    assert word in line, (guard, word)
    rewritten = sql.replace(line, line.replace(word, quoted, 1))
    _plant(directory, _rewrite_script("trigger", trigger, rewritten))
    outcome = Outcome(f"guard {guard}: {word} rewritten to {quoted}")
    cli = guard == "claims_guard_retry"
    if outcome.check(_verify_names(directory, trigger, cli=cli), "verify"):
        FIGURES["verify_named"] += 1
    _refused(base, directory, table, trigger, outcome)
    _done(outcome)


def test_every_check_of_every_table_has_a_case(base: Base) -> None:
    """The cases above cover the CHECKs of the store as installed, not only of the model."""
    installed = {
        name: len(_checks(sql))
        for (kind, name), sql in base.master.items()
        if kind == "table" and name != "alembic_version"
    }
    covered: dict[str, int] = {}
    for table, _ in _check_cases():
        covered[table] = covered.get(table, 0) + 1
    assert {t: n for t, n in installed.items() if n} == covered
    assert sum(covered.values()) >= 10


# --------------------------------------------------------------------------- hashes


def _append_observation(base: Base, directory: Path, hash_sql: str) -> str:
    """SQL appending a copy of the settled run's observation after its head, new id."""
    with _read_only(directory) as conn:
        columns = [row[1] for row in conn.execute("PRAGMA table_info(observations)")]
        records = " UNION ALL ".join(
            f"SELECT seq, hash FROM {t} WHERE run_id = :r" for t in _schema.RECORD_TABLES
        )
        head_seq, head_hash = conn.execute(
            f"SELECT seq, hash FROM ({records}) ORDER BY seq DESC LIMIT 1",
            {"r": base.settled},
        ).fetchone()
    changed = {
        "seq": str(head_seq + 1),
        "observation_id": "'o-shell'",
        "prev_hash": f"'{head_hash}'",
    }
    fields = ", ".join(f"{changed.get(c, c)} AS {c}" for c in columns)
    kept = ", ".join(c for c in columns if c != "hash")
    return (
        f"WITH x AS (SELECT {fields} FROM observations"
        f" WHERE run_id = '{base.settled}' AND observation_id = 'o1')\n"
        f"INSERT INTO observations ({kept}, hash) SELECT {kept}, {hash_sql} FROM x;\n"
    )


def test_a_row_with_a_wrong_hash_is_refused_by_the_guards_in_the_stock_shell(
    base: Base, tmp_path: Path
) -> None:
    directory = _copy(base, tmp_path / "store")
    before = _rows(directory)
    result = shell_script(
        directory / DB, _append_observation(base, directory, "'" + "0" * 64 + "'")
    )
    outcome = Outcome("wrong hash, guards in place")
    outcome.check(result.returncode != 0, "the shell inserted a row with a wrong hash")
    outcome.check("hash" in result.stderr, f"the refusal does not say why: {result.stderr}")
    outcome.check(_rows(directory) == before, "the records changed")
    _done(outcome)


def test_a_row_with_the_right_hash_is_insertable_from_the_stock_shell(
    base: Base, tmp_path: Path
) -> None:
    """The guards use sha3() as the shell defines it: a hand-written row can be right."""
    directory = _copy(base, tmp_path / "store")
    _plant(directory, _append_observation(base, directory, _chain.sql_hash("observation", "x")))
    outcome = Outcome("right hash from the shell")
    with EffectLog.load(base.settled, directory) as log:
        ids = [getattr(r, "observation_id", None) for r in log.history().records()]
    outcome.check("o-shell" in ids, "the shell's row is not in the run")
    outcome.check(_inspect.verify(directory).ok, "verify")
    _done(outcome)


def test_a_wrong_hash_with_the_guards_dropped_is_flagged_everywhere(
    base: Base, tmp_path: Path
) -> None:
    directory = _copy(base, tmp_path / "store")
    triggers = [(n, s) for (k, n), s in base.master.items() if k == "trigger"]
    _plant(
        directory,
        "BEGIN IMMEDIATE;\n"
        + "".join(f'DROP TRIGGER "{n}";\n' for n, _ in triggers)
        + _append_observation(base, directory, "'" + "0" * 64 + "'")
        + "".join(f"{s};\n" for _, s in triggers)
        + "COMMIT;\n",
    )
    outcome = Outcome("wrong hash, guards dropped for the insert")
    if outcome.check(_verify_names(directory, base.settled, cli=True), "verify"):
        FIGURES["verify_named"] += 1
    try:
        with EffectLog.load(base.settled, directory) as log:
            log.history()
    except EffectPersistenceError:
        pass
    else:
        outcome.check(False, "load accepted the run")
    runs = {r.run_id: r.problem for r in _inspect.list_runs(directory)}
    outcome.check(runs[base.settled] is not None, "runs shows the forged run without a problem")
    outcome.check(runs[base.dead] is None, "runs flags an untouched run")
    rows = [r for r in _inspect.effect_statuses(directory) if r.run_id == base.settled]
    outcome.check(
        bool(rows) and all(r.run_problem for r in rows), "status shows its verdicts unflagged"
    )
    status = ledger("status", "--store", str(directory), cwd=REPO)
    outcome.check(status.returncode == 1, f"ledger status exited {status.returncode}")
    outcome.check(base.settled[:8] in status.stderr, f"ledger status said: {status.stderr}")
    FIGURES["reports_truthful"] += not outcome.failures
    _done(outcome)
