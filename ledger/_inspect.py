"""What the ``ledger`` command asks of a store: summaries, timelines, verdicts, checks.

Reads go through :func:`ledger._store.read`, which never writes or creates a file;
only recovery writes, through :class:`ledger.effect_log.EffectLog` like any worker.
No report is computed from the store's own views (they may have been replaced): the
library's view queries are put in front of every query that uses them, and each run
shown is validated, rows and hash chain, as ``EffectLog.load`` validates it.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

from sqlalchemy import Connection
from sqlalchemy.exc import SQLAlchemyError

from ledger import _liveness, _records, _schema_check
from ledger._index import RunIndex
from ledger._owner import Writer
from ledger._schema import with_views
from ledger._store import head_revision, known_revisions, read
from ledger.effect_log import EffectLog
from ledger.effects import Assessment, EffectClaim, EffectOutcome, History, assess
from ledger.errors import EffectPersistenceError

_HEX = re.compile(r"[0-9a-f]{1,32}")
VERDICTS = ("pending", "unverified", "contradicted", "verified", "failed")


class RunNotFoundError(ValueError):
    """No run, or more than one, matches the given run id or prefix."""


def _has_table(conn: Connection, name: str) -> bool:
    found = conn.exec_driver_sql(
        "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?", (name,)
    ).first()
    return found is not None


def _blank(conn: Connection) -> bool:
    """A database with no schema yet: its creator died before its first commit; empty."""
    return not _has_table(conn, "runs")


def resolve_run(conn: Connection, prefix: str) -> str:
    """The one run whose id starts with ``prefix`` (a whole id or a unique prefix, as git does)."""
    if _blank(conn):
        raise RunNotFoundError(f"no run matches {prefix!r}: the store holds no run yet")
    if not _HEX.fullmatch(prefix):
        raise RunNotFoundError(f"{prefix!r} is not a run id or a prefix of one (lowercase hex)")
    rows = conn.exec_driver_sql(
        "SELECT run_id FROM runs WHERE substr(run_id, 1, ?) = ? ORDER BY run_id LIMIT 3",
        (len(prefix), prefix),
    ).all()
    if not rows:
        raise RunNotFoundError(f"no run matches {prefix!r}")
    if len(rows) > 1:
        raise RunNotFoundError(f"{prefix!r} matches more than one run; give more characters")
    return str(rows[0][0])


def _writer(conn: Connection, run_id: str) -> Writer | None:
    if not _has_table(conn, "run_writers"):
        return None
    row = conn.exec_driver_sql(
        "SELECT host, boot_id, pid, process_started FROM run_writers WHERE run_id = ?", (run_id,)
    ).first()
    return None if row is None else Writer(row[0], row[1], row[2], row[3])


# --------------------------------------------------------------------------- runs


@dataclasses.dataclass(frozen=True, slots=True)
class RunSummary:
    """One run at a glance."""

    run_id: str
    first_at: str | None
    last_at: str | None
    writer: Writer | None
    claims: int
    verdicts: dict[str, int]
    problem: str | None = None  # why the run does not validate: its verdicts are not to be believed

    def to_dict(self) -> dict[str, Any]:
        """The documented JSON shape of ``ledger runs --json``."""
        return {
            "run_id": self.run_id,
            "first_at": self.first_at,
            "last_at": self.last_at,
            "host": None if self.writer is None else self.writer.host,
            "pid": None if self.writer is None else self.writer.pid,
            "claims": self.claims,
            **self.verdicts,
            "problem": self.problem,
        }


_RUNS_SQL = """
, records AS (
    SELECT run_id, recorded_at FROM claims
    UNION ALL SELECT run_id, recorded_at FROM outcomes
    UNION ALL SELECT run_id, recorded_at FROM observations
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
"""


def _run_problem(conn: Connection, run_id: str) -> str | None:
    """Why a run does not validate as ``EffectLog.load`` would, or None when it does.

    Verdicts are computed from rows in SQL; a row slipped in past the guards (a forged
    state, a wrong hash) would otherwise be shown as if it were history.
    """
    try:
        _records.load_run(conn, run_id)
    except EffectPersistenceError as e:
        return str(e)
    return None


def list_runs(directory: Path) -> list[RunSummary]:
    """Every run of the store, oldest first, with its writer and its verdict counts.

    Each run is validated (rows and hash chain); one that does not validate carries its
    ``problem``.
    """
    counts = ", ".join(f"sum(verdict = '{v}') AS {v}" for v in VERDICTS)
    columns = ", ".join(f"coalesce(v.{v}, 0)" for v in VERDICTS)

    def query(conn: Connection) -> list[RunSummary]:
        if _blank(conn):
            return []
        sql = with_views(_RUNS_SQL.format(counts=counts, columns=columns))
        return [
            RunSummary(
                run_id=row[0],
                first_at=row[1],
                last_at=row[2],
                writer=_writer(conn, row[0]),
                claims=row[3],
                verdicts=dict(zip(VERDICTS, row[4:], strict=True)),
                problem=_run_problem(conn, row[0]),
            )
            for row in conn.exec_driver_sql(sql).all()
        ]

    return read(directory, query)


@dataclasses.dataclass(frozen=True, slots=True)
class RunReport:
    """One run in full: its validated history and the assessment of every claim."""

    run_id: str
    writer: Writer | None
    history: History
    assessments: tuple[Assessment, ...]

    def to_dict(self) -> dict[str, Any]:
        """The documented JSON shape of ``ledger show --json``."""
        return {
            "run_id": self.run_id,
            "writer": None
            if self.writer is None
            else {"host": self.writer.host, "pid": self.writer.pid},
            "records": [{"type": r.kind, "record": r.to_dict()} for r in self.history.records()],
            "effects": [a.to_dict() for a in self.assessments],
        }


def show_run(directory: Path, prefix: str) -> RunReport:
    """The run matching ``prefix``, validated like ``EffectLog.load`` does."""

    def query(conn: Connection) -> tuple[str, History, Writer | None]:
        run_id = resolve_run(conn, prefix)
        return run_id, _records.load_history(conn, run_id), _writer(conn, run_id)

    run_id, history, writer = read(directory, query)
    return RunReport(run_id, writer, history, assess_all(history))


def assess_all(history: History) -> tuple[Assessment, ...]:
    """The assessment of every claim of ``history``, in claim order.

    Each claim is assessed on the part of the run its rules consult, as a loaded log
    does: assessing every claim against the whole history grows with the square of the
    run (30 s for a run of 10,000 records), this grows with the run.
    """
    index = RunIndex()
    for record in history.records():
        if isinstance(record, EffectClaim):
            index.add_claim(record)
        elif isinstance(record, EffectOutcome):
            index.add_outcome(record)
        else:
            index.add_observation(record)
    return tuple(assess(claim, index.relevant(claim)) for claim in history.claims)


@dataclasses.dataclass(frozen=True, slots=True)
class EffectRow:
    """One claimed effect and its verdict, as the ``effect_status`` view gives it."""

    run_id: str
    seq: int
    effect_id: str
    operation: str
    execution: str | None
    impact: str | None
    verdict: str
    unresolved_impact: bool
    claimed_at: str
    run_problem: str | None = None  # why its run does not validate: the verdict is not believed

    def to_dict(self) -> dict[str, Any]:
        """The documented JSON shape of ``ledger status --json``."""
        return dataclasses.asdict(self)


def effect_statuses(
    directory: Path, run: str | None = None, *, unresolved: bool = False
) -> list[EffectRow]:
    """Effects across runs (or of one run) with their verdicts; optionally only unresolved ones.

    Each run shown is validated (rows and hash chain); the effects of one that does not
    validate carry its ``run_problem``.
    """

    def query(conn: Connection) -> list[EffectRow]:
        if _blank(conn):
            return []
        where, params = [], []
        if run is not None:
            where.append("run_id = ?")
            params.append(resolve_run(conn, run))
        if unresolved:
            where.append("unresolved_impact = 1")
        clause = f"WHERE {' AND '.join(where)}" if where else ""
        rows = conn.exec_driver_sql(
            with_views(
                "SELECT run_id, seq, effect_id, operation, execution, impact, verdict,"
                f" unresolved_impact, claimed_at FROM effect_status {clause}"
                " ORDER BY claimed_at, run_id, seq"
            ),
            tuple(params),
        ).all()
        problems = {run_id: _run_problem(conn, run_id) for run_id in {row[0] for row in rows}}
        return [
            EffectRow(
                run_id=row[0],
                seq=row[1],
                effect_id=row[2],
                operation=row[3],
                execution=row[4],
                impact=row[5],
                verdict=row[6],
                unresolved_impact=bool(row[7]),
                claimed_at=row[8],
                run_problem=problems[row[0]],
            )
            for row in rows
        ]

    return read(directory, query)


# --------------------------------------------------------------------------- recovery


@dataclasses.dataclass(frozen=True, slots=True)
class Recovery:
    """What recovery did to one run, or why it left the run alone."""

    run_id: str
    outcomes: tuple[EffectOutcome, ...] = ()
    skipped: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """The documented JSON shape of one entry of ``ledger recover --json``."""
        return {
            "run_id": self.run_id,
            "outcomes": [o.to_dict() for o in self.outcomes],
            "skipped": self.skipped,
        }


def _recover(directory: Path, run_id: str, *, force: bool = False) -> Recovery:
    """Recover ``run_id`` unless a live process has it loaded, or another one recovers it.

    The run's lock is taken before the run is read: what is then read stays the run's
    state until recovery has written, and a second recoverer finds the run taken.
    """
    with _liveness.recovering(directory, run_id) as claim:
        if claim is _liveness.Claim.RECOVERING:
            return Recovery(run_id, skipped=claim.value)
        if claim is _liveness.Claim.IN_USE and not force:
            return Recovery(run_id, skipped=claim.value)
        with EffectLog.load(run_id, directory) as log:
            # --force: recovering under a process that holds the run, known dead or hung
            # by its user. The library offers this to nobody else.
            return Recovery(run_id, log._recover(force=force))  # noqa: SLF001


class RunInUseError(ValueError):
    """A live process has the run loaded: recovering it under that process would break it."""


def recover_run(directory: Path, prefix: str, *, force: bool = False) -> Recovery:
    """Mark the matching run's claims that have no outcome as interrupted.

    Refused while a live process has the run loaded (it holds the run's lock), unless
    ``force``: that process's next write then fails, since recovery took the seq it was
    about to use. A run another process is recovering at that moment is left alone.
    """

    def query(conn: Connection) -> tuple[str, Writer | None]:
        run_id = resolve_run(conn, prefix)
        return run_id, _writer(conn, run_id)

    run_id, writer = read(directory, query)
    recovery = _recover(directory, run_id, force=force)
    if recovery.skipped == _liveness.Claim.IN_USE.value:
        last = "" if writer is None else f" (its last writer: pid {writer.pid} on {writer.host})"
        raise RunInUseError(
            f"run {run_id} is loaded by a live process{last}; recovering it would break "
            "that process (use --force if you know it is dead or hung)"
        )
    return recovery


def recover_dead(directory: Path) -> list[Recovery]:
    """Recover every run with unsettled claims that no live process has loaded.

    A run is taken for dead when its lock can be taken (see ``ledger._liveness``),
    whatever process, pid namespace or host wrote it. A run a live process has loaded,
    or that another process is recovering, is left alone, and said so.
    """

    def query(conn: Connection) -> list[str]:
        if _blank(conn):
            return []
        candidates = conn.exec_driver_sql(
            with_views(
                "SELECT DISTINCT run_id FROM unsettled_claims WHERE running = 0 ORDER BY run_id"
            )
        )
        return [row[0] for row in candidates]

    return [_recover(directory, run_id) for run_id in read(directory, query)]


# --------------------------------------------------------------------------- verify


@dataclasses.dataclass(frozen=True, slots=True)
class VerifyReport:
    """The result of checking a whole store."""

    runs: int
    records: int
    problems: tuple[str, ...]

    @property
    def ok(self) -> bool:
        """Whether the store passed every check."""
        return not self.problems

    def to_dict(self) -> dict[str, Any]:
        """The documented JSON shape of ``ledger verify --json``."""
        return {
            "ok": self.ok,
            "runs": self.runs,
            "records": self.records,
            "problems": list(self.problems),
        }


@dataclasses.dataclass(frozen=True, slots=True)
class Head:
    """The last record of a run: what to keep elsewhere to detect a rewritten history."""

    run_id: str
    seq: int
    hash: str

    def __str__(self) -> str:
        return f"{self.run_id}:{self.seq}:{self.hash}"

    def to_dict(self) -> dict[str, Any]:
        """The documented JSON shape of ``ledger head --json``."""
        return {"run_id": self.run_id, "seq": self.seq, "hash": self.hash, "anchor": str(self)}

    @classmethod
    def parse(cls, text: str) -> Head:
        """Read an anchor ``RUN:SEQ:HASH`` (RUN may be a unique prefix)."""
        parts = text.split(":")
        if len(parts) != 3 or not parts[1].isdigit() or not re.fullmatch(r"[0-9a-f]{64}", parts[2]):
            raise RunNotFoundError(
                f"{text!r} is not an anchor RUN:SEQ:HASH (as ledger head prints)"
            )
        return cls(parts[0], int(parts[1]), parts[2])


def run_head(directory: Path, prefix: str) -> Head:
    """The matching run's head, after checking its whole chain."""

    def query(conn: Connection) -> Head:
        run_id = resolve_run(conn, prefix)
        history, digest = _records.load_run(conn, run_id)
        records = history.records()
        return Head(run_id, records[-1].seq if records else 0, digest)

    return read(directory, query)


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
    run_id = resolve_run(conn, anchor.run_id)
    found = conn.exec_driver_sql(
        " UNION ALL ".join(
            f"SELECT hash FROM {t} WHERE run_id = ? AND seq = ?"
            for t in ("claims", "outcomes", "observations")
        ),
        (run_id, anchor.seq) * 3,
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


def verify(
    directory: Path,
    progress: Callable[[int], None] | None = None,
    anchors: tuple[Head, ...] = (),
) -> VerifyReport:
    """Check the file, the schema, the guards, every row and chain of every run, and anchors.

    ``progress`` is called with the number of runs checked so far.
    """

    def query(conn: Connection) -> VerifyReport:
        if _blank(conn):
            gone = tuple(
                f"run {a.run_id}: anchor at seq {a.seq}: the store holds no run" for a in anchors
            )
            return VerifyReport(0, 0, gone)
        report = _verify(conn, progress)
        anchored = tuple(p for a in anchors if (p := _check_anchor(conn, a)) is not None)
        return dataclasses.replace(report, problems=report.problems + anchored)

    return read(directory, query)


def _verify(conn: Connection, progress: Callable[[int], None] | None) -> VerifyReport:
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
    if revision != head_revision():
        problems.append(f"schema: revision {revision} where {head_revision()} is current")
        if revision in known_revisions():
            # An older revision differs from this one by design (the next writer migrates
            # it); what no revision ever installs is reported all the same.
            schema = [p for p in schema if p.what == "foreign" and p.kind in ("trigger", "view")]
    problems.extend(f"schema: {p}" for p in schema)
    run_ids = [row[0] for row in conn.exec_driver_sql("SELECT run_id FROM runs ORDER BY run_id")]
    orphans = conn.exec_driver_sql(
        "SELECT DISTINCT run_id FROM (SELECT run_id FROM claims UNION ALL"
        " SELECT run_id FROM outcomes UNION ALL SELECT run_id FROM observations)"
        " WHERE run_id NOT IN (SELECT run_id FROM runs) ORDER BY run_id"
    ).all()
    problems.extend(f"run {row[0]}: records without a row in runs" for row in orphans)
    for done, run_id in enumerate(run_ids, start=1):
        try:
            history = _records.load_history(conn, run_id)
        except EffectPersistenceError as e:
            problems.append(f"run {run_id}: {e}")
        else:
            records += len(history.records())
        if progress is not None:
            progress(done)
    return VerifyReport(len(run_ids), records, tuple(problems))


def schema_problems(conn: Connection) -> list[_schema_check.Problem]:
    """Every table, index, trigger and view that is missing, changed or not the library's."""
    return _schema_check.compare(conn.exec_driver_sql(_schema_check.MASTER_SQL).all())


def run_count(directory: Path) -> int:
    """How many runs the store holds (for progress bars)."""
    return read(
        directory,
        lambda conn: (
            0 if _blank(conn) else conn.exec_driver_sql("SELECT count(*) FROM runs").scalar_one()
        ),
    )
