"""The storage contract: what a log needs of a store, with no driver in sight.

An :class:`~ledger.effect_log.EffectLog` numbers its records, chains them and keeps
the run in memory; a *store* makes a batch of them durable, all or nothing, under
preconditions given as data (:class:`Batch`), reads a run back validated, and holds a
run for a process (:class:`Lease`) so that recovery never runs under a live writer.
How (SQL dialect, transactions, files, locks) is the backend's business; each backend
lives in a subpackage of its own (``ledger.sqlite``) and turns its driver's errors into
the leaves of :class:`~ledger.errors.EffectPersistenceError` in one place.

A backend is found by the kind of location it serves, and imported only when a store
of that kind is opened: the layers above never import a backend.
"""

from __future__ import annotations

import enum
import importlib
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from ledger._owner import Writer
from ledger.effects import EffectClaim, EffectOutcome, History, Observation
from ledger.errors import EffectPersistenceError

__all__ = ["RUN_ID", "Backend", "Batch", "Lease", "Mode", "Store", "Written", "backend", "relabel"]

Record = EffectClaim | EffectOutcome | Observation

# What new_run_id makes and every backend's schema accepts: a run id taken from a caller
# or a file name is held to it before it reaches a store.
RUN_ID = re.compile(r"[0-9a-f]{32}")


class Mode(enum.Enum):
    """How a run is held: by its logs (many at once), or by its recovery (alone)."""

    SHARED = "shared"
    EXCLUSIVE = "exclusive"


class Lease(Protocol):
    """A run held by this process; gone with the process, whatever kills it."""

    @property
    def held(self) -> bool:
        """Whether the run is still held (not released)."""
        ...

    def release(self) -> None:
        """Stop holding the run (idempotent)."""
        ...


@dataclass(frozen=True, kw_only=True, slots=True)
class Batch:
    """Records of one run to make durable together, and what must hold for them to be.

    ``records`` are numbered and in ``seq`` order, the first following ``head`` (the
    hash of the run's last durable record). The store refuses the whole batch unless
    every precondition holds inside the transaction that writes it.
    """

    action: str  # what the caller is doing, for error messages ("cannot record ...")
    run_id: str
    records: Sequence[Record]
    head: str
    now: str  # when, for the run's row and its writer
    start: bool = False  # the run's first write from this log: create its row
    continuing: bool = False  # the log loaded the run: an existing row is its own
    writer: Writer | None = None  # record this process as the run's writer
    # Recovery's condition: the run's durable records end at this seq (no one else wrote).
    ends_at: int | None = None


@dataclass(slots=True)
class Written:
    """How a batch ended: durable (``error`` is None) with the run's new ``head``, or not.

    ``interrupt`` is a signal handler's exception (Ctrl-C) met while the batch was in
    flight: the caller records the batch's fate first, then raises it.
    """

    head: str
    error: BaseException | None = None
    interrupt: BaseException | None = None


class Store(Protocol):
    """One store, shared by every log of this process that uses it."""

    directory: Path

    def open_existing(self) -> bool:
        """Open a store that exists, for reading and later writing; False if there is none."""
        ...

    def open_for_writing(self) -> None:
        """Create the store if needed, check it, and bring its schema to the newest."""
        ...

    def load_run(self, run_id: str, action: str) -> tuple[History, str]:
        """The run's validated history and its head hash (empty and genesis for none)."""
        ...

    def append(self, batch: Batch) -> Written:
        """Make ``batch`` durable, grouped with other threads' batches; never raises for it."""
        ...

    def hold(self, run_id: str, mode: Mode) -> Lease | None:
        """Hold the run in ``mode`` without waiting; None when another process holds it so."""
        ...


class Backend(Protocol):
    """Opens and closes the stores of one kind, each shared within the process."""

    def acquire(self, directory: Path) -> Store:
        """The process's store at ``directory``, one more user counted."""
        ...

    def release(self, store: Store) -> None:
        """One user fewer; the last one closes the store's connections."""
        ...


def relabel(action: str, error: EffectPersistenceError) -> EffectPersistenceError:
    """The same kind of storage trouble, told as part of ``action``: a new error per caller."""
    told = type(error)(f"{action}: {error}")
    told.__cause__ = error
    return told


# Backends by the kind of location they serve, imported when first needed.
_BACKENDS = {"directory": "ledger.sqlite"}


def backend(directory: Path) -> Backend:
    """The backend serving the store at ``directory``."""
    del directory  # every store today is a directory holding one SQLite database
    module = importlib.import_module(_BACKENDS["directory"])
    found: Backend = module.BACKEND
    return found
