"""Which runs a live process holds: session advisory locks the server drops with the session.

A PostgreSQL store serves workers on many hosts, so no pid or kernel lock can tell
whether a run's writer lives. Each process holds its runs on one connection of its own
per store (the *holder*), by session-level advisory locks on a key derived from the run
id: SHARED for every log that has the run loaded, EXCLUSIVE for recovery. When the
process dies, or its host, or the network between them, the server ends the session
and its locks go with it; ``recover --dead`` on any host then finds the run free.

The server counts a session's holds of one key and never makes a session wait for
itself (a session holding a run shared may take it exclusive if no other session holds
it), as the SQLite backend's per-process counts do. Recovery by the ``ledger`` command
also takes a second key exclusive, so that a second recoverer can tell "someone is
recovering it" from "a worker uses it". A forked child holds none of its parent's
locks: its leases are void and it opens a holder of its own.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator
from typing import Any

from sqlalchemy import Engine

from ledger import _lifetime
from ledger.postgresql.errors import storage_errors
from ledger.storage import Mode, RecoveryHold

_generation = 0  # bumped in a forked child: leases made before the fork are void there


def run_key(run_id: str) -> int:
    """The run's advisory lock key: its first 16 hex digits, as a signed 64-bit integer."""
    return int.from_bytes(bytes.fromhex(run_id[:16]), "big", signed=True)


def recovery_keys(run_id: str) -> tuple[int, int]:
    """The key (of the two-integer kind, apart from run keys) marking a run's recovery."""
    return (
        int.from_bytes(bytes.fromhex(run_id[16:24]), "big", signed=True),
        int.from_bytes(bytes.fromhex(run_id[24:32]), "big", signed=True),
    )


# Whether any session holds a run's key, in either mode: pg_locks shows a bigint
# advisory key as its high and low 32 bits (classid, objid), objsubid 1.
HELD = (
    "SELECT EXISTS (SELECT 1 FROM pg_locks WHERE locktype = 'advisory' AND granted"
    " AND database = (SELECT oid FROM pg_database WHERE datname = current_database())"
    " AND classid = CAST(:high AS oid) AND objid = CAST(:low AS oid) AND objsubid = 1)"
)


def held_key(run_id: str) -> dict[str, int]:
    """The parameters of :data:`HELD` for ``run_id``."""
    key = run_key(run_id) & 0xFFFFFFFFFFFFFFFF
    return {"high": key >> 32, "low": key & 0xFFFFFFFF}


_TAKE = {
    Mode.SHARED: "SELECT pg_try_advisory_lock_shared(%s)",
    Mode.EXCLUSIVE: "SELECT pg_try_advisory_lock(%s)",
}
_GIVE = {
    Mode.SHARED: "SELECT pg_advisory_unlock_shared(%s)",
    Mode.EXCLUSIVE: "SELECT pg_advisory_unlock(%s)",
}


class Holder:
    """One session of this process on a store, holding its runs; thread-safe."""

    def __init__(self, engine: Callable[[], Engine], name: str) -> None:
        self._engine = engine
        self._name = name
        self._lock = threading.Lock()
        self._raw: Any = None  # the psycopg connection, checked out of the pool for good
        self._generation = _generation

    def _connection(self) -> Any:
        if self._raw is None or self._generation != _generation:
            self._raw = self._engine().raw_connection()
            conn = self._raw.driver_connection
            conn.autocommit = True
            # Named apart from the pooled sessions, for people reading pg_stat_activity.
            conn.execute("SET application_name = 'ledger liveness'")
            self._generation = _generation
        return self._raw.driver_connection

    def take(self, sql: str, key: tuple[int, ...]) -> bool:
        """Run one advisory lock function on the holder's session; its answer."""
        with self._lock, storage_errors(f"cannot lock runs of the store {self._name}"):
            conn = self._connection()
            found = conn.execute(sql.replace("%s", ", ".join(["%s"] * len(key))), key)
            return bool(found.fetchone()[0])

    def hold(self, key: int, mode: Mode) -> Lease | None:
        """Hold ``key`` in ``mode`` without waiting; None when another session holds it so."""
        if not self.take(_TAKE[mode], (key,)):
            return None
        return Lease(self, _GIVE[mode], (key,))

    def hold_recovery(self, run_id: str) -> Lease | None:
        """Mark the run as being recovered by this process; None if another session is."""
        keys = recovery_keys(run_id)
        if not self.take("SELECT pg_try_advisory_lock(%s)", keys):
            return None
        return Lease(self, "SELECT pg_advisory_unlock(%s)", keys)

    @property
    def alive(self) -> bool:
        """Whether the session (and so every lock it holds) is still there, as far as known."""
        return (
            self._raw is not None
            and self._generation == _generation
            and not self._raw.driver_connection.closed
        )

    def close(self) -> None:
        """End the session: the server drops every lock it held."""
        with self._lock:
            if self._raw is not None and self._generation == _generation:
                with contextlib.suppress(Exception):
                    # The server drops a closed session's locks only once its backend has
                    # noticed the socket closed: given back first, they are free when this
                    # returns (a recovery right after a worker closed must find its run free).
                    self._raw.driver_connection.execute("SELECT pg_advisory_unlock_all()")
                with contextlib.suppress(Exception):
                    self._raw.invalidate()  # never back into the pool with locks held
            self._raw = None


class Lease:
    """One hold of a key on a holder's session; released once, idempotent."""

    __slots__ = ("_generation", "_give", "_holder", "_key", "_released")

    def __init__(self, holder: Holder, give: str, key: tuple[int, ...]) -> None:
        self._holder = holder
        self._give = give
        self._key = key
        self._generation = _generation
        self._released = False

    @property
    def held(self) -> bool:
        """Whether the run is still held: not released, and its session not known to be gone."""
        return not self._released and self._generation == _generation and self._holder.alive

    def release(self) -> None:
        """Give the hold back (nothing to give when the session is gone already)."""
        if self._released:
            return
        self._released = True
        if self._generation == _generation and self._holder.alive:
            with contextlib.suppress(Exception):  # a lost session has dropped it already
                self._holder.take(self._give, self._key)


@contextlib.contextmanager
def recovering(holder: Holder, run_id: str) -> Iterator[RecoveryHold]:
    """Hold ``run_id`` for recovery (its recovery key and its run key, exclusive)."""
    marker = holder.hold_recovery(run_id)
    if marker is None:
        yield RecoveryHold.RECOVERING
        return
    try:
        lease = holder.hold(run_key(run_id), Mode.EXCLUSIVE)
        if lease is None:
            yield RecoveryHold.IN_USE
            return
        try:
            yield RecoveryHold.TAKEN
        finally:
            lease.release()
    finally:
        marker.release()


def _after_fork_in_child() -> None:
    global _generation  # noqa: PLW0603 - every holder and lease made before the fork is void
    _generation += 1


_lifetime.at_fork(_after_fork_in_child)
