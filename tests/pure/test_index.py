"""The log's index hands ``assess`` a small history that gives the same verdict as the run.

``EffectLog.assess`` does not scan the run: it assesses a claim against the records the
index finds (its outcomes, its targets' observations, the claims overlapping them). These
tests hold that shortcut to the pure ``assess`` over the whole history, on the tricky
resource pools of the view tests (``%``, ``_``, ``/``, siblings sharing a prefix, kinds).
The same, through a real log and through the reports' reads, is in
``tests/contract/test_index.py``.
"""

from __future__ import annotations

from hypothesis import given, settings

from ledger import effects as fx
from ledger._run.index import RunIndex
from tests.builders import fs_ref, histories, op


def index_of(history: fx.History) -> RunIndex:
    return RunIndex.of(history)


@settings(max_examples=1500, deadline=None)
@given(history=histories())
def test_relevant_history_gives_the_verdict_of_the_whole_run(history: fx.History) -> None:
    index = index_of(history)
    for claim in history.claims:
        assert fx.assess(claim, index.relevant(claim)) == fx.assess(claim, history), claim


@settings(max_examples=300, deadline=None)
@given(history=histories())
def test_unanswered_is_every_claim_without_an_outcome_in_claim_order(
    history: fx.History,
) -> None:
    answered = {o.effect_id for o in history.outcomes}
    expected = [c for c in history.claims if c.effect_id not in answered]
    assert index_of(history).unanswered() == expected


def test_root_and_deep_paths_meet_in_the_index() -> None:
    target = fs_ref("/w/a/b/c.txt")
    claims = [
        fx.EffectClaim("on-root", 1, "a", op(), (fs_ref("/"),), (), fx.utc_now()),
        fx.EffectClaim("ancestor", 2, "a", op(), (fs_ref("/w/a"),), (), fx.utc_now()),
        fx.EffectClaim("sibling", 3, "a", op(), (fs_ref("/w/ab"),), (), fx.utc_now()),
        fx.EffectClaim(
            "self",
            4,
            "a",
            op(),
            (target,),
            (fx.Postcondition(target, fx.Predicate.EXISTS),),
            fx.utc_now(),
        ),
    ]
    index = index_of(fx.History(tuple(claims), (), ()))
    relevant = {c.effect_id for c in index.relevant(claims[-1]).claims}
    assert relevant == {"on-root", "ancestor", "self"}
    below_root = fx.EffectClaim(
        "root-duty",
        5,
        "a",
        op(),
        (fs_ref("/"),),
        (fx.Postcondition(fs_ref("/"), fx.Predicate.EXISTS),),
        fx.utc_now(),
    )
    index.add_claim(below_root)
    assert {c.effect_id for c in index.relevant(below_root).claims} == {
        "on-root",
        "ancestor",
        "sibling",
        "self",
        "root-duty",
    }
