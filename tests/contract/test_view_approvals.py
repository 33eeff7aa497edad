"""The approval_status view agrees with ``EffectLog.approvals()``, request by request.

One run holds a request in each state (pending, granted and unused, used, denied,
expired); the answers are given by the ``ledger`` command in processes of their own, as
a person gives them. The view is read outside the library (the backend's test driver)
and must say what the log says: the request, its answer, the claim that used it, and
its state by the store's clock.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from ledger import effects as fx
from ledger.effect_log import EffectLog, new_run_id
from ledger.errors import ApprovalPending
from tests.backends import Backend
from tests.builders import BURST_TIMEOUT, ledger

pytestmark = pytest.mark.program

COLUMNS = (
    "run_id",
    "approval_id",
    "effect_id",
    "operation",
    "action_digest",
    "requested_at",
    "expires_at",
    "state",
    "decision",
    "decided_by",
    "source",
    "decided_at",
    "used_by",
)
HOUR = fx.ApprovalPolicy(ttl=timedelta(hours=1))
SECOND = fx.ApprovalPolicy(ttl=timedelta(seconds=1))


def _ask(log: EffectLog, n: int, policy: fx.ApprovalPolicy = HOUR) -> ApprovalPending | None:
    """Make call ``n``: None when it ran, else what the gate said."""
    try:
        with log.effect("pay", args={"n": n}, kind=fx.EffectKind.WRITE, approval=policy):
            return None
    except ApprovalPending as e:
        return e


def _answer(store: Path | str, run_id: str, verb: str, approval_id: str) -> None:
    done = ledger(verb, run_id, approval_id, "--by", "ops", "--store", str(store))
    assert done.returncode == 0, done.stderr


@pytest.fixture
def log(store_dir: Path | str) -> Iterator[EffectLog]:
    """A run with one approval request in each state; the expired one has expired."""
    with EffectLog(new_run_id(), store_dir) as made:
        asked = {n: _ask(made, n) for n in (1, 2, 3, 4)}
        expiring = _ask(made, 5, SECOND)
        assert expiring is not None
        for n, verb in ((1, "approve"), (2, "approve"), (3, "deny")):
            found = asked[n]
            assert found is not None
            _answer(store_dir, made.run_id, verb, found.approval_id)
        assert _ask(made, 1) is None  # used by this claim; 2 stays granted, 4 pending
        deadline = time.monotonic() + BURST_TIMEOUT
        while made.approvals(state="expired") == []:
            assert time.monotonic() < deadline, "the request never expired"
            time.sleep(0.1)
        yield made


def _expected(view: fx.ApprovalView) -> tuple[Any, ...]:
    request, decision = view.request, view.decision
    return (
        view.run_id,
        view.approval_id,
        request.effect_id,
        request.operation,
        request.action_digest,
        request.requested_at,
        request.expires_at,
        view.state,
        None if decision is None else decision.decision,
        None if decision is None else decision.by,
        None if decision is None else decision.source.value,
        None if decision is None else decision.decided_at,
        view.used_by,
    )


def test_the_view_says_what_the_log_says_of_each_request(
    backend: Backend, store_dir: Path | str, log: EffectLog
) -> None:
    """Every request's row in approval_status equals the log's view of it, in every state."""
    rows = backend.query(
        store_dir,
        f"SELECT {', '.join(COLUMNS)} FROM approval_status WHERE run_id = ? ORDER BY requested_at",
        (log.run_id,),
    )
    views = log.approvals()
    assert {v.state for v in views} == {"pending", "granted", "used", "denied", "expired"}
    assert [tuple(row) for row in rows] == [_expected(v) for v in views]


def test_the_view_holds_no_request_of_a_run_without_one(
    backend: Backend, store_dir: Path | str, log: EffectLog
) -> None:
    """A run that asked for nothing has no row: the view is one row per request."""
    with EffectLog(new_run_id(), store_dir) as other:
        with other.effect("pay", args={"n": 9}):
            pass
        found = backend.query(
            store_dir, "SELECT count(*) FROM approval_status WHERE run_id = ?", (other.run_id,)
        )
    assert found[0][0] == 0
    total = backend.query(store_dir, "SELECT count(*) FROM approval_status")
    assert total[0][0] == len(log.approvals())
