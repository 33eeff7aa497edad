"""Who wrote what, through the real ``ledger`` command: the run's worker and a resolution's writer.

The ledger command writes to a worker's run as itself: ``ledger resolve`` and ``ledger
recover`` leave the worker (its host, pid and name) as the run's writer, and a resolution
records the process that wrote it (OS user, host, program, pid) and its origin: ``person``
for ``ledger resolve``, ``worker`` for a log's own ``resolve``, ``reconciler`` for one that
said ``allow_self=True``. Each test runs once per storage backend.
"""

from __future__ import annotations

import json
import os
import socket
from pathlib import Path
from typing import Any

import pytest

from ledger.effect_log import EffectLog, new_run_id
from tests.backends import BACKENDS, Backend
from tests.builders import claim_small, ledger
from tests.builders import settle as outcome


@pytest.fixture(params=BACKENDS)
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Path | str:
    """A fresh store location of each backend in turn."""
    backend: Backend = request.param
    return backend.location(tmp_path)


def _json(*args: str) -> Any:
    result = ledger(*args)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def _run_of(store: Path | str, run_id: str) -> dict[str, Any]:
    (row,) = [r for r in _json("runs", "--store", str(store), "--json") if r["run_id"] == run_id]
    return row  # type: ignore[no-any-return]


def _worker(store: Path | str, run_id: str, *, settle: bool) -> None:
    """The run's worker: named ``agent-7``, in this process; two claims, settled or not."""
    with EffectLog(run_id, store, writer_name="agent-7") as log:
        for effect_id in ("e1", "e2"):
            claim_small(log, effect_id)
            if settle:
                outcome(log, effect_id)


def test_resolve_leaves_the_worker_as_the_runs_writer(store: Path | str) -> None:
    run_id = new_run_id()
    _worker(store, run_id, settle=True)
    before = _run_of(store, run_id)
    assert (before["writer_name"], before["pid"]) == ("agent-7", os.getpid())
    resolved = ledger("resolve", run_id, "e1", "--applied", "--by", "alice", "--store", str(store))
    assert resolved.returncode == 0, resolved.stderr
    after = _run_of(store, run_id)
    assert (after["writer_name"], after["pid"], after["host"]) == (
        "agent-7",
        os.getpid(),
        socket.gethostname(),
    )
    shown = _json("show", run_id, "--store", str(store), "--json")
    assert shown["writer"] == {"host": socket.gethostname(), "pid": os.getpid(), "name": "agent-7"}


@pytest.mark.parametrize("how", ["run", "dead"])
def test_recover_leaves_the_worker_as_the_runs_writer(store: Path | str, how: str) -> None:
    run_id = new_run_id()
    _worker(store, run_id, settle=False)
    argv = ["recover", run_id] if how == "run" else ["recover", "--dead"]
    recovered = ledger(*argv, "--store", str(store), "--json")
    assert recovered.returncode == 0, recovered.stderr
    assert "interrupted" in recovered.stdout  # it wrote: two outcomes
    after = _run_of(store, run_id)
    assert (after["writer_name"], after["pid"]) == ("agent-7", os.getpid())
