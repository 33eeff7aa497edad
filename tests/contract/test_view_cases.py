"""effect_status pinned: one small history per verdict and per decision rule, on each backend.

docs/concepts.md's verdicts (ASSESS) and decision rules (decide), one history each,
with the cases next to each rule that tell it from its neighbours (the rule's boundary,
the kind it is for, the newest retry rather than an older one). Every history is
written as a run of one store of the backend; the table's expected columns must be
what ``effect_status`` says, read outside the library, and what ``assess`` and
``decide`` say: a change to either side that the property test of test_view.py would
need many examples to find fails here by name.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from ledger import effects as fx
from ledger import storage
from ledger._chain import GENESIS
from ledger.effect_log import new_run_id
from ledger.storage import Batch
from tests.backends import Backend
from tests.builders import fs_ref, op, sha

NOW = "2024-01-01T00:00:00.000000+00:00"
RUN = "0123456789abcdef0123456789abcdef"  # the keys' run: a retry carries its original's key
A, B = fs_ref("/w/a.txt"), fs_ref("/w/b.txt")
BEFORE, AFTER, OTHER = sha(b"before"), sha(b"after"), sha(b"other")

R, W, IDEM, IRR = (
    fx.EffectKind.READ,
    fx.EffectKind.WRITE,
    fx.EffectKind.IDEMPOTENT,
    fx.EffectKind.IRREVERSIBLE,
)
RUNNING, SUCCESS, FAILED, INTERRUPTED = (
    fx.ExecutionOutcome.RUNNING,
    fx.ExecutionOutcome.REPORTED_SUCCESS,
    fx.ExecutionOutcome.FAILED,
    fx.ExecutionOutcome.INTERRUPTED,
)
NONE, POSSIBLE, CERTAIN = fx.Impact.NONE, fx.Impact.POSSIBLE, fx.Impact.CERTAIN
EXISTS = fx.Postcondition(A, fx.Predicate.EXISTS)


def claim(
    effect_id: str,
    seq: int,
    kind: fx.EffectKind = W,
    *,
    duties: tuple[fx.Postcondition, ...] = (),
    scope: tuple[fx.ResourceRef, ...] = (A,),
    retry_of: str | None = None,
    original: str | None = None,
) -> fx.EffectClaim:
    """A claim; a retry names the first attempt (``original``) whose key it carries."""
    key = fx.idempotency_key(RUN, original or effect_id)
    return fx.EffectClaim(
        effect_id,
        seq,
        "a1",
        op(),
        scope,
        duties,
        NOW,
        kind=kind,
        idempotency_key=key,
        retry_of=retry_of,
    )


def out(effect_id: str, seq: int, execution: fx.ExecutionOutcome, impact: fx.Impact) -> Any:
    return fx.EffectOutcome(effect_id, seq, execution, impact, recorded_at=NOW)


def seen(
    seq: int,
    *,
    exists: bool | None = True,
    digest: str | None = None,
    revision: str | None = None,
    ref: fx.ResourceRef = A,
    coverage: fx.Coverage = fx.Coverage.COMPLETE,
) -> fx.Observation:
    return fx.Observation(
        f"o{seq}",
        seq,
        ref,
        fx.ObservationMechanism.FILESYSTEM_READ,
        coverage,
        "a2",
        exists=exists,
        sha256=digest,
        revision=revision,
        recorded_at=NOW,
    )


def resolved(effect_id: str, seq: int, applied: bool) -> fx.Resolution:
    return fx.Resolution(effect_id, seq, applied, "ops", NOW)


def history(*records: Any) -> fx.History:
    return fx.History(
        claims=tuple(r for r in records if isinstance(r, fx.EffectClaim)),
        outcomes=tuple(r for r in records if isinstance(r, fx.EffectOutcome)),
        observations=tuple(r for r in records if isinstance(r, fx.Observation)),
        resolutions=tuple(r for r in records if isinstance(r, fx.Resolution)),
    )


# What effect_status says of each claim: (verdict, next_step, unresolved_impact, resolution).
Row = tuple[str, str, int, str | None]

CASES: dict[str, tuple[fx.History, dict[str, Row]]] = {
    # ---- verdicts (assess), first rule that applies
    "1 no outcome: pending, wait": (
        history(claim("e1", 1)),
        {"e1": ("pending", "wait", 1, None)},
    ),
    "1 running, impact none: pending, nothing unresolved": (
        history(claim("e1", 1), out("e1", 2, RUNNING, NONE)),
        {"e1": ("pending", "wait", 0, None)},
    ),
    "1 running after running: the last one, pending": (
        history(claim("e1", 1), out("e1", 2, RUNNING, NONE), out("e1", 3, RUNNING, CERTAIN)),
        {"e1": ("pending", "wait", 1, None)},
    ),
    "2 failed without effect: failed, retry": (
        history(claim("e1", 1), out("e1", 2, FAILED, NONE)),
        {"e1": ("failed", "retry", 0, None)},
    ),
    "2 failed with possible impact is not failed: unverified write, escalate": (
        history(claim("e1", 1), out("e1", 2, FAILED, POSSIBLE)),
        {"e1": ("unverified", "escalate", 1, None)},
    ),
    "3 evidence violates: contradicted, a reported success escalated": (
        history(
            claim("e1", 1, duties=(EXISTS,)), out("e1", 2, SUCCESS, CERTAIN), seen(3, exists=False)
        ),
        {"e1": ("contradicted", "escalate", 1, None)},
    ),
    "3 the newest evidence wins: absent after present, contradicted": (
        history(
            claim("e1", 1, duties=(EXISTS,)),
            out("e1", 2, SUCCESS, CERTAIN),
            seen(3),
            seen(4, exists=False),
        ),
        {"e1": ("contradicted", "escalate", 1, None)},
    ),
    "4 every obligation satisfied: verified, done, even interrupted": (
        history(claim("e1", 1, duties=(EXISTS,)), out("e1", 2, INTERRUPTED, POSSIBLE), seen(3)),
        {"e1": ("verified", "done", 0, None)},
    ),
    "4 the newest evidence wins: present after absent, verified": (
        history(
            claim("e1", 1, duties=(EXISTS,)),
            out("e1", 2, SUCCESS, CERTAIN),
            seen(3, exists=False),
            seen(4),
        ),
        {"e1": ("verified", "done", 0, None)},
    ),
    "4 one of two obligations without evidence: unverified": (
        history(
            claim("e1", 1, duties=(EXISTS, fx.Postcondition(B, fx.Predicate.EXISTS))),
            out("e1", 2, SUCCESS, CERTAIN),
            seen(3),
        ),
        {"e1": ("unverified", "done", 1, None)},
    ),
    "5 no obligations: unverified, a reported success done": (
        history(claim("e1", 1), out("e1", 2, SUCCESS, CERTAIN)),
        {"e1": ("unverified", "done", 1, None)},
    ),
    "5 impact none leaves nothing unresolved": (
        history(claim("e1", 1), out("e1", 2, SUCCESS, NONE)),
        {"e1": ("unverified", "done", 0, None)},
    ),
    # ---- what counts as evidence
    "evidence must follow the outcome: unverified": (
        history(claim("e1", 1, duties=(EXISTS,)), seen(2), out("e1", 3, SUCCESS, CERTAIN)),
        {"e1": ("unverified", "done", 1, None)},
    ),
    "partial coverage is no evidence: unverified": (
        history(
            claim("e1", 1, duties=(EXISTS,)),
            out("e1", 2, SUCCESS, CERTAIN),
            seen(3, coverage=fx.Coverage.PARTIAL),
        ),
        {"e1": ("unverified", "done", 1, None)},
    ),
    "another resource is no evidence: unverified": (
        history(claim("e1", 1, duties=(EXISTS,)), out("e1", 2, SUCCESS, CERTAIN), seen(3, ref=B)),
        {"e1": ("unverified", "done", 1, None)},
    ),
    "absent satisfied: verified": (
        history(
            claim("e1", 1, duties=(fx.Postcondition(A, fx.Predicate.ABSENT),)),
            out("e1", 2, SUCCESS, CERTAIN),
            seen(3, exists=False),
        ),
        {"e1": ("verified", "done", 0, None)},
    ),
    "sha256 equal: verified": (
        history(
            claim("e1", 1, duties=(fx.Postcondition(A, fx.Predicate.SHA256, AFTER),)),
            out("e1", 2, SUCCESS, CERTAIN),
            seen(3, digest=AFTER),
        ),
        {"e1": ("verified", "done", 0, None)},
    ),
    "sha256 other: contradicted": (
        history(
            claim("e1", 1, duties=(fx.Postcondition(A, fx.Predicate.SHA256, AFTER),)),
            out("e1", 2, SUCCESS, CERTAIN),
            seen(3, digest=OTHER),
        ),
        {"e1": ("contradicted", "escalate", 1, None)},
    ),
    "sha256 not read: undecided, unverified": (
        history(
            claim("e1", 1, duties=(fx.Postcondition(A, fx.Predicate.SHA256, AFTER),)),
            out("e1", 2, SUCCESS, CERTAIN),
            seen(3),
        ),
        {"e1": ("unverified", "done", 1, None)},
    ),
    "revision equal: verified": (
        history(
            claim("e1", 1, duties=(fx.Postcondition(A, fx.Predicate.REVISION, "r2"),)),
            out("e1", 2, SUCCESS, CERTAIN),
            seen(3, revision="r2"),
        ),
        {"e1": ("verified", "done", 0, None)},
    ),
    "revision of an absent target: contradicted": (
        history(
            claim("e1", 1, duties=(fx.Postcondition(A, fx.Predicate.REVISION, "r2"),)),
            out("e1", 2, SUCCESS, CERTAIN),
            seen(3, exists=False),
        ),
        {"e1": ("contradicted", "escalate", 1, None)},
    ),
    # ---- stale evidence: another claim on the target in flight as it was observed
    "a claim on the target in flight: stale, unverified": (
        history(
            claim("e1", 1, duties=(EXISTS,)),
            out("e1", 2, SUCCESS, CERTAIN),
            claim("e2", 3),
            seen(4),
        ),
        {"e1": ("unverified", "done", 1, None), "e2": ("pending", "wait", 1, None)},
    ),
    "a claim on the target made after the observation: stale": (
        history(
            claim("e1", 1, duties=(EXISTS,)),
            out("e1", 2, SUCCESS, CERTAIN),
            seen(3),
            claim("e2", 4),
            out("e2", 5, SUCCESS, CERTAIN),
        ),
        {"e1": ("unverified", "done", 1, None), "e2": ("unverified", "done", 1, None)},
    ),
    "a claim on the target settled before the observation: fresh, verified": (
        history(
            claim("e1", 1, duties=(EXISTS,)),
            out("e1", 2, SUCCESS, CERTAIN),
            claim("e2", 3),
            out("e2", 4, SUCCESS, CERTAIN),
            seen(5),
        ),
        {"e1": ("verified", "done", 0, None), "e2": ("unverified", "done", 1, None)},
    ),
    "a claim on the target settled clean after it: fresh, verified": (
        history(
            claim("e1", 1, duties=(EXISTS,)),
            out("e1", 2, SUCCESS, CERTAIN),
            claim("e2", 3),
            seen(4),
            out("e2", 5, FAILED, NONE),
        ),
        {"e1": ("verified", "done", 0, None), "e2": ("failed", "retry", 0, None)},
    ),
    "a claim on the target failed with possible impact after it: stale": (
        history(
            claim("e1", 1, duties=(EXISTS,)),
            out("e1", 2, SUCCESS, CERTAIN),
            claim("e2", 3),
            seen(4),
            out("e2", 5, FAILED, POSSIBLE),
        ),
        {"e1": ("unverified", "done", 1, None), "e2": ("unverified", "escalate", 1, None)},
    ),
    "a claim on another resource in flight: fresh, verified": (
        history(
            claim("e1", 1, duties=(EXISTS,)),
            out("e1", 2, SUCCESS, CERTAIN),
            claim("e2", 3, scope=(B,)),
            seen(4),
        ),
        {"e1": ("verified", "done", 0, None), "e2": ("pending", "wait", 1, None)},
    ),
    # ---- decision rules (decide), first rule that applies
    "rule 1 applied: done, whatever the verdict": (
        history(claim("e1", 1), out("e1", 2, INTERRUPTED, POSSIBLE), resolved("e1", 3, True)),
        {"e1": ("unverified", "done", 0, "applied")},
    ),
    "rule 1 applied before any outcome: done, pending": (
        history(claim("e1", 1), resolved("e1", 2, True)),
        {"e1": ("pending", "done", 0, "applied")},
    ),
    "rule 1 not applied: retry": (
        history(claim("e1", 1), out("e1", 2, INTERRUPTED, POSSIBLE), resolved("e1", 3, False)),
        {"e1": ("unverified", "retry", 0, "not_applied")},
    ),
    "rule 1 not applied over a verified effect: retry": (
        history(
            claim("e1", 1, duties=(EXISTS,)),
            out("e1", 2, SUCCESS, CERTAIN),
            seen(3),
            resolved("e1", 4, False),
        ),
        {"e1": ("verified", "retry", 0, "not_applied")},
    ),
    "rule 1 applied over a contradicted effect: done": (
        history(
            claim("e1", 1, duties=(EXISTS,)),
            out("e1", 2, SUCCESS, CERTAIN),
            seen(3, exists=False),
            resolved("e1", 4, True),
        ),
        {"e1": ("contradicted", "done", 0, "applied")},
    ),
    "rule 5 needs a reported success: interrupted write, escalate": (
        history(claim("e1", 1), out("e1", 2, INTERRUPTED, POSSIBLE)),
        {"e1": ("unverified", "escalate", 1, None)},
    ),
    "rule 5 reported success of an irreversible effect: done": (
        history(claim("e1", 1, IRR), out("e1", 2, SUCCESS, CERTAIN)),
        {"e1": ("unverified", "done", 1, None)},
    ),
    "rule 6 interrupted read: retry": (
        history(claim("e1", 1, R), out("e1", 2, INTERRUPTED, POSSIBLE)),
        {"e1": ("unverified", "retry", 1, None)},
    ),
    "rule 6 interrupted idempotent: retry": (
        history(claim("e1", 1, IDEM), out("e1", 2, INTERRUPTED, POSSIBLE)),
        {"e1": ("unverified", "retry", 1, None)},
    ),
    "rule 6 contradicted idempotent: retry": (
        history(
            claim("e1", 1, IDEM, duties=(EXISTS,)),
            out("e1", 2, SUCCESS, CERTAIN),
            seen(3, exists=False),
        ),
        {"e1": ("contradicted", "retry", 1, None)},
    ),
    "rule 8 interrupted irreversible: escalate": (
        history(claim("e1", 1, IRR), out("e1", 2, INTERRUPTED, POSSIBLE)),
        {"e1": ("unverified", "escalate", 1, None)},
    ),
    "rule 7 absent before and after: retry": (
        history(
            seen(1, exists=False),
            claim("e1", 2, duties=(EXISTS,)),
            out("e1", 3, INTERRUPTED, POSSIBLE),
            seen(4, exists=False),
        ),
        {"e1": ("contradicted", "retry", 1, None)},
    ),
    "rule 7 the same digest before and after: retry": (
        history(
            seen(1, digest=BEFORE),
            claim("e1", 2, duties=(fx.Postcondition(A, fx.Predicate.SHA256, AFTER),)),
            out("e1", 3, INTERRUPTED, POSSIBLE),
            seen(4, digest=BEFORE),
        ),
        {"e1": ("contradicted", "retry", 1, None)},
    ),
    "rule 7 the same revision before and after: retry": (
        history(
            seen(1, revision="r1"),
            claim("e1", 2, duties=(fx.Postcondition(A, fx.Predicate.REVISION, "r2"),)),
            out("e1", 3, INTERRUPTED, POSSIBLE),
            seen(4, revision="r1"),
        ),
        {"e1": ("contradicted", "retry", 1, None)},
    ),
    "rule 7 another digest after: escalate": (
        history(
            seen(1, digest=BEFORE),
            claim("e1", 2, duties=(fx.Postcondition(A, fx.Predicate.SHA256, AFTER),)),
            out("e1", 3, INTERRUPTED, POSSIBLE),
            seen(4, digest=OTHER),
        ),
        {"e1": ("contradicted", "escalate", 1, None)},
    ),
    "rule 7 present before, absent after: escalate": (
        history(
            seen(1),
            claim("e1", 2, duties=(EXISTS,)),
            out("e1", 3, INTERRUPTED, POSSIBLE),
            seen(4, exists=False),
        ),
        {"e1": ("contradicted", "escalate", 1, None)},
    ),
    "rule 7 needs the observation before the claim: escalate": (
        history(
            claim("e1", 1, duties=(EXISTS,)),
            seen(2, exists=False),
            out("e1", 3, INTERRUPTED, POSSIBLE),
            seen(4, exists=False),
        ),
        {"e1": ("contradicted", "escalate", 1, None)},
    ),
    "rule 7 is a write's: irreversible unchanged, escalate": (
        history(
            seen(1, exists=False),
            claim("e1", 2, IRR, duties=(EXISTS,)),
            out("e1", 3, INTERRUPTED, POSSIBLE),
            seen(4, exists=False),
        ),
        {"e1": ("contradicted", "escalate", 1, None)},
    ),
    # ---- retries: the newest retry speaks for the effect
    "a retry without outcome speaks for its original: wait": (
        history(
            claim("e1", 1, R),
            out("e1", 2, INTERRUPTED, POSSIBLE),
            claim("e2", 3, R, retry_of="e1", original="e1"),
        ),
        {"e1": ("unverified", "wait", 1, None), "e2": ("pending", "wait", 1, None)},
    ),
    "the newest of two retries speaks, not the oldest": (
        history(
            claim("e1", 1, R),
            out("e1", 2, INTERRUPTED, POSSIBLE),
            claim("e2", 3, R, retry_of="e1", original="e1"),
            out("e2", 4, FAILED, NONE),
            claim("e3", 5, R, retry_of="e1", original="e1"),
        ),
        {
            "e1": ("unverified", "wait", 1, None),
            "e2": ("failed", "retry", 0, None),
            "e3": ("pending", "wait", 1, None),
        },
    ),
    "a retry's retry speaks for the first attempt": (
        history(
            claim("e1", 1, R),
            out("e1", 2, INTERRUPTED, POSSIBLE),
            claim("e2", 3, R, retry_of="e1", original="e1"),
            out("e2", 4, INTERRUPTED, POSSIBLE),
            claim("e3", 5, R, retry_of="e2", original="e1"),
            out("e3", 6, SUCCESS, CERTAIN),
        ),
        {
            "e1": ("unverified", "done", 1, None),
            "e2": ("unverified", "done", 1, None),
            "e3": ("unverified", "done", 1, None),
        },
    ),
    "a retry of an older retry does not speak over the newest retry": (
        history(
            claim("e1", 1, R),
            out("e1", 2, INTERRUPTED, POSSIBLE),
            claim("e2", 3, R, retry_of="e1", original="e1"),
            out("e2", 4, FAILED, NONE),
            claim("e3", 5, R, retry_of="e1", original="e1"),
            claim("e4", 6, R, retry_of="e2", original="e1"),
            out("e4", 7, SUCCESS, CERTAIN),
        ),
        {
            "e1": ("unverified", "wait", 1, None),
            "e2": ("failed", "done", 0, None),
            "e3": ("pending", "wait", 1, None),
            "e4": ("unverified", "done", 1, None),
        },
    ),
    "a resolved retry speaks: its resolution, not its original's": (
        history(
            claim("e1", 1),
            out("e1", 2, INTERRUPTED, POSSIBLE),
            resolved("e1", 3, False),
            claim("e2", 4, retry_of="e1", original="e1"),
            out("e2", 5, INTERRUPTED, POSSIBLE),
            resolved("e2", 6, True),
        ),
        {
            "e1": ("unverified", "done", 0, "not_applied"),
            "e2": ("unverified", "done", 0, "applied"),
        },
    ),
    "a later claim that is no retry does not speak": (
        history(claim("e1", 1, R), out("e1", 2, INTERRUPTED, POSSIBLE), claim("e2", 3, R)),
        {"e1": ("unverified", "retry", 1, None), "e2": ("pending", "wait", 1, None)},
    ),
}


@pytest.fixture
def store(backend: Backend, tmp_path: Path) -> Iterator[tuple[Backend, Path | str, storage.Store]]:
    location = backend.location(tmp_path)
    served = storage.backend(location)
    the_store = served.acquire(location)
    yield backend, location, the_store
    served.release(the_store)


def said(case: str) -> dict[str, Row]:
    """What assess and decide say of each claim of the case's history."""
    found = {}
    h = CASES[case][0]
    for c in h.claims:
        a = fx.assess(c, h)
        found[c.effect_id] = (
            a.verdict.value,
            fx.decide(c, h).step.value,
            int(a.unresolved_impact),
            a.resolution,
        )
    return found


@pytest.mark.parametrize("case", CASES)
def test_assess_and_decide_give_the_pinned_row(case: str) -> None:
    """The table is the spec's: assess and decide give each row (pure: the backend aside)."""
    fx.check_history(CASES[case][0])
    assert said(case) == CASES[case][1]


def test_effect_status_gives_every_pinned_row(
    store: tuple[Backend, Path | str, storage.Store],
) -> None:
    """Every case, each a run of one store: effect_status gives the table's row for each claim."""
    backend, location, the_store = store
    the_store.open_for_writing()
    run_ids = {case: new_run_id() for case in CASES}
    for case, (h, _) in CASES.items():
        written = the_store.append(
            Batch(
                action="test: write a pinned case",
                run_id=run_ids[case],
                records=h.records(),
                head=GENESIS,
                now=NOW,
                start=True,
            )
        )
        assert written.error is None, (case, written.error)
    rows = backend.query(
        location,
        "SELECT run_id, effect_id, verdict, next_step, unresolved_impact, resolution"
        " FROM effect_status ORDER BY run_id, seq",
    )
    by_run: dict[str, dict[str, Row]] = {}
    for run_id, effect_id, verdict, next_step, unresolved, resolution in rows:
        by_run.setdefault(run_id, {})[effect_id] = (verdict, next_step, unresolved, resolution)
    wrong = {
        case: by_run.get(run_ids[case])
        for case, (_, expected) in CASES.items()
        if by_run.get(run_ids[case]) != expected
    }
    assert wrong == {}, "\n".join(f"{c}: view {v} != {CASES[c][1]}" for c, v in wrong.items())
