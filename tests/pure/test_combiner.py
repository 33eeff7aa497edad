"""What the queue's lock helpers do with exceptions raised while they wait.

A signal handler's exception (Ctrl-C) arriving while a thread takes a lock is held back
and returned, with the lock held (tests/sqlite/test_interrupts.py sends real signals);
a call that fails every time is a bug, and is raised instead of retried for ever.
"""

from __future__ import annotations

import threading

import pytest

from ledger._combiner import Combiner, Entry, acquire_uninterrupted, wait_for_gate

# Far longer than any wait here can take: a thread still waiting then never wakes.
JOIN_TIMEOUT = 60


class _Interrupted:
    """A real lock whose first ``times`` acquisitions raise, as a signal handler's would."""

    def __init__(self, times: int) -> None:
        self.lock = threading.RLock()
        self.times = times

    def _is_owned(self) -> bool:
        return self.lock._is_owned()  # type: ignore[attr-defined]

    def acquire(self) -> bool:
        if self.times:
            self.times -= 1
            raise KeyboardInterrupt
        return self.lock.acquire()


def test_interrupts_while_taking_a_lock_are_returned_with_the_lock_held() -> None:
    """Three Ctrl-C while taking the lock: it is held, and the first interrupt is returned."""
    lock = _Interrupted(3)
    interrupt = acquire_uninterrupted(lock)
    assert isinstance(interrupt, KeyboardInterrupt)
    assert lock._is_owned()
    lock.lock.release()


def test_a_lock_that_can_never_be_taken_raises_instead_of_spinning() -> None:
    """An acquire that always raises is a bug: RuntimeError, caused by it, not a hang."""
    with pytest.raises(RuntimeError, match="every attempt raised") as raised:
        acquire_uninterrupted(_Interrupted(10**9))
    assert isinstance(raised.value.__cause__, KeyboardInterrupt)


def test_a_gate_that_can_never_be_waited_on_raises_instead_of_spinning() -> None:
    """A gate whose acquire always raises, never ready: RuntimeError, not a hang."""
    with pytest.raises(RuntimeError, match="every attempt raised"):
        wait_for_gate(_Interrupted(10**9), lambda: False)


def test_interrupts_while_waiting_on_a_gate_are_returned_once_it_opens() -> None:
    """Ctrl-C while asleep on a gate: the wait goes on until the gate opens, then returns it."""
    gate = _Interrupted(2)
    gate.lock.acquire()
    opened = threading.Event()

    def open_gate() -> None:
        opened.set()
        gate.lock.release()

    # The opener runs in this thread (the gate is this thread's RLock), on the third look
    # at whether the gate is ready: after both interrupts were raised.
    ready_calls = 0

    def ready() -> bool:
        nonlocal ready_calls
        ready_calls += 1
        if ready_calls == 3 and not opened.is_set():
            open_gate()
        return opened.is_set()

    interrupt = wait_for_gate(gate, ready)
    assert isinstance(interrupt, KeyboardInterrupt)
    assert opened.is_set()


def test_every_caller_waiting_for_an_idle_queue_wakes_when_it_falls_idle() -> None:
    """Two threads wait for the queue to fall idle (as close and recovery do): both wake when the write ends."""
    lock = threading.Condition(threading.RLock())
    writing, finish = threading.Event(), threading.Event()

    def run(batch: list[Entry]) -> None:
        lock.release()  # as a store's write does while it commits
        writing.set()
        finish.wait(JOIN_TIMEOUT)
        lock.acquire()
        for entry in batch:
            entry.done = True

    queue: Combiner[Entry] = Combiner(lock, run, lambda _entries, _error: None)

    def write() -> None:
        with lock:
            queue.submit(Entry())

    waiting = [threading.Event(), threading.Event()]

    def wait_idle(said: threading.Event) -> None:
        with lock:
            assert queue.busy
            said.set()  # under the lock: the writer cannot end before this thread waits
            while queue.busy:
                lock.wait()

    writer = threading.Thread(target=write, daemon=True)
    writer.start()
    assert writing.wait(JOIN_TIMEOUT)
    waiters = [threading.Thread(target=wait_idle, args=(w,), daemon=True) for w in waiting]
    for waiter, said in zip(waiters, waiting, strict=True):
        waiter.start()
        assert said.wait(JOIN_TIMEOUT)
    finish.set()  # the writer retakes the lock only once both waiters sleep, and hands over
    for thread in (writer, *waiters):
        thread.join(JOIN_TIMEOUT)
    stuck = [t.name for t in (writer, *waiters) if t.is_alive()]
    with lock:
        lock.notify_all()  # let a stuck waiter end with the test
    assert stuck == []


def test_a_caller_that_comes_while_one_writes_alone_is_written_next_by_itself() -> None:
    """One caller writes at once on an idle queue; one that comes meanwhile leads the next batch.

    The first writes its entry alone, through no queue; the second, queued while the first
    writes, is handed the leadership and writes its own batch: each batch holds exactly
    its caller's entry, and both return settled.
    """
    lock = threading.Condition(threading.RLock())
    writing, finish = threading.Event(), threading.Event()
    batches: list[list[str]] = []
    names: dict[int, str] = {}

    def run(batch: list[Entry]) -> None:
        batches.append([names[id(e)] for e in batch])
        if len(batches) == 1:
            lock.release()  # as a store's write does while it commits
            writing.set()
            finish.wait(JOIN_TIMEOUT)
            lock.acquire()
        for entry in batch:
            entry.done = True

    queue: Combiner[Entry] = Combiner(lock, run, lambda _entries, _error: None)
    first, second = Entry(), Entry()
    names.update({id(first): "first", id(second): "second"})

    def write(entry: Entry) -> None:
        with lock:
            queue.submit(entry)

    writer = threading.Thread(target=write, args=(first,), daemon=True)
    writer.start()
    assert writing.wait(JOIN_TIMEOUT)
    follower = threading.Thread(target=write, args=(second,), daemon=True)
    follower.start()
    while True:  # the follower has queued once the queue holds it
        with lock:
            if queue.waiting:
                break
        follower.join(0.01)
    finish.set()
    for thread in (writer, follower):
        thread.join(JOIN_TIMEOUT)
    assert not writer.is_alive()
    assert not follower.is_alive()
    assert batches == [["first"], ["second"]]
    assert first.done
    assert second.done
    with lock:
        assert not queue.busy


def test_a_write_that_raises_alone_settles_its_entry_and_frees_the_queue() -> None:
    """The run of a lone caller's batch raises: its entry is abandoned, the error raised, the queue idle."""
    lock = threading.Condition(threading.RLock())
    abandoned: list[tuple[int, BaseException | None]] = []

    def run(_batch: list[Entry]) -> None:
        raise OSError("the disk is gone")

    def abandon(entries: list[Entry], error: BaseException | None) -> None:
        for entry in entries:
            abandoned.append((len(entries), error))
            entry.done = True

    queue: Combiner[Entry] = Combiner(lock, run, abandon)
    entry = Entry()
    with lock, pytest.raises(OSError, match="the disk is gone"):
        queue.submit(entry)
    assert entry.done
    assert [(n, str(e)) for n, e in abandoned] == [(1, "the disk is gone")]
    with lock:
        assert not queue.busy
