"""A resolution records the process that wrote it, and as what: a worker's, a reconciler's.

``log.resolve`` works on any log, the one that claimed the effect included, and records
origin ``worker`` (``reconciler`` with ``allow_self=True``) with this process's OS user,
host, program and pid; loading the run gives them back as written. (``ledger resolve``,
which records ``person``, is tested through the command in tests/cli.)
"""

from __future__ import annotations

import os
import pwd
import socket
from pathlib import Path

import pytest

from ledger import effects as fx
from ledger.effect_log import EffectLog, new_run_id
from tests.builders import claim_small, loaded, settle


def _resolved(store: Path, **options: object) -> tuple[fx.Resolution, fx.Resolution]:
    """A run whose worker resolves its own effect e1: what resolve returned, what load reads."""
    run_id = new_run_id()
    with EffectLog(run_id, store, writer_name="agent") as log:
        claim_small(log, "e1")
        settle(log, "e1", fx.ExecutionOutcome.INTERRUPTED, fx.Impact.POSSIBLE)
        written = log.resolve("e1", applied=True, by="alice (on-call)", **options)  # type: ignore[arg-type]
        assert log.decide("e1").step is fx.NextStep.DONE  # not refused: the contract's resolve
    (read,) = loaded(run_id, store).resolutions
    return written, read


def test_a_logs_own_resolution_records_a_worker_and_this_process(store_dir: Path) -> None:
    written, read = _resolved(store_dir)
    assert read == written
    assert read.origin is fx.ResolutionOrigin.WORKER
    assert not read.by_person
    assert read.by == "alice (on-call)"  # kept as the writer named them
    assert (read.os_user, read.host, read.pid) == (
        pwd.getpwuid(os.geteuid()).pw_name,
        socket.gethostname(),
        os.getpid(),
    )
    assert read.program  # the test runner's name, whatever runs it
    assert read.to_dict()["origin"] == "worker"


def test_allow_self_records_a_reconciler(store_dir: Path) -> None:
    written, read = _resolved(store_dir, allow_self=True)
    assert read == written
    assert read.origin is fx.ResolutionOrigin.RECONCILER
    assert not read.by_person


@pytest.mark.parametrize("value", ["yes", 1, None])
def test_allow_self_must_be_a_bool_and_nothing_is_written(store_dir: Path, value: object) -> None:
    run_id = new_run_id()
    with EffectLog(run_id, store_dir) as log:
        claim_small(log, "e1")
        before = log.history()
        with pytest.raises(TypeError, match="allow_self must be a bool"):
            log.resolve("e1", applied=True, by="ops", allow_self=value)  # type: ignore[arg-type]
        assert log.history() == before
    assert loaded(run_id, store_dir) == before
