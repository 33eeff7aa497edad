"""Group commit on the SQLite backend: a burst shares commits in the WAL, and a full disk mid-burst.

Transactions are counted in the store's write-ahead log itself, from its frame headers,
while a reader's snapshot keeps the log from being reset. A full disk is a real
``RLIMIT_FSIZE`` (``SIGXFSZ`` ignored) in a child process. What group commit is on any
backend is in ``tests/contract/test_group_commit.py``.
"""

from __future__ import annotations

import contextlib
import json
import re
import sqlite3
import textwrap
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from ledger.effect_log import EffectLog, new_run_id
from ledger.sqlite.commit import begin_immediate, writing_connection
from tests.builders import (
    CHILD_TIMEOUT,
    REPO,
    claim_target,
    gap_free,
    loaded,
    no_errors,
    python_stdout,
    run_threads,
)
from tests.sqlite.driver import DB, query, wal_commits

THREADS = 8
DISK_ERROR = re.compile(r"(?i)disk|I/O|full|too large")


@contextlib.contextmanager
def snapshot_reader(db: Path) -> Iterator[sqlite3.Connection]:
    """A plain read-only sqlite3 connection in autocommit mode, outside the library."""
    conn = sqlite3.connect(
        f"{db.as_uri()}?mode=ro",
        uri=True,
        timeout=30,
        isolation_level=None,
        check_same_thread=False,
    )
    try:
        yield conn
    finally:
        conn.close()


def _runs_with_claims(store: Path) -> list[tuple[str]]:
    return query(store / DB, "SELECT DISTINCT run_id FROM claims")


def test_a_burst_of_claims_shares_commits(store_dir: Path) -> None:
    """A burst of 8 x 30 claims from 8 threads takes fewer commits in the WAL than claims."""
    per_thread = 30
    with EffectLog(new_run_id(), store_dir) as first:
        claim_target(first, "setup")
        wal = first.path.with_name(DB + "-wal")
        logs = [EffectLog(new_run_id(), store_dir) for _ in range(THREADS)]
        # A reader holding a snapshot of a WAL with frames in it: the WAL cannot be
        # reset (nor its frames overwritten) until it ends, so every commit of the burst
        # stays in it, however large it grows.
        with snapshot_reader(first.path) as snapshot:
            snapshot.execute("BEGIN")
            snapshot.execute("SELECT count(*) FROM claims").fetchone()
            salt, before = wal.read_bytes()[16:24], wal_commits(first.path)

            def work(log: EffectLog) -> Callable[[], None]:
                return lambda: [claim_target(log, f"e{i}") for i in range(per_thread)]

            try:
                no_errors(run_threads([work(log) for log in logs]))
                assert wal.read_bytes()[16:24] == salt, "the WAL was reset during the burst"
                commits = wal_commits(first.path) - before
            finally:
                snapshot.execute("COMMIT")
                for log in logs:
                    log.close()
    claims = THREADS * per_thread
    for log in logs:
        assert [c.seq for c in loaded(log.run_id, store_dir).claims] == list(
            range(1, per_thread + 1)
        )
    assert commits >= 1
    assert commits < claims, f"{claims} claims from {THREADS} threads took {commits} commits"


# argv: store, slack (bytes), seed. Eight logs claim once each, then the WAL may grow by
# `slack` bytes at most (SIGXFSZ ignored, as a server would) and eight threads claim at
# once until each has met the full disk three times. Prints, per run, the claims that
# returned and those that raised, then dies without closing anything.
FULL_DISK_CHILD = textwrap.dedent(
    """
    import json, os, resource, signal, sys, threading
    from pathlib import Path
    from ledger import effects as fx
    from ledger.effect_log import EffectLog, EffectPersistenceError, new_run_id

    store, slack = Path(sys.argv[1]), int(sys.argv[2])
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    OP = fx.OperationRef("write_file", "test/1", "0" * 64)

    def claim(log, effect_id):
        ref = fx.ResourceRef("fs", f"/sandbox/{log.run_id}/{effect_id}", "target")
        return log.claim(effect_id=effect_id, action_id="a", operation=OP, impact_scope=[ref])

    logs = [EffectLog(new_run_id(), store) for _ in range(8)]
    report = {log.run_id: {"ok": [claim(log, "first").effect_id], "raised": [], "errors": []}
              for log in logs}
    wal = store / "ledger.sqlite3-wal"
    resource.setrlimit(resource.RLIMIT_FSIZE, (wal.stat().st_size + slack, resource.RLIM_INFINITY))
    start = threading.Barrier(8)

    def work(log):
        mine = report[log.run_id]
        start.wait(60)
        for i in range(60):
            try:
                mine["ok"].append(claim(log, f"e{i}").effect_id)
            except EffectPersistenceError as e:
                mine["raised"].append(f"e{i}")
                mine["errors"].append(str(e))
                if len(mine["raised"]) == 3:
                    return

    threads = [threading.Thread(target=work, args=(log,)) for log in logs]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    report["hung"] = sum(thread.is_alive() for thread in threads)
    print(json.dumps(report), flush=True)
    os._exit(0)  # no close, no checkpoint: as if the process died here
    """
)


def test_a_full_disk_mid_burst_fails_exactly_the_claims_it_hit(tmp_path: Path) -> None:
    """The disk fills during a burst of threads: every claim that returned is durable, every one that raised is absent."""
    ok_after_limit = raised = 0
    for i, slack in enumerate([0, 6 * 4120, 25 * 4120, 60 * 4120]):
        store = tmp_path / f"store{i}"
        out = python_stdout(FULL_DISK_CHILD, store, slack, cwd=REPO, timeout=CHILD_TIMEOUT * 2)
        report: dict[str, Any] = json.loads(out)
        assert report.pop("hung") == 0, "a thread did not finish (deadlock?)"
        # This process never set a limit: what it reads is what the disk holds.
        for run_id, mine in report.items():
            assert all(DISK_ERROR.search(e) for e in mine["errors"]), mine["errors"]
            history = loaded(run_id, store)
            assert [c.effect_id for c in history.claims] == mine["ok"]
            assert gap_free(history)
            assert not set(mine["raised"]) & {c.effect_id for c in history.claims}
            ok_after_limit += len(mine["ok"]) - 1
            raised += len(mine["raised"])
        if slack == 0:
            assert all(mine["ok"] == ["first"] for mine in report.values())
        assert {run for (run,) in _runs_with_claims(store)} == set(report)
    # Both kinds of caller were met: some claims fitted before the disk was full.
    assert ok_after_limit > 0
    assert raised > 0


def test_a_writer_waits_for_another_processes_write_lock_until_its_deadline(
    store_dir: Path,
) -> None:
    """BEGIN IMMEDIATE tries again while another connection writes, gives up at the deadline."""
    with EffectLog(new_run_id(), store_dir) as log:
        claim_target(log, "e1")
    holder = sqlite3.connect(store_dir / DB, isolation_level=None)
    writer = writing_connection(sqlite3.connect(store_dir / DB, isolation_level=None, timeout=60))
    try:
        holder.execute("BEGIN IMMEDIATE")
        cursor = writer.cursor()
        with pytest.raises(sqlite3.OperationalError, match="locked") as raised:
            begin_immediate(cursor, timeout_ms=300)
        assert raised.value.sqlite_errorcode == sqlite3.SQLITE_BUSY
        assert not writer.in_transaction
        holder.execute("COMMIT")
        begin_immediate(cursor, timeout_ms=60_000)  # free: taken at once
        assert writer.in_transaction
        writer.execute("ROLLBACK")
    finally:
        holder.close()
        writer.close()


def test_a_claim_waiting_for_another_processes_write_lock_lands_once_it_is_free(
    store_dir: Path,
) -> None:
    """The lock held by another connection: the claim waits, and lands when it is released."""
    with EffectLog(new_run_id(), store_dir) as log:
        claim_target(log, "e1")
        holder = sqlite3.connect(store_dir / DB, isolation_level=None)
        try:
            holder.execute("BEGIN IMMEDIATE")
            done = threading.Event()
            worker = threading.Thread(target=lambda: (claim_target(log, "e2"), done.set()))
            worker.start()
            assert not done.wait(0.5)  # it cannot land while the lock is held
            holder.execute("COMMIT")
            worker.join(CHILD_TIMEOUT)
            assert done.is_set()
        finally:
            holder.close()
    assert query(store_dir / DB, "SELECT effect_id FROM claims ORDER BY seq") == [("e1",), ("e2",)]
