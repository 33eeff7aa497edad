"""The log on the SQLite backend: its database file, and recovery against what only SQLite shows.

``log.path`` names the store's database file; recovery meets a trigger planted in the
store, a Ctrl-C inside its transaction (the group commit of ``ledger.sqlite.commit``),
and a store directory that moved away. The log's behaviour on any backend is in
``tests/contract/test_effect_log.py``.
"""

from __future__ import annotations

import logging
import signal
import sqlite3
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from ledger.effect_log import EffectLog, effects_dir
from ledger.errors import LogDegradedError, StoreTamperedError, StoreUnavailableError
from ledger.sqlite.commit import GroupCommit, Job
from tests.builders import FAILED, NONE, Call, claim_write, op, orphan_run, wait_for
from tests.sqlite.driver import DB, execute, query, write_locked


def _outcome_rows(store: Path) -> list[tuple[Any, ...]]:
    return query(store / DB, "SELECT * FROM outcomes ORDER BY run_id, seq")


def test_path_and_run_id(
    tmp_path: Path, store_dir: Path, run_id: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """log.run_id is the run id and log.path the absolute Path of <directory>/ledger.sqlite3."""
    with EffectLog(run_id, store_dir) as log:
        assert log.run_id == run_id
        assert isinstance(log.path, Path)
        assert log.path == store_dir / "ledger.sqlite3"
        claim_write(log)
        assert log.path.is_file()
    with EffectLog.load(run_id, str(store_dir)) as again:
        assert (again.run_id, again.path) == (run_id, store_dir / "ledger.sqlite3")
    with EffectLog(run_id) as default:
        assert default.path == effects_dir() / "ledger.sqlite3"
    monkeypatch.chdir(tmp_path)
    with EffectLog(run_id, "relative") as relative:
        assert relative.path.is_absolute()
        assert relative.path == tmp_path / "relative" / "ledger.sqlite3"


def test_recovery_that_cannot_lock_the_run_names_the_run_and_the_cause(store_dir: Path) -> None:
    """The store directory moved away under a loaded log: recovery fails saying why, writing nothing."""
    run_id = orphan_run(store_dir)
    with EffectLog.load(run_id, store_dir) as log:
        aside = store_dir.with_name("aside")
        store_dir.rename(aside)
        try:
            with pytest.raises(StoreUnavailableError) as refused:
                log.recover_interrupted()
        finally:
            aside.rename(store_dir)
        assert str(refused.value) == (
            f"cannot recover run {run_id}: cannot lock runs of the store {store_dir}: "
            "No such file or directory"
        )
        assert not log.degraded
        assert [o.effect_id for o in log.recover_interrupted()] == ["e1"]


EAT_OUTCOMES = "CREATE TRIGGER eat BEFORE INSERT ON outcomes BEGIN SELECT RAISE(IGNORE); END"


def test_recovery_that_meets_a_tampered_store_degrades_the_log(
    store_dir: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A trigger planted after load: recovery raises StoreTamperedError, logs why, and the log writes no more."""
    run_id = orphan_run(store_dir)
    with EffectLog.load(run_id, store_dir) as log:
        execute(log.path, EAT_OUTCOMES)
        with caplog.at_level(logging.ERROR), pytest.raises(StoreTamperedError) as refused:
            log.recover_interrupted()
        assert log.degraded
        assert caplog.messages == [
            (
                f"run {run_id} is degraded: recovery could not be persisted ({refused.value}); "
                "it is kept in memory only and nothing more will be written"
            )
        ]
        assert log.history().outcomes == ()
        with pytest.raises(LogDegradedError):
            log.recover_interrupted()
    assert _outcome_rows(store_dir) == []


def test_ctrl_c_in_recoverys_transaction_is_raised_and_writes_nothing(
    store_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """SIGINT inside recovery's transaction: KeyboardInterrupt reaches the caller, nothing is written, recovery can run again."""
    if threading.current_thread() is not threading.main_thread():
        pytest.fail("Python runs signal handlers in the main thread only: run the suite there")
    run_id = orphan_run(store_dir)
    delivered: list[int] = []

    def handler(signum: int, frame: Any) -> None:
        delivered.append(signum)
        signal.default_int_handler(signum, frame)

    run = GroupCommit._run

    def run_then_ctrl_c(
        group: GroupCommit, connection: sqlite3.Connection, cursor: Any, batch: list[Job]
    ) -> list[Job]:
        committed: list[Job] = run(group, connection, cursor, batch)
        signal.pthread_kill(threading.get_ident(), signal.SIGINT)  # the handler raises here
        return committed

    previous = signal.signal(signal.SIGINT, handler)
    try:
        with EffectLog.load(run_id, store_dir) as log:
            with monkeypatch.context() as patched:
                patched.setattr(GroupCommit, "_run", run_then_ctrl_c)
                with pytest.raises(KeyboardInterrupt):
                    log.recover_interrupted()
            assert delivered == [signal.SIGINT]
            assert log.history().outcomes == ()
            assert not log.degraded
            assert _outcome_rows(store_dir) == []
            assert [(o.effect_id, o.seq) for o in log.recover_interrupted()] == [("e1", 2)]
    finally:
        signal.signal(signal.SIGINT, previous)


def test_recovery_waiting_for_a_write_that_degrades_the_log_refuses(
    store_dir: Path, in_thread: Callable[[Callable[[], Any]], Call]
) -> None:
    """Recovery waits for an outcome in flight that meets a tampered store: the log degrades and recovery refuses."""
    run_id = orphan_run(store_dir)
    with EffectLog.load(run_id, store_dir) as log:
        log.claim(effect_id="e2", action_id="a2", operation=op(), impact_scope=[])
        with write_locked(log.path) as other:
            settling = in_thread(lambda: log.outcome(effect_id="e2", execution=FAILED, impact=NONE))
            wait_for(lambda: "e2" in log._state.queued_settles, "the outcome is queued")
            log.history()  # the outcome's thread is writing
            recovering = in_thread(log.recover_interrupted)
            wait_for(recovering.waits_for_the_log, "recovery waits for the outcome in flight")
            other.execute(EAT_OUTCOMES)
            other.execute("COMMIT")
        assert settling.result().effect_id == "e2"  # kept in memory
        assert log.degraded
        with pytest.raises(LogDegradedError) as refused:
            recovering.result()
        assert str(refused.value) == (
            f"run {run_id} is degraded: an earlier record was not persisted, "
            "so no new effect may start"
        )
    assert _outcome_rows(store_dir) == []
