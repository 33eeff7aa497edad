"""The order in which this machine's processes take a store's write lock.

SQLite gives its write lock to whichever connection asks first after it is free; a
writer that finds it taken can only try again later (ledger.sqlite.commit retries every
0.2 to 2 ms). Under contention that is a lottery: the process that just committed asks
again at once, a waiter that slept a little too long loses again and again, and the
unlucky claim of four busy processes waited 20 to 80 ms. So before ``BEGIN IMMEDIATE``
each writing process takes its *turn*: an exclusive POSIX record lock on one byte of the
store's ``ledger.lock``, above the run and recovery bytes (ledger.sqlite.liveness),
held until its transaction has ended. Waiters of the turn sleep in the kernel, which
wakes them as soon as it is free, in about the order they came (they race for it once
woken, and a process that has just given its turn back may take it again first).

The turn is a courtesy among this library's writers, not what keeps their transactions
apart (SQLite's lock does that): a process that ignores it (the ``sqlite3`` shell), or a
turn lost to a closed descriptor, costs fairness, never correctness. Nor may it hang a
writer: the kernel's wait has no timeout, so it is waited for in a thread of its own,
and a writer that has not got the turn after :data:`PATIENCE` seconds goes on without
it, straight to SQLite's lock and its deadline; until the turn is found free again, the
process's writers then go without it (a holder that is stopped, say, in a debugger,
costs each of them that wait once, not at every write). One turn serves all the
Store objects of a process on one store path (:func:`attach`), so a store closed
and opened again keeps its place and what it learnt.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import logging
import os
import threading
from pathlib import Path

from ledger import _lifetime
from ledger.errors import EffectPersistenceError
from ledger.sqlite import liveness

log = logging.getLogger("ledger")

# How long a writer waits in the queue before it goes on to SQLite's lock without it.
# Turns are held for one transaction, milliseconds; a queue of many processes behind
# large batches may take longer, and then falls back to SQLite's retries, still correct.
PATIENCE = 2.0

_OFFSET = liveness.TURN_OFFSET


class Turn:
    """This process's place in the queue of one store's writing processes.

    Used by one thread at a time (the store's group-commit leader, under its write lock):
    :meth:`take` before ``BEGIN IMMEDIATE``, :meth:`give_back` once the transaction ended.
    Every failure to take it is a turn gone without, never a failed write.
    """

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self._cond = threading.Condition(threading.Lock())
        self._pin: liveness.Pin | None = None
        self._waiter: threading.Thread | None = None
        self.users = 0  # Stores attached (see attach)
        self._pending = False  # the waiter thread is asking the kernel for the byte
        self._wanted = False  # a writer waits for the waiter thread to get it
        self._held = False  # this process may hold the byte, for the writer
        self._stuck = False  # the last wait ran out of patience
        self._closed = False

    def take(self) -> bool:
        """Wait for this process's turn; False if it went without one (see module doc)."""
        with self._cond:
            self._closed = False  # a store's connections may be opened again after close
            try:
                if not self._pending:
                    if self._pin is None:
                        self._pin = liveness.pin(self.directory)
                    # Held before the kernel is asked: a signal handler raising just after
                    # it granted the byte must not leave it held past give_back().
                    self._held = True
                    if self._lock(fcntl.LOCK_EX | fcntl.LOCK_NB):
                        self._stuck = False
                        return True
                    self._held = False
                    if self._stuck:
                        return False
                    self._start_waiter()
                    self._pending = True
                    self._cond.notify_all()
                elif self._stuck:
                    return False
            except (OSError, RuntimeError, EffectPersistenceError) as e:  # go without
                self._held = False
                log.warning("store %s: writing without a turn: %s", self.directory, e)
                return False
            self._wanted = True
            try:
                ended = self._cond.wait_for(
                    lambda: self._held or self._closed or not self._pending, PATIENCE
                )
            except BaseException:
                # Interrupted (Ctrl-C): the writer goes no further, so neither may the turn.
                self._wanted = False
                self._give_back()
                raise
            self._wanted = False
            if self._held:
                return True
            if not ended:  # out of patience (a failed waiter marked it stuck itself)
                self._stuck = True
            return False

    def give_back(self) -> None:
        """Let the next process in: called once the transaction has ended either way."""
        with self._cond:
            self._give_back()

    def close(self) -> None:
        """Give the byte back, and let the descriptor and the waiter thread go once idle."""
        with self._cond:
            self._give_back()
            self._closed = True
            self._cond.notify_all()
            if not self._pending:
                self._unpin()

    @property
    def pending(self) -> bool:
        """Whether the waiter thread still queues in the kernel."""
        return self._pending

    # -- internals; the condition's lock held

    def _give_back(self) -> None:
        if self._held:
            # Unlocking never waits nor conflicts; should it fail all the same, the next
            # processes lose only their patience once. The flag goes after the unlock.
            with contextlib.suppress(OSError):
                self._lock(fcntl.LOCK_UN)
            self._held = False

    def _unpin(self) -> None:
        if self._pin is not None:
            liveness.unpin(self._pin)
            self._pin = None

    def _lock(self, command: int) -> bool:
        """Lock or unlock the turn byte; False if another process holds it (or it cannot be had)."""
        assert self._pin is not None  # noqa: S101 - pinned by take() before any lock
        try:
            fcntl.lockf(self._pin.fd, command, 1, _OFFSET, os.SEEK_SET)
        except OSError as e:
            if e.errno not in (errno.EAGAIN, errno.EACCES, errno.EDEADLK, errno.ENOLCK):
                raise
            return False
        return True

    def _start_waiter(self) -> None:
        if self._waiter is None:
            waiter = threading.Thread(target=self._wait, name="ledger-turn", daemon=True)
            waiter.start()  # before anything is marked: a thread that cannot start changes nothing
            self._waiter = waiter

    def _wait(self) -> None:
        """The waiter thread: blocks in the kernel for the byte whenever a writer asks."""
        try:
            while self._serve():
                pass
        finally:
            with self._cond:  # whatever ended it, the next take() starts a new one
                if self._waiter is threading.current_thread():
                    self._waiter = None
                if self._pending and self._waiter is None:
                    self._pending = False
                    self._stuck = True
                    if self._closed:
                        self._unpin()
                self._cond.notify_all()

    def _serve(self) -> bool:
        """One request: False once closed with nothing asked."""
        with self._cond:
            self._cond.wait_for(lambda: self._pending or self._closed)
            if not self._pending:  # closed, and nobody asks
                self._waiter = None  # here: a take() from now on starts a new thread
                return False
            pin = self._pin
        assert pin is not None  # noqa: S101 - pinned before any request
        try:
            # Blocks without the GIL; the writer's patience runs meanwhile.
            fcntl.lockf(pin.fd, fcntl.LOCK_EX, 1, _OFFSET, os.SEEK_SET)
            got = True
        except OSError:  # EDEADLK, ENOLCK: go without, as if out of patience
            got = False
        with self._cond:
            self._pending = False
            if got:
                self._held = True
            if not (got and self._wanted and not self._closed):
                # Nobody wants it any more: the next process may have it. That the queue
                # moved says the turn is worth waiting for again.
                self._give_back()
                self._stuck = not got
                if self._closed:
                    self._unpin()
            self._cond.notify_all()
        return True


# --------------------------------------------------------------------------- one per store

_turns_lock = threading.Lock()
_turns: dict[Path, Turn] = {}


def attach(directory: Path) -> Turn:
    """The process's turn on the store at ``directory``, shared by its Store objects."""
    with _turns_lock:
        turn = _turns.get(directory)
        if turn is None:
            turn = _turns[directory] = Turn(directory)
        turn.users += 1
        return turn


def detach(turn: Turn) -> None:
    """Undo :func:`attach`; the last detach closes the turn.

    A turn whose waiter thread still queues stays in the registry, so that a store opened
    again meanwhile finds its place in the queue, and that the wait ran out of patience.
    """
    with _turns_lock:
        turn.users -= 1
        if turn.users > 0:
            return
        turn.close()
        if not turn.pending and _turns.get(turn.directory) is turn:
            del _turns[turn.directory]


def _after_fork_in_child() -> None:
    # The child has none of its parent's waiter threads nor locks: it starts afresh, and
    # its stores attach again (ledger.sqlite.store).
    global _turns_lock  # noqa: PLW0603 - the lock may have been held at fork
    _turns_lock = threading.Lock()
    _turns.clear()


_lifetime.at_fork(_after_fork_in_child)
