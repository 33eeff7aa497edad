"""Group commit on PostgreSQL: threads of one process share transactions, each told its own fate.

Transactions are counted by the server's own marks on every row: ``xmin``, the id of
the transaction that wrote it, and the time that transaction committed. To gather a known batch, a session of the test holds a
run's append lock (the transaction-level advisory lock every append of the run takes)
as another host's writer would: the process's leader waits on the server for it while
the other threads queue behind it, then takes them all at once. What group commit is
on any backend is in ``tests/contract/test_group_commit.py``.
"""

from __future__ import annotations

import contextlib
import signal
import threading
import time
from collections.abc import Callable, Iterator

import pytest

from ledger import effects as fx
from ledger.effect_log import EffectLog, EffectPersistenceError, new_run_id
from ledger.postgresql import store as _store
from ledger.postgresql.commit import append_key
from tests.builders import TIMEOUT, Call, claim_bare, gap_free, no_errors, run_threads
from tests.postgresql import driver

THREADS = 8


@contextlib.contextmanager
def shared_store(url: str) -> Iterator[_store.Store]:
    """The process's store for ``url``: the one every log on it writes through."""
    store = _store.acquire(url)
    try:
        yield store
    finally:
        _store.release(store)


def history_of(run_id: str, url: str) -> fx.History:
    """The run's history as a fresh ``EffectLog.load`` reads it from the store."""
    with EffectLog.load(run_id, url) as log:
        return log.history()


def _oids(run_id: str) -> tuple[int, int]:
    # pg_locks shows the two keys of an advisory lock as unsigned oids.
    high, low = append_key(run_id)
    return high % 2**32, low % 2**32


class AppendLocks:
    """Runs' append locks held on a session of the test's own, as another host's writer would."""

    def __init__(self, url: str) -> None:
        self._conn = driver.connect(url, autocommit=True)

    def hold(self, run_id: str) -> None:
        self._conn.execute("SELECT pg_advisory_lock(%s, %s)", append_key(run_id))

    def release(self, run_id: str) -> None:
        self._conn.execute("SELECT pg_advisory_unlock(%s, %s)", append_key(run_id))

    def awaited(self, run_id: str) -> bool:
        """Whether another session waits on the server for the run's append lock."""
        classid, objid = _oids(run_id)
        found = self._conn.execute(
            "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted"
            " AND classid = %s AND objid = %s AND objsubid = 2",
            (classid, objid),
        ).fetchone()
        return found is not None and found[0] > 0

    def close(self) -> None:
        self._conn.close()


@pytest.fixture
def locks(url: str) -> Iterator[AppendLocks]:
    held = AppendLocks(url)
    try:
        yield held
    finally:
        held.close()


def wait_until(predicate: Callable[[], bool], what: str) -> None:
    """Poll until ``predicate`` holds; fail the test after ``TIMEOUT``."""
    deadline = time.monotonic() + TIMEOUT
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting until {what}"
        time.sleep(0.005)


def transactions(url: str, run_ids: list[str], effect_id: str | None = None) -> tuple[int, int]:
    """The runs' claims (only ``effect_id``'s, if given), and the transactions that wrote them.

    A row written in a savepoint carries the savepoint's own transaction id: rows are
    told apart by the commit of their top-level transaction, whose time the server
    keeps for each of its ids (``track_commit_timestamp``, see server.py).
    """
    sql = (
        "SELECT count(*), count(DISTINCT pg_xact_commit_timestamp(xmin)) FROM claims"
        " WHERE run_id = ANY(%s)"
    )
    params: tuple[object, ...] = (run_ids,)
    if effect_id is not None:
        sql += " AND effect_id = %s"
        params = (run_ids, effect_id)
    with driver.connect(url) as conn:
        found = conn.execute(sql, params).fetchone()
    assert found is not None
    return int(found[0]), int(found[1])


def open_transactions(url: str) -> list[tuple[object, ...]]:
    """Every session of the store's database left inside a transaction, and what it runs."""
    with driver.connect(url, autocommit=True) as conn:
        return conn.execute(
            "SELECT pid, state, query FROM pg_stat_activity WHERE datname = current_database()"
            " AND pid <> pg_backend_pid() AND state LIKE 'idle in transaction%%'"
        ).fetchall()


def append_locks_held(url: str, run_ids: list[str]) -> int:
    """How many of the runs' append locks any session holds or waits for."""
    with driver.connect(url, autocommit=True) as conn:
        found = conn.execute(
            "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND objsubid = 2"
            " AND (classid, objid) IN (SELECT * FROM unnest(%s::oid[], %s::oid[]))",
            ([_oids(r)[0] for r in run_ids], [_oids(r)[1] for r in run_ids]),
        ).fetchone()
    assert found is not None
    return int(found[0])


# --------------------------------------------------------------------------- sharing


def test_a_burst_of_claims_from_threads_shares_transactions(url: str) -> None:
    """Eight threads, each with a log on its own run, claim 25 times at once: fewer transactions than claims."""
    per_thread = 25
    with EffectLog(new_run_id(), url) as first:  # the schema exists before the burst
        claim_bare(first, "setup")
    logs = [EffectLog(new_run_id(), url) for _ in range(THREADS)]

    def work(log: EffectLog) -> Callable[[], None]:
        return lambda: [claim_bare(log, f"e{i}") for i in range(per_thread)]

    try:
        no_errors(run_threads([work(log) for log in logs]))
    finally:
        for log in logs:
            log.close()
    for log in logs:
        history = history_of(log.run_id, url)
        assert [c.effect_id for c in history.claims] == [f"e{i}" for i in range(per_thread)]
        assert gap_free(history)
    claims, written_by = transactions(url, [log.run_id for log in logs])
    assert claims == THREADS * per_thread
    assert 1 <= written_by < claims, f"{claims} claims from {THREADS} threads in {written_by}"


def test_a_refused_job_fails_alone_and_the_rest_of_its_batch_commits_together(
    url: str, locks: AppendLocks
) -> None:
    """A batch holds a stale log, a new log on an existing run and six good logs: only the two fail.

    The six good claims (three on new runs, three on runs with records) land in one
    transaction; the refused ones leave nothing, not even the stale log's writer row.
    """
    existing, stale_run, blocker_run = new_run_id(), new_run_id(), new_run_id()
    for run_id in (existing, stale_run):
        with EffectLog(run_id, url) as log:
            claim_bare(log, "original")
    stale = EffectLog.load(stale_run, url)
    with EffectLog.load(stale_run, url) as other:  # the run advances past the stale log
        claim_bare(other, "advance")
    writer_before = driver.POSTGRESQL.query(
        url, "SELECT * FROM run_writers WHERE run_id = ?", (stale_run,)
    )
    exists = EffectLog(existing, url)
    blocker = EffectLog(blocker_run, url)
    claim_bare(blocker, "b1")
    goods = [EffectLog(new_run_id(), url) for _ in range(6)]
    for log in goods[3:]:
        claim_bare(log, "before")
    everyone = [blocker, stale, exists, *goods]
    try:
        with shared_store(url) as store:
            locks.hold(blocker_run)
            leader = Call(lambda: claim_bare(blocker, "b2"), "blocked leader")
            wait_until(lambda: locks.awaited(blocker_run), "the leader waits for the run's lock")
            calls = {
                log.run_id: Call(lambda log=log: claim_bare(log, "g"), log.run_id)
                for log in [stale, exists, *goods]
            }
            wait_until(lambda: store.group.waiting == 8, "eight jobs queue behind the leader")
            locks.release(blocker_run)
            assert leader.result().seq == 2
            with pytest.raises(EffectPersistenceError, match="claim 'g'"):
                calls.pop(stale.run_id).result()
            with pytest.raises(EffectPersistenceError, match="already exists"):
                calls.pop(exists.run_id).result()
            landed = {run_id: call.result() for run_id, call in calls.items()}
        assert [c.seq for c in landed.values()] == [1, 1, 1, 2, 2, 2]
        for log in [blocker, *goods]:
            assert history_of(log.run_id, url) == log.history()
        # The two refused logs learnt nothing of the store, and the store nothing of them.
        assert [c.effect_id for c in stale.history().claims] == ["original"]
        assert exists.history() == fx.History()
    finally:
        for log in everyone:
            log.close()
    assert transactions(url, list(landed), "g") == (6, 1)
    assert [c.effect_id for c in history_of(existing, url).claims] == ["original"]
    assert [c.effect_id for c in history_of(stale_run, url).claims] == ["original", "advance"]
    assert (
        driver.POSTGRESQL.query(url, "SELECT * FROM run_writers WHERE run_id = ?", (stale_run,))
        == writer_before
    )


# --------------------------------------------------------------------------- Ctrl-C


@pytest.fixture
def sigint() -> Iterator[Callable[[], bool]]:
    """Send SIGINT to the main thread until its handler (Python's own) has run; whether it ran."""
    if threading.current_thread() is not threading.main_thread():
        pytest.fail("Python runs signal handlers in the main thread only: run the suite there")
    main = threading.get_ident()
    delivered = threading.Event()

    def handler(signum: int, frame: object) -> None:
        if delivered.is_set():  # a resend that crossed the first
            return
        delivered.set()
        signal.default_int_handler(signum, frame)

    def send() -> bool:
        # A thread about to block can take a signal just before it sleeps: send again,
        # but seldom. psycopg looks for pending handlers when its poll of the socket
        # times out (every 0.1 s), and a signal restarts that poll: resent every few
        # hundredths of a second, they would keep it from ever timing out.
        deadline = time.monotonic() + TIMEOUT
        signal.pthread_kill(main, signal.SIGINT)
        while not delivered.wait(0.5):
            if time.monotonic() > deadline:
                return False
            signal.pthread_kill(main, signal.SIGINT)
        return True

    previous = signal.signal(signal.SIGINT, handler)
    try:
        yield send
    finally:
        signal.signal(signal.SIGINT, previous)


def test_ctrl_c_in_the_leader_of_a_batch_leaves_nothing_open_and_fails_every_job(
    url: str, locks: AppendLocks, sigint: Callable[[], bool]
) -> None:
    """Ctrl-C while the main thread leads three jobs, waiting for a run's lock: all three fail, nothing stays open.

    Each caller learns its job failed, each log's memory equals the store, no session
    is left in a transaction nor holds a run's lock, and every log writes again.
    """
    first, mine, other, third = (EffectLog(new_run_id(), url) for _ in range(4))
    logs = [first, mine, other, third]
    for log in logs:
        claim_bare(log, "before")
    with shared_store(url) as store:
        locks.hold(first.run_id)
        locks.hold(other.run_id)
        leader = Call(lambda: claim_bare(first, "x"), "first leader")
        wait_until(lambda: locks.awaited(first.run_id), "the first leader waits for its run")
        followers: list[Call] = []

        def interrupt_the_main_leader() -> bool:
            wait_until(lambda: store.group.waiting == 1, "the main thread's claim is queued")
            followers.extend(
                Call(lambda log=log: claim_bare(log, "x"), log.run_id) for log in (other, third)
            )
            wait_until(lambda: store.group.waiting == 3, "both followers are queued")
            locks.release(first.run_id)  # the first leader commits and hands over to main
            wait_until(
                lambda: store.group.waiting == 0 and locks.awaited(other.run_id),
                "the main thread leads the three jobs, waiting for a run's lock",
            )
            return sigint()

        helper = Call(interrupt_the_main_leader, "helper")
        try:
            with pytest.raises(KeyboardInterrupt):
                claim_bare(mine, "x")
        finally:
            locks.release(other.run_id)
        assert helper.result(), "the SIGINT handler did not run"
        assert leader.result().seq == 2
        for follower in followers:
            with pytest.raises(EffectPersistenceError, match="interrupted"):
                follower.result()
    assert open_transactions(url) == []
    locks.close()
    assert append_locks_held(url, [log.run_id for log in logs]) == 0
    try:
        for log in logs:
            assert history_of(log.run_id, url) == log.history()
            claim_bare(log, "after")
            assert not log.degraded
        expected = {first.run_id: ["before", "x", "after"]}
        for log in logs:
            claims = [c.effect_id for c in history_of(log.run_id, url).claims]
            assert claims == expected.get(log.run_id, ["before", "after"])
    finally:
        for log in logs:
            log.close()
