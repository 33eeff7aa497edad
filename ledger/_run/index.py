"""What one run's log keeps in memory so that assessing and recovering do not scan it.

``assess(claim, history)`` only ever looks at the claim's own outcomes, at the
complete observations of its obligations' targets, and at the other claims whose
impact scope overlaps those targets (with their outcomes). :class:`RunIndex`
finds exactly those records through dictionaries, so
:meth:`RunIndex.relevant` hands the pure :func:`~ledger.effects.assess` a small
history that gives the same verdict as the whole run, at a cost that does not
grow with the run. It also knows the claims that have no outcome at all, in
claim order, which is what recovery appends to.

Pure: no storage, no clock.
"""

from __future__ import annotations

from collections import defaultdict

from ledger.effects import (
    Decision,
    EffectClaim,
    EffectKind,
    EffectOutcome,
    ExecutionOutcome,
    History,
    Impact,
    Observation,
    Record,
    Resolution,
    ResourceRef,
    decide,
)

_Key = tuple[str, str]


def _prefixes(locator: str) -> list[str]:
    # Every P such that locator starts with P + "/": the fs locators it lies below.
    return [locator[:i] for i, char in enumerate(locator) if char == "/"]


class RunIndex:
    """Claims, outcomes and observations of one run, indexed for assessment and recovery."""

    def __init__(self) -> None:
        self._outcomes: dict[str, list[EffectOutcome]] = defaultdict(list)
        self._observed: dict[_Key, list[Observation]] = defaultdict(list)
        # Claims by impact-scope locator: equal (any kind), below a locator (fs), any fs.
        self._at: dict[_Key, list[EffectClaim]] = defaultdict(list)
        self._below: dict[str, list[EffectClaim]] = defaultdict(list)
        self._fs: list[EffectClaim] = []
        self._external: list[EffectClaim] = []
        self._retries: dict[str, list[EffectClaim]] = defaultdict(list)
        self._resolutions: dict[str, Resolution] = {}
        self._unanswered: dict[str, EffectClaim] = {}  # insertion order is claim order
        self._claims: dict[str, EffectClaim] = {}
        # Writes and irreversible calls whose call ended in doubt (neither a reported
        # success nor a failure without effect) and no person settled: the only effects
        # whose decision can be ESCALATE but for a contradicted success (ledger._run.steps).
        self._doubtful: dict[str, EffectClaim] = {}

    @classmethod
    def of(cls, history: History) -> RunIndex:
        """The index of a whole history."""
        index = cls()
        for record in history.records():
            index.add(record)
        return index

    def add(self, record: Record) -> None:
        """Index a record of any type (in ``seq`` order)."""
        if isinstance(record, EffectClaim):
            self.add_claim(record)
        elif isinstance(record, EffectOutcome):
            self.add_outcome(record)
        elif isinstance(record, Resolution):
            self.add_resolution(record)
        elif isinstance(record, Observation):
            self.add_observation(record)
        # An approval's records decide nothing here: its claim, once made, does.

    def decide(self, claim: EffectClaim) -> Decision:
        """:func:`~ledger.effects.decide` of ``claim`` on the part of the run it consults."""
        attempts = self.attempts(claim)
        return decide(claim, self.relevant(attempts[-1], tuple(attempts[:-1])))

    def add_claim(self, claim: EffectClaim) -> None:
        """Index a claim (in ``seq`` order)."""
        self._unanswered[claim.effect_id] = claim
        self._claims[claim.effect_id] = claim
        if claim.retry_of is not None:
            self._retries[claim.retry_of].append(claim)
        if any(ref.kind == "external" for ref in claim.impact_scope):
            self._external.append(claim)
        seen_fs = False
        for ref in claim.impact_scope:
            self._at[ref.kind, ref.locator].append(claim)
            if ref.kind == "fs":
                seen_fs = True
                for prefix in _prefixes(ref.locator):
                    self._below[prefix].append(claim)
        if seen_fs:
            self._fs.append(claim)

    def add_outcome(self, outcome: EffectOutcome) -> None:
        """Index an outcome (in ``seq`` order)."""
        self._outcomes[outcome.effect_id].append(outcome)
        self._unanswered.pop(outcome.effect_id, None)
        claim = self._claims.get(outcome.effect_id)
        if (
            claim is not None
            and outcome.terminal
            and claim.kind in (EffectKind.WRITE, EffectKind.IRREVERSIBLE)
            and outcome.execution is not ExecutionOutcome.REPORTED_SUCCESS
            and not (outcome.execution is ExecutionOutcome.FAILED and outcome.impact is Impact.NONE)
            and outcome.effect_id not in self._resolutions
        ):
            self._doubtful[outcome.effect_id] = claim

    def add_observation(self, observation: Observation) -> None:
        """Index an observation (in ``seq`` order)."""
        self._observed[observation.resource.kind, observation.resource.locator].append(observation)

    def add_resolution(self, resolution: Resolution) -> None:
        """Index a resolution (one per effect)."""
        self._resolutions[resolution.effect_id] = resolution
        self._doubtful.pop(resolution.effect_id, None)

    def doubtful(self) -> list[EffectClaim]:
        """The attempts whose call ended in doubt and that no person has settled."""
        return list(self._doubtful.values())

    def terminal(self, effect_id: str) -> EffectOutcome | None:
        """The terminal outcome of ``effect_id``, if it has one."""
        for outcome in self._outcomes.get(effect_id, ()):
            if outcome.terminal:
                return outcome
        return None

    def resolution(self, effect_id: str) -> Resolution | None:
        """The resolution of ``effect_id``, if it has one."""
        return self._resolutions.get(effect_id)

    def attempts(self, claim: EffectClaim) -> list[EffectClaim]:
        """``claim``, its newest retry, that one's newest retry…: the attempts decide follows."""
        chain = [claim]
        while True:
            later = [c for c in self._retries.get(chain[-1].effect_id, ()) if c.seq > chain[-1].seq]
            if not later:
                return chain
            chain.append(later[-1])

    def unanswered(self) -> list[EffectClaim]:
        """The claims that have no outcome at all, in ``seq`` order."""
        return list(self._unanswered.values())

    def _overlapping(self, target: ResourceRef) -> list[EffectClaim]:
        """A superset of the claims whose impact scope overlaps ``target``."""
        found = list(self._at.get((target.kind, target.locator), ()))
        if target.kind == "external":  # rare: every claim with an external scope
            return found + self._external
        if target.kind != "fs":
            return found
        if target.locator == "/":
            return found + self._fs
        found += self._below.get(target.locator, ())
        found += self._at.get(("fs", "/"), ())
        for prefix in _prefixes(target.locator):
            found += self._at.get(("fs", prefix), ())
        return found

    def relevant(self, claim: EffectClaim, also: tuple[EffectClaim, ...] = ()) -> History:
        """The part of the run that :func:`~ledger.effects.assess` consults for ``claim``.

        With the claims ``also`` (an effect's earlier attempts, for decide) and their outcomes.
        """
        claims: dict[int, EffectClaim] = {claim.seq: claim}
        claims.update((c.seq, c) for c in also)
        observations: dict[int, Observation] = {}
        for condition in claim.obligations:
            target = condition.target
            for obs in self._observed.get((target.kind, target.locator), ()):
                observations[obs.seq] = obs
            for other in self._overlapping(target):
                claims[other.seq] = other
        outcomes = [o for c in claims.values() for o in self._outcomes.get(c.effect_id, ())]
        resolutions = [
            r for c in claims.values() if (r := self._resolutions.get(c.effect_id)) is not None
        ]
        return History(
            tuple(claims[seq] for seq in sorted(claims)),
            tuple(sorted(outcomes, key=lambda o: o.seq)),
            tuple(observations[seq] for seq in sorted(observations)),
            tuple(sorted(resolutions, key=lambda r: r.seq)),
        )
