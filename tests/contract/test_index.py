"""The log's index, through a real log and through the reads behind ``ledger show``.

A log's ``assess`` and the reports' ``assess_all`` use the index (``ledger._run.index``) on
what they hold; on generated histories (``tests.builders.histories``) both give what the
pure ``assess`` gives over the whole run. The index itself is in
``tests/pure/test_index.py``.
"""

from __future__ import annotations

from pathlib import Path

from hypothesis import HealthCheck, given, settings

from ledger import _inspect
from ledger import effects as fx
from ledger.effect_log import EffectLog, new_run_id
from tests.backends import Backend
from tests.builders import histories, replay


@settings(max_examples=300, deadline=None)
@given(history=histories())
def test_reports_assess_every_claim_as_the_whole_run_does(history: fx.History) -> None:
    """`ledger show` and `ledger report` assess through the index: the same verdicts, in claim order."""
    assert _inspect.assess_all(history) == tuple(fx.assess(c, history) for c in history.claims)


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(history=histories())
def test_log_assess_equals_assess_of_its_history(
    backend: Backend, tmp_path: Path, history: fx.History
) -> None:
    """Replayed through a real log (every record type), then loaded again: verdicts and decisions."""
    store = backend.location(tmp_path / new_run_id())
    with EffectLog(new_run_id(), store) as log:
        replay(log, history)
        run_id = log.run_id
        whole = log.history()
        for claim in whole.claims:
            assert log.assess(claim.effect_id) == fx.assess(claim, whole)
            assert log.decide(claim.effect_id) == fx.decide(claim, whole)
    with EffectLog.load(run_id, store) as loaded:
        for claim in whole.claims:
            assert loaded.assess(claim.effect_id) == fx.assess(claim, whole)
            assert loaded.decide(claim.effect_id) == fx.decide(claim, whole)
