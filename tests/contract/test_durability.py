"""Durability on any backend: what a claim promises survives SIGKILL; missing stores stay missing.

A child process is killed while it claims and settles; every record it acknowledged is
there afterwards, and recovery marks exactly the claims left without an outcome. How
the SQLite backend gets there (fsync, its WAL, corrupt files) is in
``tests/sqlite/test_durability.py``.
"""

from __future__ import annotations

import signal
import subprocess
import textwrap
from pathlib import Path

import pytest

from ledger import effects as fx
from ledger.effect_log import EffectLog, new_run_id
from tests.backends import Backend
from tests.builders import (
    CHILD_LOG_PRELUDE,
    CHILD_TIMEOUT,
    PYTHON,
    claim_small,
    effect_ids,
    gap_free,
    listing,
    read_lines,
    run_child,
    run_of_forty_claims,
    subprocess_env,
)


@pytest.fixture
def good_store(store_dir: Path) -> tuple[Path, str]:
    """A closed store with 40 claims of one run, and that run's id."""
    return store_dir, run_of_forty_claims(store_dir)


KILLED_LOOP_CHILD = """
log = EffectLog(sys.argv[2], sys.argv[1])
for i in range(100_000):
    claim(log, f"e{i}")
    print(f"claim e{i}", flush=True)
    if i % 2 == 0:
        log.outcome(effect_id=f"e{i}", execution=fx.ExecutionOutcome.REPORTED_SUCCESS,
                    impact=fx.Impact.CERTAIN)
        print(f"outcome e{i}", flush=True)
"""


def test_acknowledged_claims_survive_sigkill(store_dir: Path, run_id: str) -> None:
    """Every record acknowledged before a SIGKILL loads after it (at most one more), gap-free."""
    child = subprocess.Popen(
        [
            PYTHON,
            "-c",
            CHILD_LOG_PRELUDE + textwrap.dedent(KILLED_LOOP_CHILD),
            str(store_dir),
            run_id,
        ],
        env=subprocess_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        # Read from the descriptor itself: lines a buffered reader had taken from the pipe
        # would be lost to communicate(), which reads the descriptor.
        printed = read_lines(child, 40)
        child.send_signal(signal.SIGKILL)
        rest, errors = child.communicate(timeout=CHILD_TIMEOUT)
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
    assert child.returncode == -signal.SIGKILL, errors.decode()
    # Lines still in the pipe were printed after their call returned: acknowledged too.
    lines = (printed + rest).decode().splitlines(keepends=True)
    acknowledged = [line.split() for line in lines if line.endswith("\n")]
    acked_claims = [effect for kind, effect in acknowledged if kind == "claim"]
    acked_outcomes = [effect for kind, effect in acknowledged if kind == "outcome"]

    with EffectLog.load(run_id, store_dir) as loaded:
        history = loaded.history()
        claimed = effect_ids(history)
        assert claimed[: len(acked_claims)] == acked_claims
        assert len(claimed) <= len(acked_claims) + 1
        assert claimed == [f"e{i}" for i in range(len(claimed))]
        with_outcome = [o.effect_id for o in history.outcomes]
        assert with_outcome[: len(acked_outcomes)] == acked_outcomes
        assert len(history.records()) <= len(acknowledged) + 1
        assert gap_free(history)

        recovered = loaded.recover_interrupted()
        assert [o.effect_id for o in recovered] == [e for e in claimed if e not in with_outcome]
        assert [o.seq for o in recovered] == list(
            range(len(history.records()) + 1, len(history.records()) + len(recovered) + 1)
        )
        assert all(o.execution is fx.ExecutionOutcome.INTERRUPTED for o in recovered)
    with EffectLog.load(run_id, store_dir) as again:
        assert again.recover_interrupted() == ()
        assert gap_free(again.history())
        for effect in claimed:
            assert again.assess(effect).execution is not None


def test_recover_after_sigkill_marks_only_claims_without_outcome(
    store_dir: Path, run_id: str
) -> None:
    """After a SIGKILL, recovery marks every loaded claim without an outcome, and only those."""
    out = run_child(
        """
        log = EffectLog(sys.argv[2], sys.argv[1])
        for i in range(6):
            claim(log, f"e{i}")
        log.outcome(effect_id="e1", execution=fx.ExecutionOutcome.REPORTED_SUCCESS,
                    impact=fx.Impact.CERTAIN)
        log.outcome(effect_id="e3", execution=fx.ExecutionOutcome.RUNNING,
                    impact=fx.Impact.POSSIBLE)
        print("ready", flush=True)
        os.kill(os.getpid(), signal.SIGKILL)
        """,
        store_dir,
        run_id,
        signal_exit=signal.SIGKILL,
    )
    assert out == "ready\n"
    with EffectLog.load(run_id, store_dir) as loaded:
        recovered = loaded.recover_interrupted()
        assert [o.effect_id for o in recovered] == ["e0", "e2", "e4", "e5"]
        assert [o.seq for o in recovered] == [9, 10, 11, 12]
        for o in recovered:
            assert (o.execution, o.impact, o.replayed) == (
                fx.ExecutionOutcome.INTERRUPTED,
                fx.Impact.POSSIBLE,
                True,
            )
        assert loaded.recover_interrupted() == ()
    with EffectLog.load(run_id, store_dir) as again:
        assert again.recover_interrupted() == ()
        assert gap_free(again.history())
        assert again.assess("e3").verdict is fx.EffectVerdict.PENDING


def test_missing_store_loads_empty_and_creates_nothing(
    backend: Backend, tmp_path: Path, run_id: str
) -> None:
    """Loading from a store that does not exist is empty and creates no directory at all."""
    store = backend.location(tmp_path / "parent")
    with EffectLog.load(run_id, store) as loaded:
        assert loaded.history() == fx.History((), (), ())
    assert listing(tmp_path) == []


def test_run_without_rows_loads_empty_and_writes_nothing(
    backend: Backend, good_store: tuple[Path, str]
) -> None:
    """A run the store has never seen loads as empty and leaves the store's rows unchanged."""
    store, _ = good_store
    other = new_run_id()

    def runs() -> list[tuple[str]]:
        return backend.query(store, "SELECT run_id FROM runs ORDER BY run_id")

    before = runs()
    with EffectLog.load(other, store) as loaded:
        assert loaded.history() == fx.History((), (), ())
    assert runs() == before
    assert (other,) not in before


def test_loaded_empty_run_starts_at_seq_one(store_dir: Path, run_id: str) -> None:
    """A run loaded as empty from a missing store can be continued, starting at seq 1."""
    with EffectLog.load(run_id, store_dir) as loaded:
        assert claim_small(loaded, "e1").seq == 1
    with EffectLog.load(run_id, store_dir) as again:
        assert effect_ids(again.history()) == ["e1"]
