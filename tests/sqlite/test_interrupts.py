"""Interrupts and races on the write path: Ctrl-C mid-write, recovery against outcomes and close.

A real ``SIGINT`` is sent to the main thread, where pytest runs the test, with
``signal.pthread_kill``; Python's default handler raises ``KeyboardInterrupt`` there.
Other threads are paused at chosen points inside the store's real transaction by
wrapping ``GroupCommit._run`` (what a group commit runs between ``BEGIN IMMEDIATE`` and
``COMMIT``): that changes when things happen, not what they do. The store and SQLite are
never mocked. Where a signal must land while the main thread waits at one place, its
stack is read first. Every wait has a timeout, so a deadlock fails a test instead of
hanging it, and no assertion depends on timing.
"""

from __future__ import annotations

import contextlib
import functools
import linecache
import logging
import os
import re
import signal
import sqlite3
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from types import FrameType
from typing import Any

import pytest

from ledger import effects as fx
from ledger._run.index import RunIndex
from ledger.effect_log import ClaimRequest, EffectLog, EffectPersistenceError, new_run_id
from ledger.sqlite import store as _store
from ledger.sqlite.commit import GroupCommit, Job
from tests.builders import INTERRUPTED, TIMEOUT, Call, fs_ref, loaded, op, settle, wait_for
from tests.sqlite.driver import other_process_holds_the_turn, turn_seen_from_another_process

# --------------------------------------------------------------------------- helpers


def claim(log: EffectLog, effect_id: str) -> fx.EffectClaim:
    """Claim a write of ``/sandbox/<effect_id>.txt``."""
    return log.claim(
        effect_id=effect_id,
        action_id=f"a-{effect_id}",
        operation=op(args=effect_id.encode()),
        impact_scope=[fs_ref(f"/sandbox/{effect_id}.txt")],
    )


def stored_rows(db: Path, run_id: str) -> list[tuple[str, int, str]]:
    """The run's claims and outcomes as plain, read-only sqlite3 sees them, in seq order."""
    with contextlib.closing(sqlite3.connect(f"{db.as_uri()}?mode=ro", uri=True)) as conn:
        return conn.execute(
            "SELECT 'claim', seq, effect_id FROM claims WHERE run_id = ?1 UNION ALL "
            "SELECT 'outcome', seq, effect_id FROM outcomes WHERE run_id = ?1 ORDER BY 2",
            (run_id,),
        ).fetchall()


def stack(ident: int) -> list[tuple[str, str]]:
    """Each Python frame of a thread as (function, current source line), innermost first."""
    frame: FrameType | None = sys._current_frames().get(ident)
    frames = []
    while frame is not None:
        line = linecache.getline(frame.f_code.co_filename, frame.f_lineno).strip()
        frames.append((frame.f_code.co_name, line))
        frame = frame.f_back
    return frames


def waiting_in(thread: threading.Thread, function: str) -> bool:
    """Whether ``thread`` sleeps in ``Condition.wait``, called (at any depth) from ``function``."""
    frames = stack(thread.ident or 0)
    return bool(frames) and frames[0][0] == "wait" and function in {f for f, _ in frames}


def blocked_retaking_the_log_lock(ident: int) -> bool:
    """Whether the thread, queued on a log, is past its gate and blocked taking the log's lock."""
    frames = stack(ident)
    # The log's queue (ledger._combiner), called from its writes' submit, retaking its lock.
    waking = [
        i
        for i, (function, line) in enumerate(frames[:-1])
        if function == "submit" and "acquire_uninterrupted(self.lock)" in line
    ]
    return bool(waking) and frames[waking[0] + 1][0] == "submit" and ".acquire(" in frames[0][1]


class Pause:
    """A point some thread stops at, until the test releases it (or ``TIMEOUT`` passes)."""

    def __init__(self, what: str) -> None:
        self.what = what
        self.entered = threading.Event()
        self._released = threading.Event()
        self.timed_out = False

    def stop_here(self) -> None:
        self.entered.set()
        if not self._released.wait(TIMEOUT):
            self.timed_out = True  # go on: a test must never hang

    def wait_entered(self) -> None:
        assert self.entered.wait(TIMEOUT), f"nothing reached {self.what}"

    def release(self) -> None:
        self._released.set()


def _holds(run_id: str, batch: list[Job]) -> bool:
    # Every job's action names its run: "cannot record ... in run <id>", "cannot recover run <id>".
    return any(run_id in job.action for job in batch)


class Rig:
    """Threads, logs and paused transactions of one test; all of them ended in teardown."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.calls: list[Call] = []
        self.logs: list[EffectLog] = []
        self.pauses: list[Pause] = []
        self._lock = threading.Lock()
        self._before: list[tuple[str, Pause]] = []
        self._after: list[tuple[str, Callable[[], None]]] = []  # run in the main thread
        run = GroupCommit._run

        def instrumented(
            group: GroupCommit, connection: sqlite3.Connection, cursor: Any, batch: list[Job]
        ) -> list[Job]:
            pause = self._take(self._before, batch)
            if pause is not None:
                pause.stop_here()
            committed: list[Job] = run(group, connection, cursor, batch)
            main = threading.current_thread() is threading.main_thread()
            then = self._take(self._after, batch) if main else None
            if then is not None:
                then()
            return committed

        monkeypatch.setattr(GroupCommit, "_run", instrumented)

    def _take(self, rules: list[tuple[str, Any]], batch: list[Job]) -> Any:
        with self._lock:
            for i, (run_id, rule) in enumerate(rules):
                if _holds(run_id, batch):
                    del rules[i]
                    return rule
        return None

    def start(self, name: str, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Call:
        """Run ``fn(*args, **kwargs)`` in a new thread."""
        call = Call(functools.partial(fn, *args, **kwargs), name)
        self.calls.append(call)
        return call

    def log(self, log: EffectLog) -> EffectLog:
        """Close ``log`` in teardown."""
        self.logs.append(log)
        return log

    def pause(self, what: str) -> Pause:
        """A pause, released in teardown at the latest."""
        pause = Pause(what)
        self.pauses.append(pause)
        return pause

    def hold(self, run_id: str) -> Pause:
        """Stop the next transaction holding a job of ``run_id`` before its jobs run."""
        pause = self.pause(f"a transaction of run {run_id}")
        with self._lock:
            self._before.append((run_id, pause))
        return pause

    def after_jobs(self, run_id: str, then: Callable[[], None]) -> None:
        """Call ``then`` after the jobs of the main thread's next transaction of ``run_id`` ran.

        That is inside the transaction, before its COMMIT, in the main thread.
        """
        with self._lock:
            self._after.append((run_id, then))

    def finish(self) -> None:
        for pause in self.pauses:
            pause.release()
        deadline = time.monotonic() + TIMEOUT
        stuck = []
        for call in self.calls:
            call.thread.join(max(0.1, deadline - time.monotonic()))
            if call.thread.is_alive():
                stuck.append(call.thread.name)
        for log in self.logs:
            closing = Call(log.close, f"close {log.run_id}")
            closing.thread.join(max(0.1, deadline - time.monotonic()))
            if closing.thread.is_alive():
                stuck.append(closing.thread.name)
        assert not stuck, f"threads still running after the test: {stuck}"
        assert not [p.what for p in self.pauses if p.timed_out], "a pause was never released"


@pytest.fixture
def sigint() -> Iterator[Callable[[], threading.Event]]:
    """Send SIGINT to the main thread; returns an event set once its handler has run.

    The handler is Python's default one (it raises KeyboardInterrupt), which also notes
    that it ran; the handler found before the test is restored after it.
    """
    if threading.current_thread() is not threading.main_thread():
        pytest.fail("Python runs signal handlers in the main thread only: run the suite there")
    main = threading.get_ident()
    delivered = threading.Event()

    def handler(signum: int, frame: FrameType | None) -> None:
        if delivered.is_set():  # a resend that crossed the first (see interrupt_until_handled)
            return
        delivered.set()
        signal.default_int_handler(signum, frame)

    def send() -> threading.Event:
        signal.pthread_kill(main, signal.SIGINT)
        return delivered

    previous = signal.signal(signal.SIGINT, handler)
    try:
        yield send
    finally:
        signal.signal(signal.SIGINT, previous)


def interrupt_until_handled(sigint: Callable[[], threading.Event]) -> bool:
    """Send SIGINT to the main thread until its handler has run; whether it ran in time.

    A thread about to block on a lock can take the signal after its last look for
    pending handlers and before the kernel puts it to sleep: the signal is noted, the
    thread sleeps on, and only another signal wakes it. The handler acts on the first.
    """
    deadline = time.monotonic() + TIMEOUT
    delivered = sigint()
    while not delivered.wait(0.05):
        if time.monotonic() > deadline:
            return False
        sigint()
    return True


@pytest.fixture
def rig(monkeypatch: pytest.MonkeyPatch) -> Iterator[Rig]:
    rig = Rig(monkeypatch)
    try:
        yield rig
    finally:
        rig.finish()


# --------------------------------------------------------------------------- Ctrl-C


def test_ctrl_c_in_the_leader_mid_transaction_rolls_back_and_settles_every_caller(
    store_dir: Path, sigint: Callable[[], threading.Event], rig: Rig
) -> None:
    """Ctrl-C while the main thread commits its claim with another thread's outcome and claim.

    The transaction is rolled back (the shared connection is free, SQLite's write lock
    too), the other claim raises, the outcome stays in memory and degrades the log, and
    the store holds exactly the records the log has not marked as lost.
    """
    log = rig.log(EffectLog(new_run_id(), store_dir))
    claim(log, "e0")
    first = rig.hold(log.run_id)
    leader = rig.start("log leader", claim, log, "x1")
    first.wait_entered()  # main, then the outcome, then the claim queue behind it

    def outcome_after_main() -> fx.EffectOutcome:
        wait_for(lambda: log._writes.queue.waiting == 1, "main's claim is queued")
        return settle(log, "e0")

    def claim_after_outcome() -> fx.EffectClaim:
        wait_for(lambda: log._writes.queue.waiting == 2, "the outcome is queued")
        return claim(log, "c1")

    def ctrl_c() -> None:  # in the transaction holding main's batch, which main leads
        sigint()  # its handler raises KeyboardInterrupt right here, before COMMIT

    def release_when_queued() -> None:
        try:
            wait_for(
                lambda: log._writes.queue.waiting == 3,
                "main's claim, the outcome and c1 are queued",
            )
            rig.after_jobs(log.run_id, ctrl_c)
        finally:
            first.release()

    other_outcome = rig.start("outcome", outcome_after_main)
    other_claim = rig.start("claim c1", claim_after_outcome)
    helper = rig.start("helper", release_when_queued)
    with pytest.raises(KeyboardInterrupt):
        claim(log, "m1")
    helper.result()
    assert leader.result().seq == 2

    # Nothing of the interrupted transaction stays open on the connection the store holds.
    assert not log._journal.store._connection().in_transaction
    with contextlib.closing(sqlite3.connect(log.path, timeout=0.5, isolation_level=None)) as conn:
        conn.execute("BEGIN IMMEDIATE")  # another connection can take the write lock
        conn.execute("ROLLBACK")

    # The other thread's claim exists nowhere and said so; its outcome is not lost silently.
    with pytest.raises(EffectPersistenceError, match="interrupted"):
        other_claim.result()
    outcome = other_outcome.result()
    assert log.degraded
    history = log.history()
    assert history.outcomes == (outcome,)
    assert [(c.seq, c.effect_id) for c in history.claims] == [(1, "e0"), (2, "x1")]
    with pytest.raises(ValueError, match="already has a terminal outcome"):
        log.outcome(effect_id="e0", execution=fx.ExecutionOutcome.FAILED, impact=fx.Impact.NONE)

    # The store holds the durable claims and nothing the log holds in memory only.
    stored = loaded(log.run_id, store_dir)
    assert stored.claims == history.claims
    assert stored.outcomes == stored.observations == ()
    assert stored_rows(log.path, log.run_id) == [("claim", 1, "e0"), ("claim", 2, "x1")]

    # The process goes on writing to the store.
    other = rig.log(EffectLog(new_run_id(), store_dir))
    assert claim(other, "z1").seq == 1


def test_ctrl_c_while_a_write_waits_for_sqlites_write_lock_leaves_no_transaction_open(
    store_dir: Path, sigint: Callable[[], threading.Event], rig: Rig
) -> None:
    """Ctrl-C while a claim waits for another connection's write lock: nothing stays open, the next claim lands.

    The claim tries ``BEGIN IMMEDIATE`` again and again, sleeping between tries: the
    handler runs in a sleep, or once a try has returned (the write lock taken, or not).
    """
    log = rig.log(EffectLog(new_run_id(), store_dir))
    claim(log, "e0")
    other = sqlite3.connect(log.path, isolation_level=None, check_same_thread=False)
    other.execute("BEGIN IMMEDIATE")
    main = threading.get_ident()

    def interrupt_then_let_go() -> None:
        try:
            wait_for(
                lambda: (
                    stack(main)[:1]
                    in (
                        [("begin_immediate", "time.sleep(pause)")],
                        [("begin_immediate", 'cursor.execute("BEGIN IMMEDIATE")')],
                    )
                ),
                "main waits for the write lock",
            )
            sigint()
        finally:
            other.execute("ROLLBACK")

    helper = rig.start("helper", interrupt_then_let_go)
    try:
        with pytest.raises(KeyboardInterrupt):
            claim(log, "e1")
        helper.result()
    finally:
        other.close()
    assert not log._journal.store._connection().in_transaction
    assert claim(log, "e2").seq == 2


def test_ctrl_c_while_a_write_waits_for_its_turn_leaves_the_turn_to_others(
    store_dir: Path, sigint: Callable[[], threading.Event], rig: Rig
) -> None:
    """Ctrl-C while a claim waits in line for its process's turn: the turn is not kept.

    Another process holds the turn; the main thread's claim waits for it (in the
    condition its waiter thread wakes). After the interrupt, once the holder lets go,
    the byte is free again and the next claim lands with its turn.
    """
    log = rig.log(EffectLog(new_run_id(), store_dir))
    claim(log, "e0")
    main = threading.get_ident()
    with other_process_holds_the_turn(store_dir) as holder:

        def interrupt() -> None:
            wait_for(
                lambda: "take" in {f for f, _ in stack(main)} and stack(main)[0][0] == "wait",
                "main waits for its turn",
            )
            sigint()

        helper = rig.start("helper", interrupt)
        with pytest.raises(KeyboardInterrupt):
            claim(log, "e1")
        helper.result()
        assert holder.stdin is not None
        holder.stdin.write("go\n")
        holder.stdin.flush()
        holder.wait(TIMEOUT)
    wait_for(lambda: turn_seen_from_another_process(store_dir) == "free", "the turn is given back")
    assert not log._journal.store._connection().in_transaction
    assert claim(log, "e2").seq == 2


def test_ctrl_c_while_another_leader_commits_the_claim_keeps_memory_equal_to_the_store(
    store_dir: Path, sigint: Callable[[], threading.Event], rig: Rig
) -> None:
    """Ctrl-C while another log's thread commits main's claim: the log learns it is durable."""
    log, other, third = (rig.log(EffectLog(new_run_id(), store_dir)) for _ in range(3))
    for each in (log, other, third):
        claim(each, "e0")
    group = log._journal.store.group
    first = rig.hold(other.run_id)
    store_leader = rig.start("store leader", claim, other, "z1")
    first.wait_entered()
    next_leader = rig.start("next store leader", claim, third, "w1")
    wait_for(lambda: group._queue.waiting == 1, "the next leader's job is queued")
    second = rig.hold(third.run_id)

    def interrupt_while_held() -> None:
        try:
            wait_for(lambda: group._queue.waiting == 2, "main's job is queued behind it")
            first.release()
            second.wait_entered()  # the next leader's transaction holds main's job
            assert group._queue.waiting == 0
            assert interrupt_until_handled(sigint), "the SIGINT handler did not run"
        finally:
            first.release()
            second.release()

    helper = rig.start("helper", interrupt_while_held)
    with pytest.raises(KeyboardInterrupt):
        claim(log, "m1")
    helper.result()
    assert store_leader.result().seq == next_leader.result().seq == 2

    stored = loaded(log.run_id, store_dir)
    assert [(c.seq, c.effect_id) for c in stored.claims] == [(1, "e0"), (2, "m1")]
    assert log.history() == stored  # the interrupted claim is durable, and the log knows it
    assert claim(log, "m2").seq == 3
    settle(log, "e0")
    assert not log.degraded
    assert loaded(log.run_id, store_dir) == log.history()


def test_ctrl_c_just_before_commit_acknowledges_no_job(
    store_dir: Path, sigint: Callable[[], threading.Event], rig: Rig
) -> None:
    """Ctrl-C after main's transaction ran its jobs and before its COMMIT: no caller is told its write landed.

    Main leads a transaction holding its own claim and another log's; the SIGINT is sent
    as main reaches the ``COMMIT`` statement (a line trace on the transaction's frame) and
    its handler raises there, before the statement runs.
    """
    log, other, third = (rig.log(EffectLog(new_run_id(), store_dir)) for _ in range(3))
    for each in (log, other, third):
        claim(each, "e0")
    group = log._journal.store.group
    first = rig.hold(other.run_id)
    store_leader = rig.start("store leader", claim, other, "z1")
    first.wait_entered()
    followers: list[Call] = []

    def queue_behind_main() -> None:
        try:
            wait_for(lambda: group._queue.waiting == 1, "main's job is queued")
            followers.append(rig.start("follower", claim, third, "w1"))
            wait_for(lambda: group._queue.waiting == 2, "the follower's job is queued behind it")
        finally:
            first.release()

    fired = threading.Event()

    def before_commit(frame: FrameType, event: str, _arg: object) -> Any:
        line = linecache.getline(frame.f_code.co_filename, frame.f_lineno).strip()
        if event == "line" and line == 'cursor.execute("COMMIT")' and not fired.is_set():
            assert frame.f_locals["committing"] is True
            fired.set()
            interrupt_until_handled(sigint)  # the handler raises here, in the traced frame
        return before_commit

    def trace(frame: FrameType, event: str, _arg: object) -> Any:
        return before_commit if frame.f_code is GroupCommit._transaction.__code__ else None

    helper = rig.start("helper", queue_behind_main)
    sys.settrace(trace)
    try:
        with pytest.raises(KeyboardInterrupt):
            claim(log, "m1")
    finally:
        sys.settrace(None)
    helper.result()
    assert fired.is_set(), "main never reached COMMIT"
    assert store_leader.result().seq == 2
    with pytest.raises(EffectPersistenceError, match="interrupted"):
        followers[0].result()

    assert not log._journal.store._connection().in_transaction
    for each in (log, third):
        stored = loaded(each.run_id, store_dir)
        assert [c.effect_id for c in stored.claims] == ["e0"]
        assert each.history() == stored  # nothing acknowledged that the store lacks
    assert claim(log, "m2").seq == 2  # the process goes on writing


def test_ctrl_c_right_after_being_handed_the_leadership_strands_nothing(
    store_dir: Path,
    sigint: Callable[[], threading.Event],
    rig: Rig,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Ctrl-C as a waiting writer, just made the log's leader, takes the log's lock back.

    Recovery hands the log over to main's queued claim, then indexes its outcomes with
    the log's lock held: it is paused there, so that main is blocked taking the lock.
    """
    log = rig.log(EffectLog(new_run_id(), store_dir))
    claim(log, "e1")  # no outcome: recovery settles it
    recovering = rig.hold(log.run_id)
    recovery = rig.start("recovery", log.recover_interrupted)
    recovering.wait_entered()
    indexing = rig.pause("recovery indexing its outcomes, the log's lock held")
    add_outcome = RunIndex.add_outcome

    def slow_add_outcome(index: RunIndex, outcome: fx.EffectOutcome) -> None:
        if threading.current_thread() is recovery.thread:
            indexing.stop_here()
        add_outcome(index, outcome)

    monkeypatch.setattr(RunIndex, "add_outcome", slow_add_outcome)
    main = threading.get_ident()

    def interrupt_once_handed_over() -> None:
        try:
            wait_for(
                lambda: log._writes.queue.waiting == 1, "main's claim is queued behind recovery"
            )
            recovering.release()
            indexing.wait_entered()  # recovery has handed the log over to main
            wait_for(
                lambda: blocked_retaking_the_log_lock(main),
                "main, now the log's leader, is blocked taking the log's lock",
            )
            assert interrupt_until_handled(sigint), "the SIGINT handler did not run"
        finally:
            recovering.release()
            indexing.release()

    helper = rig.start("helper", interrupt_once_handed_over)
    with pytest.raises(KeyboardInterrupt):
        claim(log, "m1")
    helper.result()

    # The interrupt does not cancel the claim it met: main leads it to the store first,
    # then raises. The leadership is not stranded: a later claim goes through.
    later = rig.start("later claim", claim, log, "later")
    assert later.result().seq == 4  # fails on a timeout if the leadership was stranded
    recovered = recovery.result()
    assert [(o.effect_id, o.seq, o.execution) for o in recovered] == [("e1", 2, INTERRUPTED)]
    history = log.history()
    assert [(c.effect_id, c.seq) for c in history.claims] == [("e1", 1), ("m1", 3), ("later", 4)]
    rig.start("close", log.close).result()
    assert loaded(log.run_id, store_dir) == history


# --------------------------------------------------------------------------- races


def test_an_outcome_racing_the_recovery_of_its_effect_is_refused(
    store_dir: Path, run_id: str, rig: Rig
) -> None:
    """Recovery is settling e1 when another thread records e1's outcome and another claims e3."""
    with EffectLog(run_id, store_dir) as first:
        claim(first, "e1")
        claim(first, "e2")
    log = rig.log(EffectLog.load(run_id, store_dir))
    recovering = rig.hold(run_id)
    recovery = rig.start("recovery", log.recover_interrupted)
    recovering.wait_entered()
    try:
        outcome = rig.start("outcome of e1", settle, log, "e1")
        wait_for(
            lambda: not outcome.thread.is_alive() or log._writes.queue.waiting == 1,
            "the outcome is refused or queued behind recovery",
        )
        innocent = rig.start("claim e3", claim, log, "e3")
        wait_for(lambda: "e3" in log._state.queued_claims, "the claim is queued")
    finally:
        recovering.release()

    recovered = recovery.result()
    assert [(o.effect_id, o.seq, o.execution) for o in recovered] == [
        ("e1", 3, INTERRUPTED),
        ("e2", 4, INTERRUPTED),
    ]
    with pytest.raises(ValueError, match="already has a terminal outcome"):
        outcome.result()
    assert innocent.result().seq == 5
    assert not log.degraded
    history = log.history()
    fx.check_history(history)
    assert loaded(run_id, store_dir) == history


def test_recovery_waiting_when_close_begins_writes_nothing(
    store_dir: Path, run_id: str, rig: Rig
) -> None:
    """close() begins while recovery waits for a write in flight: recovery refuses, the store is let go.

    Recovery that finished before close() began would be fine; here close() has begun
    first, so the log accepts no more records, recovery's included.
    """
    log = rig.log(EffectLog(run_id, store_dir))
    claim(log, "e1")
    writing = rig.hold(run_id)
    write = rig.start("write in flight", claim, log, "e2")
    writing.wait_entered()
    at_close: list[list[tuple[str, int, str]]] = []

    def close() -> None:
        log.close()
        at_close.append(stored_rows(log.path, run_id))

    try:
        recovery = rig.start("recovery", log.recover_interrupted)
        wait_for(lambda: waiting_in(recovery.thread, "recover_interrupted"), "recovery waits")
        log.history()  # returns once recovery's wait has let go of the log's lock
        closing = rig.start("close", close)
        wait_for(lambda: waiting_in(closing.thread, "close"), "close waits")
        log.history()
    finally:
        writing.release()

    assert write.result().seq == 2
    closing.result()
    with pytest.raises(ValueError, match="the log is closed"):
        recovery.result()
    assert log.directory not in _store._registry  # no store left acquired
    written = [("claim", 1, "e1"), ("claim", 2, "e2")]
    assert at_close == [written]
    assert stored_rows(log.path, run_id) == written  # nothing written after close


# --------------------------------------------------------------------------- messages


def test_storage_errors_name_the_action_and_the_run(
    store_dir: Path, tmp_path: Path, rig: Rig, caplog: pytest.LogCaptureFixture
) -> None:
    """A store file with a second hard link: each error says what was being written, in which run."""
    log = rig.log(EffectLog(new_run_id(), store_dir))
    other = rig.log(EffectLog(new_run_id(), store_dir))
    claim(log, "e0")
    claim(other, "o1")
    link = store_dir / "second-link"
    os.link(log.path, link)
    try:
        with pytest.raises(EffectPersistenceError) as claimed:
            claim(log, "e1")
        requests = [
            ClaimRequest(effect_id=e, action_id="a", operation=op(), impact_scope=[fs_ref("/s")])
            for e in ("e2", "e3")
        ]
        with pytest.raises(EffectPersistenceError) as claimed_many:
            log.claim_many(requests)
        with pytest.raises(EffectPersistenceError) as recovered:
            log.recover_interrupted()
        with caplog.at_level(logging.ERROR, logger="ledger"):
            settle(other, "o1")  # not raised: the log degrades
    finally:
        link.unlink()
    cause = (
        f"database file {log.path} has 2 hard links; a store file must have one: "
        "remove the other links"
    )
    assert str(claimed.value) == f"cannot record claim 'e1' in run {log.run_id}: {cause}"
    assert str(claimed_many.value) == f"cannot record 2 claims in run {log.run_id}: {cause}"
    assert str(recovered.value) == f"cannot recover run {log.run_id}: {cause}"
    assert other.degraded
    assert f"cannot record outcome of 'o1' in run {other.run_id}: {cause}" in caplog.text
    assert claim(log, "e1").seq == 2  # the link is gone: the same log writes again

    not_a_directory = tmp_path / "not-a-directory"
    not_a_directory.write_text("x")
    fresh = rig.log(EffectLog(new_run_id(), not_a_directory))
    expected = f"cannot record claim 'e1' in run {fresh.run_id}: store directory "
    with pytest.raises(EffectPersistenceError, match=re.escape(expected)):
        claim(fresh, "e1")
