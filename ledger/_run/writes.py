"""How one run's log writes: a queue of checked records, written in batches, in ``seq`` order.

Threads that write at once queue here; one of them (the leader, :mod:`ledger._combiner`)
writes every queued record in one transaction while the others wait for its fate. A
record that lands is added to the run's memory (:class:`~ledger._run.state.RunState`).
One that does not: a claim or a resolution exists nowhere and its caller gets the error;
an outcome or an observation stays in memory and *degrades* the log, which then writes
nothing more (the durable rows stay a prefix of what the worker did).
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Sequence
from typing import Any

from ledger import _owner
from ledger._chain import GENESIS
from ledger._combiner import Combiner, Entry, acquire_uninterrupted
from ledger._owner import Writer
from ledger._run.journal import Journal
from ledger._run.state import RunState, renumber
from ledger.effects import (
    ApprovalDecision,
    ApprovalRequest,
    EffectClaim,
    EffectOutcome,
    Observation,
    Record,
    ResolutionOrigin,
    utc_now,
)
from ledger.errors import (
    EffectPersistenceError,
    LogDegradedError,
    StoreTamperedError,
    retold,
)
from ledger.storage import CHAIN_NOT_EXTENDED, SEQ_TAKEN, Batch

__all__ = ["Request", "Writes", "degraded_error"]

log = logging.getLogger("ledger")


def degraded_error(run_id: str) -> LogDegradedError:
    """The error of a write a degraded log refuses."""
    return LogDegradedError(
        f"run {run_id} is degraded: an earlier record was not persisted, so no new effect may start"
    )


class Request(Entry):
    """Records one caller asked to write, waiting in the log's queue."""

    __slots__ = ("action", "error", "raises", "records")

    def __init__(self, action: str, records: Sequence[Record], *, raises: bool) -> None:
        super().__init__()
        self.action = action
        self.records = list(records)
        # Claims and resolutions (and strict outcomes) raise when they cannot be written;
        # other records degrade the log.
        self.raises = raises
        self.error: BaseException | None = None


class Writes:
    """The write queue of one run's log; every method is called with ``cond`` held."""

    def __init__(
        self,
        state: RunState,
        journal: Journal,
        cond: threading.Condition,
        *,
        writer_name: str | None,
    ) -> None:
        self.state = state
        self.journal = journal
        self.cond = cond
        self.queue: Combiner[Request] = Combiner(cond, self._write, self._abandon)
        self.writer_name = writer_name
        self.head = GENESIS  # the hash of the run's last durable record
        self.started = False  # whether the run's row is in the store
        self.continuing = False  # loaded: the run may already exist
        self.writer_pid = 0  # the process recorded as the run's writer, once it wrote
        # The ledger command's log on a worker's run: what it writes leaves the worker as
        # the run's writer.
        self.visitor: str | None = None
        self.unwritten: list[Observation] = []  # made before the run's first write
        self.degraded = False

    @property
    def run_id(self) -> str:
        """The run's id."""
        return self.state.run_id

    def submit(self, request: Request) -> None:
        """Queue a checked request and return once it is written (or failed).

        A signal handler that raises meanwhile (Ctrl-C) is held back until the log's
        memory matches the store, then raised.
        """
        self.state.reserve(request.records)
        interrupt = self.queue.submit(request)
        if interrupt is not None:
            raise interrupt

    def degrade(self, what: str, error: BaseException) -> None:
        """Write nothing more: ``what`` could not be persisted and is in memory only."""
        self.degraded = True
        log.error(
            "run %s is degraded: %s could not be persisted (%s); "
            "it is kept in memory only and nothing more will be written",
            self.run_id,
            what,
            error,
        )

    def written_by(self, *, allow_self: bool) -> dict[str, Any]:
        """The fields of a resolution that say which process wrote it, and as what."""
        if self.visitor is not None:
            origin, program = ResolutionOrigin.PERSON, self.visitor
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

    def process(self) -> dict[str, Any]:
        """This process as an approval record names it: OS user, host, program, pid."""
        return {
            "os_user": _owner.os_user(),
            "host": _owner.host_name(),
            "program": self.visitor if self.visitor is not None else _owner.program(),
            "pid": os.getpid(),
        }

    def catch_up(self, action: str) -> bool:
        """Take in the approval decisions other processes appended to the run since its head.

        A person answers a request with ``ledger approve`` while the worker that asked
        holds the run: the worker's next write would otherwise meet the run moved on.
        True when the store's run is this log's followed by decisions only, now adopted
        (the head moves to the store's); False when there is nothing new, or anything else
        is new (then the write that met it fails, as before).
        """
        if not self.started or self.degraded:
            return False
        store = self.journal.acquire()
        history, head = store.load_run(self.run_id, action)
        if head == self.head:
            return False
        records = history.records()
        known = self.state.next_seq - 1
        if len(records) <= known or (known and records[known - 1] != self._last(known)):
            return False
        new = records[known:]
        if not all(isinstance(r, ApprovalDecision) for r in new):
            return False
        for record in new:
            self.state.remember(record)
        self.state.next_seq = new[-1].seq + 1
        self.head = head
        return True

    def _last(self, seq: int) -> Record | None:
        """This log's durable record at ``seq`` (the newest it knows)."""
        for record in reversed(self.state.history().records()):
            if record.seq == seq:
                return record
        return None

    def _writer(self) -> Writer | None:
        if self.visitor is not None or self.writer_pid == os.getpid():
            return None
        return Writer.current(self.writer_name)

    def _write(self, batch: list[Request]) -> BaseException | None:
        """The queue's writer (see ledger._combiner): lock held, released to write."""
        try:
            return self._write_batch(batch)
        finally:
            for request in batch:
                self.state.release(request.records)

    def _abandon(self, batch: list[Request], error: BaseException | None) -> None:
        """Settle as unwritten the requests a failure of this code itself left behind."""
        cause = f"{type(error).__name__}: {error}" if error is not None else "interrupted"
        lost = EffectPersistenceError(f"cannot record records in run {self.run_id}: {cause}")
        lost.__cause__ = error
        self._fail(batch, lost)

    def _write_batch(self, batch: list[Request]) -> BaseException | None:
        """Write a batch and settle its requests; return an interrupt held back meanwhile."""
        seq = self.state.next_seq
        for request in batch:  # number the records for real, in queue order
            request.records = [renumber(r, seq + i) for i, r in enumerate(request.records)]
            seq += len(request.records)
        records = [record for request in batch for record in request.records]
        if self.degraded:
            self._fail(batch, None)
            return None
        if not self.started and not any(
            isinstance(r, (EffectClaim, ApprovalRequest)) for r in records
        ):
            # A run that has not claimed writes nothing: its observations wait for a claim.
            # A request for approval starts the run: a person must find it in the store.
            for record in records:
                self.unwritten.append(record)  # type: ignore[arg-type]  # only observations
                self.state.remember(record)
            self.state.next_seq = seq
            for request in batch:
                request.done = True
            return None
        action = batch[0].action if len(batch) == 1 else f"{len(records)} records"
        writer = self._writer()
        durable = Batch(
            action=f"cannot record {action} in run {self.run_id}",
            run_id=self.run_id,
            records=[*self.unwritten, *records] if not self.started else records,
            head=self.head,
            # Only the run's row and its writer's carry the time: asked only for them.
            now=utc_now() if writer is not None or not self.started else "",
            start=not self.started,
            continuing=self.continuing,
            writer=writer,
            # A loaded run that was empty must still be: had another process started it
            # since, this log's first record would clash with that one's.
            ends_at=0 if self.continuing and not self.started else None,
        )
        failed = self.journal.hold_shared(durable.action)
        if failed is not None:
            self._fail(batch, failed)
            return None
        self.cond.release()  # other threads queue up for the next transaction meanwhile
        try:
            job = self.journal.append(durable)
        finally:
            held_back = acquire_uninterrupted(self.cond)
        if job.error is not None and self._moved_on(job.error, durable):
            # Another process answered an approval meanwhile: the batch follows its answer.
            return self._write_batch(batch) or job.interrupt or held_back
        if job.error is not None:
            self._fail(batch, job.error)
        else:
            self.head = job.head
            self.started = True
            self.writer_pid = os.getpid()
            self.unwritten.clear()
            for record in records:
                self.state.remember(record)
            self.state.next_seq = seq
            for request in batch:
                request.done = True
        return job.interrupt or held_back

    def _moved_on(self, error: BaseException, durable: Batch) -> bool:
        """Whether ``error`` is the run having moved on by decisions now caught up with.

        Caught up here, or by another thread of this log while the batch was in flight
        (the head it followed is no longer this log's).
        """
        if not isinstance(error, EffectPersistenceError) or isinstance(error, StoreTamperedError):
            return False
        if SEQ_TAKEN not in str(error) and CHAIN_NOT_EXTENDED not in str(error):
            return False
        if durable.head != self.head:
            return True
        try:
            return self.catch_up(durable.action)
        except EffectPersistenceError:
            return False

    def _fail(self, batch: list[Request], error: BaseException | None) -> None:
        """Tell each request of a batch that was not written (``None``: the log is degraded).

        Claims exist nowhere; outcomes and observations stay in memory and degrade the log.
        A store found tampered with degrades the log even when only claims met it: one
        that drops rows may have dropped others, so nothing more is written to it.
        """
        seq = self.state.next_seq
        if isinstance(error, StoreTamperedError) and not self.degraded:
            self.degrade(batch[0].action, error)
        for request in batch:
            if request.raises:
                if error is None:
                    request.error = degraded_error(self.run_id)
                elif isinstance(error, EffectPersistenceError):
                    request.error = retold(error)
                else:
                    request.error = error  # not the store's trouble: raised as it is
            else:
                if error is not None and not self.degraded:
                    self.degrade(request.action, error)
                request.records = [renumber(r, seq + i) for i, r in enumerate(request.records)]
                seq += len(request.records)
                for record in request.records:
                    self.state.remember(record)
            request.done = True
        self.state.next_seq = seq

    def recover(
        self, appended: tuple[EffectOutcome, ...], now: str, *, force: bool
    ) -> tuple[EffectOutcome, ...]:
        """Write recovery's outcomes, the run held exclusive (released while the store commits)."""
        exclusive = self.journal.hold_exclusive(force=force)
        try:
            return self._recover_held(appended, now)
        finally:
            if exclusive is not None:
                exclusive.release()

    def _recover_held(
        self, appended: tuple[EffectOutcome, ...], now: str
    ) -> tuple[EffectOutcome, ...]:
        request = Batch(
            action=f"cannot recover run {self.run_id}",
            run_id=self.run_id,
            records=appended,
            head=self.head,
            now=now,
            writer=None if self.visitor is not None else Writer.current(self.writer_name),
            ends_at=self.state.next_seq - 1,  # or another writer touched the run: refused
        )
        settling = {o.effect_id for o in appended}
        # Nobody else writes this run until recovery is done, and no outcome of these
        # effects is accepted meanwhile: they are being settled.
        self.queue.hold()
        self.state.queued_settles.update(settling)
        self.cond.release()
        try:
            job = self.journal.append(request)
        finally:
            held_back = acquire_uninterrupted(self.cond)
            self.state.queued_settles.difference_update(settling)
            self.queue.hand_over()
        if job.error is None:
            self.head = job.head
            self.writer_pid = os.getpid()
            for record in appended:
                self.state.remember(record)
            self.state.next_seq += len(appended)
        elif isinstance(job.error, StoreTamperedError):
            self.degrade("recovery", job.error)
        interrupt = job.interrupt or held_back
        if interrupt is not None:
            raise interrupt
        if job.error is not None:
            raise job.error
        return appended
