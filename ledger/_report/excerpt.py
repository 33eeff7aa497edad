"""What the page keeps of a run: the records it shows and those their verdicts consult.

A run of 100,000 effects is never held whole. The survey shows each record to an
:class:`Excerpt` as it validates the run (a :class:`ledger.storage.Take`), which keeps:

- the effects drawn (at most :data:`~ledger._report.model.LANE_LIMIT`: those with
  unresolved impact first, then in claim order) and the effects the lists at the top of
  the page name, each named one with its later attempts, each drawn one with its retries;
- the observations of their targets, and the last observations of targets no claim
  names (the timeline's strays).

Once the run has validated it reads, in the same snapshot (:class:`ledger.storage.RunRecords`),
the claims whose scope may overlap those effects' obligations (filtered by the run's own
index, :meth:`RunIndex.relevant`), the outcomes of every claim kept, the resolutions
(the first :data:`~ledger._report.model.TABLE_LIMIT` and those of the effects kept) and
the run's times where the timeline marks them: each verdict and decision shown is the
one the whole run gives. Memory holds that part, the targets observed, and the ids of
the retries.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import heapq
from collections import defaultdict, deque
from collections.abc import Collection, Iterable

from ledger import storage
from ledger._report.model import GAP_S, LANE_LIMIT, TABLE_LIMIT
from ledger._run.index import RunIndex
from ledger.effects import (
    Assessment,
    EffectClaim,
    History,
    Observation,
    Record,
    Resolution,
    assess,
)

__all__ = ["Excerpt", "Loaded"]

TICKS = 6  # times marked under a timeline
GAPS = 8  # longest pauses marked on a timeline

_Key = tuple[str, str]


@dataclasses.dataclass(frozen=True, slots=True)
class Loaded:
    """The part of a validated run the page shows, indexed once, and the run's sizes."""

    records: tuple[Record, ...]  # the records kept, in seq order
    index: RunIndex  # of the records kept: verdicts of the effects kept as the whole run's
    claims: dict[str, EffectClaim]  # of the records kept
    retries: dict[str, list[EffectClaim]]  # the claims that retry each effect kept, in order
    resolutions: tuple[Resolution, ...]  # the run's first TABLE_LIMIT resolutions
    count: int  # records of the run
    effects: int  # claims of the run
    resolution_count: int  # resolutions of the run
    lanes: tuple[str, ...]  # the effects drawn, in claim order
    strays: tuple[Observation, ...]  # the last observations of targets no claim names
    ticks: tuple[tuple[int, str | None], ...]  # seq and time of the records marked below
    gaps: tuple[tuple[float, int], ...]  # the longest pauses: seconds, and the seq after

    def assess(self, effect_id: str) -> Assessment:
        """The verdict on one effect, from the part of the run its rules consult."""
        claim = self.claims[effect_id]
        return assess(claim, self.index.relevant(claim))

    def reason(self, effect_id: str) -> str:
        """Why the effect's next step is what it is, as ``decide`` says ("" if unclaimed)."""
        claim = self.claims.get(effect_id)
        return "" if claim is None else self.index.decide(claim).reason


def _key(record: Observation) -> _Key:
    return record.resource.kind, record.resource.locator


def _targets(claim: EffectClaim) -> set[_Key]:
    """What a claim names: its impact scope and its obligations' targets."""
    found = {(r.kind, r.locator) for r in claim.impact_scope}
    found |= {(p.target.kind, p.target.locator) for p in claim.obligations}
    return found


def _obligation_targets(claims: Iterable[EffectClaim]) -> set[_Key]:
    """What the obligations of ``claims`` name: the targets their verdicts are checked at."""
    return {(p.target.kind, p.target.locator) for c in claims for p in c.obligations}


def _seconds(stamp: str) -> float:
    return dt.datetime.fromisoformat(stamp).timestamp()


def _overlapping(claims: Iterable[EffectClaim], focus: list[EffectClaim]) -> dict[str, EffectClaim]:
    """Of ``claims``, those the verdicts of ``focus`` consult (with ``focus``).

    The run's own index decides which claims overlap an obligation's target, so the
    claims kept are exactly those the whole run's index would hand to ``assess``.
    """
    index = RunIndex()
    for claim in claims:
        index.add_claim(claim)
    found: dict[str, EffectClaim] = {}
    for claim in focus:
        found.update((c.effect_id, c) for c in index.relevant(claim).claims)
    return found


def _times(
    times: Iterable[tuple[int, str | None]], count: int
) -> tuple[tuple[tuple[int, str | None], ...], tuple[tuple[float, int], ...]]:
    """The records the timeline's ticks mark, and its longest pauses (at least GAP_S)."""
    marks = min(count, TICKS)
    picks = {round(i * (count - 1) / max(marks - 1, 1)) for i in range(marks)} if count else set()
    ticks: list[tuple[int, str | None]] = []
    longest: list[tuple[float, int]] = []  # a heap of the GAPS longest pauses
    before: str | None = None
    for i, (seq, recorded_at) in enumerate(times):
        if i in picks:
            ticks.append((seq, recorded_at))
        if before is not None and recorded_at is not None:
            waited = _seconds(recorded_at) - _seconds(before)
            if waited >= GAP_S:
                if len(longest) < GAPS:
                    heapq.heappush(longest, (waited, seq))
                else:
                    heapq.heappushpop(longest, (waited, seq))
        before = recorded_at
    return tuple(ticks), tuple(sorted(longest, key=lambda p: p[1]))


class Excerpt:
    """What the page keeps of one run (a :class:`ledger.storage.Take`): see the module.

    ``unresolved``: the run's effects with unresolved impact (drawn first); ``named``:
    its effects the lists at the top of the page name (their claims and decisions).
    """

    def __init__(
        self, run: storage.RunRecords, unresolved: Collection[str], named: Collection[str]
    ) -> None:
        self._run = run
        self._unresolved = unresolved
        self._named = named
        self._observed = run.observed()
        self._claimed: set[_Key] = set()  # the targets observed that a claim names
        self._count = 0
        self._effects = 0
        # The effects drawn: the first LANE_LIMIT with unresolved impact, then the first
        # others (those left out are known once every claim is seen).
        self._first_unresolved: dict[str, EffectClaim] = {}
        self._first_others: dict[str, EffectClaim] = {}
        self._held: dict[str, EffectClaim] = {}  # the effects named, every later attempt
        self._retries: dict[str, EffectClaim] = {}  # retries of the effects maybe drawn
        self._drawn: list[EffectClaim] | None = None
        self._watched: set[_Key] = set()
        self._observations: list[Observation] = []
        self._strays: deque[Observation] = deque(maxlen=LANE_LIMIT)

    def see(self, record: Record) -> bool:
        """Keep what the page may show or consult of one record as the run is checked."""
        self._count += 1
        if isinstance(record, EffectClaim):
            return self._see_claim(record)
        if isinstance(record, Observation):
            if self._drawn is None:
                self._choose()
            key = _key(record)
            if key in self._watched:
                self._observations.append(record)
                return True
            if key not in self._claimed:  # a target no claim names
                self._strays.append(record)
                return True
        return False

    def _see_claim(self, claim: EffectClaim) -> bool:
        self._effects += 1
        self._claimed |= _targets(claim) & self._observed
        eid = claim.effect_id
        keep = False
        if eid in self._unresolved:
            if len(self._first_unresolved) < LANE_LIMIT:
                self._first_unresolved[eid] = claim
                keep = True
        elif len(self._first_others) < LANE_LIMIT:
            self._first_others[eid] = claim
            keep = True
        if claim.retry_of is not None:
            if claim.retry_of in self._first_unresolved or claim.retry_of in self._first_others:
                self._retries[eid] = claim  # it links from the row of an effect drawn
                keep = True
            if claim.retry_of in self._held:  # a later attempt at an effect named
                self._held[eid] = claim
                keep = True
        if eid in self._named:
            self._held[eid] = claim
            keep = True
        return keep

    def _choose(self) -> None:
        """The effects drawn, and the targets whose observations are kept."""
        others = list(self._first_others.values())
        drawn = [
            *self._first_unresolved.values(),
            *others[: LANE_LIMIT - len(self._first_unresolved)],
        ]
        self._drawn = sorted(drawn, key=lambda c: c.seq)
        focus = [*self._drawn, *self._held.values()]
        self._watched = set().union(*map(_targets, self._drawn)) if drawn else set()
        self._watched |= _obligation_targets(focus)

    def done(self) -> Loaded:
        """The part of the run kept, indexed, with the run's sizes and times."""
        if self._drawn is None:
            self._choose()
        drawn = self._drawn or []
        run = self._run
        focus = {c.effect_id: c for c in drawn} | self._held
        kept = dict(focus)
        lanes = {c.effect_id for c in drawn}
        kept |= {eid: c for eid, c in self._retries.items() if c.retry_of in lanes}
        targets = _obligation_targets(focus.values())
        if targets:
            wanted = run.overlapping(targets) - kept.keys()
            others = run.claims(wanted)
            watching = [c for c in focus.values() if c.obligations]
            kept |= {eid: c for eid, c in _overlapping(others, watching).items() if eid not in kept}
        claims = sorted(kept.values(), key=lambda c: c.seq)
        outcomes = run.outcomes(kept.keys())
        resolutions: list[Resolution] = []
        first: list[Resolution] = []
        resolution_count = 0
        for resolution in run.resolutions():
            resolution_count += 1
            if resolution.effect_id in kept or len(first) < TABLE_LIMIT:
                resolutions.append(resolution)
            if len(first) < TABLE_LIMIT:
                first.append(resolution)
        ticks, gaps = _times(run.times(), self._count)
        strays = tuple(self._strays)
        merged = sorted([*self._observations, *strays], key=lambda o: o.seq)
        history = History(tuple(claims), tuple(outcomes), tuple(merged), tuple(resolutions))
        retries: dict[str, list[EffectClaim]] = defaultdict(list)
        for claim in claims:
            if claim.retry_of is not None:
                retries[claim.retry_of].append(claim)
        return Loaded(
            records=history.records(),
            index=RunIndex.of(history),
            claims={c.effect_id: c for c in claims},
            retries=retries,
            resolutions=tuple(first),
            count=self._count,
            effects=self._effects,
            resolution_count=resolution_count,
            lanes=tuple(c.effect_id for c in drawn),
            strays=strays,
            ticks=ticks,
            gaps=gaps,
        )
