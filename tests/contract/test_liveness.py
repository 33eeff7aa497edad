"""Liveness: a run is in use while a live process holds it, whatever its pid.

Real processes hold and lose real holds (:meth:`ledger.storage.Store.hold`): children
that load, claim or recover a run, SIGKILLed ones, forked ones (``tests.builders.Child``).
Nothing about the hold is mocked. How the SQLite backend holds a run (a lock file) is in
``tests/sqlite/test_liveness.py``.
"""

from __future__ import annotations

import gc
import json
import os
from pathlib import Path

import pytest

from ledger import _inspect, storage
from ledger import effects as fx
from ledger.effect_log import EffectLog, new_run_id
from ledger.errors import RunHeldError
from ledger.storage import RecoveryHold
from tests.builders import Child, claim_bare, orphan_run


def test_a_live_writer_keeps_another_process_from_recovering_its_run(
    store_dir: Path, run_id: str, spawn: type[Child]
) -> None:
    """While this process has the run open, a child can load it but its recovery is refused."""
    with EffectLog(run_id, store_dir) as log:
        claim_bare(log, "e1")
        child = spawn("recover", store_dir, run_id)
        assert "another live process has it loaded" in str(child.answer["error"])
        assert child.finish() == 0
        reader = spawn("load", store_dir, run_id)
        assert reader.answer == {"claims": ["e1"]}
        reader.finish()
    with EffectLog.load(run_id, store_dir) as again:
        assert again.history().outcomes == ()


def test_a_loaded_run_that_was_never_written_is_not_recovered(
    store_dir: Path, run_id: str, spawn: type[Child]
) -> None:
    """A child that only loaded a run holds it: recovery is refused until the child is SIGKILLed."""
    orphan_run(store_dir, run_id)
    holder = spawn("load", store_dir, run_id)
    assert holder.answer == {"claims": ["e1"]}
    with EffectLog.load(run_id, store_dir) as log, pytest.raises(RunHeldError) as e:
        log.recover_interrupted()
    assert "another live process has it loaded" in str(e.value)
    holder.kill()
    with EffectLog.load(run_id, store_dir) as log:
        assert [o.effect_id for o in log.recover_interrupted()] == ["e1"]


def test_a_sigkilled_writer_leaves_its_run_to_recovery(
    store_dir: Path, run_id: str, spawn: type[Child]
) -> None:
    """A child that claimed and was SIGKILLed holds nothing: another process recovers its claim."""
    orphan_run(store_dir, new_run_id())  # the store exists before the child writes
    writer = spawn("claim", store_dir, run_id)
    assert writer.answer == {"claimed": True}
    refused = spawn("recover", store_dir, run_id)
    assert "another live process has it loaded" in str(refused.answer["error"])
    writer.kill()
    recovered = spawn("recover", store_dir, run_id)
    assert recovered.answer == {"recovered": ["e-child"]}


def test_a_log_loaded_only_to_read_does_not_stop_a_writer(
    store_dir: Path, run_id: str, spawn: type[Child]
) -> None:
    """A child holding the run to read it does not keep this process from writing to it."""
    orphan_run(store_dir, run_id)
    reader = spawn("load", store_dir, run_id)
    with EffectLog.load(run_id, store_dir) as log:
        claim_bare(log, "e2")
        log.outcome(effect_id="e2", execution=fx.ExecutionOutcome.FAILED, impact=fx.Impact.NONE)
        assert not log.degraded
    reader.finish()
    with EffectLog.load(run_id, store_dir) as log:
        assert [c.effect_id for c in log.history().claims] == ["e1", "e2"]


def test_closing_one_of_two_logs_of_a_run_keeps_the_run_held(
    store_dir: Path, run_id: str, spawn: type[Child]
) -> None:
    """Two logs of one run in one process: the run stays held until both are closed."""
    orphan_run(store_dir, run_id)
    first = EffectLog.load(run_id, store_dir)
    with EffectLog.load(run_id, store_dir):
        pass
    with EffectLog(new_run_id(), store_dir) as other:  # another run of the same lock file
        claim_bare(other, "x")
    try:
        assert "another live process" in str(spawn("recover", store_dir, run_id).answer["error"])
    finally:
        first.close()
    assert spawn("recover", store_dir, run_id).answer == {"recovered": ["e1"]}


def test_a_log_dropped_without_close_releases_its_run(
    store_dir: Path, run_id: str, spawn: type[Child]
) -> None:
    """A log that is garbage holds nothing: its run can be recovered by another process."""
    orphan_run(store_dir, run_id)
    log = EffectLog.load(run_id, store_dir)
    assert "another live process" in str(spawn("recover", store_dir, run_id).answer["error"])
    del log
    gc.collect()
    assert spawn("recover", store_dir, run_id).answer == {"recovered": ["e1"]}


def test_a_write_while_another_process_recovers_the_run_fails_and_loses_nothing(
    store_dir: Path, run_id: str, spawn: type[Child]
) -> None:
    """Loaded while a child holds the run for recovery: a claim raises, an outcome degrades, nothing lands."""
    with EffectLog(run_id, store_dir) as log:
        claim_bare(log, "e1")
        before = log.history()
    recoverer = spawn("exclusive", store_dir, run_id)
    assert recoverer.answer == {"held": True}
    with EffectLog.load(run_id, store_dir) as log:
        assert log.history() == before  # reading is fine
        with pytest.raises(RunHeldError) as e:
            claim_bare(log, "e2")
        assert f"another process was recovering run {run_id}" in str(e.value)
        log.outcome(effect_id="e1", execution=fx.ExecutionOutcome.FAILED, impact=fx.Impact.NONE)
        assert log.degraded
        assert len(log.history().outcomes) == 1  # kept in memory, not lost
    fresh = EffectLog(run_id, store_dir)  # a log that never loaded: refused all the same
    with pytest.raises(RunHeldError) as e:
        claim_bare(fresh, "e3")
    assert f"another process is recovering run {run_id}" in str(e.value)
    fresh.close()
    recoverer.finish()
    with EffectLog.load(run_id, store_dir) as log:
        assert log.history() == before


def test_a_run_held_for_recovery_in_this_process_is_shared_by_its_logs(
    store_dir: Path, run_id: str, spawn: type[Child]
) -> None:
    """Recovery here converts the process's hold to exclusive and back: children see both."""
    orphan_run(store_dir, run_id)
    with _inspect.reader(store_dir).recovering(run_id) as claim:
        assert claim is RecoveryHold.TAKEN
        reader = spawn("load", store_dir, run_id)
        assert reader.answer == {"claims": ["e1"]}  # loads; its hold is missed
        with EffectLog.load(run_id, store_dir) as log:
            assert [o.effect_id for o in log.recover_interrupted()] == ["e1"]
            assert spawn("exclusive", store_dir, run_id).answer == {"held": False}
        with _inspect.reader(store_dir).recovering(run_id) as again:  # nested: still ours
            assert again is RecoveryHold.TAKEN
    assert spawn("exclusive", store_dir, run_id).answer == {"held": True}


def test_a_log_loaded_while_this_process_recovers_its_run_keeps_it_exclusive(
    store_dir: Path, run_id: str, spawn: type[Child]
) -> None:
    """A log of the run opened and closed here while this process recovers it: no other process may write to it meanwhile."""
    orphan_run(store_dir, run_id)
    with _inspect.reader(store_dir).recovering(run_id) as claim:
        assert claim is RecoveryHold.TAKEN
        with EffectLog.load(run_id, store_dir) as log:  # a shared hold on top of the exclusive one
            writer = spawn("claim", store_dir, run_id)
            assert f"another process is recovering run {run_id}" in str(writer.answer["error"])
            writer.finish()
            assert [o.effect_id for o in log.recover_interrupted()] == ["e1"]
        writer = spawn("claim", store_dir, run_id)
        assert f"another process is recovering run {run_id}" in str(writer.answer["error"])
        writer.finish()
    assert spawn("exclusive", store_dir, run_id).answer == {"held": True}


def test_recovering_tells_another_recoverer_from_a_user(
    store_dir: Path, run_id: str, spawn: type[Child]
) -> None:
    """A run another process recovers is RECOVERING; one another process merely holds is IN_USE."""
    orphan_run(store_dir, run_id)
    user = spawn("load", store_dir, run_id)
    with _inspect.reader(store_dir).recovering(run_id) as claim:
        assert claim is RecoveryHold.IN_USE
    user.finish()
    other = spawn("recovering", store_dir, run_id)
    assert other.answer == {"recovering": "TAKEN"}
    with _inspect.reader(store_dir).recovering(run_id) as claim:
        assert claim is RecoveryHold.RECOVERING
    assert other.finish() == 0


def test_a_forked_child_does_not_think_it_holds_its_parents_lock(
    store_dir: Path, run_id: str, spawn: type[Child]
) -> None:
    """In a forked child the parent's lease is void and the run is the parent's; the parent keeps it."""
    orphan_run(store_dir, run_id)
    log = EffectLog.load(run_id, store_dir)
    try:
        lease = log._journal.lease
        assert lease is not None
        assert lease.held
        read_end, write_end = os.pipe()
        pid = os.fork()
        if pid == 0:  # pragma: no cover - the child reports through the pipe
            try:
                report = {
                    "lease_held": lease.held,
                    "exclusive": storage.backend(store_dir)
                    .acquire(store_dir)
                    .hold(run_id, storage.Mode.EXCLUSIVE)
                    is not None,
                }
                os.write(write_end, json.dumps(report).encode())
            finally:
                os._exit(0)
        os.close(write_end)
        with os.fdopen(read_end) as pipe:
            report = json.loads(pipe.read())
        assert os.waitpid(pid, 0)[1] == 0
        assert report == {"lease_held": False, "exclusive": False}
        # The child closed its copy of the lock file's descriptor: the parent's lock stays.
        assert lease.held
        assert "another live process" in str(spawn("recover", store_dir, run_id).answer["error"])
    finally:
        log.close()
