"""What a log dropped without ``close()`` still holds, given back by a thread of its own.

A log that is never closed is finalized by the garbage collector, which runs in
whichever thread happens to allocate at that moment: maybe one inside the very lock the
release needs (the registries' locks are plain locks: it would wait for itself
forever), or halfway through changing the counts the release changes. So a finalizer
only queues the release (``queue.SimpleQueue.put`` may interrupt itself: it is made for
finalizers), and one daemon thread runs the releases, with the locks taken as any other
thread takes them. What it gives back: the log's hold on its run, so that another
process may recover it, and its store, with the store's inotify instance and
connections once no other log of the process uses it.
"""

from __future__ import annotations

import logging
import os
import queue
import threading
import weakref
from collections.abc import Callable
from typing import TypeAlias

from ledger import _lifetime

log = logging.getLogger("ledger")

_releases: queue.SimpleQueue[Callable[[], None]] = queue.SimpleQueue()
_started_in = 0  # the pid whose thread runs the releases (a forked child has none)
_start_lock = threading.Lock()


def _run() -> None:
    while True:
        release = _releases.get()
        try:
            release()
        except Exception:
            # The run is still freed when this process ends; nothing else to do here.
            log.warning("a log dropped without close() could not be released", exc_info=True)


def _start() -> None:
    global _started_in  # noqa: PLW0603 - one thread per process
    with _start_lock:
        if _started_in != os.getpid():
            threading.Thread(target=_run, name="ledger-dropped-logs", daemon=True).start()
            _started_in = os.getpid()


def _queue(release: Callable[[], None]) -> None:
    _releases.put(release)


# What on_drop returns, to detach; a string, as finalize is not subscriptable at run time.
Finalizer: TypeAlias = "weakref.finalize[[Callable[[], None]], object]"


def on_drop(owner: object, release: Callable[[], None]) -> Finalizer:
    """Run ``release`` in the releasing thread once ``owner`` is garbage.

    Call ``detach()`` on the result when ``owner`` gives back what ``release`` would.
    """
    _start()  # here, in ordinary code: never from a finalizer
    return weakref.finalize(owner, _queue, release)


def _after_fork_in_child() -> None:
    global _start_lock  # noqa: PLW0603 - may have been held at fork
    _start_lock = threading.Lock()


_lifetime.at_fork(_after_fork_in_child)
