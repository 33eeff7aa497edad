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
import functools
import logging
import os
import secrets
import threading
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any, Self, TypedDict, Unpack

from ledger import _calls, _dropped, _owner, _paths, _resume, storage
from ledger._calls import Recording, Seen, current_call, new_effect_id
from ledger._chain import GENESIS
from ledger._combiner import Combiner, Entry, acquire_uninterrupted
from ledger._index import RunIndex
from ledger._owner import Writer
from ledger._paths import effects_dir
from ledger._recorded import MAX_RECORDED_BYTES, Redact
from ledger.effects import (
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
    NextStep,
    Observation,
    ObservationMechanism,
    OperationRef,
    Postcondition,
    Resolution,
    ResolutionOrigin,
    ResourceRef,
    assess,
    check_identifier,
    idempotency_key,
    utc_now,
)
from ledger.errors import (
    EffectPersistenceError,
    LogDegradedError,
    RunHeldError,
    StillRunning,
    StoreTamperedError,
)
from ledger.storage import RUN_ID as _RUN_ID
from ledger.storage import Batch, Lease, Mode, Store, relabel

__all__ = [
    "ClaimRequest",
    "EffectLog",
    "EffectPersistenceError",
    "OutcomeRequest",
    "RecordingOptions",
    "current_call",
    "effects_dir",
    "new_effect_id",
    "new_run_id",
]

log = logging.getLogger("ledger")

_Record = EffectClaim | EffectOutcome | Observation | Resolution


def new_run_id() -> str:
    """Return a new run id: 32 lowercase hex characters from the OS CSPRNG."""
    return secrets.token_hex(16)


_fresh_effect_id = new_effect_id  # for methods whose keyword shadows the name


def _check_run_id(run_id: object) -> str:
    if not isinstance(run_id, str):
        raise InvalidTypeError(f"run_id must be a str, not {type(run_id).__name__}")
    if not _RUN_ID.fullmatch(run_id):
        raise ValueError(
            f"run_id must be 32 lowercase hex characters (use new_run_id()), got {run_id!r:.80}"
        )
    return run_id


def _location(directory: str | os.PathLike[str] | None) -> storage.Location:
    """A store directory as an absolute path, or a PostgreSQL URL as given."""
    if directory is None:
        directory = _paths.default_store()
    if not isinstance(directory, (str, os.PathLike)):
        raise InvalidTypeError(f"directory must be a path or a URL, not {type(directory).__name__}")
    text = os.fspath(directory)
    if not text or "\x00" in text:
        raise ValueError("directory must be a non-empty path or URL without NUL")
    if storage.is_url(text):
        return text
    return Path(text).expanduser().absolute()


def _check_resource(value: object, field: str) -> ResourceRef:
    if not isinstance(value, ResourceRef):
        raise InvalidTypeError(
            f"{field} must be a ResourceRef (see effects.resource_ref), not {type(value).__name__}"
        )
    return value


class RecordingOptions(TypedDict, total=False):
    """What :class:`EffectLog`, :meth:`EffectLog.load` and :meth:`EffectLog.resume` record.

    The constructor's keywords: ``record_args``, ``record_result`` (default ``True``),
    ``redact`` (``None``) and ``max_recorded_bytes`` (65,536).
    """

    record_args: bool
    record_result: bool
    redact: Redact | None
    max_recorded_bytes: int


@dataclass(frozen=True, kw_only=True, slots=True)
class ClaimRequest:
    """One claim for :meth:`EffectLog.claim_many`: the keywords of :meth:`EffectLog.claim`."""

    effect_id: str
    action_id: str
    operation: OperationRef
    impact_scope: Iterable[ResourceRef]
    obligations: Iterable[Postcondition] = ()
    kind: EffectKind = EffectKind.WRITE
    retry_of: str | None = None
    step: str = ""
    args: object = None


@dataclass(frozen=True, kw_only=True, slots=True)
class OutcomeRequest:
    """One outcome for :meth:`EffectLog.outcome_many`: the keywords of :meth:`EffectLog.outcome`."""

    effect_id: str
    execution: ExecutionOutcome
    impact: Impact
    execution_id: str | None = None
    result: object = None
    result_recorded: bool | None = None


class EffectLog:
    """The durable log of one run: claims, outcomes and observations, in ``seq`` order.

    Thread-safe: threads may share one log. Many logs, in threads or processes,
    may write different runs to one store at once. An open log holds its run's lock in
    the store's ``ledger.lock``, which keeps other processes from recovering the run
    under it and dies with its process (docs/storage.md, "Liveness").
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
        """
        check_identifier(writer_name, "writer_name", optional=True)
        self._recording = Recording.of(record_args, record_result, redact, max_recorded_bytes)
        self._writer_name = writer_name
        self._run_id = _check_run_id(run_id)
        self._directory = _location(directory)
        if isinstance(self._directory, Path):
            # Agent tools must never reach a store a log points at, even before it exists.
            _paths.remember_store(self._directory)
        self._backend = storage.backend(self._directory)
        self._store: Store | None = None
        # Threads that write at once queue here; one of them (the leader) writes every
        # queued record in one transaction, while the others wait for its outcome.
        self._cond = threading.Condition(threading.RLock())
        self._writes: Combiner[_Request] = Combiner(self._cond, self._write, self._abandon)
        self._queued = 0  # records queued or being written
        self._queued_claims: set[str] = set()
        self._queued_settles: set[str] = set()
        self._queued_observations: set[str] = set()
        self._queued_resolutions: set[str] = set()
        # The idempotency keys of claims queued or being written: an effect whose key is
        # among them has a retry on its way, and is not to be retried again meanwhile.
        self._queued_keys: Counter[str] = Counter()
        self._index = RunIndex()
        self._steps = _resume.StepIndex()
        self._recovered: tuple[EffectOutcome, ...] = ()
        self._entered: list[contextvars.Token[tuple[EffectLog, ...]]] = []
        self._claims: list[EffectClaim] = []
        self._claimed: dict[str, EffectClaim] = {}
        self._settled: set[str] = set()
        self._outcomes: list[EffectOutcome] = []
        self._observations: list[Observation] = []
        self._resolutions: list[Resolution] = []
        self._observation_ids: set[str] = set()
        self._unwritten: list[Observation] = []  # made before the run's first write
        self._next_seq = 1
        self._head = GENESIS  # the hash of the run's last durable record
        self._started = False  # whether the run's row is in the store
        self._continuing = False  # loaded: the run may already exist
        self._writer_pid = 0  # the process recorded as the run's writer, once it wrote
        # The ledger command's log on a worker's run (see _visit): what it writes leaves
        # the worker as the run's writer, and its resolutions are a person's.
        self._visitor: str | None = None
        # The run's shared lock (a storage.Lease): while this log is open, recovery
        # by another process cannot take the run. Taken at load, or before a new run's
        # first write (until then the run has no row to recover, and no file is created).
        self._lease: Lease | None = None
        self._release_lease: _dropped.Finalizer | None = None
        self._release_store: _dropped.Finalizer | None = None
        self._lease_missed = False  # loaded while another process was recovering the run
        self._degraded = False
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
        return self._degraded

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
        self._continuing = True
        store = self._own(self._backend.acquire(self._directory))
        try:
            if store.open_existing():
                # Before reading: what is read then stays the run's state until this log
                # writes, since no other process can recover the run meanwhile.
                lease = store.hold(run_id, Mode.SHARED)
                if lease is None:
                    self._lease_missed = True  # readable; writing is refused (see _hold_run)
                else:
                    self._keep(lease)
                history, self._head = store.load_run(run_id, f"cannot load run {run_id}")
                self._adopt(history)
        except BaseException:
            self._drop_lease()
            self._drop_store()
            raise
        return self

    @classmethod
    def _visit(cls, run_id: str, directory: storage.Location, program: str) -> Self:
        """Load a run for the ``ledger`` command (``program``: ``ledger resolve``, say).

        Not public: what this log writes leaves the run's writer (the worker, its name)
        as it was, and a resolution it writes is a person's, recorded as written by
        ``program``. It holds the run as any loaded log does.
        """
        self = cls.load(run_id, directory)
        self._visitor = program
        return self

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
            if self._claims:
                self._take_over()
        except BaseException:
            self.close()
            raise
        return self

    def _take_over(self) -> None:
        """Refuse a run a live process holds; recover and observe what its writer left."""
        with self._cond:
            if self._lease_missed:
                raise RunHeldError(
                    f"cannot resume run {self._run_id}: another process was recovering it"
                )
            exclusive = self._hold_exclusive(self._store_for_write(), force=False)
            if exclusive is not None:
                exclusive.release()
        self._recovered = self._recover(force=False)
        targets: dict[str, ResourceRef] = {}
        with self._cond:
            # An effect whose newest attempt reported success is DONE (or, contradicted,
            # was observed already): only those that ended otherwise are decided, so a
            # long run resumes at the cost of its failures, not of its length.
            ended_otherwise: dict[str, EffectClaim] = {}
            for outcome in self._outcomes:
                if outcome.terminal and outcome.execution is not ExecutionOutcome.REPORTED_SUCCESS:
                    root = self._root(self._claimed[outcome.effect_id])
                    ended_otherwise[root.effect_id] = root
            for claim in ended_otherwise.values():
                if self._index.decide(claim).step is NextStep.DONE:
                    continue
                for condition in self._index.attempts(claim)[-1].obligations:
                    if condition.target.kind == "fs":
                        targets.setdefault(condition.target.locator, condition.target)
        looked = _calls.look_at(targets.values(), f"run {self._run_id}", "as it was resumed")
        if looked:
            self._outcome_all(
                (),
                f"observations resuming run {self._run_id}",
                seen=looked,
                source_action_id="resume",
            )

    def _keep(self, lease: Lease) -> None:
        self._lease = lease
        # A log dropped without close() must not keep its run from being recovered.
        self._release_lease = _dropped.on_drop(self, lease.release)

    def _drop_lease(self) -> None:
        if self._release_lease is not None:
            self._release_lease.detach()
        if self._lease is not None:
            self._lease.release()
        self._lease = self._release_lease = None

    def _own(self, store: Store) -> Store:
        self._store = store
        # Nor its store's connections and inotify instance, the process's few.
        release = functools.partial(self._backend.release, store)
        self._release_store = _dropped.on_drop(self, release)
        return store

    def _drop_store(self) -> None:
        if self._release_store is not None:
            self._release_store.detach()
        if self._store is not None:
            self._backend.release(self._store)
        self._store = self._release_store = None

    def _hold_run(self, store: Store, action: str) -> BaseException | None:
        """Hold the run shared before writing to it; the error to fail the write with, if not."""
        if self._lease is not None and self._lease.held:
            return None
        if self._lease_missed:
            return RunHeldError(
                f"{action}: another process was recovering run {self._run_id} when this log "
                "loaded it, so what it loaded may be stale; load the run again"
            )
        try:
            store.open_for_writing()  # the lock file lives in the store's directory
        except EffectPersistenceError as e:
            return relabel(action, e)
        try:
            lease = store.hold(self._run_id, Mode.SHARED)
        except EffectPersistenceError as e:
            return relabel(action, e)
        if lease is None:
            return RunHeldError(
                f"{action}: another process is recovering run {self._run_id}; "
                "nothing was written: load the run again once it is done"
            )
        self._keep(lease)
        return None

    def _adopt(self, history: History) -> None:
        for record in history.records():
            self._remember(record)
        records = history.records()
        self._next_seq = records[-1].seq + 1 if records else 1
        self._started = bool(records)

    def close(self) -> None:
        """Release the store; the log accepts no more records.

        Records other threads are writing at that moment are written first.
        """
        with self._cond:
            if self._closed:
                return
            self._closed = True
            while self._writes.busy:
                self._cond.wait()
            self._drop_store()
            self._drop_lease()
            if self._unwritten:
                log.warning(
                    "run %s closed with %d observation(s) never written: the run made no claim",
                    self._run_id,
                    len(self._unwritten),
                )

    def __enter__(self) -> Self:
        # ledger.tool calls in this thread or task run as effects of this log until exit.
        self._entered.append(_calls.enter_log(self))
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._entered:
            _calls.leave_log(self._entered.pop())
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self._closed else "degraded" if self._degraded else "open"
        return f"<EffectLog run_id={self._run_id} store={self.store} {state}>"

    # ------------------------------------------------------------------ internals

    def _check_open(self) -> None:
        if self._closed:
            raise ValueError("the log is closed")

    def _store_for_write(self) -> Store:
        if self._store is None:
            return self._own(self._backend.acquire(self._directory))
        return self._store

    def _remember(self, record: _Record) -> None:
        """Add a record to the log's memory (in seq order): history, checks and index."""
        if isinstance(record, EffectClaim):
            self._claims.append(record)
            self._claimed[record.effect_id] = record
            self._index.add_claim(record)
            self._steps.add_claim(record)
        elif isinstance(record, EffectOutcome):
            self._outcomes.append(record)
            if record.terminal:
                self._settled.add(record.effect_id)
            self._index.add_outcome(record)
        elif isinstance(record, Resolution):
            self._resolutions.append(record)
            self._index.add_resolution(record)
        else:
            self._observations.append(record)
            self._observation_ids.add(record.observation_id)
            self._index.add_observation(record)

    def _submit(self, request: _Request) -> None:
        """Queue a checked request and return once it is written (or failed); lock held.

        A signal handler that raises meanwhile (Ctrl-C) is held back until the log's
        memory matches the store, then raised: check :meth:`history` after it.
        """
        self._queued += len(request.records)
        interrupt = self._writes.submit(request)
        if interrupt is not None:
            raise interrupt

    def _forget(self, request: _Request) -> None:
        self._queued -= len(request.records)
        self._queued_claims.difference_update(request.effect_ids)
        self._queued_settles.difference_update(request.settles)
        self._queued_observations.difference_update(request.observation_ids)
        self._queued_resolutions.difference_update(request.resolves)
        for record in request.records:
            if isinstance(record, EffectClaim):
                if record.retry_of is None:
                    self._steps.queued.discard(record.step)
                key = record.idempotency_key
                self._queued_keys[key] -= 1
                if not self._queued_keys[key]:
                    del self._queued_keys[key]

    def _write(self, batch: list[_Request]) -> BaseException | None:
        """The queue's writer (see ledger._combiner): lock held, released to write."""
        try:
            return self._write_batch(batch)
        finally:
            for request in batch:
                self._forget(request)

    def _abandon(self, batch: list[_Request], error: BaseException | None) -> None:
        """Settle as unwritten the requests a failure of this code itself left behind."""
        cause = f"{type(error).__name__}: {error}" if error is not None else "interrupted"
        lost = EffectPersistenceError(f"cannot record records in run {self._run_id}: {cause}")
        lost.__cause__ = error
        self._fail(batch, lost)

    def _write_batch(self, batch: list[_Request]) -> BaseException | None:
        """Write a batch and settle its requests; return an interrupt held back meanwhile."""
        seq = self._next_seq
        for request in batch:  # number the records for real, in queue order
            request.records = [_renumber(r, seq + i) for i, r in enumerate(request.records)]
            seq += len(request.records)
        records = [record for request in batch for record in request.records]
        if self._degraded:
            self._fail(batch, None)
            return None
        if not self._started and not any(isinstance(r, EffectClaim) for r in records):
            # A run that has not claimed writes nothing: its observations wait for a claim.
            for record in records:
                self._unwritten.append(record)  # type: ignore[arg-type]  # only observations
                self._remember(record)
            self._next_seq = seq
            for request in batch:
                request.done = True
            return None
        action = batch[0].action if len(batch) == 1 else f"{len(records)} records"
        written = [*self._unwritten, *records] if not self._started else records
        durable = Batch(
            action=f"cannot record {action} in run {self._run_id}",
            run_id=self._run_id,
            records=written,
            head=self._head,
            now=utc_now(),
            start=not self._started,
            continuing=self._continuing,
            writer=None
            if self._visitor is not None or self._writer_pid == os.getpid()
            else Writer.current(self._writer_name),
            # A loaded run that was empty must still be: had another process started it
            # since, this log's first record would clash with that one's.
            ends_at=0 if self._continuing and not self._started else None,
        )
        store = self._store_for_write()
        failed = self._hold_run(store, durable.action)
        if failed is not None:
            self._fail(batch, failed)
            return None
        self._cond.release()  # other threads queue up for the next transaction meanwhile
        try:
            job = store.append(durable)
        finally:
            held_back = acquire_uninterrupted(self._cond)
        if job.error is not None:
            self._fail(batch, job.error)
        else:
            self._head = job.head
            self._started = True
            self._writer_pid = os.getpid()
            self._unwritten.clear()
            for record in records:
                self._remember(record)
            self._next_seq = seq
            for request in batch:
                request.done = True
        return job.interrupt or held_back

    def _fail(self, batch: list[_Request], error: BaseException | None) -> None:
        """Tell each request of a batch that was not written (``None``: the log is degraded).

        Claims exist nowhere; outcomes and observations stay in memory and degrade the log.
        A store found tampered with degrades the log even when only claims met it: one
        that drops rows may have dropped others, so nothing more is written to it.
        """
        seq = self._next_seq
        if isinstance(error, StoreTamperedError) and not self._degraded:
            self._degrade(batch[0].action, error)
        for request in batch:
            if request.claims:
                if error is None:
                    request.error = _degraded_error(self._run_id)
                elif isinstance(error, EffectPersistenceError):
                    request.error = type(error)(str(error))  # one per caller
                    request.error.__cause__ = error
                else:
                    request.error = error  # not the store's trouble: raised as it is
            else:
                if error is not None and not self._degraded:
                    self._degrade(request.action, error)
                request.records = [_renumber(r, seq + i) for i, r in enumerate(request.records)]
                seq += len(request.records)
                for record in request.records:
                    self._remember(record)
            request.done = True
        self._next_seq = seq

    def _degrade(self, what: str, error: BaseException) -> None:
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
        kind: EffectKind = EffectKind.WRITE,
        retry_of: str | None = None,
        step: str = "",
        args: object = None,
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
        """
        request = ClaimRequest(
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
        return self._claim_all((request,), f"claim {effect_id!r}")[0]

    def _key_for(self, request: ClaimRequest) -> str:
        """The idempotency key of a claim: its own, or that of the effect it retries."""
        if request.retry_of is None:
            return idempotency_key(self._run_id, request.effect_id)
        retried = self._claimed.get(request.retry_of)
        if retried is None:
            raise ValueError(
                f"effect {request.retry_of!r} is not claimed in run {self._run_id}: "
                "a retry repeats an effect of its run"
            )
        return retried.idempotency_key

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

    def _claim_all(
        self,
        batch: tuple[ClaimRequest, ...],
        action: str,
        *,
        retrying: str | None = None,
        seen: Sequence[Seen] = (),
    ) -> tuple[EffectClaim, ...]:
        with self._cond:
            self._check_open()
            if retrying is not None:
                self._check_retry(retrying)
            records: list[EffectClaim] = []
            batch_ids: set[str] = set()
            batch_steps: set[str] = set()
            now = utc_now()
            seq = self._next_seq + self._queued  # the seq it gets unless the queue moves
            observed = self._observed_records(seen, batch[0].action_id, seq, now) if seen else []
            seq += len(observed)
            for request in batch:
                # The record checks every field, with the same errors as claim's keywords.
                record = EffectClaim(
                    effect_id=request.effect_id,
                    seq=seq + len(records),
                    action_id=request.action_id,
                    operation=request.operation,
                    impact_scope=request.impact_scope,  # type: ignore[arg-type]  # validated, made a tuple
                    obligations=request.obligations,  # type: ignore[arg-type]  # same
                    recorded_at=now,
                    kind=request.kind,
                    idempotency_key=self._key_for(request),
                    retry_of=request.retry_of,
                    step=request.step,
                    args=request.args,
                )
                effect_id = record.effect_id
                if (
                    effect_id in self._claimed
                    or effect_id in self._queued_claims
                    or effect_id in batch_ids
                ):
                    raise ValueError(
                        f"effect {effect_id!r} is already claimed in run {self._run_id}"
                    )
                if (
                    record.step
                    and record.retry_of is None
                    and (self._steps.taken(record.step) or record.step in batch_steps)
                ):
                    raise ValueError(
                        f"step {record.step!r} already has a first attempt in run "
                        f"{self._run_id}: a step names one call (retry it instead)"
                    )
                if record.step and record.retry_of is None:
                    batch_steps.add(record.step)
                batch_ids.add(effect_id)
                records.append(record)
            if self._degraded:
                raise _degraded_error(self._run_id)
            pending = _Request(action, [*observed, *records], claims=True)
            pending.effect_ids = batch_ids
            pending.observation_ids = {r.observation_id for r in observed}
            self._queued_claims.update(batch_ids)
            self._queued_observations.update(pending.observation_ids)
            self._queued_keys.update(r.idempotency_key for r in records)
            self._steps.queued.update(batch_steps)
            self._submit(pending)
            if pending.error is not None:
                raise pending.error
            # the claims, numbered
            return tuple(pending.records[len(observed) :])  # type: ignore[arg-type]

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
        request = OutcomeRequest(
            effect_id=effect_id,
            execution=execution,
            impact=impact,
            execution_id=execution_id,
            result=result,
            result_recorded=result_recorded,
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
        self,
        batch: tuple[OutcomeRequest, ...],
        action: str,
        *,
        seen: Sequence[Seen] = (),
        source_action_id: str = "",
    ) -> tuple[EffectOutcome, ...]:
        with self._cond:
            self._check_open()
            records: list[EffectOutcome] = []
            settled: set[str] = set()
            now = utc_now()
            seq = self._next_seq + self._queued
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
                    if effect_id in self._queued_claims:
                        raise ValueError(
                            f"effect {effect_id!r} is still being claimed in run {self._run_id}: "
                            "record its outcome after claim returns"
                        )
                    raise ValueError(f"effect {effect_id!r} has no claim in run {self._run_id}")
                if (
                    effect_id in self._settled
                    or effect_id in self._queued_settles
                    or effect_id in settled
                ):
                    raise ValueError(f"effect {effect_id!r} already has a terminal outcome")
                record = EffectOutcome(
                    effect_id=effect_id,
                    seq=seq + len(records),
                    execution=request.execution,
                    impact=request.impact,
                    execution_id=request.execution_id,
                    replayed=False,
                    recorded_at=_not_before(now, self._claimed[effect_id]),
                    result=request.result,
                    result_recorded=request.result_recorded,
                )
                if record.terminal:
                    settled.add(effect_id)
                records.append(record)
            observed = self._observed_records(seen, source_action_id, seq + len(records), now)
            pending = _Request(action, [*records, *observed], claims=False)
            pending.settles = settled
            pending.observation_ids = {r.observation_id for r in observed}
            self._queued_settles.update(settled)
            self._queued_observations.update(pending.observation_ids)
            self._submit(pending)
            # the outcomes, numbered
            return tuple(pending.records[: len(records)])  # type: ignore[arg-type]

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
            record = self._observation(
                Seen(observation_id, resource, mechanism, exists, sha256, revision, coverage),
                source_action_id,
                self._next_seq + self._queued,
                utc_now(),
            )
            if not self._started and not self._degraded and not self._queued:
                # Nothing is written before the run's first claim, which writes these too.
                self._unwritten.append(record)
                self._remember(record)
                self._next_seq += 1
                return record
            pending = _Request(f"observation {observation_id!r}", [record], claims=False)
            pending.observation_ids = {observation_id}
            self._queued_observations.add(observation_id)
            self._submit(pending)
            return pending.records[0]  # type: ignore[return-value]  # the observation

    def _observation(self, seen: Seen, source_action_id: str, seq: int, now: str) -> Observation:
        """An observation record, checked (lock held); ``seq`` is provisional."""
        check_identifier(seen.observation_id, "observation_id")
        _check_resource(seen.resource, "resource")
        if (
            seen.observation_id in self._observation_ids
            or seen.observation_id in self._queued_observations
        ):
            raise ValueError(
                f"observation {seen.observation_id!r} is already recorded in run {self._run_id}"
            )
        return Observation(
            observation_id=seen.observation_id,
            seq=seq,
            resource=seen.resource,
            mechanism=seen.mechanism,
            coverage=seen.coverage,
            source_action_id=source_action_id,
            exists=seen.exists,
            sha256=seen.sha256,
            revision=seen.revision,
            recorded_at=now,
        )

    def _observed_records(
        self, seen: Sequence[Seen], source_action_id: str, seq: int, now: str
    ) -> list[Observation]:
        records: list[Observation] = []
        for item in seen:
            record = self._observation(item, source_action_id, seq + len(records), now)
            if any(r.observation_id == record.observation_id for r in records):
                raise ValueError(f"observation {record.observation_id!r} is given twice")
            records.append(record)
        return records

    def _begin_step(
        self, probe: EffectClaim, seen: Sequence[Seen], step: str | None, *, tool: bool
    ) -> _resume.Begin:
        """Enter a call's step: replay it, or claim it (first attempt or retry) with its baseline.

        ``step`` None is the automatic one. Decided and queued under the lock, so two
        threads entering one step make one attempt (the other is refused). Raises what a
        call that must not run raises (ledger._resume), before anything is written.
        """
        with self._cond:
            self._check_open()
            if step is None:
                step = self._steps.next_auto(probe.operation.name, probe.operation.args_sha256)
            first = self._steps.first(step)
            decision = outcome = newest = None
            if first is not None:
                newest = self._index.attempts(first)[-1]
                decision = self._index.decide(first)
                outcome = self._index.terminal(newest.effect_id)
                if self._queued_keys[first.idempotency_key]:
                    decision = dataclasses.replace(
                        decision, step=NextStep.WAIT, reason="A retry of it is being claimed."
                    )
            elif step in self._steps.queued:
                raise StillRunning(
                    f"step {step!r} is being claimed by another call of this log",
                    run_id=self._run_id,
                    effect_id=probe.effect_id,
                    decision=None,
                )
            tries = 0 if first is None else self._steps.tries(first.idempotency_key)
            plan = _resume.plan(
                self._run_id, step, probe, first, newest, decision, outcome, tries, tool=tool
            )
            if plan.replay is not None:
                return _resume.Begin(plan.replay, plan.attempt, replayed=True, outcome=outcome)
            if _resume.guarded(probe.kind):
                self._guard(probe, first)
        # Claimed with the lock released, as every claim is (the queue takes it once):
        # _claim_all checks again that a retry is still due and a first attempt's step free.
        effect_id = probe.effect_id
        if plan.retry_of is not None and effect_id in self._claimed:
            # The code gives its call an effect id: the step's first attempt has it.
            effect_id = _fresh_effect_id()
        request = ClaimRequest(
            effect_id=effect_id,
            action_id=probe.action_id if probe.action_id != probe.effect_id else effect_id,
            operation=probe.operation,
            impact_scope=probe.impact_scope,
            obligations=probe.obligations,
            kind=probe.kind,
            retry_of=plan.retry_of,
            step=step,
            args=probe.args,
        )
        claim = self._claim_all(
            (request,),
            f"claim {effect_id!r}",
            retrying=plan.retry_of if plan.checked else None,
            seen=seen,
        )[0]
        return _resume.Begin(claim, plan.attempt)

    def _guard(self, probe: EffectClaim, own: EffectClaim | None) -> None:
        """Refuse a write into the scope of an effect whose decision is ESCALATE (lock held)."""
        for candidate in self._index.doubtful():
            root = self._root(candidate)
            if own is not None and root.effect_id == own.effect_id:
                continue  # its own step: decided above
            if not _resume.overlapping(probe.impact_scope, candidate):
                continue
            decision = self._index.decide(root)
            if decision.step is NextStep.ESCALATE:
                newest = self._index.attempts(root)[-1]
                raise _resume.needs_resolution(
                    self._run_id,
                    newest,
                    decision,
                    f"{probe.operation.name} would touch the scope of effect "
                    f"{newest.effect_id!r}, which is in doubt:",
                )

    def _root(self, claim: EffectClaim) -> EffectClaim:
        """The first attempt of the effect ``claim`` is an attempt of."""
        while claim.retry_of is not None and claim.retry_of in self._claimed:
            claim = self._claimed[claim.retry_of]
        return claim

    def _settle_seen(
        self,
        effect_id: str,
        settle: _calls.Settle | None,
        seen: Sequence[Seen],
        source_action_id: str,
    ) -> None:
        """Record an outcome and what was seen of the targets after the call, together.

        One transaction (no outcome when ``settle`` is None); kept in memory, like any
        outcome, if they cannot be written.
        """
        requests: tuple[OutcomeRequest, ...] = ()
        if settle is not None:
            requests = (
                OutcomeRequest(
                    effect_id=effect_id,
                    execution=settle.execution,
                    impact=settle.impact,
                    result=settle.result,
                    result_recorded=settle.recorded,
                ),
            )
        if requests or seen:
            self._outcome_all(
                requests, f"outcome of {effect_id!r}", seen=seen, source_action_id=source_action_id
            )

    # ------------------------------------------------------------------ queries

    def history(self) -> History:
        """Every record of the run this log knows, in ``seq`` order."""
        with self._cond:
            return History(
                tuple(self._claims),
                tuple(self._outcomes),
                tuple(self._observations),
                tuple(self._resolutions),
            )

    def assess(self, effect_id: str) -> Assessment:
        """The verdict on ``effect_id``: the same as ``fx.assess(claim, log.history())``.

        Its cost does not grow with the run: only the records the rules consult are
        looked at (the claim's outcomes, its targets' observations, the claims whose
        scope overlaps them), found through the log's index.
        """
        with self._cond:
            claim = self._claim_of(effect_id)
            return assess(claim, self._index.relevant(claim))

    def decide(self, effect_id: str) -> Decision:
        """What to do next about ``effect_id``: ``fx.decide(claim, log.history())``.

        Like :meth:`assess`, it looks only at the records the rules consult.
        """
        with self._cond:
            return self._index.decide(self._claim_of(effect_id))

    def retry(self, effect_id: str, *, new_effect_id: str | None = None) -> EffectClaim:
        """Claim ``effect_id`` again: same operation, kind, scope, postconditions, key and step.

        Only when :meth:`decide` says ``RETRY``; otherwise a ``ValueError`` names the
        decision and nothing is written. The new claim has ``retry_of`` set to
        ``effect_id`` and a fresh effect id unless ``new_effect_id`` is given; from then
        on, ``effect_id``'s decision is its newest retry's. Durable as :meth:`claim` is.
        """
        with self._cond:
            claim = self._claim_of(effect_id)
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

    def _check_retry(self, effect_id: str) -> None:
        """Refuse a retry unless the decision is RETRY and no other retry is on its way."""
        claim = self._claim_of(effect_id)
        decision = self._index.decide(claim)
        step, reason = decision.step, decision.reason
        if self._queued_keys[claim.idempotency_key]:
            # Decided together with the queue: two threads retrying at once make one retry.
            step, reason = NextStep.WAIT, "A retry of it is being claimed."
        if step is not NextStep.RETRY:
            raise ValueError(
                f"effect {effect_id!r} is not to be retried: the decision is "
                f"{step.value.upper()} ({reason})"
            )

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
            self._claim_of(effect_id)
            if not isinstance(applied, bool):
                raise InvalidTypeError(f"applied must be a bool, not {type(applied).__name__}")
            if not isinstance(allow_self, bool):
                raise InvalidTypeError(
                    f"allow_self must be a bool, not {type(allow_self).__name__}"
                )
            if (
                self._index.resolution(effect_id) is not None
                or effect_id in self._queued_resolutions
            ):
                raise ValueError(f"effect {effect_id!r} is already resolved")
            record = Resolution(
                effect_id=effect_id,
                seq=self._next_seq + self._queued,
                applied=applied,
                by=by,
                recorded_at=utc_now(),
                note=note,
                **self._written_by(allow_self=allow_self),
            )
            if self._degraded:
                raise _degraded_error(self._run_id)
            pending = _Request(f"resolution of {effect_id!r}", [record], claims=True)
            pending.resolves = {effect_id}
            self._queued_resolutions.add(effect_id)
            self._submit(pending)
            if pending.error is not None:
                raise pending.error
            return pending.records[0]  # type: ignore[return-value]  # the resolution

    def _written_by(self, *, allow_self: bool) -> dict[str, Any]:
        """The fields of a resolution that say which process wrote it, and as what."""
        if self._visitor is not None:
            origin, program = ResolutionOrigin.PERSON, self._visitor
        else:
            origin = ResolutionOrigin.RECONCILER if allow_self else ResolutionOrigin.WORKER
            program = _owner.program()
        return {
            "origin": origin,
            "os_user": _owner.os_user(),
            "host": _owner.host_name(),
            "program": program,
            "pid": os.getpid(),
        }

    def _claim_of(self, effect_id: str) -> EffectClaim:
        check_identifier(effect_id, "effect_id")
        claim = self._claimed.get(effect_id)
        if claim is None:
            raise ValueError(f"effect {effect_id!r} has no claim in run {self._run_id}")
        return claim

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
            if self._degraded:
                raise LogDegradedError(
                    f"run {self._run_id} is degraded: recovery would write past a lost record"
                )
            while self._writes.busy:  # let records in flight land first
                self._cond.wait()
            self._check_open()  # closed while it waited
            if self._degraded:
                raise _degraded_error(self._run_id)
            unanswered = self._index.unanswered()
            if not unanswered:
                return ()
            base = self._next_seq - 1
            now = utc_now()
            appended = tuple(
                EffectOutcome(
                    effect_id=claim.effect_id,
                    seq=base + i,
                    execution=ExecutionOutcome.INTERRUPTED,
                    impact=Impact.POSSIBLE,
                    replayed=True,
                    recorded_at=_not_before(now, claim),
                )
                for i, claim in enumerate(unanswered, start=1)
            )
            if self._lease_missed:
                raise RunHeldError(
                    f"cannot recover run {self._run_id}: another process was recovering it "
                    "when this log loaded it; load the run again"
                )
            store = self._store_for_write()
            exclusive = self._hold_exclusive(store, force=force)
            try:
                return self._recover_locked(store, base, now, appended)
            finally:
                if exclusive is not None:
                    exclusive.release()

    def _hold_exclusive(self, store: Store, *, force: bool) -> Lease | None:
        """Hold the run exclusive for recovery (lock held), or refuse: a live process has it."""
        try:
            store.open_for_writing()  # the lock file lives in the store's directory
            exclusive = store.hold(self._run_id, Mode.EXCLUSIVE)
        except EffectPersistenceError as e:
            raise relabel(f"cannot recover run {self._run_id}", e) from e
        if exclusive is None and not force:
            raise RunHeldError(
                f"cannot recover run {self._run_id}: another live process has it loaded, "
                "and recovering it would break that process; close it there, or stop it"
            )
        return exclusive

    def _recover_locked(
        self, store: Store, base: int, now: str, appended: tuple[EffectOutcome, ...]
    ) -> tuple[EffectOutcome, ...]:
        """Write recovery's outcomes (lock held, released while the store commits)."""
        request = Batch(
            action=f"cannot recover run {self._run_id}",
            run_id=self._run_id,
            records=appended,
            head=self._head,
            now=now,
            writer=None if self._visitor is not None else Writer.current(self._writer_name),
            ends_at=base,  # or another writer touched the run: refused
        )
        settling = {o.effect_id for o in appended}
        # Nobody else writes this run until recovery is done, and no outcome of these
        # effects is accepted meanwhile: they are being settled.
        self._writes.hold()
        self._queued_settles.update(settling)
        self._cond.release()
        try:
            job = store.append(request)
        finally:
            held_back = acquire_uninterrupted(self._cond)
            self._queued_settles.difference_update(settling)
            self._writes.hand_over()
        if job.error is None:
            self._head = job.head
            self._writer_pid = os.getpid()
            for record in appended:
                self._remember(record)
            self._next_seq += len(appended)
        elif isinstance(job.error, StoreTamperedError):
            self._degrade("recovery", job.error)
        interrupt = job.interrupt or held_back
        if interrupt is not None:
            raise interrupt
        if job.error is not None:
            raise job.error
        return appended

    # ------------------------------------------------------------------ tool calls

    def effect(
        self,
        operation: str,
        *,
        args: object = None,
        kind: EffectKind = EffectKind.WRITE,
        impact_scope: Iterable[ResourceRef | _calls.Referable] = (),
        obligations: Iterable[Postcondition] = (),
        effect_id: str | None = None,
        action_id: str | None = None,
        backend: str = "",
        no_impact: _calls.ExceptionTypes = (),
        step: str | None = None,
        record_args: bool | None = None,
        record_result: bool | None = None,
        redact: Redact | None = None,
    ) -> _calls.EffectScope:
        """One tool call as one effect: ``with log.effect("op", args=...) as call:``.

        Entering (``with`` or ``async with``) first observes every file a postcondition
        names (the baseline :func:`~ledger.effects.decide` compares with), then claims
        the effect, durably, before the body runs. A normal exit records
        ``REPORTED_SUCCESS`` with impact ``CERTAIN`` (``NONE`` for a ``READ``); an
        exception records ``FAILED`` with impact ``POSSIBLE`` (``NONE`` for a type in
        ``no_impact``) and goes on unchanged; an outcome the body gave through
        ``call.succeeded()`` or ``call.failed()`` is kept. Then those files are observed
        again, so a write that landed is ``VERIFIED``.

        ``step`` names the call across restarts (a framework's tool-call id); without one,
        the n-th call of this log with an operation and arguments digest is the n-th such
        call of the run. Entering a step that has attempts acts on its decision and writes
        nothing unless the body is to run: ``DONE`` replays (``call.replayed`` is true and
        ``call.result`` the recorded result: the body checks ``call.replayed``), ``RETRY``
        claims a retry with the same idempotency key, ``WAIT`` raises
        :class:`~ledger.errors.StillRunning`, ``ESCALATE``
        :class:`~ledger.errors.NeedsResolution`. A ``WRITE`` or ``IRREVERSIBLE`` call into
        the scope of an effect in doubt raises ``NeedsResolution`` too.

        ``args`` (``None``: ``{}``) is digested with :func:`~ledger.effects.args_digest`
        and recorded (``record_args``, through ``redact``); ``impact_scope`` takes
        references or resources (``FilesystemResource``, ``OwnedResource``,
        ``ExternalResource``); ``effect_id`` defaults to a fresh unique id, ``action_id``
        to the effect id. Every argument is checked here: nothing is written for a bad
        one (``ValueError`` / ``TypeError``). In asyncio code the writes run off the event
        loop; see docs/api.md for cancellation.
        """
        return _calls.EffectScope(
            self,
            operation,
            args=args,
            kind=kind,
            impact_scope=impact_scope,
            obligations=obligations,
            effect_id=effect_id,
            action_id=action_id,
            backend=backend,
            no_impact=no_impact,
            step=step,
            recording=self._recording.given(record_args, record_result, redact),
        )

    @property
    def tool(self) -> _calls.Tool:
        """A decorator making each call of a function (sync or async) one :meth:`effect`.

        ``@log.tool`` or ``@log.tool(kind=..., operation=None, impact_scope=None,
        obligations=None, backend="", no_impact=(), step=None, record_args=None,
        record_result=None, redact=None)``: the call's bound arguments (defaults applied)
        are the effect's ``args``, the function's ``__name__`` its operation unless one is
        given, its return value the recorded result; ``impact_scope``, ``obligations`` and
        ``step`` may be callables taking the function's arguments. A call whose step is
        done returns the recorded result, or raises :class:`~ledger.errors.AlreadyDone`
        when none was recorded (a ``READ`` runs again). The wrapper keeps the function's
        name, docstring and signature.
        """
        return _calls.Tool(self)

    def observe_file(
        self,
        resource: _calls.FileTarget,
        *,
        source_action_id: str,
        observation_id: str | None = None,
    ) -> Observation:
        """Read a file and record what it holds: its SHA-256, or that it is absent.

        ``resource`` is a ``FilesystemResource`` or an ``fs`` :class:`ResourceRef`. A
        regular file is read whole (``FILESYSTEM_READ``, ``COMPLETE``); symlinks are
        followed, and a dangling one is absent. A directory, a FIFO, a socket, a device
        or a file this process may not read is recorded as existing without a digest
        (``FILESYSTEM_STAT``). ``OSError`` when not even its existence can be told.
        ``observation_id`` defaults to a fresh unique id.
        """
        return _calls.observe_file(
            self, resource, source_action_id=source_action_id, observation_id=observation_id
        )


class _Request(Entry):
    """Records one caller asked to write, waiting in the log's queue."""

    __slots__ = (
        "action",
        "claims",
        "effect_ids",
        "error",
        "observation_ids",
        "records",
        "resolves",
        "settles",
    )

    def __init__(self, action: str, records: Sequence[_Record], *, claims: bool) -> None:
        super().__init__()
        self.action = action
        self.records = list(records)
        # Claims and resolutions raise when they cannot be written; others degrade.
        self.claims = claims
        self.effect_ids: set[str] = set()
        self.settles: set[str] = set()
        self.observation_ids: set[str] = set()
        self.resolves: set[str] = set()
        self.error: BaseException | None = None


def _renumber(record: _Record, seq: int) -> _Record:
    # Records are built with the seq they get unless the queue ahead of them changes.
    return record if record.seq == seq else dataclasses.replace(record, seq=seq)


def _degraded_error(run_id: str) -> LogDegradedError:
    return LogDegradedError(
        f"run {run_id} is degraded: an earlier record was not persisted, so no new effect may start"
    )


def _not_before(now: str, claim: EffectClaim) -> str:
    """The time to record an outcome of ``claim`` at: ``now``, or the claim's own if later.

    A wall clock stepped back (NTP, a VM restored), or another host's behind this one,
    would date the outcome before its claim, which no durable run may hold
    (:func:`~ledger.effects.check_times`): the outcome then carries its claim's time.
    Both are in utc_now()'s form, so as text they order as times.
    """
    return max(now, claim.recorded_at)
