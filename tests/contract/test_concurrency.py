"""Concurrency: many logs, threads and processes writing one store at once (API behaviour 9).

Real processes and threads on real files. Child processes start together: each one
signals that it is ready by creating a file, then waits for a ``go`` file that the
parent creates once every child is ready. Every wait has a timeout, so a deadlock
fails the test instead of hanging it.
"""

from __future__ import annotations

import gc
import json
import multiprocessing
import os
import signal
import sqlite3
import stat
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import pytest

from ledger import effects as fx
from ledger.effect_log import EffectLog, new_run_id
from ledger.sqlite.engine import head_revision
from ledger.sqlite.schema import SQLITE_TRIGGERS, VIEWS
from tests.builders import PYTHON, REPO, fs_ref, op, subprocess_env

# A generous bound for any child or thread: a deadlock fails instead of hanging.
TIMEOUT = 120.0

# ----------------------------------------------------------------------------- children

# Shared preamble: arguments, the barrier, and a module-level operation.
_PRELUDE = r"""
import hashlib
import json
import sys
import time
from pathlib import Path

from ledger import effects as fx
from ledger.effect_log import EffectLog, new_run_id

OP = fx.OperationRef("write_file", "test/1", hashlib.sha256(b"{}").hexdigest())


def barrier(directory, name):
    (directory / f"ready-{name}").touch()
    deadline = time.monotonic() + 60
    while not (directory / "go").exists():
        if time.monotonic() > deadline:
            raise SystemExit(f"child {name}: the barrier never opened")
        time.sleep(0.002)
"""

# argv: store, barrier dir, name, run id ("-" for a new one), claims, settle (0/1)
WRITER = (
    _PRELUDE
    + r"""
store, gate, name, run_id, count, settle = sys.argv[1:7]
gate = Path(gate)
run_id = new_run_id() if run_id == "-" else run_id
with EffectLog(run_id, store) as log:  # writes nothing yet
    barrier(gate, name)
    for i in range(int(count)):
        ref = fx.ResourceRef("fs", f"/sandbox/{name}/{i}.txt", "target")
        log.claim(
            effect_id=f"e{i}",
            action_id=f"a{i}",
            operation=OP,
            impact_scope=[ref],
            obligations=[fx.Postcondition(ref, fx.Predicate.EXISTS)],
        )
        if settle == "1":
            log.outcome(
                effect_id=f"e{i}",
                execution=fx.ExecutionOutcome.REPORTED_SUCCESS,
                impact=fx.Impact.CERTAIN,
                execution_id=f"x{i}",
            )
    # An outcome that failed to persist does not raise: it degrades the log.
    if log.degraded:
        raise SystemExit(f"child {name}: run {run_id} is degraded")
print(run_id, flush=True)
"""
)

# argv: store, barrier dir, name, warm (0/1), output file, run ids...
# Loads every run over and over until the file "stop" appears in the barrier dir,
# then once more; writes every loaded history to the output file. A warm reader
# keeps one log open throughout, so its loads reuse the process's open store; a
# cold one opens the store afresh for every load.
READER = (
    _PRELUDE
    + r"""
store, gate, name, warm, output, *run_ids = sys.argv[1:]
gate = Path(gate)
barrier(gate, name)
anchor = EffectLog.load(run_ids[0], store) if warm == "1" else None
loads = []


def load_all():
    for run_id in run_ids:
        with EffectLog.load(run_id, store) as log:
            history = log.history()
        seqs = [r.seq for r in history.records()]
        if seqs != list(range(1, len(seqs) + 1)):
            raise AssertionError(f"run {run_id} loaded with seqs {seqs}")
        loads.append({"run_id": run_id, "history": history.to_dict()})


deadline = time.monotonic() + 90
while not (gate / "stop").exists():
    if time.monotonic() > deadline:
        raise SystemExit(f"child {name}: never told to stop")
    load_all()
load_all()  # every writer has exited: these are the complete runs
if anchor is not None:
    anchor.close()
Path(output).write_text(json.dumps(loads))
print(len(loads), flush=True)
"""
)


def _spawn(script: str, *args: object) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [PYTHON, "-c", script, *map(str, args)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=subprocess_env(),
        cwd=REPO,
    )


def _kill_all(procs: Sequence[subprocess.Popen[str]]) -> str:
    report = []
    for proc in procs:
        if proc.poll() is None:
            proc.kill()
    for proc in procs:
        out, err = proc.communicate()
        report.append(f"pid {proc.pid} rc={proc.returncode}\nstdout:\n{out}\nstderr:\n{err}")
    return "\n".join(report)


def _open_barrier(gate: Path, procs: Sequence[subprocess.Popen[str]]) -> None:
    """Wait until every child is ready, then let them all go at once."""
    deadline = time.monotonic() + TIMEOUT
    while len(list(gate.glob("ready-*"))) < len(procs):
        if any(p.poll() is not None for p in procs) or time.monotonic() > deadline:
            pytest.fail("a child died or hung before the barrier:\n" + _kill_all(procs))
        time.sleep(0.005)
    (gate / "go").touch()


def _finish(procs: Sequence[subprocess.Popen[str]]) -> list[str]:
    """Wait for every child; each must exit 0 with an empty stderr. Returns their stdouts."""
    deadline = time.monotonic() + TIMEOUT
    outputs = []
    for proc in procs:
        try:
            out, err = proc.communicate(timeout=max(1.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            pytest.fail("a child did not finish (deadlock?):\n" + _kill_all(procs))
        assert proc.returncode == 0, f"child {proc.pid} failed:\n{err}"
        assert err == "", f"child {proc.pid} wrote to stderr:\n{err}"
        outputs.append(out)
    return outputs


# ----------------------------------------------------------------------------- checks


def _sql(db: Path, query: str, params: Sequence[object] = ()) -> list[tuple[object, ...]]:
    """Run a query with plain sqlite3, read-only, outside the library."""
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=30)
    try:
        return conn.execute(query, params).fetchall()
    finally:
        conn.close()


def _per_run(db: Path, table: str) -> dict[str, int]:
    return dict(_sql(db, f"SELECT run_id, count(*) FROM {table} GROUP BY run_id"))


def _assert_complete(history: fx.History, effect_ids: Sequence[str]) -> None:
    """The run holds exactly these claims, each followed by its terminal outcome, gap-free."""
    records = history.records()
    assert [r.seq for r in records] == list(range(1, 2 * len(effect_ids) + 1))
    assert sorted(c.effect_id for c in history.claims) == sorted(effect_ids)
    assert sorted(o.effect_id for o in history.outcomes) == sorted(effect_ids)
    assert history.observations == ()
    claimed_at = {c.effect_id: c.seq for c in history.claims}
    for outcome in history.outcomes:
        assert outcome.seq > claimed_at[outcome.effect_id]
        assert outcome.execution is fx.ExecutionOutcome.REPORTED_SUCCESS
        assert not outcome.replayed


def _assert_sql_counts(db: Path, expected: dict[str, int]) -> None:
    """Plain SQL agrees: a row in runs, and ``n`` claims and ``n`` outcomes, per run."""
    assert {r for (r,) in _sql(db, "SELECT run_id FROM runs")} == set(expected)
    assert _per_run(db, "claims") == expected
    assert _per_run(db, "outcomes") == expected
    assert _per_run(db, "impact_scope") == expected
    assert _per_run(db, "obligations") == expected
    # seq is unique per run across the record tables, and runs 1..2n.
    seqs = _sql(
        db,
        "SELECT run_id, count(*), count(DISTINCT seq), min(seq), max(seq) FROM ("
        " SELECT run_id, seq FROM claims UNION ALL SELECT run_id, seq FROM outcomes"
        " UNION ALL SELECT run_id, seq FROM observations) GROUP BY run_id",
    )
    assert {row[0]: row[1:] for row in seqs} == {
        run: (2 * n, 2 * n, 1, 2 * n) for run, n in expected.items()
    }


def _run_threads(workers: Sequence[Callable[[], None]]) -> None:
    """Start the workers together in daemon threads; fail on any error or a hang."""
    start = threading.Barrier(len(workers))
    errors: list[BaseException] = []

    def body(work: Callable[[], None]) -> None:
        try:
            start.wait(timeout=TIMEOUT)
            work()
        except BaseException as e:
            errors.append(e)

    threads = [threading.Thread(target=body, args=(w,), daemon=True) for w in workers]
    for thread in threads:
        thread.start()
    deadline = time.monotonic() + TIMEOUT
    for thread in threads:
        thread.join(timeout=max(0.1, deadline - time.monotonic()))
    assert not any(t.is_alive() for t in threads), "a thread did not finish (deadlock?)"
    if errors:
        raise errors[0]


def _claim_and_settle(log: EffectLog, effect_id: str) -> None:
    ref = fs_ref(f"/sandbox/{log.run_id}/{effect_id}.txt")
    log.claim(
        effect_id=effect_id,
        action_id=f"a-{effect_id}",
        operation=op(),
        impact_scope=[ref],
        obligations=[fx.Postcondition(ref, fx.Predicate.EXISTS)],
    )
    log.outcome(
        effect_id=effect_id,
        execution=fx.ExecutionOutcome.REPORTED_SUCCESS,
        impact=fx.Impact.CERTAIN,
    )


# ----------------------------------------------------------------------------- tests

PROCESSES = 4
PER_PROCESS = 50


def test_processes_write_their_own_runs_into_one_store_at_once(
    store_dir: Path, tmp_path: Path
) -> None:
    """Processes writing their own runs to one store at once all succeed and lose no row."""
    gate = tmp_path / "gate"
    gate.mkdir()
    procs = [_spawn(WRITER, store_dir, gate, i, "-", PER_PROCESS, 1) for i in range(PROCESSES)]
    _open_barrier(gate, procs)
    run_ids = [out.strip() for out in _finish(procs)]
    assert len(set(run_ids)) == PROCESSES
    effect_ids = [f"e{i}" for i in range(PER_PROCESS)]
    for run_id in run_ids:
        with EffectLog.load(run_id, store_dir) as log:
            history = log.history()
        assert len(history.records()) == 2 * PER_PROCESS
        _assert_complete(history, effect_ids)
    _assert_sql_counts(store_dir / "ledger.sqlite3", dict.fromkeys(run_ids, PER_PROCESS))


def test_threads_share_one_log(store_dir: Path) -> None:
    """Threads claiming and settling through one shared log keep every record, gap-free."""
    threads, per_thread = 8, 25
    with EffectLog(new_run_id(), store_dir) as log:

        def work(t: int) -> Callable[[], None]:
            return lambda: [_claim_and_settle(log, f"t{t}-e{i}") for i in range(per_thread)]

        _run_threads([work(t) for t in range(threads)])
        assert not log.degraded
        history = log.history()
        effect_ids = [f"t{t}-e{i}" for t in range(threads) for i in range(per_thread)]
        _assert_complete(history, effect_ids)
        # Each thread's own claims keep the order it made them in.
        for t in range(threads):
            mine = [c.effect_id for c in history.claims if c.effect_id.startswith(f"t{t}-")]
            assert mine == [f"t{t}-e{i}" for i in range(per_thread)]
        with EffectLog.load(log.run_id, store_dir) as again:
            assert again.history() == history
    _assert_sql_counts(store_dir / "ledger.sqlite3", {log.run_id: len(effect_ids)})


def test_logs_of_different_runs_in_threads_share_one_store(store_dir: Path) -> None:
    """Logs of different runs written from threads of one process lose no row."""
    threads, per_thread = 6, 30
    run_ids = [new_run_id() for _ in range(threads)]
    histories: dict[str, fx.History] = {}

    def work(t: int) -> Callable[[], None]:
        def body() -> None:
            run_id = run_ids[t]
            with EffectLog(run_id, store_dir) as log:
                for i in range(per_thread // 2):
                    _claim_and_settle(log, f"e{i}")
            # Half-way, every thread closes its log and continues its run from the
            # store, while the other threads keep writing (and opening, and closing).
            with EffectLog.load(run_id, store_dir) as log:
                for i in range(per_thread // 2, per_thread):
                    _claim_and_settle(log, f"e{i}")
                assert not log.degraded
                histories[run_id] = log.history()

        return body

    _run_threads([work(t) for t in range(threads)])
    effect_ids = [f"e{i}" for i in range(per_thread)]
    for run_id in run_ids:
        _assert_complete(histories[run_id], effect_ids)
        with EffectLog.load(run_id, store_dir) as again:
            assert again.history() == histories[run_id]
    _assert_sql_counts(store_dir / "ledger.sqlite3", dict.fromkeys(run_ids, per_thread))


def test_processes_create_a_new_store_at_the_same_moment(tmp_path: Path) -> None:
    """Processes racing to create a brand-new store all succeed and migrate it exactly once."""
    store = tmp_path / "not" / "yet" / "store"
    gate = tmp_path / "gate"
    gate.mkdir()
    procs = [_spawn(WRITER, store, gate, i, "-", 1, 0) for i in range(8)]
    _open_barrier(gate, procs)
    run_ids = [out.strip() for out in _finish(procs)]
    assert len(set(run_ids)) == 8

    db = store / "ledger.sqlite3"
    assert stat.S_IMODE(os.lstat(store).st_mode) == 0o700
    assert stat.S_IMODE(os.lstat(db).st_mode) == 0o600
    assert _sql(db, "SELECT version_num FROM alembic_version") == [(head_revision(),)]
    triggers = {n for (n,) in _sql(db, "SELECT name FROM sqlite_master WHERE type = 'trigger'")}
    views = {n for (n,) in _sql(db, "SELECT name FROM sqlite_master WHERE type = 'view'")}
    assert triggers == set(SQLITE_TRIGGERS)
    assert views == set(VIEWS)
    assert _sql(db, "PRAGMA journal_mode") == [("wal",)]
    assert _per_run(db, "claims") == dict.fromkeys(run_ids, 1)
    for run_id in run_ids:
        with EffectLog.load(run_id, store) as log:
            history = log.history()
        assert [(c.seq, c.effect_id) for c in history.claims] == [(1, "e0")]
        assert history.outcomes == ()


def test_loads_while_other_processes_write_see_gap_free_prefixes(
    store_dir: Path, tmp_path: Path
) -> None:
    """Processes loading runs while other processes write them only ever see valid prefixes."""
    writers, per_writer = 3, 50
    gate = tmp_path / "gate"
    gate.mkdir()
    run_ids = [new_run_id() for _ in range(writers)]
    writer_procs = [
        _spawn(WRITER, store_dir, gate, i, run_ids[i], per_writer, 1) for i in range(writers)
    ]
    outputs = {warm: tmp_path / f"loads-{warm}.json" for warm in (0, 1)}
    readers = [
        _spawn(READER, store_dir, gate, f"reader{warm}", warm, output, *run_ids)
        for warm, output in outputs.items()
    ]
    _open_barrier(gate, [*writer_procs, *readers])
    assert [out.strip() for out in _finish(writer_procs)] == run_ids
    (gate / "stop").touch()
    _finish(readers)

    finals: dict[str, tuple[fx.Record, ...]] = {}
    effect_ids = [f"e{i}" for i in range(per_writer)]
    for run_id in run_ids:
        with EffectLog.load(run_id, store_dir) as log:
            history = log.history()
        _assert_complete(history, effect_ids)
        finals[run_id] = history.records()

    for output in outputs.values():
        loads = json.loads(output.read_text())
        # At least the pass after every writer exited. How many passes overlap the writes
        # depends on the machine's load, so it is not asserted: every pass must be a prefix.
        assert len(loads) >= writers
        for load in loads:
            records = fx.History.from_dict(load["history"]).records()
            assert records == finals[load["run_id"]][: len(records)]
        # The reader's last pass came after every writer exited: it saw whole runs.
        for load in loads[-writers:]:
            assert fx.History.from_dict(load["history"]).records() == finals[load["run_id"]]
    _assert_sql_counts(store_dir / "ledger.sqlite3", dict.fromkeys(run_ids, per_writer))


def _forked_writer(store: Path, run_id: str, count: int) -> None:
    with EffectLog(run_id, store) as log:
        for i in range(count):
            _claim_and_settle(log, f"e{i}")
            # Finalise whatever the fork left behind (the parent's pooled connections).
            gc.collect()
        if log.degraded:
            raise SystemExit(f"run {run_id} is degraded")


def test_forked_processes_write_beside_a_parent_with_an_open_store(store_dir: Path) -> None:
    """Processes forked from a parent that has the store open write their runs, as does the parent."""
    children, per_child = 3, 20
    with EffectLog(new_run_id(), store_dir) as parent:
        # The parent has written and read: its engine holds pooled connections at fork.
        for i in range(5):
            _claim_and_settle(parent, f"p{i}")
        with EffectLog.load(parent.run_id, store_dir) as again:
            assert again.history() == parent.history()
        run_ids = [new_run_id() for _ in range(children)]
        context = multiprocessing.get_context("fork")
        procs = [
            context.Process(target=_forked_writer, args=(store_dir, r, per_child)) for r in run_ids
        ]
        for proc in procs:
            proc.start()
        try:
            for i in range(5, 5 + per_child):
                _claim_and_settle(parent, f"p{i}")
            deadline = time.monotonic() + TIMEOUT
            for proc in procs:
                proc.join(timeout=max(0.1, deadline - time.monotonic()))
        finally:
            for proc in procs:
                if proc.is_alive():
                    proc.kill()
                    proc.join()
        assert [proc.exitcode for proc in procs] == [0] * children
        assert not parent.degraded
        parent_history = parent.history()

    _assert_complete(parent_history, [f"p{i}" for i in range(5 + per_child)])
    for run_id in run_ids:
        with EffectLog.load(run_id, store_dir) as log:
            _assert_complete(log.history(), [f"e{i}" for i in range(per_child)])
    expected = {**dict.fromkeys(run_ids, per_child), parent.run_id: 5 + per_child}
    _assert_sql_counts(store_dir / "ledger.sqlite3", expected)


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
    deadline = time.monotonic() + TIMEOUT
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
        release.join(timeout=TIMEOUT)
        first.join(timeout=TIMEOUT)
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
