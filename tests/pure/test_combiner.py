"""What the queue's lock helpers do with exceptions raised while they wait.

A signal handler's exception (Ctrl-C) arriving while a thread takes a lock is held back
and returned, with the lock held (tests/sqlite/test_interrupts.py sends real signals);
a call that fails every time is a bug, and is raised instead of retried for ever.
"""

from __future__ import annotations

import threading

import pytest

from ledger._combiner import acquire_uninterrupted, wait_for_gate


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
