"""The SQLite backend: one WAL-mode database file per store directory, behind ledger.storage.

``store`` owns the files, the engine and the transactions; ``commit`` groups the
writers of a process into one transaction and one fsync; ``rows`` writes records as
rows; ``schema`` renders the guards of ``ledger._sql`` as triggers, and ``schema_check``
checks a store's schema against them; ``migrate`` serves ``ledger migrate``;
``forensics`` and ``shell`` serve the ``ledger`` command's reads;
``trust`` checks files before SQLite opens them; ``liveness`` holds runs by
kernel locks; ``errors`` turns driver errors into the caller's.

Internal: not part of the public API, and its names may change between versions; open
a store through :class:`ledger.EffectLog` and the ``ledger`` command.
"""

from __future__ import annotations

import contextlib
from pathlib import Path

from ledger import storage
from ledger.sqlite import forensics
from ledger.sqlite import store as _store


def _path(location: storage.Location) -> Path:
    # storage.backend hands this backend every location that is not a URL.
    return Path(location)


class _Backend:
    """Stores are directories; each is shared by every log of the process that uses it."""

    def acquire(self, directory: storage.Location) -> storage.Store:
        return _store.acquire(_path(directory))

    def release(self, store: storage.Store) -> None:
        if not isinstance(store, _store.Store):
            raise TypeError(f"not a store of this backend: {type(store).__name__}")
        _store.release(store)

    def reader(self, directory: storage.Location) -> storage.Reader:
        return forensics.Reader(_path(directory))

    def unsynchronised(
        self, directory: storage.Location
    ) -> contextlib.AbstractContextManager[None]:
        return _store.unsynchronised(_path(directory))


BACKEND: storage.Backend = _Backend()
