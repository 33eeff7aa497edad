"""Whether anything about a store's files may have changed since they were last checked.

Every write checks the store's directory and files first (ledger.sqlite.trust): type,
owner, mode, links. Stat'ing four paths costs four system calls, and between a commit's
fsyncs each one costs far more than in a tight loop (measured here: about 40 µs per
claim for the four). So a store asks the kernel to tell it instead: an inotify
instance watches the directory and each file, for the events that can change what the
checks read, and a commit whose files raised none since their last full check skips
it with one ``poll`` of that instance.

What is watched, and why each is needed (a directory's watch does not see a link made
to one of its files from elsewhere, only the file's own watch does):

- the directory: a file created, deleted or renamed in it (a ``-wal`` replaced by a
  symlink, a database moved in), its own mode or owner changed, itself moved or deleted;
- each file that exists: its mode, owner or link count changed (``IN_ATTRIB``), itself
  moved or deleted.

Writes, truncations and reads raise none of these, so a store at work stays quiet. Any
event at all, an overflowed queue, or an instance that could not be had means a full
check; the watches are renewed after each one. The order makes it safe: pending events
are dropped and the watches placed *before* the files are stat'ed, so a change that the
stat did not see raised an event that the next write finds.

Where inotify is missing (not Linux, a C library without it) or refused (the per-user
limit of instances or watches reached), every write checks the files whole, as before.
So it does on a FUSE file system: its server may change a file without the kernel
seeing it (a passthrough of a directory that others write directly, a file system
shared by hosts), and inotify reports only changes made through this kernel.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import os
import select
import threading
import weakref
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from ledger import _lifetime
from ledger.sqlite.liveness import file_system

_IN_NONBLOCK = os.O_NONBLOCK
_IN_CLOEXEC = os.O_CLOEXEC
_IN_ATTRIB = 0x4
_IN_MOVED_FROM = 0x40
_IN_MOVED_TO = 0x80
_IN_CREATE = 0x100
_IN_DELETE = 0x200
_IN_DELETE_SELF = 0x400
_IN_MOVE_SELF = 0x800
_IN_DONT_FOLLOW = 0x02000000
_FILE_EVENTS = _IN_ATTRIB | _IN_DELETE_SELF | _IN_MOVE_SELF | _IN_DONT_FOLLOW
_DIRECTORY_EVENTS = _FILE_EVENTS | _IN_CREATE | _IN_DELETE | _IN_MOVED_FROM | _IN_MOVED_TO


def _libc() -> tuple[Any, Any] | None:
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        init, add = libc.inotify_init1, libc.inotify_add_watch
    except (AttributeError, OSError):
        return None
    init.argtypes, init.restype = [ctypes.c_int], ctypes.c_int
    add.argtypes, add.restype = [ctypes.c_int, ctypes.c_char_p, ctypes.c_uint32], ctypes.c_int
    return init, add


_INOTIFY = _libc()


# Instances one process may hold: the kernel's limit is per user (128 by default) and
# shared with every other program of that user, so a process with many stores open
# checks the others by stat rather than take more.
MAX_INSTANCES = 4
_instances = 0
_instances_lock = threading.RLock()  # a finalizer may run in a thread that holds it


def _take_instance() -> int | None:
    global _instances  # noqa: PLW0603 - the process's count
    assert _INOTIFY is not None  # noqa: S101 - asked only where inotify exists
    with _instances_lock:
        if _instances >= MAX_INSTANCES:
            return None
        fd: int = _INOTIFY[0](_IN_NONBLOCK | _IN_CLOEXEC)
        if fd < 0:  # the user's limit reached, most likely
            return None
        _instances += 1
        return fd


def _give_instance(fd: int) -> None:
    global _instances  # noqa: PLW0603 - the process's count
    with _instances_lock:
        _instances -= 1
        with contextlib.suppress(OSError):
            os.close(fd)


class Watch:
    """The kernel's word that a store's files are as they were at their last full check.

    :meth:`quiet` is the fast path; a caller that gets False checks the files whole
    inside :meth:`checking`, which renews the watches first and trusts them again only
    if the check passed. Threads may call both at once: ``_generation`` is odd while a
    check (or :meth:`close`) is under way and changes with each, and :meth:`quiet`
    answers True only if it did not change while it looked, so it never trusts a poll
    that another thread's check emptied of the events it was looking for.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._fd: int | None = None
        self._release: Any = None  # weakref.finalize: the descriptor goes with the watch
        self._local = threading.local()
        self._armed = False  # the last full check passed, and the watches were in place
        self._generation = 0
        self._failed = _INOTIFY is None  # no inotify here (or no more): always check whole
        _lifetime.track(self)

    def quiet(self) -> bool:
        """True if the files passed a full check and nothing has happened to them since."""
        generation = self._generation
        fd = self._fd
        if generation & 1 or not self._armed or fd is None:
            return False
        # A poll object of each thread's own: one may not be polled by two threads at
        # once, and select() refuses descriptors above 1023.
        local = self._local
        if getattr(local, "fd", None) != fd:
            local.poll = select.poll()
            local.poll.register(fd, select.POLLIN)
            local.fd = fd
        try:
            pending = local.poll.poll(0)
        except OSError:
            return False
        return not pending and self._generation == generation

    @contextlib.contextmanager
    def checking(self, paths: Sequence[str]) -> Iterator[None]:
        """Renew the watches on ``paths`` (directory first), for a full check in the block.

        The watches are trusted again only if the block ends without an exception.
        """
        with self._lock:
            self._generation += 1
            self._armed = False
            try:
                armed = self._renew(paths)
                yield
                self._armed = armed
            finally:
                self._generation += 1

    def after_fork(self) -> None:
        """In a forked child: start afresh, with a full check (see _after_fork_in_child)."""
        self._lock = threading.Lock()  # may have been held at fork
        self.close()

    def close(self) -> None:
        """Let the instance go: every later check is a full one until it is renewed."""
        with self._lock:
            self._generation += 1
            self._armed = False
            self._drop()
            self._generation += 1

    def _drop(self) -> None:
        self._fd = None
        if self._release is not None:
            self._release()  # closes the descriptor, once
            self._release = None

    def _fail(self) -> bool:
        self._failed = True  # for good: trying again would cost more than stat
        self._drop()
        return False

    def _renew(self, paths: Sequence[str]) -> bool:
        """Drop pending events and place the watches; False if they cannot be trusted."""
        if self._failed:
            return False
        assert _INOTIFY is not None  # noqa: S101 - _failed says so otherwise
        add = _INOTIFY[1]
        if self._fd is None:
            if _unseen_changes(paths[0]):
                return self._fail()
            fd = _take_instance()
            if fd is None:
                return self._fail()
            self._fd = fd
            self._release = weakref.finalize(self, _give_instance, fd)
        while True:  # drop what is pending: the full check that follows covers it
            try:
                if not os.read(self._fd, 65536):
                    break
            except BlockingIOError:
                break
        mask = _DIRECTORY_EVENTS
        for path in paths:
            # A file that is missing is not watched: its creation is the directory's
            # event. Anything else (no watches left) leaves the checks to stat.
            if add(self._fd, os.fsencode(path), mask) < 0 and (
                ctypes.get_errno() != errno.ENOENT or mask == _DIRECTORY_EVENTS
            ):
                return self._fail()
            mask = _FILE_EVENTS
        # The directories above: one of them renamed or removed may leave the store's
        # path naming something else. Moves and removals are enough: a writer is refused
        # a path where anyone but this user and root may rename a directory (see
        # ledger.sqlite.trust.Exposure), and only this user or root could let others
        # later. Best effort: one the user may not read is not watched (inotify needs
        # read permission).
        for parent in Path(paths[0]).parents:
            add(self._fd, os.fsencode(parent), _IN_MOVE_SELF | _IN_DELETE_SELF)
        return True


def _unseen_changes(directory: str) -> bool:
    """Whether ``directory``'s files may change without an inotify event: on FUSE."""
    kind = file_system(Path(directory))
    return kind is not None and (kind == "fuse" or kind.startswith("fuse."))


def _after_fork_in_child() -> None:
    # The child shares the parent's inotify instances: reading their events would take
    # them from the parent. Each child watch starts afresh (Watch.after_fork, run after
    # this: every watch is tracked after its module registered).
    global _instances_lock  # noqa: PLW0603 - may have been held at fork
    _instances_lock = threading.RLock()


_lifetime.at_fork(_after_fork_in_child)
