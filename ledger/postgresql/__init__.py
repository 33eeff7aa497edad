"""The PostgreSQL backend: one database per store, shared by workers on many hosts.

``store`` owns the engine and the transactions (a run's appends serialised by an
advisory lock); ``commit`` groups the appends of the process's threads into shared
transactions; ``engine`` names the store by its URL, checks every connection's
durability settings and migrates under an advisory lock; ``guards`` renders the guards
and views of ``ledger._sql`` (the floor both backends share) as PL/pgSQL; ``liveness``
holds runs by session advisory locks; ``forensics`` serves the ``ledger`` command's
reads and ``psql``; ``errors`` turns driver errors into the caller's.

Internal: not part of the public API, and its names may change between versions; open
a store through :class:`ledger.EffectLog` and the ``ledger`` command.
"""

from __future__ import annotations

import contextlib

from ledger import storage
from ledger.postgresql import forensics
from ledger.postgresql import store as _store


def _url(location: storage.Location) -> str:
    # storage.backend hands this backend only URLs.
    return str(location)


class _Backend:
    """Stores are databases named by URL; each is shared by every log of the process."""

    def acquire(self, directory: storage.Location) -> storage.Store:
        return _store.acquire(_url(directory))

    def release(self, store: storage.Store) -> None:
        if not isinstance(store, _store.Store):
            raise TypeError(f"not a store of this backend: {type(store).__name__}")
        _store.release(store)

    def reader(self, directory: storage.Location) -> storage.Reader:
        return forensics.Reader(_url(directory))

    def unsynchronised(
        self, directory: storage.Location
    ) -> contextlib.AbstractContextManager[None]:
        # The bench measures a PostgreSQL store as it is: its durability is the server's.
        del directory
        return contextlib.nullcontext()


BACKEND: storage.Backend = _Backend()
