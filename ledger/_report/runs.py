"""One run of the page drawn: its timeline in SVG and its table of records.

A run is drawn from what the page keeps of it (:class:`~ledger._report.excerpt.Loaded`):
at most :data:`~ledger._report.model.LANE_LIMIT` lanes (those with unresolved impact
first) and :data:`~ledger._report.model.TABLE_LIMIT` rows; only the effects drawn are
assessed.
"""

from __future__ import annotations

import itertools
from collections import defaultdict
from collections.abc import Sequence

from ledger import _inspect, _text
from ledger._report.excerpt import Loaded
from ledger._report.html import when
from ledger._report.model import (
    LANE_H,
    LANE_LIMIT,
    LEFT,
    OBSERVATION_MARKS,
    RIGHT,
    TABLE_LIMIT,
    TITLE_VALUE_LIMIT,
    TOP,
    VALUE_LIMIT,
    Lane,
    Link,
    Mark,
    Row,
    RunPage,
    Tick,
    Timeline,
)
from ledger.effects import (
    ApprovalDecision,
    ApprovalRequest,
    Assessment,
    EffectClaim,
    EffectOutcome,
    ExecutionOutcome,
    Observation,
    Record,
    Resolution,
)

__all__ = ["recorded", "run_page"]


def run_page(
    run: Loaded | None,
    index: int,
    summary: _inspect.RunSummary,
    problems: list[str],
    *,
    draw: bool,
) -> RunPage:
    """A run's section: its summary, and its timeline and records when it is drawn.

    A run that does not validate, or is not among those drawn, gets its summary only.
    """
    found = list(dict.fromkeys([*([summary.problem] if summary.problem else []), *problems]))
    if found or not draw:
        return RunPage(index, summary, tuple(found), 0, None, (), summary.verdicts)
    if run is None:  # cannot happen: a run drawn that validates was kept by the survey
        return RunPage(index, summary, ("not read",), 0, None, (), summary.verdicts)
    timeline, drawn = _timeline(run)
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
        run.count,
        timeline,
        rows,
        summary.verdicts,
        resolutions,
        run.resolution_count,
    )


# --------------------------------------------------------------------------- the timeline


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


def _timeline(run: Loaded) -> tuple[Timeline, set[int]]:
    """The run's drawing, and the seqs of the records it draws (the table lists those).

    Only the effects drawn are assessed; every record kept is looked at once.
    """
    last = max(run.count, 2)

    def x(seq: int) -> float:
        return round(LEFT + (seq - 1) / (last - 1) * (RIGHT - LEFT), 1)

    claims = [run.claims[effect_id] for effect_id in run.lanes]
    outcomes, resolved, seen = _gather(run.records, {c.effect_id for c in claims})
    strays = run.strays
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
                x1=x(end.seq) if end else RIGHT,
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
            ticks=tuple(
                Tick(x(seq), f"#{seq} {(recorded_at or '')[11:19]}")
                for seq, recorded_at in run.ticks
            ),
            gaps=tuple(Tick(x(seq) - 0.5, "+" + _span(waited)) for waited, seq in run.gaps),
            height=TOP + rows * LANE_H + 8,
            effects=run.effects,
        ),
        drawn,
    )


def _gather(
    records: Sequence[Record], keep: set[str]
) -> tuple[
    dict[str, list[EffectOutcome]],
    dict[str, Resolution],
    dict[str, list[Observation]],
]:
    """The outcomes, resolutions and observations of the effects ``keep`` draws.

    Each record is looked at twice at most.
    """
    outcomes: dict[str, list[EffectOutcome]] = defaultdict(list)
    resolved: dict[str, Resolution] = {}
    watchers: dict[tuple[str, str], list[str]] = defaultdict(list)
    for record in records:
        if isinstance(record, EffectOutcome) and record.effect_id in keep:
            outcomes[record.effect_id].append(record)
        elif isinstance(record, Resolution) and record.effect_id in keep:
            resolved[record.effect_id] = record
        elif isinstance(record, EffectClaim) and record.effect_id in keep:
            targets = {(r.kind, r.locator) for r in record.impact_scope}
            targets |= {(p.target.kind, p.target.locator) for p in record.obligations}
            for target in targets:
                watchers[target].append(record.effect_id)
    seen: dict[str, list[Observation]] = defaultdict(list)
    for record in records:
        if isinstance(record, Observation):
            target = (record.resource.kind, record.resource.locator)
            for effect_id in watchers.get(target, ()):
                seen[effect_id].append(record)
    return outcomes, resolved, seen


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
        word = f"; resolved {said} by {resolution.by} at {when(resolution.recorded_at)}"
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


def recorded(value: object, limit: int) -> str:
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
            fields.append(("args", recorded(record.args, limit)))
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
    if isinstance(record, (ApprovalRequest, ApprovalDecision)):
        # Every field of the record, as it is, so that the page leaves none of it out.
        return [
            (key.replace("_", " "), _text.shortened(_text.compact_json(value), limit))
            if not isinstance(value, str)
            else (key.replace("_", " "), _text.shortened(value, limit))
            for key, value in record.to_dict().items()
            if key != "seq" and value is not None
        ]
    if isinstance(record, EffectOutcome):
        return [
            ("effect", record.effect_id),
            ("execution", record.execution.value),
            ("impact", record.impact.value),
            ("execution id", record.execution_id or "-"),
            ("written by", "recovery" if record.replayed else "the worker"),
            *([("result", recorded(record.result, limit))] if record.result_recorded else []),
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
    record: Record, run: Loaded, listed: set[int], index: int, verdicts: dict[str, str]
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
    elif isinstance(record, (ApprovalRequest, ApprovalDecision)):
        ident, action, verdict = record.approval_id, None, None
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
