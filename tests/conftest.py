"""Shared fixtures: real store directories, sandboxes, the tools some tests need.

The builders test modules import by name are in ``tests/builders.py``.
"""

from __future__ import annotations

import http.server
import os
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import settings

from ledger.effect_log import EffectLog, new_run_id
from ledger.resources import FilesystemRoot
from tests.builders import (
    CHILD_TIMEOUT,
    TIMEOUT,
    Call,
    Child,
    Payments,
    missing,
    require_tool,
)
from tests.postgresql.server import drop_test_databases

# `make mutants` runs the property tests once per mutant: the same examples each time
# (derandomized, no example database, 25 where a test sets no number), so a mutant's
# verdict does not depend on luck.
settings.register_profile("mutants", max_examples=25, derandomize=True, database=None)


@pytest.fixture(autouse=True)
def _isolated_default_store(
    tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    # No test may touch the user's real default store, nor a PostgreSQL one named by LEDGER_URL.
    monkeypatch.setenv("LEDGER_DIR", str(tmp_path_factory.mktemp("default-store") / "ledger"))
    monkeypatch.delenv("LEDGER_URL", raising=False)


@pytest.fixture(autouse=True)
def _postgresql_databases_dropped() -> Iterator[None]:
    # Set up first, so torn down last: after the test's own fixtures closed its logs.
    yield
    drop_test_databases()


@pytest.fixture
def store_dir(tmp_path: Path) -> Path:
    """A store directory that does not exist yet."""
    return tmp_path / "store"


@pytest.fixture
def run_id() -> str:
    """A fresh run id."""
    return new_run_id()


@pytest.fixture
def log(store_dir: Path, run_id: str) -> Iterator[EffectLog]:
    """A new log on a fresh store, closed afterwards."""
    with EffectLog(run_id, store_dir) as effect_log:
        yield effect_log


@pytest.fixture
def sandbox(tmp_path: Path) -> FilesystemRoot:
    """A sealed sandbox directory for agent file tools."""
    path = tmp_path / "sandbox"
    path.mkdir()
    return FilesystemRoot.seal(path)


@pytest.fixture
def sqlite3_shell() -> str:
    """The stock ``sqlite3`` shell, which the test runs."""
    return require_tool("sqlite3")


@pytest.fixture
def root() -> None:
    """The test acts as another user (chown, setpriv): it needs root."""
    if os.geteuid() != 0:
        missing("this test acts as another user, which needs root")


@pytest.fixture
def in_thread() -> Iterator[Callable[[Callable[[], Any]], Call]]:
    """Start calls in threads; each is joined after the test, even a failed one."""
    calls: list[Call] = []

    def start(fn: Callable[[], Any]) -> Call:
        calls.append(Call(fn))
        return calls[-1]

    yield start
    stuck = []
    for call in calls:
        call.thread.join(TIMEOUT)
        if call.thread.is_alive():
            stuck.append(call)
    assert not stuck, f"{len(stuck)} thread(s) still running after the test"


@pytest.fixture
def spawn() -> Iterator[type[Child]]:
    """Start :class:`Child` processes; every one still running is killed and reaped at the end."""
    started: list[Child] = []

    class Tracked(Child):
        def __init__(self, what: str, store: Path, run_id: str) -> None:
            super().__init__(what, store, run_id)
            started.append(self)

    yield Tracked
    for child in started:
        if child.proc.poll() is None:
            child.proc.kill()
        child.proc.wait(timeout=CHILD_TIMEOUT)
        for stream in (child.proc.stdin, child.proc.stdout):
            if stream is not None:
                stream.close()


@pytest.fixture
def payments() -> Iterator[tuple[str, type[Payments]]]:
    """A deduplicating payment server on 127.0.0.1 (``Payments``): its URL and its handler."""
    handler = type("Handler", (Payments,), {"seen": [], "performed": {}})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/payments", handler
    finally:
        server.shutdown()
        server.server_close()
