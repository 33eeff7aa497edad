"""Concurrency on the SQLite backend: a new store raced for, and a writer queued on SQLite's lock.

Processes racing to create one store leave it private, in WAL mode, at the newest
revision with every guard; a thread interrupted by a signal while it waits for SQLite's
write lock (held by a plain ``sqlite3`` connection) blocks no later writer. What
concurrency is on any backend is in ``tests/contract/test_concurrency.py``.
"""

from __future__ import annotations

import os
import signal
import sqlite3
import stat
import sys
import threading
import time
from pathlib import Path

import pytest

from ledger.effect_log import EffectLog, new_run_id
from ledger.sqlite.engine import head_revision
from ledger.sqlite.schema import SQLITE_TRIGGERS, VIEWS
from tests.builders import (
    BURST_TIMEOUT,
    WRITER_CHILD,
    finish_children,
    op,
    open_barrier,
    start_child,
)
from tests.sqlite.driver import query


def _per_run(db: Path, table: str) -> dict[str, int]:
    return dict(query(db, f"SELECT run_id, count(*) FROM {table} GROUP BY run_id"))


def test_processes_create_a_new_store_at_the_same_moment(tmp_path: Path) -> None:
    """Processes racing to create a brand-new store all succeed and migrate it exactly once."""
    store = tmp_path / "not" / "yet" / "store"
    gate = tmp_path / "gate"
    gate.mkdir()
    procs = [start_child(WRITER_CHILD, store, gate, i, "-", 1, 0) for i in range(8)]
    open_barrier(gate, procs)
    run_ids = [out.strip() for out in finish_children(procs)]
    assert len(set(run_ids)) == 8

    db = store / "ledger.sqlite3"
    assert stat.S_IMODE(os.lstat(store).st_mode) == 0o700
    assert stat.S_IMODE(os.lstat(db).st_mode) == 0o600
    assert query(db, "SELECT version_num FROM alembic_version") == [(head_revision(),)]
    triggers = {n for (n,) in query(db, "SELECT name FROM sqlite_master WHERE type = 'trigger'")}
    views = {n for (n,) in query(db, "SELECT name FROM sqlite_master WHERE type = 'view'")}
    assert triggers == set(SQLITE_TRIGGERS)
    assert views == set(VIEWS)
    assert query(db, "PRAGMA journal_mode") == [("wal",)]
    assert _per_run(db, "claims") == dict.fromkeys(run_ids, 1)
    for run_id in run_ids:
        with EffectLog.load(run_id, store) as log:
            history = log.history()
        assert [(c.seq, c.effect_id) for c in history.claims] == [(1, "e0")]
        assert history.outcomes == ()


class _SignalledError(Exception):
    """What the test's signal handler raises in the main thread."""


def _claim_in_thread(
    log: EffectLog, effect_id: str, errors: list[BaseException]
) -> threading.Thread:
    def body() -> None:
        try:
            log.claim(effect_id=effect_id, action_id="a", operation=op(), impact_scope=[])
        except BaseException as e:
            errors.append(e)

    thread = threading.Thread(target=body, daemon=True)
    thread.start()
    return thread


def _wait_until_inside_sqlite(thread: threading.Thread) -> None:
    """Wait until ``thread`` is blocked executing SQL; fail the test if it never is."""
    deadline = time.monotonic() + BURST_TIMEOUT
    while time.monotonic() < deadline and thread.is_alive():
        frame = sys._current_frames().get(thread.ident or 0)
        while frame is not None:
            code = frame.f_code
            if code.co_name == "_commit" and code.co_filename.endswith(
                os.path.join("sqlite", "commit.py")
            ):
                return  # it leads the process's write queue, waiting for SQLite's lock
            frame = frame.f_back
        time.sleep(0.01)
    raise AssertionError("the writer never blocked inside SQLite: the scenario did not happen")


def test_a_writer_interrupted_while_queued_does_not_block_later_writers(store_dir: Path) -> None:
    """A thread interrupted by a signal while it waits for the store's write lock blocks no later writer."""
    errors: list[BaseException] = []
    main = EffectLog(new_run_id(), store_dir)
    other = EffectLog(new_run_id(), store_dir)
    later = EffectLog(new_run_id(), store_dir)
    main.claim(effect_id="e0", action_id="a0", operation=op(), impact_scope=[])
    # Another process (here: a plain sqlite3 connection) holds SQLite's write lock, so
    # the next writer of this process waits inside SQLite, holding the process's queue.
    holder = sqlite3.connect(main.path, isolation_level=None, check_same_thread=False)
    holder.execute("BEGIN IMMEDIATE")
    release = threading.Timer(2.0, holder.rollback)

    def interrupt(signum: int, frame: object) -> None:
        raise _SignalledError

    first = _claim_in_thread(other, "first", errors)
    _wait_until_inside_sqlite(first)  # if it were not first in line, the test would prove nothing
    previous = signal.signal(signal.SIGALRM, interrupt)
    try:
        release.start()
        signal.setitimer(signal.ITIMER_REAL, 0.5)
        # The main thread queues behind "first" and is interrupted there, as by a
        # SIGTERM handler raising SystemExit, or by Ctrl-C.
        with pytest.raises(_SignalledError):  # the signal arrived, and was raised
            main.claim(effect_id="e1", action_id="a1", operation=op(), impact_scope=[])
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
        release.join(timeout=BURST_TIMEOUT)
        first.join(timeout=BURST_TIMEOUT)
        holder.close()
    assert not first.is_alive()

    after = _claim_in_thread(later, "after", errors)
    after.join(timeout=10)
    stuck = after.is_alive()
    for log in (main, other) if stuck else (main, other, later):
        log.close()  # a stuck thread holds its log's lock: leave that log alone
    assert not stuck, "a writer queued after the interrupted one waits forever (deadlock)"
    assert errors == []
    with EffectLog.load(later.run_id, store_dir) as log:
        assert [c.effect_id for c in log.history().claims] == ["after"]
