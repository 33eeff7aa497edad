"""What `ledger report` keeps of a run gives the verdicts and decisions of the whole run.

The page keeps of a run only the effects it draws or names and what their verdicts
consult (ledger._report.excerpt), found through the store's reads as the run is
validated (Reader.survey): the claims whose scope may overlap an obligation's target
come from the store's scope index. On generated histories (``tests.builders.histories``:
``%``, ``_``, ``/``, siblings sharing a prefix, several kinds), replayed into a real
store and with one lane drawn, every effect drawn or named is assessed and decided as
the whole run assesses and decides it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from unittest import mock

from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from ledger import _inspect, storage
from ledger import effects as fx
from ledger._report import excerpt
from ledger.effect_log import EffectLog, new_run_id
from tests.backends import Backend
from tests.builders import histories, replay


def _replay(history: fx.History, store: storage.Location) -> str:
    """``history`` written through a real log; its run id."""
    with EffectLog(new_run_id(), store) as log:
        replay(log, history)
        return log.run_id


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(history=histories(), data=st.data())
def test_what_the_page_keeps_gives_the_whole_run_s_verdicts(
    backend: Backend, tmp_path: Path, history: fx.History, data: st.DataObject
) -> None:
    assume(history.claims)  # an empty log writes no store
    ids = [c.effect_id for c in history.claims]
    unresolved = data.draw(st.sets(st.sampled_from(ids)))
    named = data.draw(st.sets(st.sampled_from(ids)))
    store = backend.location(tmp_path / new_run_id())
    run_id = _replay(history, store)

    def keep(
        summaries: Sequence[storage.RunSummary], rows: storage.EffectRows
    ) -> dict[str, Callable[[storage.RunRecords], excerpt.Excerpt]]:
        return {run_id: lambda run: excerpt.Excerpt(run, unresolved, named)}

    with mock.patch.object(excerpt, "LANE_LIMIT", 1):
        survey = _inspect.reader(store).survey(keep)
    kept = survey.kept[run_id]
    whole = EffectLog.load(run_id, store)
    with whole:
        full = whole.history()
    claims = {c.effect_id: c for c in full.claims}
    first = [i for i in ids if i in unresolved][:1] or ids[:1]
    assert list(kept.lanes) == first
    assert kept.count == len(full.records())
    assert kept.effects == len(full.claims)
    for effect_id in [*kept.lanes, *named]:  # a lane shows its verdict
        assert kept.assess(effect_id) == fx.assess(claims[effect_id], full)
    for effect_id in named:  # a row of the lists says why its next step is what it is
        assert kept.index.decide(kept.claims[effect_id]) == fx.decide(claims[effect_id], full)
        assert kept.reason(effect_id) == fx.decide(claims[effect_id], full).reason
    for effect_id in kept.lanes:
        retries = [c.effect_id for c in full.claims if c.retry_of == effect_id]
        assert [c.effect_id for c in kept.retries.get(effect_id, ())] == retries
