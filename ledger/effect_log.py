"""The durable effect log of one run.

An :class:`EffectLog` is what an agent worker holds for one run::

    log = EffectLog(new_run_id())
    claim = log.claim(effect_id="e1", action_id="a1", operation=op, impact_scope=scope,
                      obligations=(postcondition,))   # durable (fsynced) when it returns
    ...call the tool...
    log.outcome(effect_id="e1", execution=fx.ExecutionOutcome.REPORTED_SUCCESS,
                impact=fx.Impact.CERTAIN)
    log.observe(observation_id="o1", resource=ref, mechanism=..., coverage=...,
                source_action_id="a2", exists=True, sha256=digest)
    log.assess("e1").verdict

After a crash, ``EffectLog.load(run_id)`` reads the run back (validating every
row) and :meth:`EffectLog.recover_interrupted` marks every claim that never got
an outcome as INTERRUPTED with POSSIBLE impact.

Errors: ``ValueError`` / ``TypeError`` for the caller's mistakes, raised before
anything is written; :class:`EffectPersistenceError` for storage trouble.
"""

from __future__ import annotations

import logging
import os
import re
import secrets
import threading
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Self

from ledger import _paths, _records
from ledger._chain import GENESIS
from ledger._errors import EffectPersistenceError
from ledger._owner import Writer
from ledger._paths import effects_dir
from ledger._store import Store, acquire, release
from ledger.effects import (
    Assessment,
    Coverage,
    EffectClaim,
    EffectOutcome,
    ExecutionOutcome,
    History,
    Impact,
    InvalidTypeError,
    Observation,
    ObservationMechanism,
    OperationRef,
    Postcondition,
    ResourceRef,
    assess,
    check_identifier,
    utc_now,
)

__all__ = [
    "ClaimRequest",
    "EffectLog",
    "EffectPersistenceError",
    "OutcomeRequest",
    "effects_dir",
    "new_run_id",
]

log = logging.getLogger("ledger")

_RUN_ID = re.compile(r"[0-9a-f]{32}")


def new_run_id() -> str:
    """Return a new run id: 32 lowercase hex characters from the OS CSPRNG."""
    return secrets.token_hex(16)


def _check_run_id(run_id: object) -> str:
    if not isinstance(run_id, str):
        raise InvalidTypeError(f"run_id must be a str, not {type(run_id).__name__}")
    if not _RUN_ID.fullmatch(run_id):
        raise ValueError(
            f"run_id must be 32 lowercase hex characters (use new_run_id()), got {run_id!r:.80}"
        )
    return run_id


def _directory(directory: str | os.PathLike[str] | None) -> Path:
    if directory is None:
        return effects_dir()
    if not isinstance(directory, (str, os.PathLike)):
        raise InvalidTypeError(f"directory must be a path, not {type(directory).__name__}")
    text = os.fspath(directory)
    if not text or "\x00" in text:
        raise ValueError("directory must be a non-empty path without NUL")
    return Path(text).expanduser().absolute()


def _check_resource(value: object, field: str) -> ResourceRef:
    if not isinstance(value, ResourceRef):
        raise InvalidTypeError(
            f"{field} must be a ResourceRef (see effects.resource_ref), not {type(value).__name__}"
        )
    return value


@dataclass(frozen=True, kw_only=True, slots=True)
class ClaimRequest:
    """One claim for :meth:`EffectLog.claim_many`: the keywords of :meth:`EffectLog.claim`."""

    effect_id: str
    action_id: str
    operation: OperationRef
    impact_scope: Iterable[ResourceRef]
    obligations: Iterable[Postcondition] = ()


@dataclass(frozen=True, kw_only=True, slots=True)
class OutcomeRequest:
    """One outcome for :meth:`EffectLog.outcome_many`: the keywords of :meth:`EffectLog.outcome`."""

    effect_id: str
    execution: ExecutionOutcome
    impact: Impact
    execution_id: str | None = None


class EffectLog:
    """The durable log of one run: claims, outcomes and observations, in ``seq`` order.

    Thread-safe: threads may share one log. Many logs, in threads or processes,
    may write different runs to one store at once.
    """

    def __init__(self, run_id: str, directory: str | os.PathLike[str] | None = None) -> None:
        """Start a new run in the store at ``directory`` (default :func:`effects_dir`).

        Writes nothing: the store is created by the first claim. If the store
        already holds rows of ``run_id``, that first write raises
        :class:`EffectPersistenceError`; use :meth:`load` to continue a run.
        """
        self._run_id = _check_run_id(run_id)
        self._directory = _directory(directory)
        # Agent tools must never reach a store a log points at, even before it exists.
        _paths.remember_store(self._directory)
        self._store: Store | None = None
        self._lock = threading.RLock()
        self._claims: list[EffectClaim] = []
        self._claimed: dict[str, EffectClaim] = {}
        self._settled: set[str] = set()
        self._outcomes: list[EffectOutcome] = []
        self._observations: list[Observation] = []
        self._observation_ids: set[str] = set()
        self._unwritten: list[Observation] = []  # made before the run's first write
        self._next_seq = 1
        self._head = GENESIS  # the hash of the run's last durable record
        self._started = False  # whether the run's row is in the store
        self._continuing = False  # loaded: the run may already exist
        self._writer_recorded = False  # this process is recorded as the run's writer
        self._degraded = False
        self._closed = False

    # ------------------------------------------------------------------ properties

    @property
    def run_id(self) -> str:
        """The run's id."""
        return self._run_id

    @property
    def path(self) -> Path:
        """The store's database file (it may not exist yet)."""
        return self._directory / _paths.DB_NAME

    @property
    def directory(self) -> Path:
        """The store directory."""
        return self._directory

    @property
    def degraded(self) -> bool:
        """True once an outcome or observation failed to persist; the log then writes nothing."""
        return self._degraded

    # ------------------------------------------------------------------ lifecycle

    @classmethod
    def load(cls, run_id: str, directory: str | os.PathLike[str] | None = None) -> Self:
        """Reopen a run after a restart, from its durable rows only.

        Every row is validated; one that does not (a forged state, an impossible
        sequence, a broken link) raises :class:`EffectPersistenceError`, as does a
        corrupt or refused database file. A store or run that does not exist
        loads as empty and creates nothing.
        """
        self = cls(run_id, directory)
        self._continuing = True
        store = acquire(self._directory)
        try:
            if store.open_existing():
                with store.read(f"cannot load run {run_id}") as conn:
                    history, self._head = _records.load_run(conn, run_id)
                self._adopt(history)
        except BaseException:
            release(store)
            raise
        self._store = store
        return self

    def _adopt(self, history: History) -> None:
        self._claims = list(history.claims)
        self._claimed = {c.effect_id: c for c in history.claims}
        self._outcomes = list(history.outcomes)
        self._settled = {o.effect_id for o in history.outcomes if o.terminal}
        self._observations = list(history.observations)
        self._observation_ids = {o.observation_id for o in history.observations}
        records = history.records()
        self._next_seq = records[-1].seq + 1 if records else 1
        self._started = bool(records)

    def close(self) -> None:
        """Release the store; the log accepts no more records."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            if self._store is not None:
                release(self._store)
                self._store = None
            if self._unwritten:
                log.warning(
                    "run %s closed with %d observation(s) never written: the run made no claim",
                    self._run_id,
                    len(self._unwritten),
                )

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self._closed else "degraded" if self._degraded else "open"
        return f"<EffectLog run_id={self._run_id} path={self.path} {state}>"

    # ------------------------------------------------------------------ internals

    def _check_open(self) -> None:
        if self._closed:
            raise ValueError("the log is closed")

    def _store_for_write(self) -> Store:
        if self._store is None:
            self._store = acquire(self._directory)
        return self._store

    def _write(
        self, action: str, records: Iterable[EffectClaim | EffectOutcome | Observation]
    ) -> None:
        """Write records (and the run row, and unwritten observations) in one transaction."""
        store = self._store_for_write()
        with store.write(f"cannot record {action} in run {self._run_id}") as conn:
            if not self._started:
                if _records.run_exists(conn, self._run_id):
                    if not self._continuing:
                        raise EffectPersistenceError(
                            f"run {self._run_id} already exists in {self.path}; "
                            "use EffectLog.load to continue it"
                        )
                else:
                    _records.insert_run(conn, self._run_id, utc_now())
            if not self._writer_recorded:
                _records.record_writer(conn, self._run_id, Writer.current(), utc_now())
            pending = [*self._unwritten] if not self._started else []
            head = _records.insert_records(conn, self._run_id, [*pending, *records], self._head)
        self._head = head
        self._started = True
        self._writer_recorded = True
        self._unwritten.clear()

    def _degrade(self, what: str, error: EffectPersistenceError) -> None:
        self._degraded = True
        log.error(
            "run %s is degraded: %s could not be persisted (%s); "
            "it is kept in memory only and nothing more will be written",
            self._run_id,
            what,
            error,
        )

    # ------------------------------------------------------------------ records

    def claim(
        self,
        *,
        effect_id: str,
        action_id: str,
        operation: OperationRef,
        impact_scope: Iterable[ResourceRef],
        obligations: Iterable[Postcondition] = (),
    ) -> EffectClaim:
        """Durably claim an effect before invoking the tool that makes it.

        Returns only after the claim's transaction is committed and fsynced. If it
        cannot be persisted, raises :class:`EffectPersistenceError` and the claim
        exists nowhere, not even in :meth:`history`. A duplicate ``effect_id`` in
        the run is a ``ValueError``.
        """
        request = ClaimRequest(
            effect_id=effect_id,
            action_id=action_id,
            operation=operation,
            impact_scope=impact_scope,
            obligations=obligations,
        )
        return self._claim_all((request,), f"claim {effect_id!r}")[0]

    def claim_many(self, requests: Iterable[ClaimRequest]) -> tuple[EffectClaim, ...]:
        """Claim several effects in one transaction and one fsync: all of them, or none.

        For an agent's parallel tool calls. Every request is checked before anything
        is written (a ``ValueError`` or ``TypeError`` names the first bad one, and
        nothing is claimed); the claims take consecutive ``seq`` in request order.
        If they cannot be persisted, raises :class:`EffectPersistenceError` and none
        of them exists. An empty ``requests`` writes nothing and returns ``()``.
        """
        batch = tuple(requests)
        for request in batch:
            if not isinstance(request, ClaimRequest):
                raise InvalidTypeError(
                    f"claim_many takes ClaimRequest items, not {type(request).__name__}"
                )
        if not batch:
            return ()
        return self._claim_all(batch, f"{len(batch)} claims")

    def _claim_all(self, batch: tuple[ClaimRequest, ...], action: str) -> tuple[EffectClaim, ...]:
        with self._lock:
            self._check_open()
            records: list[EffectClaim] = []
            batch_ids: set[str] = set()
            now = utc_now()
            for request in batch:
                effect_id = request.effect_id
                check_identifier(effect_id, "effect_id")
                check_identifier(request.action_id, "action_id")
                if not isinstance(request.operation, OperationRef):
                    raise InvalidTypeError(
                        f"operation must be an OperationRef, not {type(request.operation).__name__}"
                    )
                if effect_id in self._claimed or effect_id in batch_ids:
                    raise ValueError(
                        f"effect {effect_id!r} is already claimed in run {self._run_id}"
                    )
                batch_ids.add(effect_id)
                records.append(
                    EffectClaim(
                        effect_id=effect_id,
                        seq=self._next_seq + len(records),
                        action_id=request.action_id,
                        operation=request.operation,
                        impact_scope=request.impact_scope,  # type: ignore[arg-type]  # validated, made a tuple
                        obligations=request.obligations,  # type: ignore[arg-type]  # same
                        recorded_at=now,
                    )
                )
            if self._degraded:
                raise EffectPersistenceError(
                    f"run {self._run_id} is degraded: an earlier record was not persisted, "
                    "so no new effect may start"
                )
            self._write(action, records)
            for record in records:
                self._claims.append(record)
                self._claimed[record.effect_id] = record
            self._next_seq += len(records)
            return tuple(records)

    def outcome(
        self,
        *,
        effect_id: str,
        execution: ExecutionOutcome,
        impact: Impact,
        execution_id: str | None = None,
    ) -> EffectOutcome:
        """Record how a claimed effect's call ended (or that it is running).

        Needs a claimed ``effect_id``; nothing follows a terminal outcome;
        INTERRUPTED needs impact POSSIBLE. If the outcome cannot be persisted the
        log becomes :attr:`degraded`, keeps it in memory, and does not raise.
        """
        request = OutcomeRequest(
            effect_id=effect_id, execution=execution, impact=impact, execution_id=execution_id
        )
        return self._outcome_all((request,), f"outcome of {effect_id!r}")[0]

    def outcome_many(self, requests: Iterable[OutcomeRequest]) -> tuple[EffectOutcome, ...]:
        """Record several outcomes in one transaction and one fsync.

        Each request is checked as :meth:`outcome` checks it, in order (a RUNNING
        outcome may be followed by a terminal one in the same batch), before anything
        is written. If they cannot be persisted the log becomes :attr:`degraded` and
        keeps them in memory, as :meth:`outcome` does.
        """
        batch = tuple(requests)
        for request in batch:
            if not isinstance(request, OutcomeRequest):
                raise InvalidTypeError(
                    f"outcome_many takes OutcomeRequest items, not {type(request).__name__}"
                )
        if not batch:
            return ()
        return self._outcome_all(batch, f"{len(batch)} outcomes")

    def _outcome_all(
        self, batch: tuple[OutcomeRequest, ...], action: str
    ) -> tuple[EffectOutcome, ...]:
        with self._lock:
            self._check_open()
            records: list[EffectOutcome] = []
            settled: set[str] = set()
            now = utc_now()
            for request in batch:
                effect_id = request.effect_id
                check_identifier(effect_id, "effect_id")
                if not isinstance(request.execution, ExecutionOutcome):
                    raise InvalidTypeError(
                        "execution must be an ExecutionOutcome, "
                        f"not {type(request.execution).__name__}"
                    )
                if not isinstance(request.impact, Impact):
                    raise InvalidTypeError(
                        f"impact must be an Impact, not {type(request.impact).__name__}"
                    )
                if effect_id not in self._claimed:
                    raise ValueError(f"effect {effect_id!r} has no claim in run {self._run_id}")
                if effect_id in self._settled or effect_id in settled:
                    raise ValueError(f"effect {effect_id!r} already has a terminal outcome")
                record = EffectOutcome(
                    effect_id=effect_id,
                    seq=self._next_seq + len(records),
                    execution=request.execution,
                    impact=request.impact,
                    execution_id=request.execution_id,
                    replayed=False,
                    recorded_at=now,
                )
                if record.terminal:
                    settled.add(effect_id)
                records.append(record)
            self._persist_or_degrade(action, records)
            self._outcomes.extend(records)
            self._settled.update(settled)
            self._next_seq += len(records)
            return tuple(records)

    def observe(
        self,
        *,
        observation_id: str,
        resource: ResourceRef,
        mechanism: ObservationMechanism,
        coverage: Coverage,
        source_action_id: str,
        exists: bool | None = None,
        sha256: str | None = None,
        revision: str | None = None,
    ) -> Observation:
        """Record what the worker saw of a resource.

        Before the run's first claim, observations are kept in memory and written
        in that claim's transaction (a run that only observes writes nothing). If
        an observation cannot be persisted the log becomes :attr:`degraded`.
        """
        with self._lock:
            self._check_open()
            check_identifier(observation_id, "observation_id")
            _check_resource(resource, "resource")
            if observation_id in self._observation_ids:
                raise ValueError(
                    f"observation {observation_id!r} is already recorded in run {self._run_id}"
                )
            record = Observation(
                observation_id=observation_id,
                seq=self._next_seq,
                resource=resource,
                mechanism=mechanism,
                coverage=coverage,
                source_action_id=source_action_id,
                exists=exists,
                sha256=sha256,
                revision=revision,
                recorded_at=utc_now(),
            )
            if not self._started and not self._degraded:
                self._unwritten.append(record)
            else:
                self._persist_or_degrade(f"observation {observation_id!r}", (record,))
            self._observations.append(record)
            self._observation_ids.add(observation_id)
            self._next_seq += 1
            return record

    def _persist_or_degrade(
        self, what: str, records: Iterable[EffectOutcome | Observation]
    ) -> None:
        if self._degraded:
            return
        try:
            self._write(what, records)
        except EffectPersistenceError as e:
            self._degrade(what, e)

    # ------------------------------------------------------------------ queries

    def history(self) -> History:
        """Every record of the run this log knows, in ``seq`` order."""
        with self._lock:
            return History(tuple(self._claims), tuple(self._outcomes), tuple(self._observations))

    def assess(self, effect_id: str) -> Assessment:
        """The verdict on ``effect_id``: the same as ``fx.assess(claim, log.history())``."""
        with self._lock:
            check_identifier(effect_id, "effect_id")
            claim = self._claimed.get(effect_id)
            if claim is None:
                raise ValueError(f"effect {effect_id!r} has no claim in run {self._run_id}")
            return assess(claim, self.history())

    def recover_interrupted(self) -> tuple[EffectOutcome, ...]:
        """Mark every claim without any outcome INTERRUPTED / POSSIBLE, in one transaction.

        Claims with a RUNNING outcome are left alone. Returns the appended
        outcomes in ``seq`` order; a second call (here or after another restart)
        returns ``()``.
        """
        with self._lock:
            self._check_open()
            if self._degraded:
                raise EffectPersistenceError(
                    f"run {self._run_id} is degraded: recovery would write past a lost record"
                )
            with_outcome = {o.effect_id for o in self._outcomes}
            if all(c.effect_id in with_outcome for c in self._claims):
                return ()
            store = self._store_for_write()
            base = self._next_seq - 1
            with store.write(f"cannot recover run {self._run_id}") as conn:
                _records.record_writer(conn, self._run_id, Writer.current(), utc_now())
                durable = _records.max_seq(conn, self._run_id)
                if durable != base:
                    raise EffectPersistenceError(
                        f"run {self._run_id} holds records up to seq {durable} where this log "
                        f"knows {base}: another writer touched it; load it again"
                    )
                appended, head = _records.recover(conn, self._run_id, base, self._head, utc_now())
            self._head = head
            self._outcomes.extend(appended)
            self._settled.update(o.effect_id for o in appended)
            self._next_seq += len(appended)
            return appended
