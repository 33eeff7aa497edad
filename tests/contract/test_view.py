"""The SQL views agree with the pure ``assess``: a property test and pinned tricky cases.

Every history is written as a new run into a real store (one per test, with its schema,
triggers and hash chain), then ``effect_status`` and ``unsettled_claims`` are read back
and compared, claim by claim, with :func:`ledger.effects.assess`.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, TypeVar

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlalchemy import BindParameter, bindparam, text

from ledger import effects as fx
from ledger._chain import GENESIS
from ledger.effect_log import new_run_id
from ledger.sqlite.store import Store, acquire, release
from ledger.storage import Batch
from tests.builders import op, sha

NOW = "2024-01-01T00:00:00.000000+00:00"
DIGESTS = (sha(b"one"), sha(b"two"))
REVISIONS = ("r1", "r2")

Pool = tuple[tuple[str, str], ...]


def _fs(*locators: str) -> Pool:
    return tuple(("fs", loc) for loc in locators)


# Pairs of resources that a wrong overlap test confuses (and a few that truly overlap,
# for contrast). Each history draws its resources from one pair, or a few from the whole
# pool, so that such pairs meet in one history often.
TRICKY_POOLS: tuple[Pool, ...] = (
    # % matches anything in LIKE: '/w/a%/%' matches /w/a/b and /w/a_/x.
    _fs("/w/a%", "/w/a/b"),
    _fs("/w/a%", "/w/a_/x"),
    _fs("/w/a%", "/w/a%/x"),
    # _ matches one character in LIKE: '/w/a_/%' matches /w/ab/x, '/w/a_b' matches /w/axb.
    _fs("/w/a_", "/w/ab/x"),
    _fs("/w/a_b", "/w/axb"),
    _fs("/w/a_", "/w/a_/x"),
    # A sibling sharing a prefix is no descendant; / is everyone's ancestor.
    _fs("/w/a", "/w/ab"),
    _fs("/w/a", "/w/a/b"),
    _fs("/", "/w/abc"),
    _fs("/w", "/w/a_/x"),
    # LIKE is case-insensitive, GLOB has * and ?: neither may decide overlap.
    _fs("/w/a", "/w/A/x"),
    _fs("/w/a*", "/w/ab/c"),
    _fs("/w/a?", "/w/ab/c"),
    # Kinds never overlap, even when the locators are equal or look like paths, and
    # owned locators have no ancestors.
    (("fs", "/w/a"), ("owned", "/w/a")),
    (("owned", "/"), ("fs", "/w/a")),
    (("owned", "/w/a"), ("owned", "/w/a/b")),
    (("owned", "rec:1"), ("owned", "rec:1/x")),
)
RESOURCES: Pool = tuple(sorted({res for pool in TRICKY_POOLS for res in pool}))

TERMINAL_SHAPES = (
    (fx.ExecutionOutcome.REPORTED_SUCCESS, fx.Impact.NONE),
    (fx.ExecutionOutcome.REPORTED_SUCCESS, fx.Impact.POSSIBLE),
    (fx.ExecutionOutcome.REPORTED_SUCCESS, fx.Impact.CERTAIN),
    (fx.ExecutionOutcome.FAILED, fx.Impact.NONE),
    (fx.ExecutionOutcome.FAILED, fx.Impact.POSSIBLE),
    (fx.ExecutionOutcome.FAILED, fx.Impact.CERTAIN),
    (fx.ExecutionOutcome.INTERRUPTED, fx.Impact.POSSIBLE),
)
RUNNING_SHAPES = tuple((fx.ExecutionOutcome.RUNNING, impact) for impact in fx.Impact)
# Weights by repetition (pick is uniform): terminal outcomes, complete
# observations and outcome/observation steps come up more often than their alternatives.
OUTCOME_SHAPES = RUNNING_SHAPES + TERMINAL_SHAPES * 2
COVERAGES = (fx.Coverage.COMPLETE, fx.Coverage.COMPLETE, fx.Coverage.PARTIAL)
OPERATIONS = (op("write_file"), op("delete_file"))
STEPS = ("claim", "outcome", "outcome", "outcome", "observe", "observe", "observe")


# --------------------------------------------------------------------------- strategy


T = TypeVar("T")


def pick(draw: st.DrawFn, choices: Sequence[T]) -> T:
    """One of ``choices`` (shrinking towards the first); cheaper than a fresh sampled_from."""
    return choices[draw(st.integers(0, len(choices) - 1))]


def draw_ref(draw: st.DrawFn, pool: Pool, roles: tuple[str, str]) -> fx.ResourceRef:
    """A reference from ``pool``; role and revision vary because the view must ignore them."""
    kind, locator = pick(draw, pool)
    return fx.ResourceRef(kind, locator, pick(draw, roles), pick(draw, (None, "r1")))


def draw_postcondition(draw: st.DrawFn, pool: Pool) -> fx.Postcondition:
    """A postcondition with any predicate; SHA256 and REVISION expect one of two values."""
    target = draw_ref(draw, pool, ("target", "parent"))
    predicate = pick(draw, tuple(fx.Predicate))
    if predicate is fx.Predicate.SHA256:
        return fx.Postcondition(target, predicate, pick(draw, DIGESTS))
    if predicate is fx.Predicate.REVISION:
        return fx.Postcondition(target, predicate, pick(draw, REVISIONS))
    return fx.Postcondition(target, predicate)


def draw_observation(
    draw: st.DrawFn, seq: int, pool: Pool, duties: list[fx.Postcondition]
) -> fx.Observation:
    """An observation at ``seq``: of anything in the pool, or of some obligation's target.

    Of a target, it is often made to satisfy that obligation (its other fields stay
    random), so that VERIFIED comes up often enough to be tested.
    """
    exists = pick(draw, (True, False, None))
    sha256 = pick(draw, (None, *DIGESTS))
    revision = pick(draw, (None, *REVISIONS))
    if duties and draw(st.integers(0, 3)) > 0:
        duty = pick(draw, duties)
        kind, locator = duty.target.kind, duty.target.locator
        if draw(st.integers(0, 3)) > 0:
            if duty.predicate is fx.Predicate.EXISTS:
                exists = True
            elif duty.predicate is fx.Predicate.ABSENT:
                exists = False
            elif duty.predicate is fx.Predicate.SHA256:
                exists, sha256 = pick(draw, (True, None)), duty.expected
            else:
                exists, revision = pick(draw, (True, None)), duty.expected
    else:
        kind, locator = pick(draw, pool)
    return fx.Observation(
        observation_id=f"o{seq}",
        seq=seq,
        resource=fx.ResourceRef(
            kind, locator, pick(draw, ("observed", "target")), pick(draw, (None, "r1"))
        ),
        mechanism=pick(draw, tuple(fx.ObservationMechanism)),
        coverage=pick(draw, COVERAGES),
        source_action_id=f"s{seq}",
        exists=exists,
        sha256=sha256,
        revision=revision,
        recorded_at=NOW,
    )


def draw_claim(draw: st.DrawFn, seq: int, pool: Pool) -> fx.EffectClaim:
    """A claim at ``seq`` with up to two obligations and a scope that often covers their targets."""
    obligations = tuple(draw_postcondition(draw, pool) for _ in range(draw(st.integers(0, 2))))
    own = [p.target for p in obligations] if draw(st.booleans()) else []
    extra = [draw_ref(draw, pool, ("target", "parent")) for _ in range(draw(st.integers(0, 1)))]
    return fx.EffectClaim(
        effect_id=f"e{seq}",
        seq=seq,
        action_id=f"a{seq}",
        operation=pick(draw, OPERATIONS),
        impact_scope=(*own, *extra),
        obligations=obligations,
        recorded_at=NOW,
    )


def draw_outcome(draw: st.DrawFn, seq: int, effect_id: str) -> fx.EffectOutcome:
    """An outcome of any allowed shape; only an INTERRUPTED one may be replayed."""
    execution, impact = pick(draw, OUTCOME_SHAPES)
    return fx.EffectOutcome(
        effect_id=effect_id,
        seq=seq,
        execution=execution,
        impact=impact,
        execution_id=pick(draw, (None, f"x{seq}")),
        replayed=execution is fx.ExecutionOutcome.INTERRUPTED and draw(st.booleans()),
        recorded_at=NOW,
    )


@st.composite
def histories(draw: st.DrawFn) -> fx.History:
    """A valid one-run history with seq 1..n, built step by step so it is valid by construction.

    Each step is a claim, an outcome of a claim with no terminal outcome yet (so
    outcomes come as none, RUNNING, RUNNING…, RUNNING… then terminal, or terminal
    directly), or an observation; observations mostly look at a target of a settled
    claim, so that verdicts other than PENDING and UNVERIFIED come up often.
    """
    claims: list[fx.EffectClaim] = []
    outcomes: list[fx.EffectOutcome] = []
    observations: list[fx.Observation] = []
    settled: set[str] = set()
    if draw(st.booleans()):
        pool = pick(draw, TRICKY_POOLS)
    else:
        pool = tuple(
            draw(st.lists(st.sampled_from(RESOURCES), min_size=1, max_size=4, unique=True))
        )
    for seq in range(1, draw(st.integers(0, 32)) + 1):
        unsettled = [c.effect_id for c in claims if c.effect_id not in settled]
        step = pick(draw, STEPS if unsettled else ("claim", "observe"))
        if step == "claim":
            claims.append(draw_claim(draw, seq, pool))
        elif step == "outcome":
            outcomes.append(draw_outcome(draw, seq, pick(draw, unsettled)))
            if outcomes[-1].terminal:
                settled.add(outcomes[-1].effect_id)
        else:
            # Mostly look at targets of settled claims: only later observations count.
            done = [p for c in claims if c.effect_id in settled for p in c.obligations]
            duties = [p for c in claims for p in c.obligations]
            looked_at = done if done and draw(st.integers(0, 3)) > 0 else duties
            observations.append(draw_observation(draw, seq, pool, looked_at))
    return fx.History(tuple(claims), tuple(outcomes), tuple(observations))


# --------------------------------------------------------------------------- store helpers


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    """One real store per test (hypothesis runs all its examples in one); each history is a run.

    A fresh store per test keeps the property test fast: ``effect_status`` evaluates
    the whole store even when filtered by ``run_id``.
    """
    the_store = acquire(tmp_path / "store")
    yield the_store
    release(the_store)


def write_runs(store: Store, histories: list[fx.History]) -> list[str]:
    """Write each history as a new run, records in seq order, as an import does."""
    run_ids = [new_run_id() for _ in histories]
    store.open_for_writing()
    for run_id, history in zip(run_ids, histories, strict=True):
        written = store.append(
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
        )
    return rows


def checked_views(store: Store, histories: list[fx.History]) -> list[dict[str, tuple[Any, ...]]]:
    """Write each history as a new run, check both views against ``assess``, return the rows."""
    for history in histories:
        fx.check_history(history)
    run_ids = write_runs(store, histories)
    ids: BindParameter[list[str]] = bindparam("run_ids", expanding=True)
    with store.read("test: read the views") as conn:
        status = conn.execute(
            text(
                "SELECT run_id, effect_id, operation, execution, impact, verdict,"
                " unresolved_impact FROM effect_status WHERE run_id IN :run_ids ORDER BY seq"
            ).bindparams(ids),
            {"run_ids": run_ids},
        ).all()
        unsettled = conn.execute(
            text(
                "SELECT run_id, effect_id FROM unsettled_claims"
                " WHERE run_id IN :run_ids ORDER BY seq"
            ).bindparams(ids),
            {"run_ids": run_ids},
        ).all()
    results = []
    for run_id, history in zip(run_ids, histories, strict=True):
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
    max_examples=500,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(history=histories())
def test_effect_status_agrees_with_assess(store: Store, history: fx.History) -> None:
    """For every valid generated history, effect_status and unsettled_claims agree with assess."""
    view_rows(store, history)


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
    assert view_rows(store, still_running)["e1"] == ("write_file", "running", "none", "pending", 0)
    failed = fx.EffectOutcome("e1", 4, fx.ExecutionOutcome.FAILED, fx.Impact.NONE, recorded_at=NOW)
    assert view_rows(store, fx.History((claim,), (*running, failed)))["e1"] == (
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
    assert view_rows(store, fx.History((claim,), (*running, success), (seen,)))["e1"] == (
        "write_file",
        "reported_success",
        "possible",
        "verified",
        0,
    )
