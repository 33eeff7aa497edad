"""The forensic reads both backends share: runs, effects, heads, verify and the survey.

Each backend's ``Reader`` (ledger.storage.Reader) derives from :class:`Reader` and says
how it opens one read snapshot (:meth:`Reader._read`), whether a database holds a
store's schema yet, and what its schema check finds; the rest, written once here, is
the same SQL on both. No report is computed from the store's own views (they may have
been replaced): the library's view queries are put in front of every query that uses
them, and each run shown is validated, rows and hash chain, as ``EffectLog.load``
validates it.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping
from typing import TypeVar

from sqlalchemy import Connection, text

from ledger._owner import Writer
from ledger._sql import rows
from ledger._sql.guards import store_now
from ledger._sql.tables import RECORD_TABLES
from ledger._sql.views import STATUS_QUERY
from ledger.effects import (
    EffectClaim,
    EffectOutcome,
    History,
    Resolution,
)
from ledger.errors import EffectPersistenceError
from ledger.storage import (
    VERDICTS,
    ApprovalRuns,
    EffectRow,
    EffectRows,
    Head,
    Keep,
    RunNotFoundError,
    RunRecords,
    RunSummary,
    Survey,
    Take,
    VerifyReport,
    survey_of,
)

T = TypeVar("T")
K = TypeVar("K")
_HEX = re.compile(r"[0-9a-f]{1,32}")

# Runs with a claim but no row in `runs`: their effects are in effect_status all the same.
_ORPHANS = "SELECT DISTINCT run_id FROM claims WHERE run_id NOT IN (SELECT run_id FROM runs)"

_RUNS_SQL = """
, records AS (
    SELECT run_id, recorded_at FROM claims
    UNION ALL SELECT run_id, recorded_at FROM outcomes
    UNION ALL SELECT run_id, recorded_at FROM observations
    UNION ALL SELECT run_id, recorded_at FROM resolutions
    UNION ALL SELECT run_id, requested_at FROM approval_requests
    UNION ALL SELECT run_id, decided_at FROM approval_decisions
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
    counts=", ".join(f"sum(CASE WHEN verdict = '{v}' THEN 1 ELSE 0 END) AS {v}" for v in VERDICTS),
    columns=", ".join(f"coalesce(v.{v}, 0)" for v in VERDICTS),
)


class _Reread:
    """Reads of one run in the survey's snapshot (ledger.storage.RunRecords)."""

    def __init__(self, conn: Connection, run_id: str) -> None:
        self._conn = conn
        self._run_id = run_id

    def observed(self) -> set[tuple[str, str]]:
        return rows.observed_targets(self._conn, self._run_id)

    def claims(self, effect_ids: Collection[str]) -> list[EffectClaim]:
        return rows.reread_claims(self._conn, self._run_id, effect_ids)

    def overlapping(self, targets: Collection[tuple[str, str]]) -> set[str]:
        return rows.overlap_candidates(self._conn, self._run_id, targets)

    def outcomes(self, effect_ids: Collection[str]) -> list[EffectOutcome]:
        return rows.reread_outcomes(self._conn, self._run_id, effect_ids)

    def resolutions(self) -> Iterator[Resolution]:
        return rows.reread_resolutions(self._conn, self._run_id)

    def times(self) -> Iterator[tuple[int, str | None]]:
        return rows.reread_times(self._conn, self._run_id)


class Reader:
    """The reads of one store that do not depend on its backend (see ledger.storage.Reader).

    A backend gives :meth:`_read`, :meth:`_blank`, :meth:`_schema_findings` and
    :meth:`_with_views`, and the reads only it can make (the liveness of runs, its shell).
    """

    # ------------------------------------------------------------------ the backend's part

    def _read(self, query: Callable[[Connection], T]) -> T:
        """``query`` run on one read-only snapshot of the store."""
        raise NotImplementedError

    def _blank(self, conn: Connection) -> bool:
        """Whether the database holds no store schema yet (it then holds no run)."""
        raise NotImplementedError

    def _schema_findings(self, conn: Connection) -> list[str]:
        """What ``verify`` finds wrong with the database and its schema, one line each."""
        raise NotImplementedError

    def _with_views(self, sql: str) -> str:
        """``sql`` with the library's views, in the backend's spelling, in front of it."""
        raise NotImplementedError

    def _has_writers(self, conn: Connection) -> bool:  # noqa: ARG002 - a backend's may ask
        """Whether the store has the table of the runs' writers (every store at head has)."""
        return True

    # ------------------------------------------------------------------ ledger.storage.Reader

    def runs(self) -> list[RunSummary]:
        """Every run, oldest first, with its writer, verdict counts and any problem."""

        def query(conn: Connection) -> list[RunSummary]:
            if self._blank(conn):
                return []
            return [
                dataclasses.replace(s, problem=_run_problem(conn, s.run_id))
                for s in self._summaries(conn)
            ]

        return self._read(query)

    def run(self, prefix: str) -> tuple[str, History, Writer | None]:
        """The matching run: its id, validated history and last writer."""

        def query(conn: Connection) -> tuple[str, History, Writer | None]:
            run_id = self._resolve(conn, prefix)
            return run_id, rows.load_history(conn, run_id), self._writer(conn, run_id)

        return self._read(query)

    def effects(self, prefix: str | None, *, unresolved: bool) -> EffectRows:
        """Effects across runs (or of one), oldest claim first; optionally unresolved only.

        Every run of the scope is validated, not only those with a row to show: a run
        whose forged row settled its last open effect is named all the same.
        """

        def query(conn: Connection) -> EffectRows:
            if self._blank(conn):
                return EffectRows()
            where, params = [], {}
            if prefix is not None:
                scope = [self._resolve(conn, prefix)]
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
            found = conn.execute(text(self._with_views(STATUS_QUERY.format(where=clause))), params)
            # Made with their run's problem: the rows of a large run are not copied again.
            made = (EffectRow.from_view(row, problems.get(row[0])) for row in found)
            return EffectRows.of(made, problems, unresolved=unresolved)

        return self._read(query)

    def writer(self, prefix: str) -> tuple[str, Writer | None]:
        """The matching run's id and last writer."""

        def query(conn: Connection) -> tuple[str, Writer | None]:
            run_id = self._resolve(conn, prefix)
            return run_id, self._writer(conn, run_id)

        return self._read(query)

    def now(self) -> str:
        """The store's clock, in ``utc_now()``'s form: what approvals expire by."""
        return self._read(read_clock)

    def approvals(self, prefix: str | None) -> ApprovalRuns:
        """The runs (or the one run) holding approval requests, validated, and the clock."""

        def query(conn: Connection) -> ApprovalRuns:
            now = read_clock(conn)
            if prefix is not None:
                scope = [self._resolve(conn, prefix)]
            elif self._blank(conn):
                scope = []
            else:
                scope = list(
                    conn.execute(
                        text("SELECT DISTINCT run_id FROM approval_requests ORDER BY run_id")
                    ).scalars()
                )
            histories: dict[str, History] = {}
            problems: dict[str, str] = {}
            for run_id in scope:
                try:
                    histories[run_id] = rows.load_history(conn, run_id)
                except EffectPersistenceError as e:
                    problems[run_id] = str(e)
            return ApprovalRuns(now, histories, problems)

        return self._read(query)

    def unsettled(self) -> list[str]:
        """Runs holding a claim with no outcome at all (recovery's candidates)."""

        def query(conn: Connection) -> list[str]:
            if self._blank(conn):
                return []
            found = conn.execute(
                text(
                    self._with_views(
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
            run_id = self._resolve(conn, prefix)
            history, digest = rows.load_run(conn, run_id)
            records = history.records()
            return Head(run_id, records[-1].seq if records else 0, digest)

        return self._read(query)

    def verify(
        self, progress: Callable[[int], None] | None, anchors: tuple[Head, ...]
    ) -> VerifyReport:
        """Check the database, its schema, every row and chain of every run, and anchors."""

        def query(conn: Connection) -> VerifyReport:
            if self._blank(conn):
                gone = tuple(
                    f"run {a.run_id}: anchor at seq {a.seq}: the store holds no run"
                    for a in anchors
                )
                return VerifyReport(0, 0, gone)
            checked = self._check(conn, {}, progress)[0]
            found = [p for a in anchors if (p := self._check_anchor(conn, a)) is not None]
            return dataclasses.replace(checked, problems=checked.problems + tuple(found))

        return self._read(query)

    def run_count(self) -> int:
        """How many runs the store holds."""
        return self._read(
            lambda conn: (
                0
                if self._blank(conn)
                else int(conn.execute(text("SELECT count(*) FROM runs")).scalar_one())
            )
        )

    def survey(self, keep: Keep[K]) -> Survey[K]:
        """The store in one snapshot, each run read and validated once (ledger.storage.Reader)."""

        def query(conn: Connection) -> Survey[K]:
            if self._blank(conn):
                return Survey(VerifyReport(0, 0, ()), [], EffectRows(), {})
            return survey_of(
                self._summaries(conn),
                keep,
                lambda where: self._status_rows(conn, where),
                lambda wanted: self._check(conn, wanted),
                lambda run_ids: _problems(conn, run_ids),
            )

        return self._read(query)

    # ------------------------------------------------------------------ shared steps

    def _resolve(self, conn: Connection, prefix: str) -> str:
        """The one run whose id starts with ``prefix`` (a whole id or a unique prefix, as git)."""
        if self._blank(conn):
            raise RunNotFoundError(f"no run matches {prefix!r}: the store holds no run yet")
        if not _HEX.fullmatch(prefix):
            raise RunNotFoundError(f"{prefix!r} is not a run id or a prefix of one (lowercase hex)")
        found = conn.execute(
            text(
                "SELECT run_id FROM runs WHERE substr(run_id, 1, :n) = :prefix"
                " ORDER BY run_id LIMIT 3"
            ),
            {"n": len(prefix), "prefix": prefix},
        ).all()
        if not found:
            raise RunNotFoundError(f"no run matches {prefix!r}")
        if len(found) > 1:
            raise RunNotFoundError(f"{prefix!r} matches more than one run; give more characters")
        return str(found[0][0])

    def _writer(self, conn: Connection, run_id: str) -> Writer | None:
        if not self._has_writers(conn):
            return None
        row = conn.execute(
            text(
                "SELECT host, boot_id, pid, process_started, name FROM run_writers"
                " WHERE run_id = :run"
            ),
            {"run": run_id},
        ).first()
        return None if row is None else Writer(row[0], row[1], row[2], row[3], row[4])

    def _summaries(self, conn: Connection) -> list[RunSummary]:
        """Every run, oldest first, with its writer and verdict counts (its problem not asked)."""
        return [
            RunSummary(
                run_id=row[0],
                first_at=row[1],
                last_at=row[2],
                writer=self._writer(conn, row[0]),
                claims=int(row[3]),
                verdicts={v: int(n) for v, n in zip(VERDICTS, row[4:], strict=True)},
            )
            for row in conn.execute(text(self._with_views(_RUNS_SQL))).all()
        ]

    def _status_rows(self, conn: Connection, where: str) -> list[EffectRow]:
        """The ``effect_status`` rows ``where`` picks, oldest claim first."""
        found = conn.execute(text(self._with_views(STATUS_QUERY.format(where=where)))).all()
        return [EffectRow.from_view(row) for row in found]

    def _check(
        self,
        conn: Connection,
        wanted: Mapping[str, Callable[[RunRecords], Take[K]]],
        progress: Callable[[int], None] | None = None,
    ) -> tuple[VerifyReport, dict[str, str], dict[str, K]]:
        """What ``verify`` checks, each run read once: the report, and each run's problem.

        And, of each run of ``wanted`` that validates, what its :class:`Take` keeps as
        the run is validated; the others are checked, not held. ``progress`` hears how
        many runs were checked so far.
        """
        found = self._schema_findings(conn)
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
        kept: dict[str, K] = {}
        for done, run_id in enumerate(run_ids, start=1):
            # A run is never held whole: a taker keeps what it needs as it is checked.
            take = wanted[run_id](_Reread(conn, run_id)) if run_id in wanted else None
            try:
                records += rows.check_run(conn, run_id, None if take is None else take.see)[1]
            except EffectPersistenceError as e:
                found.append(f"run {run_id}: {e}")
                problems[run_id] = str(e)
            else:
                if take is not None:
                    kept[run_id] = take.done()
            if progress is not None:
                progress(done)
        return VerifyReport(len(run_ids), records, tuple(found)), problems, kept

    def _check_anchor(self, conn: Connection, anchor: Head) -> str | None:
        if not _HEX.fullmatch(anchor.run_id):
            raise RunNotFoundError(f"{anchor.run_id!r} is not a run id or a prefix of one")
        matches = conn.execute(
            text("SELECT count(*) FROM runs WHERE substr(run_id, 1, :n) = :prefix"),
            {"n": len(anchor.run_id), "prefix": anchor.run_id},
        ).scalar_one()
        if matches == 0:
            # The anchor was kept for this very case: a run removed whole is a finding.
            return f"run {anchor.run_id}: anchor at seq {anchor.seq}: the run is gone"
        run_id = self._resolve(conn, anchor.run_id)
        found = conn.execute(
            text(
                " UNION ALL ".join(
                    f"SELECT hash FROM {t} WHERE run_id = :run AND seq = :seq"
                    for t in RECORD_TABLES
                )
            ),
            {"run": run_id, "seq": anchor.seq},
        ).first()
        if found is None:
            return (
                f"run {run_id}: anchor at seq {anchor.seq}: "
                "the record is gone (the run was truncated)"
            )
        if found[0] != anchor.hash:
            return (
                f"run {run_id}: anchor at seq {anchor.seq}: the hash differs "
                "(records up to it were changed and the chain recomputed)"
            )
        return None


def read_clock(conn: Connection) -> str:
    """The store's clock, read on ``conn``, in ``utc_now()``'s form."""
    return str(conn.execute(text(f"SELECT {store_now(conn.dialect.name)}")).scalar_one())


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
