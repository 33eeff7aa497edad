"""Records to rows and back: the SQL of one run's reads, writes and recovery.

Loading validates every row through the record constructors and the history
rules: a row slipped in past the schema's guards (constraints switched off,
triggers dropped) makes loading fail closed instead of being believed.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from typing import Any

from sqlalchemy import Connection, and_, exists, func, insert, literal, select, union_all
from sqlalchemy.dialects.sqlite import insert as sqlite_insert

from ledger._errors import EffectPersistenceError
from ledger._owner import Writer
from ledger._schema import (
    claims,
    impact_scope,
    obligations,
    observations,
    outcomes,
    run_writers,
    runs,
)
from ledger.effects import (
    Coverage,
    EffectClaim,
    EffectOutcome,
    ExecutionOutcome,
    History,
    Impact,
    Observation,
    ObservationMechanism,
    OperationRef,
    Postcondition,
    Predicate,
    ResourceRef,
    check_history,
)

# --------------------------------------------------------------------------- writes


def run_exists(conn: Connection, run_id: str) -> bool:
    """Whether the store holds the run (it has written at least one record)."""
    return conn.execute(select(exists().where(runs.c.run_id == run_id))).scalar_one()


def insert_run(conn: Connection, run_id: str, created_at: str) -> None:
    """Record the run itself, in the transaction of its first record."""
    conn.execute(insert(runs), {"run_id": run_id, "created_at": created_at})


def record_writer(conn: Connection, run_id: str, writer: Writer, now: str) -> None:
    """Make ``writer`` the run's current writer (the one ``recover --dead`` checks)."""
    values = {
        "host": writer.host,
        "boot_id": writer.boot_id,
        "pid": writer.pid,
        "process_started": writer.started,
        "since": now,
    }
    statement = sqlite_insert(run_writers).values(run_id=run_id, **values)
    conn.execute(statement.on_conflict_do_update(index_elements=["run_id"], set_=values))


def insert_claim(conn: Connection, run_id: str, claim: EffectClaim) -> None:
    """Insert a claim with its impact scope and obligations."""
    conn.execute(
        insert(claims),
        {
            "run_id": run_id,
            "seq": claim.seq,
            "effect_id": claim.effect_id,
            "action_id": claim.action_id,
            "operation": claim.operation.name,
            "backend": claim.operation.backend,
            "args_sha256": claim.operation.args_sha256,
            "scope_count": len(claim.impact_scope),
            "obligation_count": len(claim.obligations),
            "recorded_at": claim.recorded_at,
        },
    )
    if claim.impact_scope:
        conn.execute(
            insert(impact_scope),
            [
                {
                    "run_id": run_id,
                    "effect_id": claim.effect_id,
                    "position": i,
                    "kind": ref.kind,
                    "locator": ref.locator,
                    "role": ref.role,
                    "revision": ref.revision,
                }
                for i, ref in enumerate(claim.impact_scope)
            ],
        )
    if claim.obligations:
        conn.execute(
            insert(obligations),
            [
                {
                    "run_id": run_id,
                    "effect_id": claim.effect_id,
                    "position": i,
                    "target_kind": p.target.kind,
                    "target_locator": p.target.locator,
                    "target_role": p.target.role,
                    "target_revision": p.target.revision,
                    "predicate": p.predicate.value,
                    "expected": p.expected,
                }
                for i, p in enumerate(claim.obligations)
            ],
        )


def insert_outcome(conn: Connection, run_id: str, outcome: EffectOutcome) -> None:
    """Insert an outcome."""
    conn.execute(
        insert(outcomes),
        {
            "run_id": run_id,
            "seq": outcome.seq,
            "effect_id": outcome.effect_id,
            "execution": outcome.execution.value,
            "impact": outcome.impact.value,
            "execution_id": outcome.execution_id,
            "replayed": int(outcome.replayed),
            "recorded_at": outcome.recorded_at,
        },
    )


def insert_observations(conn: Connection, run_id: str, items: Iterable[Observation]) -> None:
    """Insert observations (several at once for those made before the first claim)."""
    rows = [
        {
            "run_id": run_id,
            "seq": obs.seq,
            "observation_id": obs.observation_id,
            "resource_kind": obs.resource.kind,
            "resource_locator": obs.resource.locator,
            "resource_role": obs.resource.role,
            "resource_revision": obs.resource.revision,
            "mechanism": obs.mechanism.value,
            "coverage": obs.coverage.value,
            "source_action_id": obs.source_action_id,
            "resource_exists": None if obs.exists is None else int(obs.exists),
            "sha256": obs.sha256,
            "revision": obs.revision,
            "recorded_at": obs.recorded_at,
        }
        for obs in items
    ]
    if rows:
        conn.execute(insert(observations), rows)


def max_seq(conn: Connection, run_id: str) -> int:
    """The highest ``seq`` the run holds, 0 for none."""
    seqs = union_all(
        *(select(t.c.seq).where(t.c.run_id == run_id) for t in (claims, outcomes, observations))
    ).subquery()
    return int(conn.execute(select(func.coalesce(func.max(seqs.c.seq), 0))).scalar_one())


def recover(conn: Connection, run_id: str, after_seq: int, now: str) -> tuple[EffectOutcome, ...]:
    """Append INTERRUPTED / POSSIBLE to every claim of the run with no outcome at all.

    One ``INSERT … SELECT``: the seq of each new outcome continues the run in
    claim order. Returns the appended outcomes in seq order.
    """
    has_outcome = exists().where(
        and_(outcomes.c.run_id == claims.c.run_id, outcomes.c.effect_id == claims.c.effect_id)
    )
    unsettled = select(
        claims.c.run_id,
        (literal(after_seq) + func.row_number().over(order_by=claims.c.seq)).label("seq"),
        claims.c.effect_id,
        literal(ExecutionOutcome.INTERRUPTED.value).label("execution"),
        literal(Impact.POSSIBLE.value).label("impact"),
        literal(None).label("execution_id"),
        literal(1).label("replayed"),
        literal(now).label("recorded_at"),
    ).where(claims.c.run_id == run_id, ~has_outcome)
    conn.execute(
        insert(outcomes).from_select(
            [
                "run_id",
                "seq",
                "effect_id",
                "execution",
                "impact",
                "execution_id",
                "replayed",
                "recorded_at",
            ],
            unsettled,
        )
    )
    rows = conn.execute(
        select(outcomes)
        .where(outcomes.c.run_id == run_id, outcomes.c.seq > after_seq)
        .order_by(outcomes.c.seq)
    ).mappings()
    return tuple(_outcome(row) for row in rows)


# --------------------------------------------------------------------------- reads


class _InvalidRowError(Exception):
    """A row that does not make a valid record."""


def _bool(value: Any, column: str) -> bool | None:
    if value is None:
        return None
    if type(value) is int and value in (0, 1):
        return bool(value)
    raise _InvalidRowError(f"{column} holds {value!r}, which is not 0, 1 or NULL")


def _outcome(row: Any) -> EffectOutcome:
    replayed = _bool(row["replayed"], "replayed")
    if replayed is None:
        raise _InvalidRowError("replayed is NULL")
    return EffectOutcome(
        effect_id=row["effect_id"],
        seq=row["seq"],
        execution=ExecutionOutcome(row["execution"]),
        impact=Impact(row["impact"]),
        execution_id=row["execution_id"],
        replayed=replayed,
        recorded_at=row["recorded_at"],
    )


def _observation(row: Any) -> Observation:
    return Observation(
        observation_id=row["observation_id"],
        seq=row["seq"],
        resource=ResourceRef(
            row["resource_kind"],
            row["resource_locator"],
            row["resource_role"],
            row["resource_revision"],
        ),
        mechanism=ObservationMechanism(row["mechanism"]),
        coverage=Coverage(row["coverage"]),
        source_action_id=row["source_action_id"],
        exists=_bool(row["resource_exists"], "resource_exists"),
        sha256=row["sha256"],
        revision=row["revision"],
        recorded_at=row["recorded_at"],
    )


def _children(conn: Connection, table: Any, run_id: str, claimed: set[str]) -> dict[str, list[Any]]:
    grouped: dict[str, list[Any]] = defaultdict(list)
    rows = conn.execute(
        select(table).where(table.c.run_id == run_id).order_by(table.c.effect_id, table.c.position)
    ).mappings()
    for row in rows:
        effect_id = row["effect_id"]
        if effect_id not in claimed:
            raise _InvalidRowError(f"{table.name} row for unclaimed effect {effect_id!r}")
        if row["position"] != len(grouped[effect_id]):
            raise _InvalidRowError(
                f"{table.name} of {effect_id!r} has a gap at position {row['position']}"
            )
        grouped[effect_id].append(row)
    return grouped


def load_history(conn: Connection, run_id: str) -> History:
    """Read and validate every record of one run; fail closed on anything wrong."""
    where = "record"
    try:
        claim_rows = list(
            conn.execute(
                select(claims).where(claims.c.run_id == run_id).order_by(claims.c.seq)
            ).mappings()
        )
        claimed = {row["effect_id"] for row in claim_rows}
        scopes = _children(conn, impact_scope, run_id, claimed)
        duties = _children(conn, obligations, run_id, claimed)
        loaded_claims = []
        for row in claim_rows:
            where = f"claim at seq {row['seq']}"
            for table, rows, count in (
                ("impact_scope", scopes, "scope_count"),
                ("obligations", duties, "obligation_count"),
            ):
                if len(rows.get(row["effect_id"], ())) != row[count]:
                    raise _InvalidRowError(  # noqa: TRY301 - reported below with the others
                        f"{count} is {row[count]!r} but {table} holds "
                        f"{len(rows.get(row['effect_id'], ()))} rows for the claim"
                    )
            loaded_claims.append(
                EffectClaim(
                    effect_id=row["effect_id"],
                    seq=row["seq"],
                    action_id=row["action_id"],
                    operation=OperationRef(row["operation"], row["backend"], row["args_sha256"]),
                    impact_scope=tuple(
                        ResourceRef(s["kind"], s["locator"], s["role"], s["revision"])
                        for s in scopes.get(row["effect_id"], ())
                    ),
                    obligations=tuple(
                        Postcondition(
                            ResourceRef(
                                d["target_kind"],
                                d["target_locator"],
                                d["target_role"],
                                d["target_revision"],
                            ),
                            Predicate(d["predicate"]),
                            d["expected"],
                        )
                        for d in duties.get(row["effect_id"], ())
                    ),
                    recorded_at=row["recorded_at"],
                )
            )
        loaded_outcomes = []
        for row in conn.execute(
            select(outcomes).where(outcomes.c.run_id == run_id).order_by(outcomes.c.seq)
        ).mappings():
            where = f"outcome at seq {row['seq']}"
            loaded_outcomes.append(_outcome(row))
        loaded_observations = []
        for row in conn.execute(
            select(observations).where(observations.c.run_id == run_id).order_by(observations.c.seq)
        ).mappings():
            where = f"observation at seq {row['seq']}"
            loaded_observations.append(_observation(row))
        where = "history"
        history = History(tuple(loaded_claims), tuple(loaded_outcomes), tuple(loaded_observations))
        check_history(history)
        if history.records() and not run_exists(conn, run_id):
            raise _InvalidRowError("the run has records but no row in runs")  # noqa: TRY301 - reported below with the others
    except (ValueError, TypeError, _InvalidRowError) as e:
        raise EffectPersistenceError(
            f"run {run_id} does not validate ({where}): {e}; refusing to load it"
        ) from e
    return history
