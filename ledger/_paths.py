"""Where stores live, and which store directories this process has opened.

Kept free of storage imports so that :mod:`ledger.resources` can refuse paths
inside a store without loading SQLAlchemy.
"""

from __future__ import annotations

import collections
import contextlib
import os
import threading
from pathlib import Path

from ledger import _lifetime

DB_NAME = "ledger.sqlite3"

_lock = threading.Lock()
_opened: set[Path] = set()


def _after_fork_in_child() -> None:
    # The stores the parent opened stay sensitive in the child; only the lock, which
    # another thread may have held at fork, is made anew.
    global _lock  # noqa: PLW0603 - may have been held at fork
    _lock = threading.Lock()


_lifetime.at_fork(_after_fork_in_child)


def effects_dir() -> Path:
    """Return the default store directory.

    ``$LEDGER_DIR`` when set and non-empty, else ``$XDG_STATE_HOME/ledger``,
    else ``~/.local/state/ledger``. The directory is not created here.
    """
    explicit = os.environ.get("LEDGER_DIR")
    if explicit:
        return Path(explicit).expanduser().absolute()
    state = os.environ.get("XDG_STATE_HOME")
    base = Path(state) if state and Path(state).is_absolute() else Path.home() / ".local" / "state"
    return (base / "ledger").absolute()


def default_store() -> Path | str:
    """The store used when none is named: ``$LEDGER_URL``, else :func:`effects_dir`.

    ``$LEDGER_URL`` counts when set and non-empty; it wins over ``$LEDGER_DIR``.
    """
    return os.environ.get("LEDGER_URL") or effects_dir()


def remember_store(directory: Path) -> None:
    """Record that this process opened a store at ``directory``."""
    with _lock:
        _opened.add(directory.absolute())
        with contextlib.suppress(OSError):  # resolve(strict=False) fails only on loops
            _opened.add(directory.resolve())


def sensitive_dirs() -> tuple[Path, ...]:
    """Every directory agent tools must not reach: the default store and opened ones."""
    with _lock:
        opened = tuple(_opened)
    return (effects_dir(), *opened)


# --------------------------------------------------------------------------- stores on disk

SCAN_LIMIT = 100_000
"""How many directory entries a search for stores below a directory may read by default."""


class ScanLimitError(Exception):
    """A search for stores below a directory met more entries than it may read."""

    def __init__(self, directory: Path, limit: int) -> None:
        super().__init__(f"{directory}: more than {limit} entries below it")
        self.directory = directory
        self.limit = limit


def holds_store(directory: Path) -> bool:
    """Whether ``directory`` holds a ledger database: that is what makes it a store.

    Any entry of that name counts, even a link or one unreadable: a store that
    cannot be opened is still one that agent tools must not reach.
    """
    return os.path.lexists(directory / DB_NAME)


def store_around(path: Path) -> Path | None:
    """The store that ``path`` (absolute) is or lies inside, found on disk, or ``None``.

    Walks from ``path`` up to ``/``: one ``lstat`` per ancestor. A directory this
    process may not search reads as no store (what cannot be seen cannot be reached
    by tools running as this user either).
    """
    for candidate in (path, *path.parents):
        if holds_store(candidate):
            return candidate
    return None


def store_within(directory: Path, limit: int = SCAN_LIMIT) -> Path | None:
    """A store at or below ``directory``, found on disk, or ``None``.

    Breadth first with ``os.scandir``, so that a shallow store is found before a
    deep tree is read, and without following symlinks: a link is never a way into
    a tree outside ``directory`` here, and a path through a link is checked on its
    own when it is resolved. A subdirectory that cannot be listed is skipped once
    its database name is tried, which needs only search permission. Costs one
    ``scandir`` per directory below ``directory``.
    Raises :class:`ScanLimitError` after ``limit`` entries rather than read an
    unbounded tree; the caller decides what an unchecked tree means.
    """
    pending = collections.deque([directory])
    seen = 0
    while pending:
        current = pending.popleft()
        try:
            with os.scandir(current) as entries:
                for entry in entries:
                    if entry.name == DB_NAME:
                        return current
                    seen += 1
                    if seen > limit:
                        raise ScanLimitError(directory, limit)
                    # is_dir(follow_symlinks=False) mostly answers from the listing itself.
                    with contextlib.suppress(OSError):
                        if entry.is_dir(follow_symlinks=False):
                            pending.append(Path(entry.path))
        except PermissionError:
            if holds_store(current):  # listing needs read permission, this only search
                return current
        except (FileNotFoundError, NotADirectoryError):
            continue  # gone, or replaced, since it was listed
    return None


def known_store_within(directory: Path) -> Path | None:
    """A directory of :func:`sensitive_dirs` at or below ``directory``, by path alone.

    These need no disk: the default store and the stores this process opened are
    sensitive even before their database exists.
    """
    for store in sensitive_dirs():
        for candidate in {store, Path(os.path.realpath(store))}:
            if candidate == directory or directory in candidate.parents:
                return candidate
    return None
