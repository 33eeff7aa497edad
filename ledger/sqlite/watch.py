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
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import os
import select
import threading
import weakref
from collections.abc import Iterable
from typing import Any

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


class Watch:
    """The kernel's word that a store's files are as they were at their last full check.

    :meth:`quiet` is the fast path; a caller that gets False checks the files whole
    inside :meth:`checking`, which renews the watches first and trusts them again only
    if the check passed.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._fd: int | None = None
        self._local = threading.local()
        self._armed = False  # the last full check passed, and the watches were in place
        self._failed = _INOTIFY is None  # no inotify here: always check whole
        _watches.add(self)

    def quiet(self) -> bool:
        """True if the files passed a full check and nothing has happened to them since."""
        armed = self._armed
        fd = self._fd  # read after _armed: close() clears them in that order
        if not armed or fd is None:
            return False
        # A poll object of each thread's own: one may not be polled by two threads at
        # once, and select() refuses descriptors above 1023.
        local = self._local
        if getattr(local, "fd", None) != fd:
            local.poll = select.poll()
            local.poll.register(fd, select.POLLIN)
            local.fd = fd
        try:
            return not local.poll.poll(0)
        except OSError:  # closed meanwhile
            return False

    @contextlib.contextmanager
    def checking(self, paths: Iterable[str]) -> Any:
        """Renew the watches on ``paths`` (directory first), for a full check in the block.

        The watches are trusted again only if the block ends without an exception.
        """
        with self._lock:
            self._armed = False
            armed = self._renew(paths)
            yield
            self._armed = armed

    def close(self) -> None:
        """Let the instance go: every later check is a full one until it is renewed."""
        with self._lock:
            self._armed = False
            fd, self._fd = self._fd, None
            if fd is not None:
                with contextlib.suppress(OSError):
                    os.close(fd)

    def _renew(self, paths: Iterable[str]) -> bool:
        """Drop pending events and place the watches; False if they cannot be trusted."""
        if self._failed:
            return False
        assert _INOTIFY is not None  # noqa: S101 - _failed says so otherwise
        init, add = _INOTIFY
        if self._fd is None:
            fd = init(_IN_NONBLOCK | _IN_CLOEXEC)
            if fd < 0:  # the per-user limit of instances, most likely: check whole
                self._failed = True
                return False
            self._fd = fd
        while True:  # drop what is pending: the full check that follows covers it
            try:
                if not os.read(self._fd, 65536):
                    break
            except BlockingIOError:
                break
        mask = _DIRECTORY_EVENTS
        for path in paths:
            if add(self._fd, os.fsencode(path), mask) < 0:
                code = ctypes.get_errno()
                # A file that is missing is not watched: its creation is the directory's
                # event. Anything else (the limit of watches) leaves the check to stat.
                if code != errno.ENOENT or mask == _DIRECTORY_EVENTS:
                    return False
            mask = _FILE_EVENTS
        return True


_watches: weakref.WeakSet[Watch] = weakref.WeakSet()


def _after_fork_in_child() -> None:
    # The child shares the parent's inotify instance: reading its events would take them
    # from the parent. Each child watch starts afresh, with a full check.
    for watch in list(_watches):
        watch._lock = threading.Lock()  # noqa: SLF001 - may have been held at fork
        watch.close()


os.register_at_fork(after_in_child=_after_fork_in_child)
