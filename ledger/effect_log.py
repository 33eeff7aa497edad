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
anything is written; :class:`EffectPersistenceError` for storage trouble (its leaves,
which say what kind, are in :mod:`ledger.errors`).
"""

from __future__ import annotations

import contextvars
import dataclasses
import logging
import os
import threading
from collections.abc import Iterable, Sequence
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Self, Unpack

from ledger import _paths, _telemetry, storage
from ledger._paths import effects_dir
from ledger._run import files, tool
from ledger._run.agent import ToolCalls
from ledger._run.approving import Approvals
from ledger._run.calls import AsyncEffectCall, EffectCall, EffectScope, current_call
from ledger._run.journal import Journal, check_run_id, location
from ledger._run.recorded import MAX_RECORDED_BYTES, Recording, Redact
from ledger._run.requests import (
    ClaimRequest,
    ObservationRequest,
    OutcomeRequest,
    RecordingOptions,
    new_effect_id,
    new_run_id,
    only,
)
from ledger._run.state import RunState
from ledger._run.writes import Request, Writes, degraded_error
from ledger.effects import (
    ApprovalPolicy,
    Assessment,
    Coverage,
    Decision,
    EffectClaim,
    EffectKind,
    EffectOutcome,
    ExecutionOutcome,
    History,
    Impact,
    InvalidTypeError,
    Observation,
    ObservationMechanism,
    OperationRef,
    Postcondition,
    Record,
    Resolution,
    ResourceRef,
    assess,
    check_identifier,
    utc_now,
)
from ledger.errors import EffectPersistenceError, LogDegradedError, RunHeldError

if TYPE_CHECKING:  # the otel extra's, for the annotations only: never imported otherwise
    from opentelemetry.metrics import MeterProvider
    from opentelemetry.trace import TracerProvider

__all__ = [
    "AsyncEffectCall",
    "ClaimRequest",
    "EffectCall",
    "EffectLog",
    "EffectPersistenceError",
    "EffectScope",
    "ObservationRequest",
    "OutcomeRequest",
    "RecordingOptions",
    "current_call",
    "effects_dir",
    "new_effect_id",
    "new_run_id",
]

log = logging.getLogger("ledger")

_fresh_effect_id = new_effect_id  # for methods whose keyword shadows the name


class EffectLog(ToolCalls, Approvals):
    """The durable log of one run: claims, outcomes and observations, in ``seq`` order.

    Thread-safe: threads may share one log. Many logs, in threads or processes,
    may write different runs to one store at once. An open log holds its run's lock in
    the store's ``ledger.lock``, which keeps other processes from recovering the run
    under it and dies with its process (docs/storage.md, "Liveness").

    Its memory of the run is a :class:`~ledger._run.state.RunState`; its store and the
    run's lock a :class:`~ledger._run.journal.Journal`; its writes go through the queue
    of :class:`~ledger._run.writes.Writes`.
    """

    def __init__(
        self,
        run_id: str,
        directory: str | os.PathLike[str] | None = None,
        *,
        writer_name: str | None = None,
        record_args: bool = True,
        record_result: bool = True,
        redact: Redact | None = None,
        max_recorded_bytes: int = MAX_RECORDED_BYTES,
        tracer_provider: TracerProvider | None = None,
        meter_provider: MeterProvider | None = None,
        record_in_spans: bool = False,
    ) -> None:
        """Start a new run in the store at ``directory``: a directory, or ``postgresql://...``.

        The default is ``$LEDGER_URL`` when set, else :func:`effects_dir`.

        Writes nothing: the store is created by the first claim. If the store
        already holds rows of ``run_id``, that first write raises
        :class:`EffectPersistenceError`; use :meth:`load` to continue a run.
        ``writer_name`` (an identifier) is recorded with this process as the run's
        writer, for people: ``ledger runs`` shows it.

        ``record_args``, ``record_result``, ``redact`` and ``max_recorded_bytes`` are what
        :meth:`effect` and :attr:`tool` record of a call unless they say otherwise: its
        arguments and its result, through ``redact`` (dict -> dict), each stored as not
        recorded when JSON cannot hold it exactly or it is larger than the bound.

        With OpenTelemetry's API installed (the ``otel`` extra), every effect attempt is a
        span of ``tracer_provider`` (default: the global one) and its counts go to
        ``meter_provider`` (same); ``record_in_spans`` puts the recorded arguments and
        result in the span too. Without it nothing is imported (docs/telemetry.md).
        """
        check_identifier(writer_name, "writer_name", optional=True)
        self._recording = Recording.of(record_args, record_result, redact, max_recorded_bytes)
        self._telemetry = _telemetry.Telemetry.of(tracer_provider, meter_provider, record_in_spans)
        self._traced = (tracer_provider, meter_provider, record_in_spans)
        self._writer_name = writer_name
        self._run_id = check_run_id(run_id)
        self._directory = location(directory)
        if isinstance(self._directory, Path):
            # Agent tools must never reach a store a log points at, even before it exists.
            _paths.remember_store(self._directory)
        self._state = RunState(self._run_id)
        self._journal = Journal(self._run_id, self._directory)
        # Threads that write at once queue in the writes; one of them writes every queued
        # record in one transaction, while the others wait for its outcome.
        self._cond = threading.Condition(threading.RLock())
        self._writes = Writes(self._state, self._journal, self._cond, writer_name=writer_name)
        self._recovered: tuple[EffectOutcome, ...] = ()
        self._asked: set[str] = set()  # the approval requests this log wrote
        self._entered: list[contextvars.Token[tuple[EffectLog, ...]]] = []
        self._closed = False

    # ------------------------------------------------------------------ properties

    @property
    def run_id(self) -> str:
        """The run's id."""
        return self._run_id

    @property
    def path(self) -> Path | None:
        """The store's database file (it may not exist yet); None for a PostgreSQL store."""
        if isinstance(self._directory, Path):
            return self._directory / _paths.DB_NAME
        return None

    @property
    def directory(self) -> Path | str:
        """The store directory, or a PostgreSQL store's URL as it was given."""
        return self._directory

    @property
    def store(self) -> str:
        """The store's name: its directory, or its URL with the password removed."""
        return storage.describe(self._directory)

    @property
    def recovered(self) -> tuple[EffectOutcome, ...]:
        """The outcomes :meth:`resume` recorded for the claims a dead writer left unsettled."""
        return self._recovered

    @property
    def recording(self) -> Recording:
        """What :meth:`effect` and :attr:`tool` record of a call by default."""
        return self._recording

    @property
    def degraded(self) -> bool:
        """True once an outcome or observation failed to persist; the log then writes nothing."""
        return self._writes.degraded

    # ------------------------------------------------------------------ lifecycle

    @classmethod
    def load(
        cls,
        run_id: str,
        directory: str | os.PathLike[str] | None = None,
        *,
        writer_name: str | None = None,
        **recording: Unpack[RecordingOptions],
    ) -> Self:
        """Reopen a run after a restart, from its durable rows only.

        Every row is validated; one that does not (a forged state, an impossible
        sequence, a broken link) raises :class:`EffectPersistenceError`, as does a
        corrupt or refused database file. A store or run that does not exist
        loads as empty and creates nothing.

        The log holds the run (shared) until it is closed: no other process can
        recover it meanwhile, while any may read or write it (see
        :meth:`recover_interrupted`). ``writer_name`` is as for the constructor: recorded
        with this process at its first write; the recording options are the constructor's.
        """
        self = cls(run_id, directory, writer_name=writer_name, **recording)
        self._writes.continuing = True
        loaded = self._journal.load()
        if loaded is not None:
            history, self._writes.head = loaded
            self._state.adopt(history)
            self._writes.started = self._state.next_seq > 1
        return self

    @classmethod
    def _visit(cls, run_id: str, directory: storage.Location, program: str) -> Self:
        """Load a run for the ``ledger`` command (``program``: ``ledger resolve``, say).

        Not public: what this log writes leaves the run's writer (the worker, its name)
        as it was, and a resolution it writes is a person's, recorded as written by
        ``program``. It holds the run as any loaded log does.
        """
        self = cls.load(run_id, directory)
        self._writes.visitor = program
        return self

    def reload(self) -> Self:
        """Close this log and load its run again: a new log with what the store holds now.

        For a process that shares a run with others (``ledger resolve`` may add a
        resolution to a run a worker holds, and the worker's next write is then refused):
        the new log has the same store, writer name and recording options, and is not
        :attr:`degraded`. This log is closed, as by :meth:`close`.
        """
        self.close()
        recording = self._recording
        return type(self).load(
            self._run_id,
            self._directory,
            writer_name=self._writer_name,
            record_args=recording.args,
            record_result=recording.result,
            redact=recording.redact,
            max_recorded_bytes=recording.max_bytes,
            tracer_provider=self._traced[0],
            meter_provider=self._traced[1],
            record_in_spans=self._traced[2],
        )

    @classmethod
    def resume(
        cls,
        run_id: str,
        store: str | os.PathLike[str] | None = None,
        *,
        writer_name: str | None = None,
        **recording: Unpack[RecordingOptions],
    ) -> Self:
        """Start or continue a run: the one line a worker begins with, first start or restart.

        A run that does not exist is created (by its first claim); an existing one is
        loaded. If it has records, no other live process may hold it
        (:class:`~ledger.errors.RunHeldError`): its earlier writer is gone, so the claims
        it left without an outcome are recovered (:meth:`recover_interrupted`;
        :attr:`recovered` lists the outcomes written), and the file every postcondition of
        an effect not ``DONE`` names (whose call did not report success) is observed, so
        that :meth:`decide` can tell a write that never touched its file (``RETRY``) from
        one that may have landed. Then the worker runs its code again: each call finds its
        earlier attempt by its step (see :meth:`effect`). The recording options
        (``record_args``, ``record_result``, ``redact``, ``max_recorded_bytes``) are the
        constructor's.
        """
        self = cls.load(run_id, store, writer_name=writer_name, **recording)
        try:
            if self._state.claims:
                self._take_over()
        except BaseException:
            self.close()
            raise
        return self

    def _take_over(self) -> None:
        """Refuse a run a live process holds; recover and observe what its writer left."""
        with self._cond:
            if self._journal.lease_missed:
                raise RunHeldError(
                    f"cannot resume run {self._run_id}: another process was recovering it"
                )
            exclusive = self._journal.hold_exclusive(force=False)
            if exclusive is not None:
                exclusive.release()
        self._recovered = self._recover(force=False)
        with self._cond:
            targets = self._state.resume_targets()
        looked = files.look_at(targets, f"run {self._run_id}", "as it was resumed")
        if looked:
            self.outcome_many((), observed=looked, source_action_id="resume")

    def close(self) -> None:
        """Release the store; the log accepts no more records.

        Records other threads are writing at that moment are written first.
        """
        with self._cond:
            if self._closed:
                return
            self._closed = True
            while self._writes.queue.busy:
                self._cond.wait()
            self._journal.close()
            if self._telemetry is not None:
                self._telemetry.close()
            if self._writes.unwritten:
                log.warning(
                    "run %s closed with %d observation(s) never written: the run made no claim",
                    self._run_id,
                    len(self._writes.unwritten),
                )

    def __enter__(self) -> Self:
        # ledger.tool calls in this thread or task run as effects of this log until exit.
        self._entered.append(tool.enter_log(self))
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._entered:
            tool.leave_log(self._entered.pop())
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self._closed else "degraded" if self.degraded else "open"
        return f"<EffectLog run_id={self._run_id} store={self.store} {state}>"

    def _check_open(self) -> None:
        if self._closed:
            raise ValueError("the log is closed")

    # ------------------------------------------------------------------ records

    def claim(
        self,
        *,
        effect_id: str,
        action_id: str,
        operation: OperationRef,
        impact_scope: Iterable[ResourceRef],
        obligations: Iterable[Postcondition] = (),
        kind: EffectKind = EffectKind.WRITE,
        retry_of: str | None = None,
        step: str = "",
        args: object = None,
        approval: ApprovalPolicy | None = None,
    ) -> EffectClaim:
        """Durably claim an effect before invoking the tool that makes it.

        Returns only after the claim's transaction is committed and fsynced. If it
        cannot be persisted, raises :class:`EffectPersistenceError` and the claim
        exists nowhere, not even in :meth:`history`. A duplicate ``effect_id`` in
        the run is a ``ValueError``. The claim's idempotency key derives from the run
        and ``effect_id``; a claim with ``retry_of`` (an effect claimed earlier in the
        run) carries that effect's key instead. :meth:`retry` checks first that a
        retry is what :meth:`decide` says. ``step`` names the call across restarts (``""``:
        none) and ``args`` is the call's arguments as recorded (a JSON value; ``None``: not
        recorded): both are stored and chained as given.

        ``approval`` (an :class:`~ledger.effects.ApprovalPolicy`) makes the claim wait for a
        person's yes to this exact call, as :meth:`effect`'s does: it raises
        :class:`~ledger.errors.ApprovalPending` (the first time, after writing a request)
        or :class:`~ledger.errors.ApprovalDenied`, or claims under the grant. The claim
        then carries the effect id the request reserved (``effect_id`` on the first
        request), not necessarily ``effect_id``: read it from the returned claim.
        """
        if approval is not None:
            return self._claim_approved(
                approval,
                ClaimRequest(
                    effect_id=effect_id,
                    action_id=action_id,
                    operation=operation,
                    impact_scope=tuple(impact_scope),
                    obligations=tuple(obligations),
                    kind=kind,
                    retry_of=retry_of,
                    step=step,
                    args=args,
                ),
            )
        # claim_many's path without its request: a claim is built once, from the keywords.
        with self._cond:
            self._check_open()
            now = utc_now()
            record = self._state.claim_record(
                self._state.next_free,  # the seq it gets unless the queue moves
                now,
                effect_id=effect_id,
                action_id=action_id,
                operation=operation,
                impact_scope=impact_scope,
                obligations=obligations,
                kind=kind,
                retry_of=retry_of,
                step=step,
                args=args,
            )
            if self.degraded:
                raise degraded_error(self._run_id)
            return self._submit_claims([record], f"claim {effect_id!r}")[0]  # type: ignore[return-value]  # the claim

    def _claim_approved(self, policy: ApprovalPolicy, request: ClaimRequest) -> EffectClaim:
        """:meth:`claim` through the approval gate."""
        if request.retry_of is not None:
            raise ValueError("a retry is not gated: it runs under its first attempt's approval")
        with self._cond:
            self._check_open()
            probe = self._state.claim_record(
                self._state.next_free,
                utc_now(),
                effect_id=request.effect_id,
                action_id=request.action_id,
                operation=request.operation,
                impact_scope=request.impact_scope,
                obligations=request.obligations,
                kind=request.kind,
                retry_of=None,
                step=request.step,
                args=request.args,
            )
            passed = self.gate(probe, policy, step=request.step, args=probe.args)
        approved = dataclasses.replace(
            request, effect_id=passed.effect_id, approval_id=passed.approval_id
        )
        # Claimed with the lock released, as every claim is: the queue takes it once, and
        # cannot hand it on while this frame holds it a second time.
        return self.claim_passed(
            passed,
            lambda: self._claim_all((approved,), f"claim {passed.effect_id!r}")[0],
            probe,
            policy,
            step=request.step,
            args=probe.args,
            automatic=False,
        )

    def claim_many(
        self,
        requests: Iterable[ClaimRequest],
        *,
        observed: Iterable[ObservationRequest] = (),
    ) -> tuple[EffectClaim, ...]:
        """Claim several effects in one transaction and one fsync: all of them, or none.

        For an agent's parallel tool calls. Every request is checked before anything
        is written (a ``ValueError`` or ``TypeError`` names the first bad one, and
        nothing is claimed); the claims take consecutive ``seq`` in request order.
        If they cannot be persisted, raises :class:`EffectPersistenceError` and none
        of them exists. An empty ``requests`` writes nothing and returns ``()``.

        ``observed`` are observations written first, in the same transaction (their
        source action is the first claim's): what the worker saw just before the calls.
        """
        batch = only(ClaimRequest, requests, "claim_many")
        if not batch:
            return ()
        return self._claim_all(batch, f"{len(batch)} claims", observed=tuple(observed))

    def _claim_all(
        self,
        batch: tuple[ClaimRequest, ...],
        action: str,
        *,
        retrying: str | None = None,
        observed: Sequence[ObservationRequest] = (),
    ) -> tuple[EffectClaim, ...]:
        with self._cond:
            self._check_open()
            if retrying is not None:
                self._state.check_retry(retrying)
            now = utc_now()
            seq = self._state.next_free  # the seq it gets unless the queue moves
            seen = self._state.observation_records(observed, batch[0].action_id, seq, now)
            records = self._state.claim_records(batch, seq + len(seen), now)
            if self.degraded:
                raise degraded_error(self._run_id)
            written = self._submit_claims([*seen, *records], action)
            return tuple(written[len(seen) :])  # type: ignore[arg-type]  # the claims, numbered

    def _submit_claims(self, records: list[Record], action: str) -> list[Record]:
        """:meth:`_submit` of claims (raising); with telemetry, their spans start once durable."""
        if self._telemetry is None:
            return self._submit(records, action, raises=True)
        written = self._submit(self._telemetry.traced(records), action, raises=True)
        self._telemetry.claimed(self._run_id, written)
        return written

    def _submit_outcomes(self, records: list[Record], action: str, *, raises: bool) -> list[Record]:
        """:meth:`_submit` of outcomes; with telemetry, the spans they settle end."""
        written = self._submit(records, action, raises=raises)
        if self._telemetry is not None:
            self._telemetry.settled(written, self._state.claim_of, self.assess)
        return written

    def _submit(self, records: list[Record], action: str, *, raises: bool) -> list[Record]:
        """Write checked records, lock held; them, numbered, once written (or kept in memory).

        ``raises``: the caller gets the error of records that cannot be written, which
        then exist nowhere; otherwise they stay in memory and the log is degraded.
        """
        pending = Request(action, records, raises=raises)
        self._writes.submit(pending)
        if pending.error is not None:
            raise pending.error
        return pending.records

    def outcome(
        self,
        *,
        effect_id: str,
        execution: ExecutionOutcome,
        impact: Impact,
        execution_id: str | None = None,
        result: object = None,
        result_recorded: bool | None = None,
    ) -> EffectOutcome:
        """Record how a claimed effect's call ended (or that it is running).

        Needs a claimed ``effect_id``; nothing follows a terminal outcome;
        INTERRUPTED needs impact POSSIBLE. If the outcome cannot be persisted the
        log becomes :attr:`degraded`, keeps it in memory, and does not raise.
        ``result`` is what the call returned, as recorded (a JSON value);
        ``result_recorded`` defaults to whether it is given, and ``True`` with no result
        records a ``None`` answer.
        """
        # outcome_many's path without its request: the outcome is built once, from the keywords.
        with self._cond:
            self._check_open()
            record = self._state.outcome_record(
                self._state.next_free,
                utc_now(),
                effect_id=effect_id,
                execution=execution,
                impact=impact,
                execution_id=execution_id,
                result=result,
                result_recorded=result_recorded,
            )
            written = self._submit_outcomes([record], f"outcome of {effect_id!r}", raises=False)
            return written[0]  # type: ignore[return-value]  # the outcome

    def outcome_many(
        self,
        requests: Iterable[OutcomeRequest],
        *,
        observed: Iterable[ObservationRequest] = (),
        source_action_id: str = "",
        strict: bool = False,
    ) -> tuple[EffectOutcome, ...]:
        """Record several outcomes in one transaction and one fsync.

        Each request is checked as :meth:`outcome` checks it, in order (a RUNNING
        outcome may be followed by a terminal one in the same batch), before anything
        is written. If they cannot be persisted the log becomes :attr:`degraded` and
        keeps them in memory, as :meth:`outcome` does.

        ``observed`` are observations written after the outcomes, in the same
        transaction, with ``source_action_id``: what the worker saw just after the calls.
        With ``strict``, outcomes that cannot be persisted raise
        :class:`EffectPersistenceError` instead, exist nowhere, and leave the log as it was
        (not degraded), as a claim does: for a caller that loads the run again
        (:meth:`reload`) and writes them once more.
        """
        batch = only(OutcomeRequest, requests, "outcome_many")
        if not isinstance(strict, bool):
            raise InvalidTypeError(f"strict must be a bool, not {type(strict).__name__}")
        observed = tuple(observed)
        if not batch and not observed:
            return ()
        if observed:
            check_identifier(source_action_id, "source_action_id")
        action = f"{len(batch)} outcomes" if batch else f"{len(observed)} observations"
        if len(batch) == 1:
            action = f"outcome of {batch[0].effect_id!r}"
        return self._outcome_all(
            batch, action, observed=observed, source_action_id=source_action_id, strict=strict
        )

    def _outcome_all(
        self,
        batch: tuple[OutcomeRequest, ...],
        action: str,
        *,
        observed: Sequence[ObservationRequest] = (),
        source_action_id: str = "",
        strict: bool = False,
    ) -> tuple[EffectOutcome, ...]:
        with self._cond:
            self._check_open()
            now = utc_now()
            seq = self._state.next_free
            records = self._state.outcome_records(batch, seq, now)
            seen = self._state.observation_records(
                observed, source_action_id, seq + len(records), now
            )
            if strict and self.degraded:
                raise degraded_error(self._run_id)
            written = self._submit_outcomes([*records, *seen], action, raises=strict)
            return tuple(written[: len(records)])  # type: ignore[arg-type]  # the outcomes, numbered

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
        with self._cond:
            self._check_open()
            seen = ObservationRequest(
                observation_id, resource, mechanism, exists, sha256, revision, coverage
            )
            (record,) = self._state.observation_records(
                (seen,), source_action_id, self._state.next_free, utc_now()
            )
            writes = self._writes
            if not writes.started and not writes.degraded and not self._state.queued:
                # Nothing is written before the run's first claim, which writes these too.
                writes.unwritten.append(record)
                self._state.remember(record)
                self._state.next_seq += 1
                return record
            pending = Request(f"observation {observation_id!r}", [record], raises=False)
            writes.submit(pending)
            return pending.records[0]  # type: ignore[return-value]  # the observation

    # ------------------------------------------------------------------ queries

    def history(self) -> History:
        """Every record of the run this log knows, in ``seq`` order."""
        with self._cond:
            return self._state.history()

    def assess(self, effect_id: str) -> Assessment:
        """The verdict on ``effect_id``: the same as ``fx.assess(claim, log.history())``.

        Its cost does not grow with the run: only the records the rules consult are
        looked at (the claim's outcomes, its targets' observations, the claims whose
        scope overlaps them), found through the log's index.
        """
        with self._cond:
            claim = self._state.claim_of(effect_id)
            return assess(claim, self._state.index.relevant(claim))

    def outcome_of(self, effect_id: str) -> EffectOutcome | None:
        """The terminal outcome of ``effect_id``, or ``None`` while it has none.

        One look in the log's index, where :meth:`assess` weighs every record the rules
        consult; ``ValueError`` for an effect the run never claimed, as :meth:`assess`.
        """
        with self._cond:
            self._state.claim_of(effect_id)
            return self._state.index.terminal(effect_id)

    def decide(self, effect_id: str) -> Decision:
        """What to do next about ``effect_id``: ``fx.decide(claim, log.history())``.

        Like :meth:`assess`, it looks only at the records the rules consult. An effect
        that has an approval request and no claim yet is decided by its approval:
        ``WAIT`` while pending (the reason names the approval), ``RETRY`` once granted
        (run it), ``DENIED`` when denied, ``ESCALATE`` when it expired unanswered.
        """
        gated = self.approval_decision(effect_id)
        if gated is not None:
            return gated
        with self._cond:
            return self._state.index.decide(self._state.claim_of(effect_id))

    def retry(self, effect_id: str, *, new_effect_id: str | None = None) -> EffectClaim:
        """Claim ``effect_id`` again: same operation, kind, scope, postconditions, key and step.

        Only when :meth:`decide` says ``RETRY``; otherwise a ``ValueError`` names the
        decision and nothing is written. The new claim has ``retry_of`` set to
        ``effect_id`` and a fresh effect id unless ``new_effect_id`` is given; from then
        on, ``effect_id``'s decision is its newest retry's. Durable as :meth:`claim` is.
        """
        with self._cond:
            claim = self._state.claim_of(effect_id)
        new_id = new_effect_id or _fresh_effect_id()
        request = ClaimRequest(
            effect_id=new_id,
            action_id=claim.action_id,
            operation=claim.operation,
            impact_scope=claim.impact_scope,
            obligations=claim.obligations,
            kind=claim.kind,
            retry_of=effect_id,
            step=claim.step,
            args=claim.args,
        )
        return self._claim_all((request,), f"claim {new_id!r}", retrying=effect_id)[0]

    def resolve(
        self,
        effect_id: str,
        *,
        applied: bool,
        by: str,
        note: str = "",
        allow_self: bool = False,
    ) -> Resolution:
        """Record that a person checked whether ``effect_id`` landed: ``applied`` or not.

        Append-only and chained like every record; at most one per effect. It leaves
        the verdict as the evidence says and settles the effect's impact: its
        assessment's ``resolution`` is set, ``unresolved_impact`` is false, and
        :meth:`decide` says ``DONE`` (applied) or ``RETRY`` (not applied). ``by`` is an
        identifier of the person. Returns once durable; if it cannot be persisted,
        raises :class:`EffectPersistenceError` and the resolution exists nowhere.

        The resolution records this process beside ``by`` (OS user, host, program,
        pid) and its origin: ``worker``, or ``reconciler`` when ``allow_self`` says this
        program is an automated reconciler. Neither is a person's word: ``ledger show``
        says which process wrote it, and the MCP guard does not take it (only
        ``ledger resolve`` records ``person``).
        """
        with self._cond:
            self._check_open()
            self._state.check_resolvable(effect_id, applied=applied, allow_self=allow_self)
            record = Resolution(
                effect_id=effect_id,
                seq=self._state.next_free,
                applied=applied,
                by=by,
                recorded_at=utc_now(),
                note=note,
                **self._writes.written_by(allow_self=allow_self),
            )
            if self.degraded:
                raise degraded_error(self._run_id)
            pending = Request(f"resolution of {effect_id!r}", [record], raises=True)
            self._writes.submit(pending)
            if pending.error is not None:
                raise pending.error
            return pending.records[0]  # type: ignore[return-value]  # the resolution

    def recover_interrupted(self) -> tuple[EffectOutcome, ...]:
        """Mark every claim without any outcome INTERRUPTED / POSSIBLE, in one transaction.

        Claims with a RUNNING outcome are left alone. Returns the appended
        outcomes in ``seq`` order; a second call (here or after another restart)
        returns ``()``. Finds the claims through the log's index, not by reading
        the run again.

        Refused with :class:`~ledger.errors.RunHeldError` while another live process has the
        run loaded (its lock is held; see docs/storage.md, "Liveness"): recovering
        under a worker would break it. Logs of this process do not count.
        """
        return self._recover(force=False)

    def _recover(self, *, force: bool) -> tuple[EffectOutcome, ...]:
        """:meth:`recover_interrupted`; with ``force``, even under a process holding the run."""
        with self._cond:
            self._check_open()
            if self.degraded:
                raise LogDegradedError(
                    f"run {self._run_id} is degraded: recovery would write past a lost record"
                )
            while self._writes.queue.busy:  # let records in flight land first
                self._cond.wait()
            self._check_open()  # closed while it waited
            if self.degraded:
                raise degraded_error(self._run_id)
            now = utc_now()
            appended = self._state.recovery(now)
            if not appended:
                return ()
            recovered = self._writes.recover(appended, now, force=force)
            if self._telemetry is not None:
                claimed = self._state.claimed
                self._telemetry.recovered(
                    self._run_id, [(claimed[o.effect_id], o) for o in recovered]
                )
            return recovered
