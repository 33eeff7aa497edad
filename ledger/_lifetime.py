"""What a process made by ``fork()`` must not keep of its parent, reset in one place.

A forked child gets a copy of its parent's memory but only the thread that forked: a
lock another thread held stays held for ever in the child, a helper thread is missing,
a descriptor is shared with the parent (reading an inotify instance there takes the
parent's events, closing a lock file there would drop the child's locks), and a lease
names a lock the child never took. Each module that keeps such state for the process
(its registries of stores, lock files, turns and inotify instances, their locks)
registers here what resets it, and one ``os.register_at_fork`` hook runs every reset
in the child, never in the parent.

Resets run in the order they were registered. A module registers when it is imported,
after the modules it imports, and an object once it exists, after its module: so each
reset runs after those of what it relies on (a store's after its lock file's and its
turn's) and may use them. Registering never takes a lock, so that no thread can hold
one here at a fork.
"""

from __future__ import annotations

import itertools
import os
import weakref
from collections.abc import Callable
from typing import Protocol


class Forkable(Protocol):
    """An object with state of its process: :meth:`after_fork` resets it in a forked child."""

    def after_fork(self) -> None:
        """Make the object usable in the child; the parent's copy is left as it was."""


# What each reset is, by the order of its registration: a function, or a weak
# reference to an object (gone once the object is garbage).
_Entry = Callable[[], None] | weakref.ref[Forkable]
_entries: dict[int, _Entry] = {}
_order = itertools.count()  # next() is atomic: no lock needed to number an entry


def at_fork(reset: Callable[[], None]) -> None:
    """Call ``reset()`` in every child this process forks, after every earlier reset."""
    if not callable(reset):
        raise TypeError(f"at_fork() takes a function, not {type(reset).__name__}")
    _entries[next(_order)] = reset


def track(owner: Forkable) -> None:
    """Call ``owner.after_fork()`` in every child this process forks while ``owner`` lives.

    Held weakly: tracking keeps nothing alive.
    """
    if not callable(getattr(owner, "after_fork", None)):
        raise TypeError(f"track() takes an object with after_fork(), not {type(owner).__name__}")
    key = next(_order)
    _entries[key] = weakref.ref(owner, lambda _gone: _entries.pop(key, None))


def _after_fork_in_child() -> None:
    # One failing reset must not leave the others undone: the first error is raised
    # (Python reports it, as it would a hook's of its own) once all have run.
    error: Exception | None = None
    for entry in list(_entries.values()):
        try:
            if isinstance(entry, weakref.ref):
                owner = entry()
                if owner is not None:
                    owner.after_fork()
            else:
                entry()
        except Exception as e:  # raised below, once every reset has run
            error = error or e
    if error is not None:
        raise error


os.register_at_fork(after_in_child=_after_fork_in_child)
