"""Group commit: threads of one process that write at the same moment share one transaction.

When several threads claim at once, their records are committed together: one
transaction, one fsync. Each ``claim`` still returns only once its own record is
committed, and a failure is reported to exactly the callers whose records it hit: a
claim that returned is durable, a claim that raised exists nowhere.

Real threads started together by a ``threading.Barrier``, real child processes killed
with ``SIGKILL``. Every wait has a timeout, so a deadlock fails a test instead of
hanging it. That a burst shares commits (counted in SQLite's write-ahead log) and a full
disk mid-burst are the SQLite backend's (``tests/sqlite/test_group_commit.py``).
"""

from __future__ import annotations

import random
import signal
import subprocess
import textwrap
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from ledger import effects as fx
from ledger.effect_log import (
    ClaimRequest,
    EffectLog,
    EffectPersistenceError,
    OutcomeRequest,
    new_run_id,
)
from ledger.errors import RunExistsError
from tests.backends import Backend
from tests.builders import (
    CHILD_TIMEOUT,
    PYTHON,
    REPO,
    claim_target,
    fs_ref,
    gap_free,
    loaded,
    no_errors,
    op,
    read_lines,
    run_threads,
    subprocess_env,
)

THREADS = 8


# --------------------------------------------------------------------------- helpers


def seqs_per_run(backend: Backend, store: Path) -> dict[str, list[int]]:
    """Every run's claim seqs, ascending, as plain SQL reads them."""
    rows = backend.query(store, "SELECT run_id, seq FROM claims ORDER BY run_id, seq")
    runs: dict[str, list[int]] = {}
    for run_id, seq in rows:
        runs.setdefault(run_id, []).append(seq)
    return runs


# --------------------------------------------------------------------------- many logs, one store


def test_threads_with_their_own_logs_claim_at_once(backend: Backend, store_dir: Path) -> None:
    """Eight threads, each with its own log, claim at once: no error, each claim durable on return."""
    per_thread = 25
    with EffectLog(new_run_id(), store_dir) as first:  # the store exists before the burst
        claim_target(first, "setup")
    logs = [EffectLog(new_run_id(), store_dir) for _ in range(THREADS)]
    returned: dict[str, list[fx.EffectClaim]] = {log.run_id: [] for log in logs}
    unseen: list[str] = []

    def work(log: EffectLog) -> Callable[[], None]:
        def body() -> None:
            for i in range(per_thread):
                record = claim_target(log, f"e{i}")
                returned[log.run_id].append(record)
                # Committed before claim returned: another connection sees it at once.
                rows = backend.query(
                    store_dir,
                    "SELECT seq FROM claims WHERE run_id = ? AND effect_id = ?",
                    (log.run_id, record.effect_id),
                )
                if rows != [(record.seq,)]:
                    unseen.append(f"{log.run_id}/{record.effect_id}: {rows}")

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
    runs = seqs_per_run(backend, store_dir)
    assert {run: seqs for run, seqs in runs.items() if run in returned} == {
        run: list(range(1, per_thread + 1)) for run in returned
    }


def writer_row(backend: Backend, store: Path, run_id: str) -> list[tuple[object, ...]]:
    """The run's row in ``run_writers``: which process wrote it last, and since when."""
    return backend.query(store, "SELECT * FROM run_writers WHERE run_id = ?", (run_id,))


def _round_with_failing_writers(
    backend: Backend, store: Path, existing: str, stale_run: str, round_: int
) -> None:
    """Six new logs and two doomed ones claim three times each, at once.

    One doomed log is new on the run ``existing`` (its first write finds the run there);
    the other was loaded from ``stale_run`` before another log advanced that run, so
    its records take seqs the run already holds (its write fails after it has begun).
    """
    logs = [EffectLog(new_run_id(), store) for _ in range(THREADS - 2)]
    exists = EffectLog(existing, store)  # a new log on a run the store holds
    stale = EffectLog.load(stale_run, store)
    with EffectLog.load(stale_run, store) as other:
        claim_target(other, f"advance{round_}")
    writer = writer_row(backend, store, stale_run)
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
                    with pytest.raises(RunExistsError, match="already exists"):
                        claim_target(log, effect_id)
                    refused["exists"].append(effect_id)
                elif log is stale:
                    with pytest.raises(EffectPersistenceError, match=f"claim '{effect_id}'"):
                        claim_target(log, effect_id)
                    refused["stale"].append(effect_id)
                else:
                    returned[log.run_id].append(claim_target(log, effect_id))

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
    assert writer_row(backend, store, stale_run) == writer
    for log in logs:
        if log not in {exists, stale}:
            claims = loaded(log.run_id, store).claims
            assert claims == tuple(returned[log.run_id])
            assert [c.seq for c in claims] == [1, 2, 3]


def test_failing_writers_do_not_fail_the_others(backend: Backend, store_dir: Path) -> None:
    """Two logs' writes fail while six others claim at once: only the two fail, and leave no trace."""
    existing, stale_run = new_run_id(), new_run_id()
    for run_id in (existing, stale_run):
        with EffectLog(run_id, store_dir) as log:
            claim_target(log, "original")
    for round_ in range(4):
        _round_with_failing_writers(backend, store_dir, existing, stale_run, round_)
        # The refused claims, and the observation waiting for them, exist nowhere.
        history = loaded(existing, store_dir)
        assert [c.effect_id for c in history.claims] == ["original"]
        assert history.outcomes == history.observations == ()
        history = loaded(stale_run, store_dir)
        expected = ["original", *(f"advance{r}" for r in range(round_ + 1))]
        assert [c.effect_id for c in history.claims] == expected
        counts = backend.row_counts(store_dir)
        claims, observations = counts["claims"], counts["observations"]
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
                claim_target(log, f"s{k}")
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


def test_threads_sharing_one_log_claim_at_once(backend: Backend, store_dir: Path) -> None:
    """Eight threads claim distinct effects on one shared log: all succeed, seqs 1..N, reload equal."""
    per_thread = 25
    returned: list[list[fx.EffectClaim]] = [[] for _ in range(THREADS)]
    with EffectLog(new_run_id(), store_dir) as log:

        def work(t: int) -> Callable[[], None]:
            return lambda: returned[t].extend(
                claim_target(log, f"t{t}-e{i}") for i in range(per_thread)
            )

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
    assert seqs_per_run(backend, store_dir) == {log.run_id: list(range(1, total + 1))}


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
                        won[t].append(claim_target(log, effect_id))
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


def test_sigkill_during_a_burst_loses_no_returned_claim(backend: Backend, store_dir: Path) -> None:
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
        for run_id, seqs in seqs_per_run(backend, store_dir).items():
            assert seqs == list(range(1, len(seqs) + 1)), f"run {run_id} has a seq gap"
