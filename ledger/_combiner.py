"""One leader/follower queue: the first waiting caller writes for everyone queued behind it.

Wherever writes are batched (a log's records, a store's transactions) callers queue an
*entry*; the caller that finds nobody writing becomes the *leader*: it takes the queue
(or its first ``limit`` entries), runs the batch, wakes each caller of the batch once,
and goes on until its own entry is settled; then it hands the leadership to the oldest
waiting caller. While a leader writes, new callers queue up for the next batch, so under
load one write serves many callers, and without load a caller pays no wait at all.

Every waiting caller sleeps on a gate of its own and is woken exactly once: when its
entry is settled, or to lead. No crowd of threads wakes up to find it has nothing to do,
which would cost more than the batching saves.

A signal handler's exception (Ctrl-C) never cuts a write in flight short: it is held
back and returned, to be raised once the caller has recorded its entry's fate.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any, Generic, TypeVar

# A signal handler raises once per signal; the same call failing this many times in a
# row is a bug, not a burst of Ctrl-C, and is raised rather than retried for ever.
_RETRIES = 1000


def acquire_uninterrupted(lock: Any) -> BaseException | None:
    """Hold ``lock`` (an RLock, or a Condition on one) even if a signal handler raises.

    Return what the handler raised, for the caller to raise once it is safe to. The
    exception may come just after the lock was taken, before anything could note it:
    the lock's record of its owner says whether to take it again, so the thread neither
    blocks on a lock it holds nor goes on without it.
    """
    interrupt = None
    for _ in range(_RETRIES):
        try:
            if not lock._is_owned():  # noqa: SLF001 - what Condition itself relies on
                lock.acquire()
        except BaseException as e:  # held back, see above
            interrupt = interrupt or e
        else:
            return interrupt
    raise RuntimeError(f"cannot take {lock!r}: every attempt raised") from interrupt


def wait_for_gate(gate: Any, ready: Callable[[], bool]) -> BaseException | None:
    """Sleep on a one-shot gate until ``ready()``, even if a signal handler raises.

    Whoever opens the gate first sets what ``ready`` reads, so after an interrupt the
    flag, not the lock, says whether the wake-up already came.
    """
    interrupt = None
    failures = 0
    while True:
        try:
            if not ready():
                gate.acquire()
        except BaseException as e:  # held back, see above
            interrupt = interrupt or e
            failures += 1
            if failures >= _RETRIES:
                raise RuntimeError(f"cannot wait on {gate!r}: every attempt raised") from e
        else:
            if ready():
                return interrupt


class Entry:
    """One caller's place in a queue: settled (``done``) or handed the leadership (``lead``)."""

    __slots__ = ("done", "gate", "lead")

    def __init__(self) -> None:
        self.done = False
        self.lead = False
        # Released once: when done, or to lead. Made only when the entry queues: a
        # caller that finds the queue idle writes at once and never waits on it.
        self.gate: Any = None


E = TypeVar("E", bound=Entry)


class Combiner(Generic[E]):
    """The queue, and the leadership over it.

    ``lock`` is a Condition on an RLock (an RLock knows its owner: see
    :func:`acquire_uninterrupted`); it guards the queue and whatever the caller keeps
    beside it, and is notified whenever the queue falls idle.
    """

    def __init__(
        self,
        lock: threading.Condition,
        run: Callable[[list[E]], BaseException | None],
        abandon: Callable[[list[E], BaseException | None], None],
        *,
        limit: int | None = None,
    ) -> None:
        """``run(batch)`` writes a batch, lock held (it may release it while it writes).

        It settles each entry (``done``) and returns an interrupt it held back, if any.
        ``abandon(entries, error)`` settles the entries ``run`` left unsettled: because it
        raised ``error``, or (``None``) because it was cut short.
        """
        self.lock = lock
        self._run = run
        self._abandon = abandon
        self._limit = limit
        self._queue: list[E] = []
        self._leading = False

    @property
    def waiting(self) -> int:
        """How many entries wait for a leader to take them."""
        return len(self._queue)

    @property
    def busy(self) -> bool:
        """Whether anyone writes or waits to (lock held)."""
        return self._leading or bool(self._queue)

    def submit(self, entry: E) -> BaseException | None:
        """Queue ``entry`` and return once it is settled; lock held on entry and return.

        Returns a signal handler's exception met meanwhile, for the caller to raise
        once it has acted on the entry's fate. ``run`` raising is raised here, by the
        leader, after every entry of its batch was abandoned and woken.
        """
        self._queue.append(entry)
        interrupt = None
        if self._leading:
            entry.gate = threading.Lock()
            entry.gate.acquire()  # a new lock: never blocks
            self.lock.release()
            interrupt = wait_for_gate(entry.gate, lambda: entry.done or entry.lead)
            interrupt = acquire_uninterrupted(self.lock) or interrupt
        else:
            # Nobody writes or waits: the caller leads at once, its own entry the whole
            # first batch, with no gate (none waits on it). Callers that come meanwhile
            # queue for the next batch.
            self._leading = True
        if not entry.done:  # this caller leads until its own entry is settled
            interrupt = self._lead(entry) or interrupt
        return interrupt

    def _lead(self, entry: E) -> BaseException | None:
        interrupt: BaseException | None = None
        try:
            while not entry.done:
                batch = self._queue[: self._limit]
                del self._queue[: self._limit]
                try:
                    interrupt = self._run(batch) or interrupt
                except BaseException as e:  # settle the batch, wake it, then raise
                    self._abandon([e2 for e2 in batch if not e2.done], e)
                    raise
                else:
                    unsettled = [e2 for e2 in batch if not e2.done]
                    if unsettled:
                        self._abandon(unsettled, None)
                finally:
                    for other in batch:
                        if other is not entry:
                            other.gate.release()
        finally:
            self.hand_over()
        return interrupt

    def hold(self) -> None:
        """Wait until the queue is idle, then keep every caller queued (lock held).

        For a write that must run alone (recovery): release with :meth:`hand_over`.
        """
        while self.busy:
            self.lock.wait()
        self._leading = True

    def hand_over(self) -> None:
        """Make the oldest waiting caller the leader, or mark the queue idle (lock held)."""
        if self._queue:
            self._queue[0].lead = True
            self._queue[0].gate.release()
        else:
            self._leading = False
            self.lock.notify_all()  # whoever waits for an idle queue (close, recovery)


class Job(Entry):
    """One caller's writes in a store's commit queue: how they ended."""

    __slots__ = ("error", "interrupt")

    def __init__(self) -> None:
        super().__init__()
        self.error: BaseException | None = None
        # A signal handler's exception (Ctrl-C) met while the job was in flight, kept
        # until its fate is known so that the caller can record that fate first.
        self.interrupt: BaseException | None = None


J = TypeVar("J", bound=Job)


class GroupCommitQueue(Generic[J]):
    """A store's writers in this process: the leader commits every queued job at once.

    A backend says how a batch is committed (:meth:`_commit`: each job settled, a signal
    handler's exception raised as it is) and how the jobs a cut-short batch left are
    settled (:meth:`_interrupted`).
    """

    def __init__(self, limit: int) -> None:
        self._mutex = threading.Condition(threading.RLock())
        self._queue: Combiner[J] = Combiner(
            self._mutex, self._write, self._interrupted, limit=limit
        )

    @property
    def waiting(self) -> int:
        """How many jobs wait for a leader to take them."""
        return self._queue.waiting

    def submit(self, job: J) -> J:
        """Run ``job`` in a committed transaction and return it, its fate settled.

        Never raises for the job: its ``error`` (the store's trouble) and ``interrupt`` (a
        signal handler's exception met meanwhile) are for the caller to act on, in that
        order.
        """
        interrupt = acquire_uninterrupted(self._mutex)
        try:
            interrupt = self._queue.submit(job) or interrupt
        finally:
            self._mutex.release()
        job.interrupt = interrupt
        return job

    def _write(self, batch: list[J]) -> BaseException | None:
        """Commit a batch, the queue's lock released meanwhile; return what interrupted it."""
        self._mutex.release()
        interrupt = None
        try:
            self._commit(batch)
        except BaseException as e:  # the queue settles the unsettled jobs, then it is raised
            interrupt = e
        held_back = acquire_uninterrupted(self._mutex)
        return interrupt or held_back

    def _commit(self, batch: list[J]) -> None:
        raise NotImplementedError

    def _interrupted(self, jobs: list[J], error: BaseException | None) -> None:
        raise NotImplementedError
