"""Resources through a log: an owned record's revision reads back as it was claimed."""

from __future__ import annotations

from pathlib import Path

from ledger import effects as fx
from ledger.effect_log import EffectLog
from ledger.resources import OwnedResource
from tests.builders import op


def test_owned_revision_round_trips_through_the_store(store_dir: Path, run_id: str) -> None:
    """A claim on an owned record with a revision reads back equal after load, revision included."""
    before = OwnedResource("notes", "alice", "acme", "in/box", "n%1", revision="r7")
    after = OwnedResource("notes", "alice", "acme", "in/box", "n%1", revision="r8")
    with EffectLog(run_id, store_dir) as log:
        claim = log.claim(
            effect_id="e1",
            action_id="edit",
            operation=op("edit_note"),
            impact_scope=(fx.resource_ref(before, "target"),),
            obligations=(
                fx.Postcondition(fx.resource_ref(after, "target"), fx.Predicate.REVISION, "r8"),
            ),
        )
        log.outcome(
            effect_id="e1", execution=fx.ExecutionOutcome.REPORTED_SUCCESS, impact=fx.Impact.CERTAIN
        )
        log.observe(
            observation_id="o1",
            resource=fx.resource_ref(after, "target"),
            mechanism=fx.ObservationMechanism.RECORD_READ,
            coverage=fx.Coverage.COMPLETE,
            source_action_id="read",
            exists=True,
            revision="r8",
        )
        history = log.history()
    with EffectLog.load(run_id, store_dir) as again:
        assert again.history() == history
        (loaded,) = again.history().claims
        assert loaded == claim
        assert loaded.impact_scope[0].revision == "r7"
        assert loaded.obligations[0].target.revision == "r8"
        assert again.history().observations[0].resource.revision == "r8"
        assert again.assess("e1").verdict is fx.EffectVerdict.VERIFIED
