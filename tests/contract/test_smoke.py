"""The smallest end-to-end path: claim, outcome, observe, assess, reload."""

from ledger import effects as fx
from ledger.effect_log import EffectLog
from tests.builders import fs_ref, op


def test_claim_outcome_observe_verifies_and_reloads(log: EffectLog) -> None:
    """A claimed write observed in place is verified, before and after a reload."""
    ref = fs_ref("/sandbox/a.txt")
    log.claim(
        effect_id="e1",
        action_id="a1",
        operation=op(),
        impact_scope=[ref],
        obligations=[fx.Postcondition(ref, fx.Predicate.EXISTS)],
    )
    log.outcome(
        effect_id="e1", execution=fx.ExecutionOutcome.REPORTED_SUCCESS, impact=fx.Impact.CERTAIN
    )
    log.observe(
        observation_id="o1",
        resource=ref,
        mechanism=fx.ObservationMechanism.FILESYSTEM_STAT,
        coverage=fx.Coverage.COMPLETE,
        source_action_id="a2",
        exists=True,
    )
    assert log.assess("e1").verdict is fx.EffectVerdict.VERIFIED
    with EffectLog.load(log.run_id, log.directory) as again:
        assert again.history() == log.history()
        assert again.assess("e1").verdict is fx.EffectVerdict.VERIFIED
