"""The forensic reads of a SQLite store (ledger.storage.Reader), one snapshot each.

Reads go through :func:`ledger.sqlite.reads.read`, which never writes or creates a file
it can avoid, and reads another user's store from a private copy. No report is
computed from the store's own views (they may have been replaced): the library's view
queries are put in front of every query that uses them, and each run shown is
validated, rows and hash chain, as ``EffectLog.load`` validates it.
"""

from __future__ import annotations

import contextlib
import dataclasses
import re
from collections.abc import Callable, Collection, Iterable, Sequence
from pathlib import Path

from sqlalchemy import Connection
from sqlalchemy.exc import SQLAlchemyError

from ledger._owner import Writer
from ledger._sql.revisions import head_revision, known_revisions
from ledger._sql.tables import RECORD_TABLES
from ledger._sql.views import STATUS_QUERY, with_views
from ledger.effects import History
from ledger.errors import EffectPersistenceError
from ledger.sqlite import liveness, rows, schema_check, shell
from ledger.sqlite.reads import read
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
    Survey,
    VerifyReport,
    survey_of,
)

_HEX = re.compile(r"[0-9a-f]{1,32}")


def _has_table(conn: Connection, name: str) -> bool:
    found = conn.exec_driver_sql(
        "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?", (name,)
    ).first()
    return found is not None


def _blank(conn: Connection) -> bool:
    """A database with no schema yet: its creator died before its first commit; empty."""
    return not _has_table(conn, "runs")


def _resolve(conn: Connection, prefix: str) -> str:
    """The one run whose id starts with ``prefix`` (a whole id or a unique prefix, as git does)."""
    if _blank(conn):
        raise RunNotFoundError(f"no run matches {prefix!r}: the store holds no run yet")
    if not _HEX.fullmatch(prefix):
        raise RunNotFoundError(f"{prefix!r} is not a run id or a prefix of one (lowercase hex)")
    found = conn.exec_driver_sql(
        "SELECT run_id FROM runs WHERE substr(run_id, 1, ?) = ? ORDER BY run_id LIMIT 3",
        (len(prefix), prefix),
    ).all()
    if not found:
        raise RunNotFoundError(f"no run matches {prefix!r}")
    if len(found) > 1:
        raise RunNotFoundError(f"{prefix!r} matches more than one run; give more characters")
    return str(found[0][0])


def _writer(conn: Connection, run_id: str) -> Writer | None:
    if not _has_table(conn, "run_writers"):
        return None
    row = conn.exec_driver_sql(
        "SELECT host, boot_id, pid, process_started, name FROM run_writers WHERE run_id = ?",
        (run_id,),
    ).first()
    return None if row is None else Writer(row[0], row[1], row[2], row[3], row[4])


def _run_problem(conn: Connection, run_id: str) -> str | None:
    """Why a run does not validate as ``EffectLog.load`` would, or None when it does.

    Verdicts are computed from rows in SQL; a row slipped in past the guards (a forged
    state, a wrong hash) would otherwise be shown as if it were history.
    """
    try:
        rows.check_run(conn, run_id)
    except EffectPersistenceError as e:
        return str(e)
    return None


def _problems(conn: Connection, run_ids: Iterable[str]) -> dict[str, str]:
    """Each of ``run_ids`` that does not validate, with why, in run id order."""
    return {
        run_id: problem
        for run_id in sorted(run_ids)
        if (problem := _run_problem(conn, run_id)) is not None
    }


# Runs with a claim but no row in `runs`: their effects are in effect_status all the same.
_ORPHANS = "SELECT DISTINCT run_id FROM claims WHERE run_id NOT IN (SELECT run_id FROM runs)"

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
    counts=", ".join(f"sum(verdict = '{v}') AS {v}" for v in VERDICTS),
    columns=", ".join(f"coalesce(v.{v}, 0)" for v in VERDICTS),
)


class Reader:
    """The forensic reads of the store at ``directory`` (see ledger.storage.Reader)."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory

    def runs(self) -> list[RunSummary]:
        """Every run, oldest first, with its writer, verdict counts and any problem."""

        def query(conn: Connection) -> list[RunSummary]:
            if _blank(conn):
                return []
            return [
                dataclasses.replace(s, problem=_run_problem(conn, s.run_id))
                for s in _summaries(conn)
            ]

        return read(self.directory, query)

    def run(self, prefix: str) -> tuple[str, History, Writer | None]:
        """The matching run: its id, validated history and last writer."""

        def query(conn: Connection) -> tuple[str, History, Writer | None]:
            run_id = _resolve(conn, prefix)
            return run_id, rows.load_history(conn, run_id), _writer(conn, run_id)

        return read(self.directory, query)

    def effects(self, prefix: str | None, *, unresolved: bool) -> EffectRows:
        """Effects across runs (or of one), oldest claim first; optionally unresolved only.

        Every run of the scope is validated, not only those with a row to show: a run
        whose forged row settled its last open effect is named all the same.
        """

        def query(conn: Connection) -> EffectRows:
            if _blank(conn):
                return EffectRows()
            where, params = [], []
            if prefix is not None:
                scope = [_resolve(conn, prefix)]
                where.append("run_id = ?")
                params.append(scope[0])
            else:
                scope = [row[0] for row in conn.exec_driver_sql("SELECT run_id FROM runs")]
                # Records of a run missing from `runs` are shown, and judged, too.
                scope += [row[0] for row in conn.exec_driver_sql(_ORPHANS)]
            problems = _problems(conn, scope)
            if unresolved and not problems:
                where.append("unresolved_impact = 1")  # else EffectRows.of picks the rows
            clause = f"WHERE {' AND '.join(where)}" if where else ""
            found = conn.exec_driver_sql(
                with_views(STATUS_QUERY.format(where=clause)), tuple(params)
            )
            # Made with their run's problem: the rows of a large run are not copied again.
            rows = (EffectRow.from_view(row, problems.get(row[0])) for row in found)
            return EffectRows.of(rows, problems, unresolved=unresolved)

        return read(self.directory, query)

    def writer(self, prefix: str) -> tuple[str, Writer | None]:
        """The matching run's id and last writer."""

        def query(conn: Connection) -> tuple[str, Writer | None]:
            run_id = _resolve(conn, prefix)
            return run_id, _writer(conn, run_id)

        return read(self.directory, query)

    def unsettled(self) -> list[str]:
        """Runs holding a claim with no outcome at all (recovery's candidates)."""

        def query(conn: Connection) -> list[str]:
            if _blank(conn):
                return []
            candidates = conn.exec_driver_sql(
                with_views(
                    "SELECT DISTINCT run_id FROM unsettled_claims WHERE running = 0 ORDER BY run_id"
                )
            )
            return [row[0] for row in candidates]

        return read(self.directory, query)

    def head(self, prefix: str) -> Head:
        """The matching run's head, after checking its whole chain."""

        def query(conn: Connection) -> Head:
            run_id = _resolve(conn, prefix)
            history, digest = rows.load_run(conn, run_id)
            records = history.records()
            return Head(run_id, records[-1].seq if records else 0, digest)

        return read(self.directory, query)

    def verify(
        self, progress: Callable[[int], None] | None, anchors: tuple[Head, ...]
    ) -> VerifyReport:
        """Check the files, the schema, every row and chain of every run, and anchors."""

        def query(conn: Connection) -> VerifyReport:
            if _blank(conn):
                gone = tuple(
                    f"run {a.run_id}: anchor at seq {a.seq}: the store holds no run"
                    for a in anchors
                )
                return VerifyReport(0, 0, gone)
            report = _verify(conn, progress)
            anchored = tuple(p for a in anchors if (p := _check_anchor(conn, a)) is not None)
            return dataclasses.replace(report, problems=report.problems + anchored)

        return read(self.directory, query)

    def run_count(self) -> int:
        """How many runs the store holds."""
        return read(
            self.directory,
            lambda conn: (
                0
                if _blank(conn)
                else conn.exec_driver_sql("SELECT count(*) FROM runs").scalar_one()
            ),
        )

    def held(self, run_ids: Iterable[str]) -> set[str]:
        """Those of ``run_ids`` a live process holds (ledger.sqlite.liveness.held)."""
        return {run_id for run_id in run_ids if liveness.held(self.directory, run_id)}

    def recovering(self, run_id: str) -> contextlib.AbstractContextManager[RecoveryHold]:
        """Take the run for recovery (ledger.sqlite.liveness), or say who has it."""
        return liveness.recovering(self.directory, run_id)

    def shell(self, args: Sequence[str]) -> contextlib.AbstractContextManager[Shell]:
        """The sqlite3 shell on the store (ledger.sqlite.shell)."""
        return shell.session(self.directory, args)

    def query_command(self, query: str) -> list[str]:
        """The sqlite3 command line that prints ``query``'s rows as a box."""
        return shell.query_command(self.directory, query)

    def survey(self, keep: Keep) -> Survey:
        """The store in one snapshot, each run read and validated once (ledger.storage.Reader)."""

        def query(conn: Connection) -> Survey:
            if _blank(conn):
                return Survey(VerifyReport(0, 0, ()), [], EffectRows(), {})

            def check(wanted: set[str]) -> tuple[VerifyReport, dict[str, str], dict[str, History]]:
                histories: dict[str, History] = {}
                problems: dict[str, str] = {}

                def loaded(run_id: str, history: History | EffectPersistenceError) -> None:
                    if isinstance(history, EffectPersistenceError):
                        problems[run_id] = str(history)
                    else:
                        histories[run_id] = history

                return _verify(conn, None, loaded, wanted), problems, histories

            return survey_of(
                _summaries(conn),
                keep,
                lambda where: _status_rows(conn, where),
                check,
                lambda run_ids: _problems(conn, run_ids),
            )

        return read(self.directory, query)


def _summaries(conn: Connection) -> list[RunSummary]:
    """Every run, oldest first, with its writer and verdict counts (its problem not asked)."""
    return [
        RunSummary(
            run_id=row[0],
            first_at=row[1],
            last_at=row[2],
            writer=_writer(conn, row[0]),
            claims=row[3],
            verdicts=dict(zip(VERDICTS, row[4:], strict=True)),
        )
        for row in conn.exec_driver_sql(with_views(_RUNS_SQL)).all()
    ]


def _status_rows(conn: Connection, where: str) -> list[EffectRow]:
    """The ``effect_status`` rows ``where`` picks, oldest claim first."""
    found = conn.exec_driver_sql(with_views(STATUS_QUERY.format(where=where))).all()
    return [EffectRow.from_view(row) for row in found]


def _check_anchor(conn: Connection, anchor: Head) -> str | None:
    if not _HEX.fullmatch(anchor.run_id):
        raise RunNotFoundError(f"{anchor.run_id!r} is not a run id or a prefix of one")
    matches = conn.exec_driver_sql(
        "SELECT count(*) FROM runs WHERE substr(run_id, 1, ?) = ?",
        (len(anchor.run_id), anchor.run_id),
    ).scalar_one()
    if matches == 0:
        # The anchor was kept for this very case: a run removed whole is a finding.
        return f"run {anchor.run_id}: anchor at seq {anchor.seq}: the run is gone"
    run_id = _resolve(conn, anchor.run_id)
    found = conn.exec_driver_sql(
        " UNION ALL ".join(
            f"SELECT hash FROM {t} WHERE run_id = ? AND seq = ?" for t in RECORD_TABLES
        ),
        (run_id, anchor.seq) * len(RECORD_TABLES),
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


def _verify(
    conn: Connection,
    progress: Callable[[int], None] | None,
    loaded: Callable[[str, History | EffectPersistenceError], None] | None = None,
    keep: Collection[str] = (),
) -> VerifyReport:
    """The store's check, each run validated once.

    ``loaded`` hears of each run that does not validate, and gets the validated history
    of each run in ``keep``; the others are checked, not held.
    """
    problems: list[str] = []
    records = 0
    integrity = [row[0] for row in conn.exec_driver_sql("PRAGMA integrity_check")]
    if integrity != ["ok"]:
        problems.extend(f"integrity: {line}" for line in integrity)
    try:
        revision = conn.exec_driver_sql("SELECT version_num FROM alembic_version").scalar()
    except SQLAlchemyError:
        revision = None
    schema = schema_problems(conn)
    head = head_revision()
    if revision != head:
        behind = [p for p in schema if p.kind == "table" and p.what != "foreign"]
        if revision in known_revisions() and not behind:
            # The tables are head's already: the version row was set back by hand, and
            # the next writer's migration would fail on objects that exist.
            problems.append(
                f"schema: revision {revision} recorded, but its tables are already revision "
                f"{head}'s (set back by hand?): record it with "
                f"UPDATE alembic_version SET version_num = '{head}'"
            )
        else:
            problems.append(f"schema: revision {revision} where {head} is current")
            if revision in known_revisions():
                # An older revision differs from this one by design (the next writer
                # migrates it); what no revision ever installs is reported all the same.
                schema = [
                    p for p in schema if p.what == "foreign" and p.kind in ("trigger", "view")
                ]
    problems.extend(f"schema: {p}" for p in schema)
    run_ids = [row[0] for row in conn.exec_driver_sql("SELECT run_id FROM runs ORDER BY run_id")]
    orphans = conn.exec_driver_sql(
        "SELECT DISTINCT run_id FROM ("
        + " UNION ALL ".join(f"SELECT run_id FROM {t}" for t in RECORD_TABLES)
        + ")"
        " WHERE run_id NOT IN (SELECT run_id FROM runs) ORDER BY run_id"
    ).all()
    problems.extend(f"run {row[0]}: records without a row in runs" for row in orphans)
    for done, run_id in enumerate(run_ids, start=1):
        try:
            if run_id in keep:
                history = rows.load_history(conn, run_id)
                held = len(history.records())
            else:
                _, held = rows.check_run(conn, run_id)  # the run is not kept
        except EffectPersistenceError as e:
            problems.append(f"run {run_id}: {e}")
            if loaded is not None:
                loaded(run_id, e)
        else:
            records += held
            if loaded is not None and run_id in keep:  # a survey: read once for all it shows
                loaded(run_id, history)
        if progress is not None:
            progress(done)
    return VerifyReport(len(run_ids), records, tuple(problems))


def schema_problems(conn: Connection) -> list[schema_check.Problem]:
    """Every table, index, trigger and view that is missing, changed or not the library's."""
    return schema_check.compare(conn.exec_driver_sql(schema_check.MASTER_SQL).all())
