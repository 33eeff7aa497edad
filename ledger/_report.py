"""``ledger report``: one self-contained HTML page of a store's runs, for a person to look at.

The page is built from what the other commands print (runs, status --attention, status
--unresolved, show, verify), read in one snapshot (:meth:`ledger.storage.Reader.survey`),
so it says nothing they would not. It is rendered by Jinja2
with autoescaping on: every value from the store (ids, locators, notes) is text an
agent or its tools wrote, possibly hostile, and reaches the page only escaped, with
its non-printable characters spelled out as the command line does. The page loads
nothing: its style and script are inline, allowed by hash in its Content-Security-
Policy, so that even a value that escaped escaping could not run.

A large run is summarised, not dumped: at most :data:`ATTENTION_LIMIT` effects that
need a person and :data:`INCIDENT_LIMIT` incidents listed, :data:`LANE_LIMIT` lanes per
timeline (effects with unresolved impact first), :data:`TABLE_LIMIT` rows in a run's
record table, and :data:`RUN_LIMIT` runs drawn in full (the newest); the page says what
it left out and which command shows the rest. Only the effects drawn are assessed, and
only the histories shown are kept.
"""

from __future__ import annotations

import base64
import dataclasses
import datetime as dt
import hashlib
import itertools
import os
import re
import shlex
from collections import defaultdict
from collections.abc import Callable, Sequence
from importlib import resources
from pathlib import Path, PurePath

from ledger import _inspect, _text, storage
from ledger._attention import Attention, needs_person
from ledger._run.index import RunIndex
from ledger.effects import (
    Assessment,
    EffectClaim,
    EffectOutcome,
    ExecutionOutcome,
    History,
    Observation,
    Record,
    Resolution,
    assess,
)

LANE_LIMIT = 200
TABLE_LIMIT = 1000
RUN_LIMIT = 20
ATTENTION_LIMIT = 200  # rows of the list of what needs a person; `status --attention` has all
INCIDENT_LIMIT = 200  # rows of the incident table; `status --unresolved` has all
OBSERVATION_MARKS = 40  # per lane: a file observed every second would bury its lane
# How much of a recorded value (a claim's arguments, an outcome's result) the page shows:
# in a record's table row, and in a mark's tooltip. `ledger show --json` has it whole.
VALUE_LIMIT = 2000
TITLE_VALUE_LIMIT = 200
TARGET_LIMIT = 120  # a target or the arguments, in a row of the two lists at the top
GAP_S = 10.0  # a pause between two records at least this long is marked on the timeline

# SVG geometry, in user units (the drawing scales to the page's width).
WIDTH = 1200.0
LABEL_W = 260.0
VERDICT_W = 130.0
LANE_H = 22.0
TOP = 34.0
_LEFT = LABEL_W + 10.0
_RIGHT = WIDTH - VERDICT_W - 10.0

_DURATION = re.compile(r"(\d+)([smhd])")
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


# --------------------------------------------------------------------------- the model


@dataclasses.dataclass(frozen=True, slots=True)
class Mark:
    """One record drawn on a lane: where, what shape, and its fields for the tooltip."""

    x: float
    shape: str  # claim, success, failed, running, interrupted, observation, evidence
    title: str


@dataclasses.dataclass(frozen=True, slots=True)
class Lane:
    """One effect on the timeline, from its claim to its outcome."""

    effect_id: str
    operation: str
    verdict: str
    unresolved: bool
    y: float
    x0: float
    x1: float
    settled: bool  # a terminal outcome ends the lane; else it runs on, dashed
    interrupted: str | None  # "recovery" or "worker" when the outcome says interrupted
    marks: tuple[Mark, ...]
    title: str


@dataclasses.dataclass(frozen=True, slots=True)
class Tick:
    """A label on the timeline's axis, or a pause between two records."""

    x: float
    text: str


@dataclasses.dataclass(frozen=True, slots=True)
class Timeline:
    """A run drawn in SVG: lanes, observations of no claimed target, axis and pauses."""

    lanes: tuple[Lane, ...]
    strays: tuple[Mark, ...]  # observations of resources no effect of the run claims
    strays_y: float | None
    ticks: tuple[Tick, ...]
    gaps: tuple[Tick, ...]
    height: float
    effects: int  # how many the run claimed; more than len(lanes) when capped


@dataclasses.dataclass(frozen=True, slots=True)
class Link:
    """An effect a record names (the one it retries, a retry of it), and its row if listed."""

    label: str
    effect_id: str
    anchor: str | None  # the id of its claim's row on the page, when the table lists it


@dataclasses.dataclass(frozen=True, slots=True)
class Row:
    """One record in a run's table."""

    seq: int
    recorded_at: str
    kind: str
    ident: str
    action: str | None
    fields: tuple[tuple[str, str], ...]
    verdict: str | None  # the verdict of the effect it belongs to, for filtering
    anchor: str = ""  # its element id: "r" run index "-" seq, numbers only
    links: tuple[Link, ...] = ()
    claim_anchor: str | None = None  # the row of the claim of the effect it names


@dataclasses.dataclass(frozen=True, slots=True)
class Incident:
    """An effect with unresolved impact, and what an operator can do about it today."""

    row: _inspect.EffectRow
    run_index: int | None  # the run's section on the page, when the run is drawn
    reason: str  # why its decision is what it is, as `decide` says
    step: str  # what the commands do
    commands: tuple[str, ...]  # the exact commands to type
    target: tuple[str, ...] = ()  # its impact scope and recorded arguments


@dataclasses.dataclass(frozen=True, slots=True)
class Needs:
    """An effect a person must act on (``ledger status --attention``), and how to settle it."""

    attention: Attention
    run_index: int | None
    target: tuple[str, ...]
    reason: str  # why it needs a person, or why its run is not believed
    step: str
    commands: tuple[str, ...]


@dataclasses.dataclass(frozen=True, slots=True)
class RunPage:
    """A run's summary, and its timeline and records when it is drawn."""

    index: int
    summary: _inspect.RunSummary
    problems: tuple[str, ...]  # why it does not validate, from verify, runs or show
    records: int
    timeline: Timeline | None
    rows: tuple[Row, ...]
    verdicts: dict[str, int]
    resolutions: tuple[Row, ...] = ()  # a person's word on an effect: who, when, the note
    resolution_count: int = 0

    @property
    def verified(self) -> bool:
        """Whether its rows and hash chain validated, as ``ledger verify`` checks them."""
        return not self.problems


@dataclasses.dataclass(frozen=True, slots=True)
class Report:
    """Everything the page shows."""

    store: storage.Location
    generated_at: str
    asked: str
    verify: _inspect.VerifyReport
    store_problems: tuple[str, ...]
    attention: tuple[Needs, ...]  # what needs a person, most urgent first (at most ATTENTION_LIMIT)
    attention_total: int
    incidents: tuple[Incident, ...]  # at most INCIDENT_LIMIT
    incidents_total: int
    runs: tuple[RunPage, ...]
    drawn: int

    @property
    def unvalidated(self) -> dict[str, str]:
        """The runs shown that do not validate, each with its first problem."""
        return {r.summary.run_id: r.problems[0] for r in self.runs if r.problems}


# --------------------------------------------------------------------------- building


def parse_since(text: str, now: dt.datetime | None = None) -> str:
    """``--since``: an ISO 8601 date or time (UTC without an offset), or ``90s``/``2h``/``7d`` ago.

    Returned in the form ledger records times, so that it compares as text.
    """
    duration = _DURATION.fullmatch(text.strip())
    if duration:
        now = now or dt.datetime.now(dt.UTC)
        moment = now - dt.timedelta(seconds=int(duration[1]) * _UNITS[duration[2]])
    else:
        try:
            moment = dt.datetime.fromisoformat(text.strip())
        except ValueError:
            raise ValueError(
                f"{text!r} is not a time: give an ISO 8601 date or time "
                "(2026-03-01, 2026-03-01T09:15:00, UTC unless it has an offset) "
                "or a duration back from now (90s, 30m, 2h, 7d)"
            ) from None
        if moment.tzinfo is None:
            moment = moment.replace(tzinfo=dt.UTC)
    return moment.astimezone(dt.UTC).isoformat(timespec="microseconds")


def _match(summaries: Sequence[_inspect.RunSummary], prefix: str) -> str:
    """The run ``prefix`` names, by the rules (and messages) of ``ledger show``."""
    if not re.fullmatch(r"[0-9a-f]{1,32}", prefix):
        raise _inspect.RunNotFoundError(
            f"{prefix!r} is not a run id or a prefix of one (lowercase hex)"
        )
    found = [s.run_id for s in summaries if s.run_id.startswith(prefix)]
    if not found:
        raise _inspect.RunNotFoundError(f"no run matches {prefix!r}")
    if len(found) > 1:
        raise _inspect.RunNotFoundError(
            f"{prefix!r} matches more than one run; give more characters"
        )
    return found[0]


def _choose(
    summaries: Sequence[_inspect.RunSummary],
    rows: Sequence[_inspect.EffectRow],
    runs: Sequence[str],
    *,
    unresolved: bool,
    since: str | None,
    broken: set[str],
) -> list[_inspect.RunSummary]:
    """The runs the page shows, oldest first: those asked for, filtered.

    A run that does not validate stays whatever the filters: its times and verdicts are
    not believed, and a forged row may have settled its last open effect.
    """
    if runs:
        wanted = {_match(summaries, prefix) for prefix in runs}
        summaries = [s for s in summaries if s.run_id in wanted]
    if since is not None:
        summaries = [
            s
            for s in summaries
            if s.run_id in broken or (s.last_at is not None and s.last_at >= since)
        ]
    if unresolved:
        troubled = {row.run_id for row in rows} | broken
        summaries = [s for s in summaries if s.run_id in troubled]
    return list(summaries)


def build(
    directory: storage.Location,
    runs: Sequence[str] = (),
    *,
    unresolved: bool = False,
    since: str | None = None,
) -> Report:
    """The report of ``runs`` (ids or unique prefixes; every run when empty) of a store.

    ``unresolved`` keeps the runs that hold an effect with unresolved impact; ``since``
    (from :func:`parse_since`) the runs that wrote a record at or after it. The store is
    read once (:meth:`ledger.storage.Reader.survey`): each run is read and validated
    once, and only the histories of the runs drawn or with an incident are kept.
    """
    read = _inspect.reader(directory)

    def keep(summaries: Sequence[_inspect.RunSummary], rows: storage.EffectRows) -> set[str]:
        # Chosen as if every run validated: one that does not is never drawn nor listed,
        # and adding it to what is shown only pushes others out, so whatever is drawn or
        # listed is kept here.
        shown = _choose(summaries, rows, runs, unresolved=unresolved, since=since, broken=set())
        ids = {s.run_id for s in shown}
        listed = [row for row in rows if row.run_id in ids]
        return (
            {row.run_id for row in listed[:INCIDENT_LIMIT]}
            | {row.run_id for row in _listed_first(listed)}
            | {s.run_id for s in shown[-RUN_LIMIT:]}
        )

    survey = read.survey(keep)
    effects = survey.effects
    broken = {s.run_id for s in survey.runs if s.problem} | set(effects.problems)
    summaries = _choose(
        survey.runs, effects, runs, unresolved=unresolved, since=since, broken=broken
    )
    shown = {s.run_id for s in summaries}
    checked = survey.verify
    by_run: dict[str, list[str]] = defaultdict(list)
    store_problems = []
    for problem in checked.problems:
        run_id = problem.removeprefix("run ").split(":", 1)[0] if problem.startswith("run ") else ""
        if run_id in shown:
            by_run[run_id].append(problem.split(": ", 1)[1])
        elif not run_id:
            store_problems.append(problem)
    others = sum(1 for p in checked.problems if p.startswith("run ")) - sum(
        map(len, by_run.values())
    )
    if others:
        store_problems.append(f"{others} problem(s) in runs this page does not show")
    loaded = _Cache(
        {
            run_id: history
            for run_id, history in survey.histories.items()
            if run_id in shown and run_id not in broken
        }
    )
    rows = [row for row in effects if row.run_id in shown]
    unresolved_ids: dict[str, set[str]] = defaultdict(set)
    for row in rows:
        unresolved_ids[row.run_id].add(row.effect_id)
    drawn = {s.run_id for s in summaries[-RUN_LIMIT:]}
    pages = [
        _run_page(
            loaded.get(s.run_id),
            i,
            s,
            by_run[s.run_id],
            unresolved_ids[s.run_id],
            draw=s.run_id in drawn,
        )
        for i, s in enumerate(summaries)
    ]
    index = {p.summary.run_id: p.index for p in pages if p.timeline is not None}
    store = _shell_word(str(directory))
    needs = needs_person(rows, read.held)
    return Report(
        store=directory,
        generated_at=dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        asked=_asked(runs, unresolved=unresolved, since=since),
        verify=checked,
        store_problems=tuple(store_problems),
        attention=tuple(
            _attention(a, index.get(a.row.run_id), loaded.get(a.row.run_id), store)
            for a in needs[:ATTENTION_LIMIT]
        ),
        attention_total=len(needs),
        incidents=tuple(
            _incident(row, index.get(row.run_id), loaded.get(row.run_id), store)
            for row in rows[:INCIDENT_LIMIT]
        ),
        incidents_total=len(rows),
        runs=tuple(pages),
        drawn=len(index),
    )


def _listed_first(rows: Sequence[_inspect.EffectRow]) -> list[_inspect.EffectRow]:
    """The rows that may be among the first of what needs a person, whoever holds their run.

    The most urgent escalations, as ``needs_person`` orders them, and every claim waiting
    for an outcome (whether its writer is gone is asked later).
    """
    escalations = needs_person((r for r in rows if r.next_step == "escalate"), lambda _: set())
    waiting = [r for r in rows if r.next_step == "wait"]
    return [a.row for a in escalations[:ATTENTION_LIMIT]] + waiting


class _Cache:
    """The validated histories kept, each indexed the first time it is asked for."""

    def __init__(self, histories: dict[str, History]) -> None:
        self._histories = histories
        self._loaded: dict[str, _Loaded] = {}

    def get(self, run_id: str) -> _Loaded | None:
        if run_id not in self._loaded:
            history = self._histories.get(run_id)
            if history is None:
                return None
            self._loaded[run_id] = _Loaded.of(history)
        return self._loaded[run_id]


def _asked(runs: Sequence[str], *, unresolved: bool, since: str | None) -> str:
    what = "every run" if not runs else "run " + ", ".join(runs)
    if unresolved:
        what += " with an effect whose impact is unresolved"
    if since is not None:
        what += f" that wrote since {since}"
    return what


@dataclasses.dataclass(frozen=True, slots=True)
class _Loaded:
    """A validated run, indexed once: its records, claims, retries, decisions on demand."""

    records: tuple[Record, ...]
    index: RunIndex
    claims: dict[str, EffectClaim]
    retries: dict[str, list[EffectClaim]]  # the claims that retry each effect, in order
    resolutions: tuple[Resolution, ...]

    @classmethod
    def of(cls, history: History) -> _Loaded:
        retries: dict[str, list[EffectClaim]] = defaultdict(list)
        for claim in history.claims:
            if claim.retry_of is not None:
                retries[claim.retry_of].append(claim)
        return cls(
            history.records(),
            RunIndex.of(history),
            {c.effect_id: c for c in history.claims},
            retries,
            history.resolutions,
        )

    def assess(self, effect_id: str) -> Assessment:
        claim = self.claims[effect_id]
        return assess(claim, self.index.relevant(claim))

    def reason(self, effect_id: str) -> str:
        claim = self.claims.get(effect_id)
        return "" if claim is None else self.index.decide(claim).reason


def _target(claim: EffectClaim | None) -> tuple[str, ...]:
    """What the call touches (its impact scope) and the arguments it was called with."""
    if claim is None:
        return ()
    what = [f"{r.role}: {_text.shortened(r.locator, TARGET_LIMIT)}" for r in claim.impact_scope]
    if claim.args is not None:
        what.append(f"args: {_recorded(claim.args, TARGET_LIMIT)}")
    return tuple(what)


def _settle(
    row: _inspect.EffectRow, store: str, *, abandoned: bool = False
) -> tuple[str, tuple[str, ...]]:
    """What settles an effect a person must look at, and the exact commands to type.

    ``abandoned``: its writer is gone before it ended (``status --attention`` says so).
    """
    at = f"--store {store}"
    if abandoned:
        return (
            "its writer is gone: mark it interrupted, then check whether it landed:",
            (f"ledger recover {row.run_id} {at}",),
        )
    if row.execution is None:
        return (
            "once its worker is dead, mark it interrupted, then check whether it landed:",
            (f"ledger recover {row.run_id} {at}",),
        )
    resolve = f"ledger resolve {row.run_id} {shlex.quote(row.effect_id)}"
    return (
        "check whether it landed, then record what you found:",
        (
            f'{resolve} --applied --by "$USER" {at}',
            f'{resolve} --not-applied --by "$USER" {at}',
        ),
    )


_NOT_BELIEVED = (
    "its run does not validate: no verdict or decision of it is believed",
    "find what changed the run before acting on any of its effects:",
)


def _attention(a: Attention, run_index: int | None, run: _Loaded | None, store: str) -> Needs:
    if a.row.run_problem is not None:
        verify = (f"ledger verify --store {store}",)
        return Needs(a, run_index, (), _NOT_BELIEVED[0], _NOT_BELIEVED[1], verify)
    step, commands = _settle(a.row, store, abandoned=a.row.next_step == "wait")
    claim = None if run is None else run.claims.get(a.row.effect_id)
    return Needs(a, run_index, _target(claim), a.reason, step, commands)


def _incident(
    row: _inspect.EffectRow, run_index: int | None, run: _Loaded | None, store: str
) -> Incident:
    if row.run_problem is not None:
        # Recovering or resolving it would be refused: the run must be looked into first.
        return Incident(
            row, run_index, _NOT_BELIEVED[0], _NOT_BELIEVED[1], (f"ledger verify --store {store}",)
        )
    step, commands = _settle(row, store)
    if run is None:  # not kept by the survey: no reason or target, the commands hold
        return Incident(row, run_index, "", step, commands)
    claim = run.claims.get(row.effect_id)
    return Incident(row, run_index, run.reason(row.effect_id), step, commands, _target(claim))


def _run_page(
    run: _Loaded | None,
    index: int,
    summary: _inspect.RunSummary,
    problems: list[str],
    unresolved: set[str],
    *,
    draw: bool,
) -> RunPage:
    found = list(dict.fromkeys([*([summary.problem] if summary.problem else []), *problems]))
    if found or not draw:
        return RunPage(index, summary, tuple(found), 0, None, (), summary.verdicts)
    if run is None:  # cannot happen: a run drawn that validates was kept by the survey
        return RunPage(index, summary, ("not read",), 0, None, (), summary.verdicts)
    timeline, drawn = _timeline(run, unresolved)
    listed = set(itertools.islice((seq for seq in sorted(drawn)), TABLE_LIMIT))
    verdicts = {lane.effect_id: lane.verdict for lane in timeline.lanes}
    rows = tuple(_row(r, run, listed, index, verdicts) for r in run.records if r.seq in listed)
    resolutions = tuple(
        _row(r, run, listed, index, verdicts) for r in run.resolutions[:TABLE_LIMIT]
    )
    return RunPage(
        index,
        summary,
        (),
        len(run.records),
        timeline,
        rows,
        summary.verdicts,
        resolutions,
        len(run.resolutions),
    )


# --------------------------------------------------------------------------- the timeline


def _seconds(stamp: str) -> float:
    return dt.datetime.fromisoformat(stamp).timestamp()


def _span(seconds: float) -> str:
    """A pause in its two largest units: ``12.5s``, ``4m 12s``, ``2h 5m``, ``3d 4h``."""
    whole = int(seconds)
    days, hours, minutes, secs = whole // 86400, whole // 3600 % 24, whole // 60 % 60, whole % 60
    if days:
        return f"{days}d {hours}h"
    if hours:
        return f"{hours}h {minutes}m"
    if minutes:
        return f"{minutes}m {secs}s"
    return f"{seconds:.1f}s"


def _lanes_to_draw(claims: Sequence[EffectClaim], unresolved: set[str]) -> list[EffectClaim]:
    """Every effect when they fit; else those with unresolved impact first, then claim order.

    Drawn in claim order.
    """
    if len(claims) <= LANE_LIMIT:
        return list(claims)
    ranked = sorted(range(len(claims)), key=lambda i: (claims[i].effect_id not in unresolved, i))
    return [claims[i] for i in sorted(ranked[:LANE_LIMIT])]


def _timeline(run: _Loaded, unresolved: set[str]) -> tuple[Timeline, set[int]]:
    """The run's drawing, and the seqs of the records it draws (the table lists those).

    Only the effects drawn are assessed; every other record is looked at once.
    """
    records = run.records
    last = max(len(records), 2)

    def x(seq: int) -> float:
        return round(_LEFT + (seq - 1) / (last - 1) * (_RIGHT - _LEFT), 1)

    claims = _lanes_to_draw(list(run.claims.values()), unresolved)
    outcomes, resolved, seen, strays = _gather(records, {c.effect_id for c in claims})
    drawn: set[int] = set()
    lanes = []
    for i, claim in enumerate(claims):
        a = run.assess(claim.effect_id)
        marks = [Mark(x(claim.seq), "claim", _title(claim))]
        drawn.add(claim.seq)
        end: EffectOutcome | None = None
        interrupted = None
        for outcome in outcomes[claim.effect_id]:
            marks.append(Mark(x(outcome.seq), _outcome_shape(outcome), _title(outcome)))
            drawn.add(outcome.seq)
            if outcome.terminal:
                end = outcome
                if outcome.execution is ExecutionOutcome.INTERRUPTED:
                    interrupted = "recovery" if outcome.replayed else "worker"
        looks = seen[claim.effect_id]
        keep_ids = set(a.evidence) | set(a.stale)
        chosen = [o for o in looks if o.observation_id in keep_ids]
        chosen += [o for o in looks if o.observation_id not in keep_ids][-OBSERVATION_MARKS:]
        for obs in sorted(chosen, key=lambda o: o.seq):
            shape = "evidence" if obs.observation_id in a.evidence else "observation"
            marks.append(Mark(x(obs.seq), shape, _title(obs)))
            drawn.add(obs.seq)
        resolution = resolved.get(claim.effect_id)
        if resolution is not None:
            marks.append(Mark(x(resolution.seq), "resolution", _title(resolution)))
            drawn.add(resolution.seq)
        lanes.append(
            Lane(
                effect_id=claim.effect_id,
                operation=claim.operation.name,
                verdict=a.verdict.value,
                unresolved=a.unresolved_impact,
                y=TOP + i * LANE_H + LANE_H / 2,
                x0=x(claim.seq),
                x1=x(end.seq) if end else _RIGHT,
                settled=end is not None,
                interrupted=interrupted,
                marks=tuple(marks),
                title=_lane_title(claim, a, resolution),
            )
        )
    stray_marks = tuple(Mark(x(o.seq), "observation", _title(o)) for o in strays[-LANE_LIMIT:])
    drawn |= {o.seq for o in strays[-LANE_LIMIT:]}
    rows = len(lanes) + (1 if stray_marks else 0)
    return (
        Timeline(
            lanes=tuple(lanes),
            strays=stray_marks,
            strays_y=TOP + len(lanes) * LANE_H + LANE_H / 2 if stray_marks else None,
            ticks=_ticks(records, x),
            gaps=_gaps(records, x),
            height=TOP + rows * LANE_H + 8,
            effects=len(run.claims),
        ),
        drawn,
    )


def _gather(
    records: Sequence[Record], keep: set[str]
) -> tuple[
    dict[str, list[EffectOutcome]],
    dict[str, Resolution],
    dict[str, list[Observation]],
    list[Observation],
]:
    """The outcomes, resolutions and observations of the effects ``keep`` draws.

    And the observations of targets no claim names. Each record is looked at twice at most.
    """
    outcomes: dict[str, list[EffectOutcome]] = defaultdict(list)
    resolved: dict[str, Resolution] = {}
    watchers: dict[tuple[str, str], list[str]] = defaultdict(list)
    claimed: set[tuple[str, str]] = set()
    for record in records:
        if isinstance(record, EffectOutcome) and record.effect_id in keep:
            outcomes[record.effect_id].append(record)
        elif isinstance(record, Resolution) and record.effect_id in keep:
            resolved[record.effect_id] = record
        elif isinstance(record, EffectClaim):
            targets = {(r.kind, r.locator) for r in record.impact_scope}
            targets |= {(p.target.kind, p.target.locator) for p in record.obligations}
            claimed |= targets
            if record.effect_id in keep:
                for target in targets:
                    watchers[target].append(record.effect_id)
    seen: dict[str, list[Observation]] = defaultdict(list)
    strays: list[Observation] = []
    for record in records:
        if isinstance(record, Observation):
            target = (record.resource.kind, record.resource.locator)
            for effect_id in watchers.get(target, ()):
                seen[effect_id].append(record)
            if target not in claimed:
                strays.append(record)
    return outcomes, resolved, seen, strays


def _ticks(records: Sequence[Record], x: Callable[[int], float]) -> tuple[Tick, ...]:
    if not records:
        return ()
    count = min(len(records), 6)
    picks = sorted({round(i * (len(records) - 1) / max(count - 1, 1)) for i in range(count)})
    return tuple(
        Tick(x(records[i].seq), f"#{records[i].seq} {(records[i].recorded_at or '')[11:19]}")
        for i in picks
    )


def _gaps(records: Sequence[Record], x: Callable[[int], float]) -> tuple[Tick, ...]:
    """The longest pauses between consecutive records (a crash and a restart, say)."""
    pauses = []
    for before, after in itertools.pairwise(records):
        if before.recorded_at is None or after.recorded_at is None:
            continue
        waited = _seconds(after.recorded_at) - _seconds(before.recorded_at)
        if waited >= GAP_S:
            pauses.append((waited, after.seq))
    longest = sorted(pauses, reverse=True)[:8]
    return tuple(
        Tick(x(seq) - 0.5, "+" + _span(waited))
        for waited, seq in sorted(longest, key=lambda p: p[1])
    )


def _outcome_shape(outcome: EffectOutcome) -> str:
    return {
        ExecutionOutcome.REPORTED_SUCCESS: "success",
        ExecutionOutcome.FAILED: "failed",
        ExecutionOutcome.RUNNING: "running",
        ExecutionOutcome.INTERRUPTED: "interrupted",
    }[outcome.execution]


def _lane_title(claim: EffectClaim, a: Assessment, resolution: Resolution | None) -> str:
    state = (
        f"{a.execution.value}, impact {a.impact.value}"
        if a.execution and a.impact
        else "no outcome"
    )
    unresolved = "; impact unresolved" if a.unresolved_impact else ""
    step = f" (step {_text.shortened(claim.step, TITLE_VALUE_LIMIT)})" if claim.step else ""
    retry = f"; a retry of {claim.retry_of}" if claim.retry_of else ""
    word = ""
    if resolution is not None:
        said = "applied" if resolution.applied else "not applied"
        word = f"; resolved {said} by {resolution.by} at {_when(resolution.recorded_at)}"
    return (
        f"{claim.effect_id}: {claim.operation.name}{step}, {state}, {a.verdict.value}"
        f"{unresolved}{retry}{word}"
    )


def _title(record: Record) -> str:
    """A record's fields, one per line, for the mark's tooltip."""
    return "\n".join(
        f"{k}: {v}"
        for k, v in [
            ("seq", str(record.seq)),
            ("kind", record.record_type),
            *_fields(record, TITLE_VALUE_LIMIT),
        ]
    )


# --------------------------------------------------------------------------- the table


def _recorded(value: object, limit: int) -> str:
    """A recorded value as one line of compact JSON, printable, at most about ``limit`` long."""
    return _text.shortened(_text.compact_json(value), limit)


def _fields(record: Record, limit: int = VALUE_LIMIT) -> list[tuple[str, str]]:
    """Every field of a record, as label and text (what ``ledger show --json`` holds).

    A step is shown when the claim has one, arguments and a result when they were
    recorded, cut to ``limit`` characters.
    """
    if isinstance(record, EffectClaim):
        fields = [
            ("effect", record.effect_id),
            ("action", record.action_id),
            ("operation", record.operation.name),
            ("backend", record.operation.backend or "-"),
            ("args sha256", record.operation.args_sha256),
        ]
        fields += [
            (f"scope ({r.role})", r.locator + (f" @ {r.revision}" if r.revision else ""))
            for r in record.impact_scope
        ]
        fields += [
            (
                f"expects {p.predicate.value}",
                p.target.locator + (f" = {p.expected}" if p.expected else ""),
            )
            for p in record.obligations
        ]
        fields += [("kind", record.kind.value), ("idempotency key", record.idempotency_key)]
        if record.retry_of:
            fields.append(("retry of", record.retry_of))
        if record.step:
            fields.append(("step", _text.shortened(record.step, limit)))
        if record.args is not None:
            fields.append(("args", _recorded(record.args, limit)))
        return [*fields, ("recorded at", record.recorded_at)]
    if isinstance(record, Resolution):
        known = {"effect_id", "seq", "applied", "by", "note", "recorded_at"}
        # Whatever else a resolution records (who wrote it: user, host, program) is shown
        # as it is, so that the page leaves none of it out.
        more = [
            (key.replace("_", " "), _text.shortened(_text.compact_json(value), limit))
            if not isinstance(value, str)
            else (key.replace("_", " "), _text.shortened(value, limit))
            for key, value in record.to_dict().items()
            if key not in known and value is not None
        ]
        return [
            ("effect", record.effect_id),
            ("resolved", "applied" if record.applied else "not applied"),
            ("by", record.by),
            *more,
            ("note", _text.shortened(record.note, limit) if record.note else "-"),
            ("recorded at", record.recorded_at),
        ]
    if isinstance(record, EffectOutcome):
        return [
            ("effect", record.effect_id),
            ("execution", record.execution.value),
            ("impact", record.impact.value),
            ("execution id", record.execution_id or "-"),
            ("written by", "recovery" if record.replayed else "the worker"),
            *([("result", _recorded(record.result, limit))] if record.result_recorded else []),
            ("recorded at", record.recorded_at or "-"),
        ]
    exists = {True: "yes", False: "no", None: "unknown"}[record.exists]
    return [
        ("observation", record.observation_id),
        ("action", record.source_action_id),
        (f"resource ({record.resource.kind}, {record.resource.role})", record.resource.locator),
        ("mechanism", record.mechanism.value),
        ("coverage", record.coverage.value),
        ("exists", exists),
        ("sha256", record.sha256 or "-"),
        ("revision", record.revision or "-"),
        ("recorded at", record.recorded_at),
    ]


def _row(
    record: Record, run: _Loaded, listed: set[int], index: int, verdicts: dict[str, str]
) -> Row:
    """A record's row; an effect it names links to that effect's claim when it is listed."""

    def anchor(effect_id: str | None) -> str | None:
        claim = None if effect_id is None else run.claims.get(effect_id)
        return f"r{index}-{claim.seq}" if claim is not None and claim.seq in listed else None

    action: str | None
    verdict: str | None
    links: list[Link] = []
    claim_anchor = None
    if isinstance(record, Observation):
        ident, action, verdict = record.observation_id, record.source_action_id, None
    else:  # a claim, an outcome or a resolution: each names its effect
        ident = record.effect_id
        action = record.action_id if isinstance(record, EffectClaim) else None
        verdict = verdicts.get(ident)
        if isinstance(record, EffectClaim):
            if record.retry_of is not None:
                links.append(Link("retry of", record.retry_of, anchor(record.retry_of)))
            links += [
                Link("retried by", c.effect_id, anchor(c.effect_id))
                for c in run.retries.get(ident, ())
            ]
        else:
            claim_anchor = anchor(ident)
    shown = [
        (k, v)
        for k, v in _fields(record)
        if k not in ("effect", "observation", "action", "recorded at", "retry of")
    ]
    return Row(
        record.seq,
        record.recorded_at or "-",
        record.record_type,
        ident,
        action,
        tuple(shown),
        verdict,
        f"r{index}-{record.seq}",
        tuple(links),
        claim_anchor,
    )


# --------------------------------------------------------------------------- rendering


def printable(value: object) -> object:
    """Every text shown with its non-printable characters spelled out, as ``ledger`` prints them.

    A bidi override or a control character in a locator would otherwise change what the
    reader sees (``txt.exe`` shown as ``exe.txt``). Markup (the page's own) passes as is.
    """
    from markupsafe import Markup  # noqa: PLC0415 - loaded by render, see there

    if isinstance(value, PurePath):
        # A store directory: its bytes that are not UTF-8 are surrogates in its str,
        # which the page (UTF-8) cannot hold; spelled out, as `ledger` prints the path.
        value = str(value)
    if isinstance(value, Markup) or not isinstance(value, str) or value.isprintable():
        return value
    return _text.printable(value)


def _shell_word(text: str) -> str:
    """``text`` as one word of a POSIX shell command line, printable, to copy from the page.

    A path with bytes that are not UTF-8 (a surrogate each in its str) or with other
    characters that do not print is written as bash's ``$'...'``, its bytes escaped,
    so that the command names that very path.
    """
    if text.isprintable():
        return shlex.quote(text)
    data = os.fsencode(text)
    return (
        "$'"
        + "".join(chr(b) if 0x20 <= b < 0x7F and b not in b"'\\" else f"\\x{b:02x}" for b in data)
        + "'"
    )


def _when(stamp: str | None) -> str:
    """A time as the page shows it: the page says times are UTC, as ledger writes them."""
    if stamp is None:
        return "-"
    return stamp.replace("T", " ", 1).removesuffix("+00:00")


SHORT_ID = 10  # characters of an id shown at least; more where another id shares them


def _short_ids(report: Report) -> dict[str, str]:
    """Each long id on the page, cut to a prefix no other id on the page shares (as git does).

    An id of at most :data:`SHORT_ID` + 2 characters is shown whole; so is one no shorter
    prefix tells apart.
    """
    ids: set[str] = set()
    for needs in report.attention:
        ids |= {needs.attention.row.run_id, needs.attention.row.effect_id}
    for incident in report.incidents:
        ids |= {incident.row.run_id, incident.row.effect_id}
    for run in report.runs:
        ids.add(run.summary.run_id)
        if run.timeline is not None:
            ids |= {lane.effect_id for lane in run.timeline.lanes}
        for row in (*run.rows, *run.resolutions):
            ids.add(row.ident)
            ids |= {link.effect_id for link in row.links}
    ordered = sorted(ids)
    short = {}
    for i, full in enumerate(ordered):
        if len(full) <= SHORT_ID + 2:
            continue
        shared = max(
            (_common(full, other) for other in ordered[max(i - 1, 0) : i + 2] if other != full),
            default=0,
        )
        length = max(SHORT_ID, shared + 1)
        if length < len(full) - 1:
            short[full] = full[:length]
    return short


def _common(a: str, b: str) -> int:
    """How many leading characters ``a`` and ``b`` share."""
    for i, (x, y) in enumerate(zip(a, b, strict=False)):
        if x != y:
            return i
    return min(len(a), len(b))


def _asset(name: str) -> str:
    return (resources.files("ledger") / "templates" / name).read_text(encoding="utf-8")


def _hash(text: str) -> str:
    return "'sha256-" + base64.b64encode(hashlib.sha256(text.encode()).digest()).decode() + "'"


def render(report: Report) -> str:
    """The page: one HTML document that loads nothing and runs only its own script."""
    # Imported here: every `ledger` command imports this module (`--since`), and the
    # template engine would add a tenth of a second to each start.
    import jinja2  # noqa: PLC0415
    from markupsafe import Markup  # noqa: PLC0415

    env = jinja2.Environment(
        loader=jinja2.PackageLoader("ledger", "templates"),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
        finalize=printable,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters["when"] = _when
    short = _short_ids(report)
    env.filters["short"] = short.get
    env.filters["shell"] = lambda location: _shell_word(str(location))
    style, script = _asset("report.css"), _asset("report.js")
    csp = (
        f"default-src 'none'; style-src {_hash(style)}; script-src {_hash(script)}; "
        "base-uri 'none'; form-action 'none'"
    )
    return env.get_template("report.html.j2").render(
        report=report,
        csp=csp,
        style=Markup(style),  # noqa: S704 - the package's own file, not data
        script=Markup(script),  # noqa: S704 - the package's own file, not data
        verdicts=_inspect.VERDICTS,
        width=WIDTH,
        left=_LEFT,
        right=_RIGHT,
        label_w=LABEL_W,
        lane_h=LANE_H,
        limits={
            "lanes": LANE_LIMIT,
            "table": TABLE_LIMIT,
            "runs": RUN_LIMIT,
            "attention": ATTENTION_LIMIT,
            "incidents": INCIDENT_LIMIT,
        },
    )


def write(path: Path, text: str) -> Path:
    """Write the page to ``path``, private (0600) like the store it comes from, and return it.

    A new file renamed into place: never written through a link, never half-written.
    """
    path = path.absolute()
    data = text.encode("utf-8")  # a text the page cannot hold fails before any file exists
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        temporary.replace(path)
    except BaseException:
        # Whatever stopped it (a full disk, an interrupt), no half page is left behind.
        temporary.unlink(missing_ok=True)
        raise
    return path
