"""Concurrency: many logs, threads and processes writing one store at once (API behaviour 9).

Real processes and threads on a real store of each backend. Child processes start
together: each one signals that it is ready by creating a file, then waits for a ``go``
file that the parent creates once every child is ready (``tests.builders``). Every wait
has a timeout, so a deadlock fails the test instead of hanging it. A brand-new store
raced for by many processes, and a writer interrupted while it waits for SQLite's write
lock, are the SQLite backend's (``tests/sqlite/test_concurrency.py``).
"""

from __future__ import annotations

import gc
import json
import multiprocessing
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from ledger import effects as fx
from ledger.effect_log import EffectLog, new_run_id
from tests.backends import Backend
from tests.builders import (
    BURST_TIMEOUT,
    CHILD_PRELUDE,
    WRITER_CHILD,
    finish_children,
    fs_ref,
    no_errors,
    op,
    open_barrier,
    run_threads,
    start_child,
)

# ----------------------------------------------------------------------------- children

# argv: store, barrier dir, name, warm (0/1), output file, run ids...
# Loads every run over and over until the file "stop" appears in the barrier dir,
# then once more; writes every loaded history to the output file. A warm reader
# keeps one log open throughout, so its loads reuse the process's open store; a
# cold one opens the store afresh for every load.
READER = (
    CHILD_PRELUDE
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


# ----------------------------------------------------------------------------- checks


def _per_run(backend: Backend, store: Path, table: str) -> dict[str, int]:
    return dict(backend.query(store, f"SELECT run_id, count(*) FROM {table} GROUP BY run_id"))


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


def _assert_sql_counts(backend: Backend, store: Path, expected: dict[str, int]) -> None:
    """Plain SQL agrees: a row in runs, and ``n`` claims and ``n`` outcomes, per run."""
    assert {r for (r,) in backend.query(store, "SELECT run_id FROM runs")} == set(expected)
    for table in ("claims", "outcomes", "impact_scope", "obligations"):
        assert _per_run(backend, store, table) == expected
    # seq is unique per run across the record tables, and runs 1..2n.
    seqs = backend.query(
        store,
        "SELECT run_id, count(*), count(DISTINCT seq), min(seq), max(seq) FROM ("
        " SELECT run_id, seq FROM claims UNION ALL SELECT run_id, seq FROM outcomes"
        " UNION ALL SELECT run_id, seq FROM observations) AS records GROUP BY run_id",
    )
    assert {row[0]: row[1:] for row in seqs} == {
        run: (2 * n, 2 * n, 1, 2 * n) for run, n in expected.items()
    }


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
    backend: Backend, store_dir: Path, tmp_path: Path
) -> None:
    """Processes writing their own runs to one store at once all succeed and lose no row."""
    gate = tmp_path / "gate"
    gate.mkdir()
    procs = [
        start_child(WRITER_CHILD, store_dir, gate, i, "-", PER_PROCESS, 1) for i in range(PROCESSES)
    ]
    open_barrier(gate, procs)
    run_ids = [out.strip() for out in finish_children(procs)]
    assert len(set(run_ids)) == PROCESSES
    effect_ids = [f"e{i}" for i in range(PER_PROCESS)]
    for run_id in run_ids:
        with EffectLog.load(run_id, store_dir) as log:
            history = log.history()
        assert len(history.records()) == 2 * PER_PROCESS
        _assert_complete(history, effect_ids)
    _assert_sql_counts(backend, store_dir, dict.fromkeys(run_ids, PER_PROCESS))


def test_threads_share_one_log(backend: Backend, store_dir: Path) -> None:
    """Threads claiming and settling through one shared log keep every record, gap-free."""
    threads, per_thread = 8, 25
    with EffectLog(new_run_id(), store_dir) as log:

        def work(t: int) -> Callable[[], None]:
            return lambda: [_claim_and_settle(log, f"t{t}-e{i}") for i in range(per_thread)]

        no_errors(run_threads([work(t) for t in range(threads)]))
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
    _assert_sql_counts(backend, store_dir, {log.run_id: len(effect_ids)})


def test_logs_of_different_runs_in_threads_share_one_store(
    backend: Backend, store_dir: Path
) -> None:
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

    no_errors(run_threads([work(t) for t in range(threads)]))
    effect_ids = [f"e{i}" for i in range(per_thread)]
    for run_id in run_ids:
        _assert_complete(histories[run_id], effect_ids)
        with EffectLog.load(run_id, store_dir) as again:
            assert again.history() == histories[run_id]
    _assert_sql_counts(backend, store_dir, dict.fromkeys(run_ids, per_thread))


def test_loads_while_other_processes_write_see_gap_free_prefixes(
    backend: Backend, store_dir: Path, tmp_path: Path
) -> None:
    """Processes loading runs while other processes write them only ever see valid prefixes."""
    writers, per_writer = 3, 50
    gate = tmp_path / "gate"
    gate.mkdir()
    run_ids = [new_run_id() for _ in range(writers)]
    writer_procs = [
        start_child(WRITER_CHILD, store_dir, gate, i, run_ids[i], per_writer, 1)
        for i in range(writers)
    ]
    outputs = {warm: tmp_path / f"loads-{warm}.json" for warm in (0, 1)}
    readers = [
        start_child(READER, store_dir, gate, f"reader{warm}", warm, output, *run_ids)
        for warm, output in outputs.items()
    ]
    open_barrier(gate, [*writer_procs, *readers])
    assert [out.strip() for out in finish_children(writer_procs)] == run_ids
    (gate / "stop").touch()
    finish_children(readers)

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
    _assert_sql_counts(backend, store_dir, dict.fromkeys(run_ids, per_writer))


def _forked_writer(store: Path, run_id: str, count: int) -> None:
    with EffectLog(run_id, store) as log:
        for i in range(count):
            _claim_and_settle(log, f"e{i}")
            # Finalise whatever the fork left behind (the parent's pooled connections).
            gc.collect()
        if log.degraded:
            raise SystemExit(f"run {run_id} is degraded")


def test_forked_processes_write_beside_a_parent_with_an_open_store(
    backend: Backend, store_dir: Path
) -> None:
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
            deadline = time.monotonic() + BURST_TIMEOUT
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
    _assert_sql_counts(backend, store_dir, expected)
