"""The forensic reads of a PostgreSQL store (ledger.storage.Reader), one snapshot each.

Each read is one ``REPEATABLE READ, READ ONLY`` transaction. As on SQLite, no report is
computed from the store's own views (they may have been replaced): the library's view
queries are put in front of every query that uses them, and each run shown is
validated, rows and hash chain, as ``EffectLog.load`` validates it. ``ledger sql``
opens ``psql`` with every transaction read-only.
"""

from __future__ import annotations

import contextlib
import dataclasses
import re
import shutil
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import TypeVar

from sqlalchemy import Connection, text

from ledger._owner import Writer
from ledger._sql import rows
from ledger._sql.revisions import head_revision
from ledger._sql.tables import RECORD_TABLES
from ledger._sql.views import STATUS_QUERY
from ledger.effects import History
from ledger.errors import EffectPersistenceError
from ledger.postgresql import engine as _engine
from ledger.postgresql import liveness
from ledger.postgresql import store as _store
from ledger.postgresql.guards import TRIGGER_TABLE, with_views
from ledger.postgresql.store import Store
from ledger.storage import (
    VERDICTS,
    EffectRow,
    EffectRows,
    Head,
    Keep,
    RecoveryHold,
    RunNotFoundError,
    RunSummary,
    Shell,
    ShellMissingError,
    Survey,
    VerifyReport,
    survey_of,
)

T = TypeVar("T")
_HEX = re.compile(r"[0-9a-f]{1,32}")


def _blank(conn: Connection) -> bool:
    """A database with no ledger schema (yet): it holds no run."""
    return bool(conn.execute(text("SELECT to_regclass('runs') IS NULL")).scalar_one())


def _resolve(conn: Connection, prefix: str) -> str:
    if _blank(conn):
        raise RunNotFoundError(f"no run matches {prefix!r}: the store holds no run yet")
    if not _HEX.fullmatch(prefix):
        raise RunNotFoundError(f"{prefix!r} is not a run id or a prefix of one (lowercase hex)")
    found = conn.execute(
        text(
            "SELECT run_id FROM runs WHERE substr(run_id, 1, :n) = :prefix ORDER BY run_id LIMIT 3"
        ),
        {"n": len(prefix), "prefix": prefix},
    ).all()
    if not found:
        raise RunNotFoundError(f"no run matches {prefix!r}")
    if len(found) > 1:
        raise RunNotFoundError(f"{prefix!r} matches more than one run; give more characters")
    return str(found[0][0])


def _writer(conn: Connection, run_id: str) -> Writer | None:
    row = conn.execute(
        text(
            "SELECT host, boot_id, pid, process_started, name FROM run_writers WHERE run_id = :run"
        ),
        {"run": run_id},
    ).first()
    return None if row is None else Writer(row[0], row[1], row[2], row[3], row[4])


def _run_problem(conn: Connection, run_id: str) -> str | None:
    try:
        rows.check_run(conn, run_id)
    except EffectPersistenceError as e:
        return str(e)
    return None


# Runs with a claim but no row in `runs`: their effects are in effect_status all the same.
_ORPHANS = "SELECT DISTINCT run_id FROM claims WHERE run_id NOT IN (SELECT run_id FROM runs)"


def _problems(conn: Connection, run_ids: Iterable[str]) -> dict[str, str]:
    """Each of ``run_ids`` that does not validate, with why, in run id order."""
    return {
        run_id: problem
        for run_id in sorted(run_ids)
        if (problem := _run_problem(conn, run_id)) is not None
    }


_RUNS_SQL = """
, records AS (
    SELECT run_id, recorded_at FROM claims
    UNION ALL SELECT run_id, recorded_at FROM outcomes
    UNION ALL SELECT run_id, recorded_at FROM observations
    UNION ALL SELECT run_id, recorded_at FROM resolutions
),
times AS (
    SELECT run_id, min(recorded_at) AS first_at, max(recorded_at) AS last_at
      FROM records GROUP BY run_id
),
verdicts AS (
    SELECT run_id, count(*) AS claims, {counts} FROM effect_status GROUP BY run_id
)
SELECT r.run_id, t.first_at, t.last_at, coalesce(v.claims, 0), {columns}
  FROM runs AS r
  LEFT JOIN times AS t ON t.run_id = r.run_id
  LEFT JOIN verdicts AS v ON v.run_id = r.run_id
 ORDER BY coalesce(t.first_at, r.created_at), r.run_id
""".format(
    counts=", ".join(f"count(*) FILTER (WHERE verdict = '{v}') AS {v}" for v in VERDICTS),
    columns=", ".join(f"coalesce(v.{v}, 0)" for v in VERDICTS),
)


class Reader:
    """The forensic reads of the store at ``location`` (see ledger.storage.Reader)."""

    def __init__(self, location: str) -> None:
        self.location = location
        self.name = _engine.display(location)

    def _read(self, query: Callable[[Connection], T]) -> T:
        store = Store(self.location)
        try:
            with store.read(f"cannot read the store {self.name}") as conn:
                rows.check_readable(conn, self.name)
                return query(conn)
        finally:
            store.dispose()

    def runs(self) -> list[RunSummary]:
        """Every run, oldest first, with its writer, verdict counts and any problem."""

        def query(conn: Connection) -> list[RunSummary]:
            if _blank(conn):
                return []
            return [
                dataclasses.replace(s, problem=_run_problem(conn, s.run_id))
                for s in _summaries(conn)
            ]

        return self._read(query)

    def run(self, prefix: str) -> tuple[str, History, Writer | None]:
        """The matching run: its id, validated history and last writer."""

        def query(conn: Connection) -> tuple[str, History, Writer | None]:
            run_id = _resolve(conn, prefix)
            return run_id, rows.load_history(conn, run_id), _writer(conn, run_id)

        return self._read(query)

    def effects(self, prefix: str | None, *, unresolved: bool) -> EffectRows:
        """Effects across runs (or of one), oldest claim first; optionally unresolved only.

        Every run of the scope is validated, not only those with a row to show: a run
        whose forged row settled its last open effect is named all the same.
        """

        def query(conn: Connection) -> EffectRows:
            if _blank(conn):
                return EffectRows()
            where, params = [], {}
            if prefix is not None:
                scope = [_resolve(conn, prefix)]
                where.append("run_id = :run")
                params["run"] = scope[0]
            else:
                scope = [row[0] for row in conn.execute(text("SELECT run_id FROM runs"))]
                # Records of a run missing from `runs` are shown, and judged, too.
                scope += [row[0] for row in conn.execute(text(_ORPHANS))]
            problems = _problems(conn, scope)
            if unresolved and not problems:
                where.append("unresolved_impact = 1")  # else EffectRows.of picks the rows
            clause = f"WHERE {' AND '.join(where)}" if where else ""
            found = conn.execute(text(with_views(STATUS_QUERY.format(where=clause))), params)
            # Made with their run's problem: the rows of a large run are not copied again.
            rows = (EffectRow.from_view(row, problems.get(row[0])) for row in found)
            return EffectRows.of(rows, problems, unresolved=unresolved)

        return self._read(query)

    def writer(self, prefix: str) -> tuple[str, Writer | None]:
        """The matching run's id and last writer."""

        def query(conn: Connection) -> tuple[str, Writer | None]:
            run_id = _resolve(conn, prefix)
            return run_id, _writer(conn, run_id)

        return self._read(query)

    def unsettled(self) -> list[str]:
        """Runs holding a claim with no outcome at all (recovery's candidates)."""

        def query(conn: Connection) -> list[str]:
            if _blank(conn):
                return []
            found = conn.execute(
                text(
                    with_views(
                        "SELECT DISTINCT run_id FROM unsettled_claims WHERE running = 0"
                        " ORDER BY run_id"
                    )
                )
            )
            return [row[0] for row in found]

        return self._read(query)

    def head(self, prefix: str) -> Head:
        """The matching run's head, after checking its whole chain."""

        def query(conn: Connection) -> Head:
            run_id = _resolve(conn, prefix)
            history, digest = rows.load_run(conn, run_id)
            records = history.records()
            return Head(run_id, records[-1].seq if records else 0, digest)

        return self._read(query)

    def verify(
        self, progress: Callable[[int], None] | None, anchors: tuple[Head, ...]
    ) -> VerifyReport:
        """Check the schema's revision, every row and chain of every run, and anchors."""

        def query(conn: Connection) -> VerifyReport:
            if _blank(conn):
                gone = tuple(
                    f"run {a.run_id}: anchor at seq {a.seq}: the store holds no run"
                    for a in anchors
                )
                return VerifyReport(0, 0, gone)
            checked = _survey_runs(conn, set(), progress)[0]
            found = [p for a in anchors if (p := _check_anchor(conn, a)) is not None]
            return dataclasses.replace(checked, problems=checked.problems + tuple(found))

        return self._read(query)

    def run_count(self) -> int:
        """How many runs the store holds."""
        return self._read(
            lambda conn: (
                0
                if _blank(conn)
                else int(conn.execute(text("SELECT count(*) FROM runs")).scalar_one())
            )
        )

    @contextlib.contextmanager
    def recovering(self, run_id: str) -> Iterator[RecoveryHold]:
        """Take the run for recovery, or say who has it.

        On the session that holds the runs of this process's logs: a log of this process
        may load the run meanwhile, as on SQLite, where the holds are the process's.
        """
        store = _store.acquire(self.location)
        try:
            with liveness.recovering(store.holder, run_id) as found:
                yield found
        finally:
            _store.release(store)

    def held(self, run_ids: Iterable[str]) -> set[str]:
        """Those of ``run_ids`` whose key a session holds (ledger.postgresql.liveness.HELD)."""
        wanted = list(run_ids)

        def query(conn: Connection) -> set[str]:
            held = text(liveness.HELD)
            return {r for r in wanted if conn.execute(held, liveness.held_key(r)).scalar_one()}

        return self._read(query) if wanted else set()

    @contextlib.contextmanager
    def shell(self, args: Sequence[str]) -> Iterator[Shell]:
        """``psql`` on the store, every transaction read-only."""
        yield Shell([*self._psql(), *args])

    def query_command(self, query: str) -> list[str]:
        """The ``psql`` command line that prints ``query``'s rows."""
        return [*self._psql(), "-c", query]

    def survey(self, keep: Keep) -> Survey:
        """The store in one snapshot, each run read and validated once (ledger.storage.Reader)."""

        def query(conn: Connection) -> Survey:
            if _blank(conn):
                return Survey(VerifyReport(0, 0, ()), [], EffectRows(), {})
            return survey_of(
                _summaries(conn),
                keep,
                lambda where: _status_rows(conn, where),
                lambda wanted: _survey_runs(conn, wanted),
                lambda run_ids: _problems(conn, run_ids),
            )

        return self._read(query)

    def _psql(self) -> list[str]:
        program = shutil.which("psql")
        if program is None:
            raise ShellMissingError(
                "psql is not installed (Debian/Ubuntu: apt install postgresql-client); "
                f"any PostgreSQL client can read {self.name}"
            )
        url = _engine.parse(self.location).set(drivername="postgresql")
        # libpq reads PGOPTIONS: every transaction of the session is read-only.
        conninfo = url.render_as_string(hide_password=False)
        return [program, "--no-psqlrc", "--set=ON_ERROR_STOP=1", _readonly(conninfo)]


def _summaries(conn: Connection) -> list[RunSummary]:
    """Every run, oldest first, with its writer and verdict counts (its problem not asked)."""
    return [
        RunSummary(
            run_id=row[0],
            first_at=row[1],
            last_at=row[2],
            writer=_writer(conn, row[0]),
            claims=int(row[3]),
            verdicts={v: int(n) for v, n in zip(VERDICTS, row[4:], strict=True)},
        )
        for row in conn.execute(text(with_views(_RUNS_SQL))).all()
    ]


def _status_rows(conn: Connection, where: str) -> list[EffectRow]:
    """The ``effect_status`` rows ``where`` picks, oldest claim first."""
    found = conn.execute(text(with_views(STATUS_QUERY.format(where=where)))).all()
    return [EffectRow.from_view(row) for row in found]


def _survey_runs(
    conn: Connection, wanted: set[str], progress: Callable[[int], None] | None = None
) -> tuple[VerifyReport, dict[str, str], dict[str, History]]:
    """What ``verify`` checks, each run read once: the report, and each run's problem.

    And the histories of the runs of ``wanted`` that validate; the others are checked,
    not held. ``progress`` hears how many runs were checked so far.
    """
    found: list[str] = []
    revision = conn.execute(text("SELECT version_num FROM alembic_version")).scalar()
    if revision != head_revision():
        found.append(f"schema: revision {revision} where {head_revision()} is current")
    found.extend(f"schema: {p}" for p in _guard_problems(conn))
    run_ids = list(conn.execute(text("SELECT run_id FROM runs ORDER BY run_id")).scalars())
    orphans = conn.execute(
        text(
            "SELECT DISTINCT run_id FROM ("
            + " UNION ALL ".join(f"SELECT run_id FROM {t}" for t in RECORD_TABLES)
            + ") AS records WHERE run_id NOT IN (SELECT run_id FROM runs) ORDER BY run_id"
        )
    ).scalars()
    found.extend(f"run {run_id}: records without a row in runs" for run_id in orphans)
    records = 0
    problems: dict[str, str] = {}
    histories: dict[str, History] = {}
    for done, run_id in enumerate(run_ids, start=1):
        try:
            if run_id in wanted:
                history = rows.load_history(conn, run_id)
                histories[run_id] = history
                records += len(history.records())
            else:
                records += rows.check_run(conn, run_id)[1]  # the run is not kept
        except EffectPersistenceError as e:
            found.append(f"run {run_id}: {e}")
            problems[run_id] = str(e)
        if progress is not None:
            progress(done)
    return VerifyReport(len(run_ids), records, tuple(found)), problems, histories


def _guard_problems(conn: Connection) -> list[str]:
    """Guards of the library missing from the store, and triggers on its tables that are not."""
    found = {
        (name, table)
        for name, table in conn.execute(
            text(
                "SELECT t.tgname, c.relname FROM pg_trigger AS t"
                " JOIN pg_class AS c ON c.oid = t.tgrelid"
                " WHERE NOT t.tgisinternal AND c.relnamespace = current_schema()::regnamespace"
            )
        ).all()
    }
    wanted = set(TRIGGER_TABLE.items())
    problems = [f"trigger {name} on {table} is missing" for name, table in sorted(wanted - found)]
    problems += [
        f"trigger {name} on {table} is not the library's" for name, table in sorted(found - wanted)
    ]
    disabled = conn.execute(
        text(
            "SELECT t.tgname FROM pg_trigger AS t JOIN pg_class AS c ON c.oid = t.tgrelid"
            " WHERE NOT t.tgisinternal AND t.tgenabled = 'D'"
            " AND c.relnamespace = current_schema()::regnamespace ORDER BY 1"
        )
    ).scalars()
    problems += [f"trigger {name} is disabled" for name in disabled]
    return problems


def _readonly(conninfo: str) -> str:
    separator = "&" if "?" in conninfo else "?"
    # jit off: see ledger.postgresql.engine (the views' plans take seconds to compile).
    return f"{conninfo}{separator}options=-c%20default_transaction_read_only%3Don%20-c%20jit%3Doff"


def _check_anchor(conn: Connection, anchor: Head) -> str | None:
    if not _HEX.fullmatch(anchor.run_id):
        raise RunNotFoundError(f"{anchor.run_id!r} is not a run id or a prefix of one")
    matches = conn.execute(
        text("SELECT count(*) FROM runs WHERE substr(run_id, 1, :n) = :prefix"),
        {"n": len(anchor.run_id), "prefix": anchor.run_id},
    ).scalar_one()
    if matches == 0:
        return f"run {anchor.run_id}: anchor at seq {anchor.seq}: the run is gone"
    run_id = _resolve(conn, anchor.run_id)
    found = conn.execute(
        text(
            " UNION ALL ".join(
                f"SELECT hash FROM {t} WHERE run_id = :run AND seq = :seq" for t in RECORD_TABLES
            )
        ),
        {"run": run_id, "seq": anchor.seq},
    ).first()
    if found is None:
        return (
            f"run {run_id}: anchor at seq {anchor.seq}: the record is gone (the run was truncated)"
        )
    if found[0] != anchor.hash:
        return (
            f"run {run_id}: anchor at seq {anchor.seq}: the hash differs "
            "(records up to it were changed and the chain recomputed)"
        )
    return None
