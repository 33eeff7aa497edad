"""Group commit: threads of one process that write at the same moment share one transaction.

When several threads claim at once, their records are committed together: one
transaction, one fsync. Each ``claim`` still returns only once its own record is
committed, and a failure is reported to exactly the callers whose records it hit: a
claim that returned is durable, a claim that raised exists nowhere.

Real threads started together by a ``threading.Barrier``, real child processes killed
with ``SIGKILL``, a real ``RLIMIT_FSIZE`` (``SIGXFSZ`` ignored). Transactions are
counted in the store's write-ahead log itself, from its frame headers. Every wait has a
timeout, so a deadlock fails a test instead of hanging it.
"""

from __future__ import annotations

import contextlib
import json
import random
import re
import signal
import sqlite3
import subprocess
import textwrap
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from ledger import effects as fx
from ledger.effect_log import (
    ClaimRequest,
    EffectLog,
    EffectPersistenceError,
    OutcomeRequest,
    new_run_id,
)
from tests.builders import PYTHON, REPO, fs_ref, op, subprocess_env
from tests.contract.test_batching import read_lines, wal_commits

DB = "ledger.sqlite3"
THREADS = 8
TIMEOUT = 120.0
CHILD_TIMEOUT = 60
DISK_ERROR = re.compile(r"(?i)disk|I/O|full|too large")


# --------------------------------------------------------------------------- helpers


def claim(log: EffectLog, effect_id: str) -> fx.EffectClaim:
    """Claim a write of ``/sandbox/<run>/<effect_id>.txt`` that should leave it existing."""
    target = fs_ref(f"/sandbox/{log.run_id}/{effect_id}.txt")
    return log.claim(
        effect_id=effect_id,
        action_id=f"a-{effect_id}",
        operation=op(args=effect_id.encode()),
        impact_scope=[target],
        obligations=[fx.Postcondition(target, fx.Predicate.EXISTS)],
    )


def run_threads(workers: Sequence[Callable[[], None]]) -> list[BaseException | None]:
    """Run the workers in threads that start together; return each one's error (or None).

    A thread that does not finish in time fails the test (a deadlock).
    """
    start = threading.Barrier(len(workers))
    errors: list[BaseException | None] = [None] * len(workers)

    def body(i: int) -> None:
        try:
            start.wait(timeout=TIMEOUT)
            workers[i]()
        except BaseException as e:
            errors[i] = e

    threads = [threading.Thread(target=body, args=(i,), daemon=True) for i in range(len(workers))]
    for thread in threads:
        thread.start()
    deadline = time.monotonic() + TIMEOUT
    for thread in threads:
        thread.join(timeout=max(0.1, deadline - time.monotonic()))
    assert not any(t.is_alive() for t in threads), "a thread did not finish (deadlock?)"
    return errors


def no_errors(errors: Sequence[BaseException | None]) -> None:
    """Raise the first error a thread met."""
    for error in errors:
        if error is not None:
            raise error


@contextlib.contextmanager
def reader(db: Path) -> Iterator[sqlite3.Connection]:
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


def seqs_per_run(db: Path) -> dict[str, list[int]]:
    """Every run's claim seqs, ascending, as plain SQL reads them."""
    with reader(db) as conn:
        rows = conn.execute("SELECT run_id, seq FROM claims ORDER BY run_id, seq").fetchall()
    runs: dict[str, list[int]] = {}
    for run_id, seq in rows:
        runs.setdefault(run_id, []).append(seq)
    return runs


def loaded(run_id: str, store: Path) -> fx.History:
    """The run's history as a fresh ``EffectLog.load`` reads it."""
    with EffectLog.load(run_id, store) as log:
        return log.history()


def gap_free(history: fx.History) -> bool:
    """Whether the run's records are numbered 1, 2, 3, ... without gap or repeat."""
    return [r.seq for r in history.records()] == list(range(1, len(history.records()) + 1))


# --------------------------------------------------------------------------- many logs, one store


def test_threads_with_their_own_logs_claim_at_once(store_dir: Path) -> None:
    """Eight threads, each with its own log, claim at once: no error, each claim durable on return."""
    per_thread = 25
    with EffectLog(new_run_id(), store_dir) as first:  # the store exists before the burst
        claim(first, "setup")
    logs = [EffectLog(new_run_id(), store_dir) for _ in range(THREADS)]
    returned: dict[str, list[fx.EffectClaim]] = {log.run_id: [] for log in logs}
    unseen: list[str] = []

    def work(log: EffectLog) -> Callable[[], None]:
        def body() -> None:
            with reader(log.path) as conn:
                for i in range(per_thread):
                    record = claim(log, f"e{i}")
                    returned[log.run_id].append(record)
                    # Committed before claim returned: another connection sees it at once.
                    row = conn.execute(
                        "SELECT seq FROM claims WHERE run_id = ? AND effect_id = ?",
                        (log.run_id, record.effect_id),
                    ).fetchone()
                    if row != (record.seq,):
                        unseen.append(f"{log.run_id}/{record.effect_id}: {row}")

        return body

    try:
        no_errors(run_threads([work(log) for log in logs]))
    finally:
        for log in logs:
            log.close()
    assert unseen == [], "claims returned before another reader could see them"
    for run_id, claims in returned.items():
        assert [c.seq for c in claims] == list(range(1, per_thread + 1))
        assert loaded(run_id, store_dir).claims == tuple(claims)
    runs = seqs_per_run(store_dir / DB)
    assert {run: seqs for run, seqs in runs.items() if run in returned} == {
        run: list(range(1, per_thread + 1)) for run in returned
    }


def test_a_burst_of_claims_shares_commits(store_dir: Path) -> None:
    """A burst of 8 x 30 claims from 8 threads takes fewer commits in the WAL than claims."""
    per_thread = 30
    with EffectLog(new_run_id(), store_dir) as first:
        claim(first, "setup")
        wal = first.path.with_name(DB + "-wal")
        logs = [EffectLog(new_run_id(), store_dir) for _ in range(THREADS)]
        # A reader holding a snapshot of a WAL with frames in it: the WAL cannot be
        # reset (nor its frames overwritten) until it ends, so every commit of the burst
        # stays in it, however large it grows.
        with reader(first.path) as snapshot:
            snapshot.execute("BEGIN")
            snapshot.execute("SELECT count(*) FROM claims").fetchone()
            salt, before = wal.read_bytes()[16:24], wal_commits(first.path)

            def work(log: EffectLog) -> Callable[[], None]:
                return lambda: [claim(log, f"e{i}") for i in range(per_thread)]

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


def writer_row(store: Path, run_id: str) -> tuple[object, ...] | None:
    """The run's row in ``run_writers``: which process wrote it last, and since when."""
    with reader(store / DB) as conn:
        return conn.execute("SELECT * FROM run_writers WHERE run_id = ?", (run_id,)).fetchone()


def _round_with_failing_writers(store: Path, existing: str, stale_run: str, round_: int) -> None:
    """Six new logs and two doomed ones claim three times each, at once.

    One doomed log is new on the run ``existing`` (its first write finds the run there);
    the other was loaded from ``stale_run`` before another log advanced that run, so
    its records take seqs the run already holds (its write fails after it has begun).
    """
    logs = [EffectLog(new_run_id(), store) for _ in range(THREADS - 2)]
    exists = EffectLog(existing, store)  # a new log on a run the store holds
    stale = EffectLog.load(stale_run, store)
    with EffectLog.load(stale_run, store) as other:
        claim(other, f"advance{round_}")
    writer = writer_row(store, stale_run)
    logs.insert(round_ % (THREADS - 1), exists)
    logs.insert((3 * round_ + 1) % THREADS, stale)
    lost = exists.observe(  # waits for the first claim's transaction, which fails
        observation_id=f"o{round_}",
        resource=fs_ref("/sandbox/a.txt"),
        mechanism=fx.ObservationMechanism.FILESYSTEM_STAT,
        coverage=fx.Coverage.COMPLETE,
        source_action_id="look",
        exists=True,
    )
    stale_before = stale.history()
    returned: dict[str, list[fx.EffectClaim]] = {log.run_id: [] for log in logs}
    refused: dict[str, list[str]] = {"exists": [], "stale": []}

    def work(log: EffectLog) -> Callable[[], None]:
        def body() -> None:
            for i in range(3):
                effect_id = f"r{round_}-e{i}"
                if log is exists:
                    with pytest.raises(EffectPersistenceError, match="already exists"):
                        claim(log, effect_id)
                    refused["exists"].append(effect_id)
                elif log is stale:
                    with pytest.raises(EffectPersistenceError, match=f"claim '{effect_id}'"):
                        claim(log, effect_id)
                    refused["stale"].append(effect_id)
                else:
                    returned[log.run_id].append(claim(log, effect_id))

        return body

    try:
        no_errors(run_threads([work(log) for log in logs]))
        assert exists.history() == fx.History(observations=(lost,))
        assert stale.history() == stale_before
    finally:
        for log in logs:
            log.close()
    assert refused == {kind: [f"r{round_}-e{i}" for i in range(3)] for kind in refused}
    # Not even the stale log's note that it became the run's writer survived its failure.
    assert writer_row(store, stale_run) == writer
    for log in logs:
        if log not in {exists, stale}:
            claims = loaded(log.run_id, store).claims
            assert claims == tuple(returned[log.run_id])
            assert [c.seq for c in claims] == [1, 2, 3]


def test_failing_writers_do_not_fail_the_others(store_dir: Path) -> None:
    """Two logs' writes fail while six others claim at once: only the two fail, and leave no trace."""
    existing, stale_run = new_run_id(), new_run_id()
    for run_id in (existing, stale_run):
        with EffectLog(run_id, store_dir) as log:
            claim(log, "original")
    for round_ in range(4):
        _round_with_failing_writers(store_dir, existing, stale_run, round_)
        # The refused claims, and the observation waiting for them, exist nowhere.
        history = loaded(existing, store_dir)
        assert [c.effect_id for c in history.claims] == ["original"]
        assert history.outcomes == history.observations == ()
        history = loaded(stale_run, store_dir)
        expected = ["original", *(f"advance{r}" for r in range(round_ + 1))]
        assert [c.effect_id for c in history.claims] == expected
        with reader(store_dir / DB) as conn:
            claims = conn.execute("SELECT count(*) FROM claims").fetchone()[0]
            observations = conn.execute("SELECT count(*) FROM observations").fetchone()[0]
        assert (claims, observations) == (2 + (round_ + 1) * ((THREADS - 2) * 3 + 1), 0)


def test_batches_and_outcomes_from_threads_stay_whole(store_dir: Path) -> None:
    """Threads mixing claim_many, claim and outcome_many on their own logs keep every batch whole."""
    rounds = 8
    logs = [EffectLog(new_run_id(), store_dir) for _ in range(THREADS)]

    def work(log: EffectLog) -> Callable[[], None]:
        def body() -> None:
            for k in range(rounds):
                batch = [
                    ClaimRequest(
                        effect_id=f"b{k}.{j}",
                        action_id=f"a{k}",
                        operation=op(),
                        impact_scope=[fs_ref(f"/sandbox/{k}/{j}")],
                    )
                    for j in range(3)
                ]
                claims = log.claim_many(batch)
                assert [c.seq for c in claims] == [claims[0].seq + j for j in range(3)]
                claim(log, f"s{k}")
                log.outcome_many(
                    OutcomeRequest(
                        effect_id=c.effect_id,
                        execution=fx.ExecutionOutcome.REPORTED_SUCCESS,
                        impact=fx.Impact.CERTAIN,
                    )
                    for c in claims
                )

        return body

    try:
        no_errors(run_threads([work(log) for log in logs]))
        histories = {log.run_id: log.history() for log in logs}
        assert not any(log.degraded for log in logs)
    finally:
        for log in logs:
            log.close()
    for run_id, history in histories.items():
        assert len(history.records()) == rounds * 7
        assert gap_free(history)
        assert loaded(run_id, store_dir) == history


# --------------------------------------------------------------------------- one shared log


def test_threads_sharing_one_log_claim_at_once(store_dir: Path) -> None:
    """Eight threads claim distinct effects on one shared log: all succeed, seqs 1..N, reload equal."""
    per_thread = 25
    returned: list[list[fx.EffectClaim]] = [[] for _ in range(THREADS)]
    with EffectLog(new_run_id(), store_dir) as log:

        def work(t: int) -> Callable[[], None]:
            return lambda: returned[t].extend(claim(log, f"t{t}-e{i}") for i in range(per_thread))

        no_errors(run_threads([work(t) for t in range(THREADS)]))
        history = log.history()
        assert not log.degraded
    total = THREADS * per_thread
    assert [c.seq for c in history.claims] == list(range(1, total + 1))
    assert sorted(c.effect_id for c in history.claims) == sorted(
        f"t{t}-e{i}" for t in range(THREADS) for i in range(per_thread)
    )
    by_id = {c.effect_id: c for c in history.claims}
    for t, claims in enumerate(returned):
        assert [c.effect_id for c in claims] == [f"t{t}-e{i}" for i in range(per_thread)]
        assert [by_id[c.effect_id] for c in claims] == claims  # what each caller got is stored
        assert [c.seq for c in claims] == sorted(c.seq for c in claims)
    assert loaded(log.run_id, store_dir) == history
    assert seqs_per_run(store_dir / DB) == {log.run_id: list(range(1, total + 1))}


def test_threads_racing_for_one_effect_id_on_one_log(store_dir: Path) -> None:
    """Eight threads claim the same ids on one log at once: each id is claimed once, the rest refused."""
    ids = [f"e{i}" for i in range(15)]
    won: list[list[fx.EffectClaim]] = [[] for _ in range(THREADS)]
    refused: list[list[str]] = [[] for _ in range(THREADS)]
    messages: list[str] = []
    with EffectLog(new_run_id(), store_dir) as log:

        def work(t: int) -> Callable[[], None]:
            def body() -> None:
                for effect_id in ids:
                    try:
                        won[t].append(claim(log, effect_id))
                    except ValueError as e:
                        refused[t].append(effect_id)
                        messages.append(str(e))

            return body

        no_errors(run_threads([work(t) for t in range(THREADS)]))
        history = log.history()
    winners = sorted((c for claims in won for c in claims), key=lambda c: c.seq)
    assert sorted(c.effect_id for c in winners) == sorted(ids)  # each id won exactly once
    assert all(len(won[t]) + len(refused[t]) == len(ids) for t in range(THREADS))
    assert len(messages) == (THREADS - 1) * len(ids)
    assert all("already claimed" in message for message in messages)
    assert history.claims == tuple(winners)
    assert [c.seq for c in winners] == list(range(1, len(ids) + 1))
    assert loaded(log.run_id, store_dir) == history


# --------------------------------------------------------------------------- a full disk

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
        child = subprocess.run(
            [PYTHON, "-c", FULL_DISK_CHILD, str(store), str(slack)],
            env=subprocess_env(),
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=CHILD_TIMEOUT * 2,
            check=False,
        )
        assert child.returncode == 0, child.stderr
        report: dict[str, Any] = json.loads(child.stdout)
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
        assert set(seqs_per_run(store / DB)) == set(report)
    # Both kinds of caller were met: some claims fitted before the disk was full.
    assert ok_after_limit > 0
    assert raised > 0


# --------------------------------------------------------------------------- SIGKILL

# argv: store. Eight threads, each with its own log, claim in a loop and print
# "<run id> <effect id>" once each claim has returned.
KILLED_CHILD = textwrap.dedent(
    """
    import sys, threading
    from ledger import effects as fx
    from ledger.effect_log import EffectLog, new_run_id

    store = sys.argv[1]
    OP = fx.OperationRef("write_file", "test/1", "0" * 64)
    printing = threading.Lock()
    start = threading.Barrier(8)

    def work():
        log = EffectLog(new_run_id(), store)
        start.wait(60)
        for i in range(100_000):
            ref = fx.ResourceRef("fs", f"/sandbox/{log.run_id}/e{i}", "target")
            log.claim(effect_id=f"e{i}", action_id="a", operation=OP, impact_scope=[ref])
            with printing:
                print(log.run_id, f"e{i}", flush=True)

    for _ in range(8):
        threading.Thread(target=work).start()
    """
)


def test_sigkill_during_a_burst_loses_no_returned_claim(store_dir: Path) -> None:
    """Killed at random moments during a burst, the store holds every claim that returned, gap-free."""
    rng = random.Random(20240611)
    for _ in range(4):
        proc = subprocess.Popen(
            [PYTHON, "-c", KILLED_CHILD, str(store_dir)],
            env=subprocess_env(),
            cwd=REPO,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        data = read_lines(proc, rng.randint(1, 200))
        time.sleep(rng.uniform(0, 0.02))  # land anywhere in the claims that follow
        proc.send_signal(signal.SIGKILL)
        rest, err = proc.communicate(timeout=CHILD_TIMEOUT)
        assert proc.returncode == -signal.SIGKILL, err.decode()
        lines = (data + rest).decode().splitlines(keepends=True)
        printed: dict[str, list[str]] = {}
        for line in lines:
            if line.endswith("\n"):
                run_id, effect_id = line.split()
                printed.setdefault(run_id, []).append(effect_id)
        assert printed
        for run_id, effect_ids in printed.items():
            history = loaded(run_id, store_dir)
            stored = [c.effect_id for c in history.claims]
            assert effect_ids == [f"e{i}" for i in range(len(effect_ids))]
            assert stored[: len(effect_ids)] == effect_ids, f"run {run_id} lost a returned claim"
            assert len(stored) - len(effect_ids) in {0, 1}  # at most the claim in flight
            assert gap_free(history)
        for run_id, seqs in seqs_per_run(store_dir / DB).items():
            assert seqs == list(range(1, len(seqs) + 1)), f"run {run_id} has a seq gap"
