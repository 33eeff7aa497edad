"""The SQL views agree with the pure ``assess``: a property test and pinned tricky cases.

Every history is written as a new run into a real store of each backend (one per test,
with its schema, triggers and hash chain), through the storage contract
(:mod:`ledger.storage`); then ``effect_status`` and ``unsettled_claims`` are read back
outside the library (the backend's test driver) and compared, claim by claim, with
:func:`ledger.effects.assess`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ledger import effects as fx
from ledger import storage
from ledger._chain import GENESIS
from ledger.effect_log import new_run_id
from ledger.storage import Batch
from tests.backends import Backend
from tests.builders import RESOURCES, histories, op

NOW = "2024-01-01T00:00:00.000000+00:00"
# --------------------------------------------------------------------------- store helpers


@dataclasses.dataclass(frozen=True)
class Store:
    """A store of the backend under test: written through the contract, read outside it."""

    backend: Backend
    location: Path
    contract: storage.Store

    def query(self, sql: str, params: Sequence[object] = ()) -> list[tuple[Any, ...]]:
        return self.backend.query(self.location, sql, params)


@pytest.fixture
def store(backend: Backend, tmp_path: Path) -> Iterator[Store]:
    """One real store per test (hypothesis runs all its examples in one); each history is a run.

    A fresh store per test keeps the property test fast: ``effect_status`` evaluates
    the whole store even when filtered by ``run_id``.
    """
    location = backend.location(tmp_path)
    served = storage.backend(location)
    the_store = served.acquire(location)
    yield Store(backend, location, the_store)
    served.release(the_store)


def write_runs(store: Store, histories: list[fx.History]) -> list[str]:
    """Write each history as a new run, records in seq order, as an import does."""
    run_ids = [new_run_id() for _ in histories]
    store.contract.open_for_writing()
    for run_id, history in zip(run_ids, histories, strict=True):
        written = store.contract.append(
            Batch(
                action="test: write generated runs",
                run_id=run_id,
                records=history.records(),
                head=GENESIS,
                now=NOW,
                start=True,
            )
        )
        assert written.error is None, written.error
    return run_ids


def expected_rows(history: fx.History) -> dict[str, tuple[Any, ...]]:
    """What ``effect_status`` should say of each claim, according to ``assess``."""
    rows = {}
    for claim in history.claims:
        a = fx.assess(claim, history)
        rows[claim.effect_id] = (
            claim.operation.name,
            None if a.execution is None else a.execution.value,
            None if a.impact is None else a.impact.value,
            a.verdict.value,
            int(a.unresolved_impact),
            claim.kind.value,
            claim.idempotency_key,
            claim.retry_of,
            a.resolution,
            fx.decide(claim, history).step.value,
            claim.step,
        )
    return rows


def checked_views(store: Store, histories: list[fx.History]) -> list[dict[str, tuple[Any, ...]]]:
    """Write each history as a new run, check both views against ``assess``, return the rows."""
    for history in histories:
        fx.check_history(history)
    run_ids = write_runs(store, histories)
    ids = ", ".join("?" * len(run_ids))
    status = store.query(
        "SELECT run_id, effect_id, operation, execution, impact, verdict, unresolved_impact,"
        " kind, idempotency_key, retry_of, resolution, next_step, step"
        f" FROM effect_status WHERE run_id IN ({ids}) ORDER BY seq",
        run_ids,
    )
    unsettled = store.query(
        f"SELECT run_id, effect_id FROM unsettled_claims WHERE run_id IN ({ids}) ORDER BY seq",
        run_ids,
    )
    stored_claims = store.query(
        f"SELECT run_id, effect_id, step, args FROM claims WHERE run_id IN ({ids}) ORDER BY seq",
        run_ids,
    )
    stored_outcomes = store.query(
        f"SELECT run_id, seq, result FROM outcomes WHERE run_id IN ({ids}) ORDER BY seq", run_ids
    )
    results = []
    for run_id, history in zip(run_ids, histories, strict=True):
        # A claim's step and arguments, an outcome's result: canonical JSON text, or NULL
        # for none recorded (a recorded JSON null is the text 'null').
        assert [row[1:] for row in stored_claims if row[0] == run_id] == [
            (c.effect_id, c.step, None if c.args is None else fx.recorded_json(c.args))
            for c in history.claims
        ]
        assert [row[1:] for row in stored_outcomes if row[0] == run_id] == [
            (o.seq, fx.recorded_json(o.result) if o.result_recorded else None)
            for o in history.outcomes
        ]
        rows = [row[1:] for row in status if row[0] == run_id]
        # Exactly one row per claim, with what assess says of it.
        assert [row[0] for row in rows] == [c.effect_id for c in history.claims]
        actual = {row[0]: tuple(row[1:]) for row in rows}
        assert actual == expected_rows(history)
        terminal = {o.effect_id for o in history.outcomes if o.terminal}
        assert [row[1] for row in unsettled if row[0] == run_id] == [
            c.effect_id for c in history.claims if c.effect_id not in terminal
        ]
        results.append(actual)
    return results


def view_rows(store: Store, history: fx.History) -> dict[str, tuple[Any, ...]]:
    """Write ``history`` as a new run, check the views against ``assess``, return its rows."""
    return checked_views(store, [history])[0]


# --------------------------------------------------------------------------- property


@settings(
    max_examples=200,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(runs=st.lists(histories(recorded=True), min_size=1, max_size=4))
def test_effect_status_agrees_with_assess(store: Store, runs: list[fx.History]) -> None:
    """For every valid generated history, effect_status and unsettled_claims agree with assess.

    Verdict, resolution and unresolved impact as assess says; next_step as decide says,
    over histories with every kind, retries (and retries of retries) and resolutions,
    steps (a retry's its original's), recorded arguments and results (JSON null too);
    the step column is the claim's step. Up to four histories are written as runs of
    one store at a time and read back by one query per view, as ``ledger status`` reads
    a store: each run's rows are its own (about 500 histories in all; on PostgreSQL,
    planning the views takes most of a query's time).
    """
    checked_views(store, runs)


# --------------------------------------------------------------------------- pinned cases


def probe(target: fx.ResourceRef, scope: fx.ResourceRef) -> fx.History:
    """A write of ``target`` observed in place, then another claim on ``scope`` still in flight.

    e1's evidence is stale, and e1 UNVERIFIED rather than VERIFIED, exactly when
    ``scope`` overlaps ``target``.
    """
    return fx.History(
        claims=(
            fx.EffectClaim(
                "e1",
                1,
                "a1",
                op(),
                (target,),
                (fx.Postcondition(target, fx.Predicate.EXISTS),),
                NOW,
            ),
            fx.EffectClaim("e2", 4, "a2", op(), (scope,), (), NOW),
        ),
        outcomes=(
            fx.EffectOutcome(
                "e1", 2, fx.ExecutionOutcome.REPORTED_SUCCESS, fx.Impact.CERTAIN, recorded_at=NOW
            ),
        ),
        observations=(
            fx.Observation(
                "o1",
                3,
                target,
                fx.ObservationMechanism.FILESYSTEM_STAT,
                fx.Coverage.COMPLETE,
                "a3",
                exists=True,
                sha256=None,
                revision=None,
                recorded_at=NOW,
            ),
        ),
    )


def _stale_probe(store: Store, target: str, scope: str, scope_kind: str = "fs") -> str:
    """The view's verdict on e1 of :func:`probe` with an fs ``target``."""
    history = probe(fx.ResourceRef("fs", target, "target"), fx.ResourceRef(scope_kind, scope, "s"))
    return str(view_rows(store, history)["e1"][3])


def test_overlap_of_every_pair_of_pool_resources_agrees_with_assess(store: Store) -> None:
    """For every (target, scope) pair of the pool, the view's staleness matches fx.overlaps."""
    pairs = [(t, s) for t in RESOURCES for s in RESOURCES]
    histories = [probe(fx.ResourceRef(*t, "target"), fx.ResourceRef(*s, "scope")) for t, s in pairs]
    verdicts = [rows["e1"][3] for rows in checked_views(store, histories)]
    for (t, s), verdict in zip(pairs, verdicts, strict=True):
        overlap = fx.overlaps(fx.ResourceRef(*t, "target"), fx.ResourceRef(*s, "scope"))
        assert verdict == ("unverified" if overlap else "verified"), (t, s)
    assert {"verified", "unverified"} <= set(verdicts)


def test_percent_in_a_name_is_not_a_wildcard(store: Store) -> None:
    """A claim on /w/a% does not make evidence on /w/abc stale, but does on its child /w/a%/x."""
    assert _stale_probe(store, "/w/abc", "/w/a%") == "verified"
    assert _stale_probe(store, "/w/a%/x", "/w/a%") == "unverified"
    assert _stale_probe(store, "/w/a%", "/w/abc") == "verified"


def test_underscore_in_a_name_is_not_a_wildcard(store: Store) -> None:
    """A claim on /w/a_ or /w/a_b does not overlap /w/ab/x or /w/axb, but does its child /w/a_/x."""
    assert _stale_probe(store, "/w/ab/x", "/w/a_") == "verified"
    assert _stale_probe(store, "/w/axb", "/w/a_b") == "verified"
    assert _stale_probe(store, "/w/a_/x", "/w/a_") == "unverified"


def test_root_overlaps_every_fs_path_but_no_owned_record(store: Store) -> None:
    """The fs locator / overlaps every fs path both ways, while an owned locator / overlaps none."""
    assert _stale_probe(store, "/w/a/b", "/") == "unverified"
    assert _stale_probe(store, "/", "/w/a") == "unverified"
    assert _stale_probe(store, "/w/a", "/", scope_kind="owned") == "verified"


def test_sibling_with_a_shared_prefix_does_not_overlap(store: Store) -> None:
    """/w/ab and /w/a do not overlap either way, while /w/a/b and /w do overlap /w/a."""
    assert _stale_probe(store, "/w/a", "/w/ab") == "verified"
    assert _stale_probe(store, "/w/ab", "/w/a") == "verified"
    assert _stale_probe(store, "/w/a", "/w/a/b") == "unverified"
    assert _stale_probe(store, "/w/a", "/w") == "unverified"


def test_running_then_terminal_uses_the_terminal(store: Store) -> None:
    """After several RUNNING outcomes the terminal one gives execution, impact and verdict."""
    ref = fx.ResourceRef("fs", "/w/a", "target")
    claim = fx.EffectClaim(
        "e1", 1, "a1", op(), (ref,), (fx.Postcondition(ref, fx.Predicate.EXISTS),), NOW
    )
    running = (
        fx.EffectOutcome("e1", 2, fx.ExecutionOutcome.RUNNING, fx.Impact.CERTAIN, recorded_at=NOW),
        fx.EffectOutcome("e1", 3, fx.ExecutionOutcome.RUNNING, fx.Impact.NONE, recorded_at=NOW),
    )
    still_running = fx.History((claim,), running)
    assert view_rows(store, still_running)["e1"][:5] == (
        "write_file",
        "running",
        "none",
        "pending",
        0,
    )
    failed = fx.EffectOutcome("e1", 4, fx.ExecutionOutcome.FAILED, fx.Impact.NONE, recorded_at=NOW)
    assert view_rows(store, fx.History((claim,), (*running, failed)))["e1"][:5] == (
        "write_file",
        "failed",
        "none",
        "failed",
        0,
    )
    success = fx.EffectOutcome(
        "e1", 4, fx.ExecutionOutcome.REPORTED_SUCCESS, fx.Impact.POSSIBLE, recorded_at=NOW
    )
    seen = fx.Observation(
        "o1",
        5,
        ref,
        fx.ObservationMechanism.FILESYSTEM_STAT,
        fx.Coverage.COMPLETE,
        "a2",
        exists=True,
        sha256=None,
        revision=None,
        recorded_at=NOW,
    )
    assert view_rows(store, fx.History((claim,), (*running, success), (seen,)))["e1"][:5] == (
        "write_file",
        "reported_success",
        "possible",
        "verified",
        0,
    )
