"""The storage backends the contract suite runs against, and what it needs of each.

``tests/contract`` tests the public API, recovery, the chain, batching, concurrency and
the views through :class:`~ledger.effect_log.EffectLog` only; where a test must look
inside a store (how many rows, what a view says) or stand for another process (holding
a run, or the store's write lock), it asks the backend's test driver, a
:class:`Backend`. Each driver lives beside its backend's own tests (``tests/sqlite``, ``tests/postgresql``);
``BACKENDS`` lists them, and ``tests/contract/conftest.py`` runs every contract test once
per entry. Adding a backend to the suite is adding its driver here.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, Protocol

import pytest

from ledger import effects as fx
from ledger.effect_log import EffectLog
from ledger.storage import Mode
from tests.postgresql.driver import POSTGRESQL
from tests.sqlite.driver import SQLITE


class Holder(Protocol):
    """One run of a store, held or probed as another process would."""

    def hold(self, mode: Mode) -> None:
        """Hold the run (SHARED: loaded there; EXCLUSIVE: being recovered there)."""
        ...

    def release(self) -> None:
        """Let the run go."""
        ...

    def could_hold(self, mode: Mode) -> bool:
        """Whether another process could hold the run in ``mode`` now (nothing taken)."""
        ...

    def close(self) -> None:
        """Forget the run (after the test's logs are closed)."""
        ...


class Backend(Protocol):
    """A storage backend as the contract suite drives it: all of it outside the library."""

    name: str

    def location(self, parent: Path) -> Path | str:
        """A fresh store location (under ``parent``, for a directory), where no store is yet."""
        ...

    def query(
        self, store: Path | str, sql: str, params: Sequence[object] = ()
    ) -> list[tuple[Any, ...]]:
        """The rows of a read-only query (``?`` parameters), on a connection of its own."""
        ...

    def row_counts(self, store: Path | str) -> dict[str, int]:
        """How many rows each table of the store holds."""
        ...

    def commits(self, store: Path | str) -> int:
        """How many transactions the store has committed: compare two counts, in one test."""
        ...

    def unavailable(self, store: Path | str) -> contextlib.AbstractContextManager[None]:
        """While the block runs, the store cannot be reached (every write fails); then it is back."""
        ...

    def write_locked(self, store: Path | str) -> contextlib.AbstractContextManager[None]:
        """Another client holding the store's write lock while the block runs, writing nothing."""
        ...

    def elsewhere(self, store: Path | str, run_id: str) -> Holder:
        """The run as another process holds it, held by this one (no child process needed)."""
        ...


@contextlib.contextmanager
def writes_nothing(backend: Backend, store: Path | str, log: EffectLog) -> Iterator[fx.History]:
    """The block leaves the log's history, and every table of the store, as they were.

    Yields the history from before the block.
    """
    counts, history = backend.row_counts(store), log.history()
    yield history
    assert log.history() == history
    assert backend.row_counts(store) == counts


BACKENDS = [pytest.param(SQLITE, id=SQLITE.name), pytest.param(POSTGRESQL, id=POSTGRESQL.name)]


# The fixtures of a tier whose tests ask for a backend one by one (tests/reliability,
# tests/telemetry import them into their conftest): ``backend`` runs such a test once per
# entry of BACKENDS; ``location`` is a fresh store location of it. The contract suite's
# own ``backend`` is autouse (tests/contract/conftest.py).


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest) -> Backend:
    """The backend this run of the test is against."""
    found: Backend = request.param
    return found


@pytest.fixture
def location(backend: Backend, tmp_path: Path) -> Path | str:
    """A fresh store location of the backend, where no store is yet."""
    return backend.location(tmp_path)
