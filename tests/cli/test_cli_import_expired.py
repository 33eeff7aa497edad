"""Export and import of a run whose approvals have all expired, through the real ``ledger``.

An import replays history: the store's clock at import has nothing to say about an
answer given, or a claim made, before the request expired (the run's own times say it,
and verify, load and import hold every run to them). A live answer or claim after expiry
is still refused by the store's clock, an import in the same process notwithstanding.
Each test runs once per storage backend.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import time
from collections.abc import Callable, Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from ledger import _jsonl, storage
from ledger import effects as fx
from ledger._jsonl import ImportRefusedError
from ledger.effect_log import EffectLog, new_run_id
from ledger.errors import ApprovalPending, EffectPersistenceError
from tests.backends import BACKENDS, Backend
from tests.builders import BURST_TIMEOUT, Call, ledger, ledger_json, ledger_ok, wait_for

pytestmark = pytest.mark.program

# The requests, in the order they are asked; "expired" last, so that it expires last.
ANSWERS = {"used": "approve", "denied": "deny", "granted": "approve", "expired": None}
STATES = {"used": "used", "denied": "denied", "granted": "granted", "expired": "expired"}


@pytest.fixture(params=BACKENDS, ids=lambda b: b.name)
def backend(request: pytest.FixtureRequest) -> Backend:
    """Each storage backend in turn."""
    found: Backend = request.param
    return found


def _call(log: EffectLog, name: str, policy: fx.ApprovalPolicy) -> str:
    """The gated call ``name``: its effect id if it ran (else the gate raises)."""
    args = {"order": name, "amount": 150}
    with log.effect("refund", args=args, kind=fx.EffectKind.IRREVERSIBLE, approval=policy) as call:
        return call.effect_id


@dataclasses.dataclass(frozen=True)
class ExpiredRun:
    """A run of ``store`` whose every approval request has expired by the store's clock."""

    store: Path | str
    run_id: str
    asked: dict[str, ApprovalPending]


def _answered_in_time(store: Path | str, seconds: int) -> ExpiredRun | None:
    """The run with a ttl of ``seconds``; None if a person's answer or the claim came too late."""
    policy = fx.ApprovalPolicy(ttl=timedelta(seconds=seconds))
    with EffectLog(new_run_id(), store, writer_name="refund-bot") as log:
        asked = {}
        for name in ANSWERS:
            with pytest.raises(ApprovalPending) as pending:
                _call(log, name, policy)
            asked[name] = pending.value
        for name, verb in ANSWERS.items():
            if verb is not None:
                done = ledger(
                    verb, log.run_id, asked[name].approval_id, "--by", "ops", "--store", str(store)
                )
                if done.returncode != 0:
                    assert "expired" in done.stderr, done.stderr
                    return None
        try:
            assert _call(log, "used", policy) == asked["used"].effect_id
        except ApprovalPending:  # the grant expired before the claim reached the store
            return None
        return ExpiredRun(store, log.run_id, asked)


@pytest.fixture
def expired(backend: Backend, tmp_path: Path) -> ExpiredRun:
    """A run with a grant used by a claim, a denial, a grant never used, one left to expire.

    Their ttl is short, so that all have expired when the run is exported; longer each
    time a person's answer, or the claim, came after the expiry on a slow machine.
    """
    for seconds in (1, 3, 8, 20):
        run = _answered_in_time(backend.location(tmp_path / f"ttl{seconds}"), seconds)
        if run is not None:
            break
    else:
        pytest.fail("the answers never came within the ttl")
    at = ("--store", str(run.store))
    deadline = time.monotonic() + BURST_TIMEOUT
    # The last request expires last: once it has by the store's clock, all have.
    while _states(run.store)[run.asked["expired"].approval_id] != "expired":
        assert time.monotonic() < deadline, "the request never expired"
        time.sleep(0.2)
    assert sorted(v["state"] for v in ledger_json("approvals", "--all", *at, "--json")) == sorted(
        STATES.values()
    )
    return run


def _states(store: Path | str) -> dict[str, str]:
    return {
        v["approval_id"]: v["state"]
        for v in ledger_json("approvals", "--all", "--store", str(store), "--json")
    }


def _export(run: ExpiredRun, tmp_path: Path) -> Path:
    exported = tmp_path / f"{run.run_id}.jsonl"
    ledger_ok("export", run.run_id, "--store", str(run.store), "-o", str(exported))
    types = [json.loads(line)["type"] for line in exported.read_text().splitlines()]
    assert (types.count("approval_request"), types.count("approval_decision")) == (4, 3)
    return exported


def test_a_run_whose_approvals_expired_is_imported_and_verifies(
    backend: Backend, expired: ExpiredRun, tmp_path: Path
) -> None:
    """Every approval expired before the export: the import takes the run as it was."""
    exported = _export(expired, tmp_path)
    other = backend.location(tmp_path / "other")
    printed = ledger_ok("import", str(exported), "--store", str(other))
    assert expired.run_id in printed
    assert ledger_json("verify", "--store", str(other), "--json")["ok"]
    after = ledger_json("approvals", "--all", "--store", str(other), "--json")
    assert after == ledger_json("approvals", "--all", "--store", str(expired.store), "--json")
    assert {v["approval_id"]: v["state"] for v in after} == {
        expired.asked[name].approval_id: state for name, state in STATES.items()
    }
    shown = ledger_json("show", expired.run_id, "--store", str(other), "--json")["records"]
    assert (
        shown
        == ledger_json("show", expired.run_id, "--store", str(expired.store), "--json")["records"]
    )


def _late_answer(store: storage.Store, run: ExpiredRun) -> storage.Batch:
    """A grant of the request left to expire, dated before its expiry, by another process.

    Only the store's clock can refuse it: its writer is not the one that asked, and its
    own time is in time.
    """
    history, head = store.load_run(run.run_id, "reading the run")
    request = run.asked["expired"]
    (asked,) = [r for r in history.approval_requests if r.approval_id == request.approval_id]
    late = fx.ApprovalDecision(
        approval_id=request.approval_id,
        seq=history.records()[-1].seq + 1,
        decision="granted",
        by="ops",
        decided_at=asked.requested_at,
        source=fx.ApprovalSource.PROGRAM,
        os_user="ops",
        host="elsewhere",
        program="a late answer",
        pid=1,
    )
    return storage.Batch(
        action="cannot record a late answer",
        run_id=run.run_id,
        records=(late,),
        head=head,
        now=fx.utc_now(),
    )


def _refused_as_expired(written: storage.Written) -> None:
    assert isinstance(written.error, EffectPersistenceError), written
    assert "has expired, an answer to it is refused" in str(written.error)


@contextlib.contextmanager
def _held_store(location: Path | str) -> Iterator[storage.Store]:
    """The process's store at ``location`` (made first), held: its connections stay open."""
    EffectLog(new_run_id(), location).close()  # the store exists, at the current revision
    backend = storage.backend(location)
    store = backend.acquire(location)
    try:
        yield store
    finally:
        backend.release(store)


def test_after_an_import_a_live_answer_after_expiry_is_still_refused(
    backend: Backend, expired: ExpiredRun, tmp_path: Path
) -> None:
    """The import, then a live answer on the same store in the same process: the clock decides.

    The answer goes through the store this process holds, whose connection has just
    written the import.
    """
    exported = _export(expired, tmp_path)
    other = backend.location(tmp_path / "other")
    with _held_store(other) as store:
        assert _jsonl.import_file(other, exported).run_id == expired.run_id
        _refused_as_expired(store.append(_late_answer(store, expired)))
    assert _states(other)[expired.asked["expired"].approval_id] == "expired"
    assert ledger_json("verify", "--store", str(other), "--json")["ok"]


def _together(
    backend: Backend,
    location: Path | str,
    store: Any,
    first: Callable[[], Any],
    *writes: Callable[[], Any],
) -> list[Any]:
    """Run ``writes`` so that group commit puts them in one transaction; how each ended.

    Another connection holds the store's write lock while ``first`` waits for it, so
    that ``writes`` queue behind it, to be taken together. Each ended as it returned, or
    raised.
    """
    with backend.write_locked(location):
        plug = Call(first, "the first write")
        wait_for(lambda: store.group._queue.busy, "the first write waits for the lock")
        calls = [Call(write, f"write {n}") for n, write in enumerate(writes)]
        wait_for(lambda: store.group.waiting == len(calls), "the writes wait together")
    plug.result()
    ended = []
    for call in calls:
        try:
            ended.append(call.result())
        except Exception as e:  # how it ended, for the test to judge
            ended.append(e)
    return ended


def test_an_import_committed_with_live_writes_lends_them_nothing(
    backend: Backend, expired: ExpiredRun, tmp_path: Path
) -> None:
    """Group commit puts an import and a late answer in one transaction: the answer is refused.

    Then an import the store refuses (its run is in the store already) with a late answer,
    in one transaction: both refused. A late answer after them is refused too.
    """
    exported = _export(expired, tmp_path)
    other = backend.location(tmp_path / "other")
    with _held_store(other) as store:
        _jsonl.import_file(other, exported)
        late = _late_answer(store, expired)
        copy = new_run_id()
        imported, answered = _together(
            backend,
            other,
            store,
            lambda: _jsonl.import_file(other, exported, new_run_id()),
            lambda: _jsonl.import_file(other, exported, copy),
            lambda: store.append(late),
        )
        assert imported.run_id == copy
        _refused_as_expired(answered)
        refused, answered = _together(
            backend,
            other,
            store,
            lambda: _jsonl.import_file(other, exported, new_run_id()),
            lambda: _jsonl.import_file(other, exported),
            lambda: store.append(late),
        )
        assert isinstance(refused, ImportRefusedError)
        assert "is already in the store" in str(refused)
        _refused_as_expired(answered)
        _refused_as_expired(store.append(late))
    assert _states(other)[expired.asked["expired"].approval_id] == "expired"
    assert ledger_json("verify", "--store", str(other), "--json")["ok"]
    assert (
        ledger_json("show", copy, "--store", str(other), "--json")["records"]
        == ledger_json("show", expired.run_id, "--store", str(other), "--json")["records"]
    )
