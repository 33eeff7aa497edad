"""The error tree as the public API raises it, on any backend.

``EffectPersistenceError`` is one class under its public names, and a run created twice,
a degraded log and a run another process holds raise their leaves. What only the SQLite
backend's files lead to, and how its driver's errors are translated, is in
``tests/sqlite/test_errors.py``.
"""

from __future__ import annotations

from pathlib import Path

import pytest

import ledger.errors
from ledger import effects as fx
from ledger.effect_log import EffectLog
from ledger.effect_log import EffectPersistenceError as PublicError
from ledger.errors import EffectPersistenceError, LogDegradedError, RunExistsError, RunHeldError
from tests.backends import Backend
from tests.builders import ERROR_LEAVES, Child, claim_bare, orphan_run


def test_public_name_is_the_same_class() -> None:
    """ledger.effect_log.EffectPersistenceError is the one error class, shown under its public module."""
    assert PublicError is EffectPersistenceError
    assert EffectPersistenceError.__module__ == "ledger.effect_log"


STEP_ERRORS = (
    "AlreadyDone",
    "StillRunning",
    "NeedsResolution",
    "ApprovalPending",
    "ApprovalDenied",
)


def test_the_tree_is_importable_from_ledger_errors_and_its_old_homes() -> None:
    """ledger.errors exports both trees; ledger.effect_log still exports the root."""
    assert sorted(ledger.errors.__all__) == sorted(
        [
            "EffectPersistenceError",
            *(leaf.__name__ for leaf in ERROR_LEAVES),
            "StepNotRunError",
            *STEP_ERRORS,
        ]
    )
    assert PublicError is ledger.errors.EffectPersistenceError


def test_a_call_that_is_not_run_is_no_storage_trouble() -> None:
    """The step errors are answers, not failures: outside EffectPersistenceError, at the top."""
    import ledger as top

    for name in STEP_ERRORS:
        error = getattr(ledger.errors, name)
        assert issubclass(error, ledger.errors.StepNotRunError)
        assert not issubclass(error, EffectPersistenceError)
        assert getattr(top, name) is error


def test_a_run_created_twice_raises_run_exists(store_dir: Path, run_id: str) -> None:
    """A new log whose run is already in the store fails its first claim with RunExistsError."""
    orphan_run(store_dir, run_id)
    with EffectLog(run_id, store_dir) as again, pytest.raises(RunExistsError, match="load"):
        claim_bare(again, "e2")


def test_a_degraded_logs_claim_and_recovery_raise_log_degraded(
    backend: Backend, store_dir: Path, run_id: str
) -> None:
    """Once an outcome could not be written, claim and recover_interrupted raise LogDegradedError."""
    with EffectLog(run_id, store_dir) as log:
        claim_bare(log)
        with backend.unavailable(store_dir):  # refused: the outcome degrades the log
            log.outcome(effect_id="e1", execution=fx.ExecutionOutcome.FAILED, impact=fx.Impact.NONE)
        assert log.degraded
        with pytest.raises(LogDegradedError, match="degraded"):
            claim_bare(log, "e2")
        with pytest.raises(LogDegradedError, match="degraded"):
            log.recover_interrupted()


def test_recovering_a_run_another_process_holds_raises_run_held(
    store_dir: Path, run_id: str, spawn: type[Child]
) -> None:
    """Recovery of a run a live child process has loaded is refused with RunHeldError."""
    orphan_run(store_dir, run_id)
    child = spawn("load", store_dir, run_id)
    assert child.answer == {"claims": ["e1"]}
    with (
        EffectLog.load(run_id, store_dir) as log,
        pytest.raises(RunHeldError, match="another live process"),
    ):
        log.recover_interrupted()
    assert child.finish() == 0
