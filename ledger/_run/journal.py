"""The durable side of one run's log: its store, the run's lock in it, and its appends.

A :class:`Journal` acquires the store of a log's location, holds the run shared while
the log is open (so no other process recovers it meanwhile) or exclusive while it
recovers it, and appends a :class:`~ledger.storage.Batch`. A journal dropped without
:meth:`Journal.close` (its log dropped) still releases the lock and the store's
connections: they are the process's few.
"""

from __future__ import annotations

import functools
import os
from pathlib import Path

from ledger import _dropped, _paths, storage
from ledger.effects import History, InvalidTypeError
from ledger.errors import EffectPersistenceError, RunHeldError
from ledger.storage import RUN_ID, Batch, Lease, Mode, Store, relabel

__all__ = ["Journal", "check_run_id", "location"]


def check_run_id(run_id: object) -> str:
    """``run_id`` if it is one (32 lowercase hex characters); the caller's error if not."""
    if not isinstance(run_id, str):
        raise InvalidTypeError(f"run_id must be a str, not {type(run_id).__name__}")
    if not RUN_ID.fullmatch(run_id):
        raise ValueError(
            f"run_id must be 32 lowercase hex characters (use new_run_id()), got {run_id!r:.80}"
        )
    return run_id


def location(directory: str | os.PathLike[str] | None) -> storage.Location:
    """A store directory as an absolute path, or a PostgreSQL URL as given."""
    if directory is None:
        directory = _paths.default_store()
    if not isinstance(directory, (str, os.PathLike)):
        raise InvalidTypeError(f"directory must be a path or a URL, not {type(directory).__name__}")
    text = os.fspath(directory)
    if not text or "\x00" in text:
        raise ValueError("directory must be a non-empty path or URL without NUL")
    if storage.is_url(text):
        return text
    return Path(text).expanduser().absolute()


class Journal:
    """The store of one run's log, and the run's lease in it (not thread-safe: the log locks)."""

    def __init__(self, run_id: str, directory: storage.Location) -> None:
        self.run_id = run_id
        self.directory = directory
        self.backend = storage.backend(directory)
        self.store: Store | None = None
        # The run's shared lock: taken at load, or before a new run's first write (until
        # then the run has no row to recover, and no file is created).
        self.lease: Lease | None = None
        self._release_lease: _dropped.Finalizer | None = None
        self._release_store: _dropped.Finalizer | None = None
        self.lease_missed = False  # loaded while another process was recovering the run

    def load(self) -> tuple[History, str] | None:
        """Hold the run and read it (history, head); None if the store does not exist yet."""
        store = self._own(self.backend.acquire(self.directory))
        try:
            if not store.open_existing():
                return None
            # Before reading: what is read then stays the run's state until this log
            # writes, since no other process can recover the run meanwhile.
            lease = store.hold(self.run_id, Mode.SHARED)
            if lease is None:
                self.lease_missed = True  # readable; writing is refused (see hold_shared)
            else:
                self._keep(lease)
            return store.load_run(self.run_id, f"cannot load run {self.run_id}")
        except BaseException:
            self.close()
            raise

    def acquire(self) -> Store:
        """The store, acquired at the first need."""
        if self.store is None:
            return self._own(self.backend.acquire(self.directory))
        return self.store

    def hold_shared(self, action: str) -> BaseException | None:
        """Hold the run shared before writing to it; the error to fail the write with, if not."""
        if self.lease is not None and self.lease.held:
            return None
        if self.lease_missed:
            return RunHeldError(
                f"{action}: another process was recovering run {self.run_id} when this log "
                "loaded it, so what it loaded may be stale; load the run again"
            )
        store = self.acquire()
        try:
            store.open_for_writing()  # the lock file lives in the store's directory
            lease = store.hold(self.run_id, Mode.SHARED)
        except EffectPersistenceError as e:
            return relabel(action, e)
        if lease is None:
            return RunHeldError(
                f"{action}: another process is recovering run {self.run_id}; "
                "nothing was written: load the run again once it is done"
            )
        self._keep(lease)
        return None

    def hold_exclusive(self, *, force: bool) -> Lease | None:
        """Hold the run exclusive for recovery, or refuse: a live process has it loaded."""
        if self.lease_missed:
            raise RunHeldError(
                f"cannot recover run {self.run_id}: another process was recovering it "
                "when this log loaded it; load the run again"
            )
        store = self.acquire()
        try:
            store.open_for_writing()  # the lock file lives in the store's directory
            exclusive = store.hold(self.run_id, Mode.EXCLUSIVE)
        except EffectPersistenceError as e:
            raise relabel(f"cannot recover run {self.run_id}", e) from e
        if exclusive is None and not force:
            raise RunHeldError(
                f"cannot recover run {self.run_id}: another live process has it loaded, "
                "and recovering it would break that process; close it there, or stop it"
            )
        return exclusive

    def append(self, batch: Batch) -> storage.Written:
        """Append ``batch`` (the run held): what the store says of it."""
        return self.acquire().append(batch)

    def close(self) -> None:
        """Release the store and the run's lease."""
        if self._release_store is not None:
            self._release_store.detach()
        if self.store is not None:
            self.backend.release(self.store)
        self.store = self._release_store = None
        if self._release_lease is not None:
            self._release_lease.detach()
        if self.lease is not None:
            self.lease.release()
        self.lease = self._release_lease = None

    def _keep(self, lease: Lease) -> None:
        self.lease = lease
        # A journal dropped without close() must not keep its run from being recovered.
        self._release_lease = _dropped.on_drop(self, lease.release)

    def _own(self, store: Store) -> Store:
        self.store = store
        # Nor its store's connections and inotify instance, the process's few.
        release = functools.partial(self.backend.release, store)
        self._release_store = _dropped.on_drop(self, release)
        return store
