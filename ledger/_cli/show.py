"""``ledger show``: a run's timeline as text, every record on a line, and each effect's verdict.

Long fields (ids, keys, paths, recorded values) are cut so that its lines fit about 120
columns; ``--json`` holds everything whole.
"""

from __future__ import annotations

import textwrap
from collections.abc import Sequence
from typing import TYPE_CHECKING

import click

from ledger._cli.common import (
    UsageMistake,
    json_option,
    library_errors,
    locate,
    print_json,
    store_option,
    table,
)
from ledger._text import compact_json, printable, shortened

# The storage layer, the page and the MCP SDK are imported inside the commands that use
# them, so that --version, --help and a usage mistake answer at once (see ledger/_cli).
if TYPE_CHECKING:
    from ledger import storage
    from ledger.effects import ApprovalView, Record, Resolution

__all__ = ["show"]


# How much of a claim's step and of a recorded value (arguments, result) a line of
# `ledger show` holds; `ledger show --json` and `ledger export` hold them whole.
_STEP_SHOWN = 40
_VALUE_SHOWN = 50
# How much of an id, a key and a locator (its end: a path's file name) the text of
# `ledger show` holds: its lines fit about 120 columns.
_ID_SHOWN = 12
_LOCATOR_SHOWN = 40
_OPERATION_SHOWN = 24
_WIDTH = 118


def _short_id(ident: str) -> str:
    """An id cut to a prefix (a run's or an effect's is enough to name it, as git's)."""
    return _cut(ident, _ID_SHOWN + 3)


def _cut(text: str, limit: int) -> str:
    """``text`` if it fits ``limit`` characters, else its start and "..." in as many."""
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _tail(locator: str, limit: int = _LOCATOR_SHOWN) -> str:
    """A locator cut to its end, which names the thing (a path's directories come first)."""
    return locator if len(locator) <= limit else "..." + locator[-(limit - 3) :]


def _written(resolution: Resolution) -> str:
    """Which process wrote a resolution, for ``ledger show``: a person's command or a worker."""
    from ledger.effects import ResolutionOrigin  # noqa: PLC0415

    if resolution.origin is None:
        return "writer not recorded"
    if resolution.origin is ResolutionOrigin.PERSON:
        return f"written by {resolution.program}, user {resolution.os_user} on {resolution.host}"
    kind = "the worker itself" if resolution.origin is ResolutionOrigin.WORKER else "a reconciler"
    return f"written by {kind}, not a person ({resolution.program}, pid {resolution.pid})"


def _describe(record: Record) -> tuple[str, str]:
    from ledger.effects import (  # noqa: PLC0415
        ApprovalDecision,
        ApprovalRequest,
        EffectClaim,
        EffectOutcome,
        Resolution,
    )

    if isinstance(record, ApprovalRequest):
        args = (
            ""
            if record.args is None
            else f"; args {shortened(compact_json(record.args), _VALUE_SHOWN)}"
        )
        why = f"; {record.reason}" if record.reason else ""
        return (
            record.approval_id,
            (
                f"asks approval of {record.operation} for effect {_short_id(record.effect_id)}"
                f"{args}; digest {record.action_digest[:12]}; expires {record.expires_at}{why}"
            ),
        )
    if isinstance(record, ApprovalDecision):
        note = f": {record.note}" if record.note else ""
        return (
            record.approval_id,
            (
                f"{record.decision} by {record.by}{note}; through {record.source.value} "
                f"({record.program}, user {record.os_user} on {record.host})"
            ),
        )
    if isinstance(record, Resolution):
        word = "applied" if record.applied else "not applied"
        note = f": {record.note}" if record.note else ""
        return record.effect_id, f"resolved {word} by {record.by}{note}; {_written(record)}"
    if isinstance(record, EffectClaim):
        scope = ", ".join(_tail(r.locator) for r in record.impact_scope[:2]) or "-"
        if len(record.impact_scope) > 2:
            scope += f" and {len(record.impact_scope) - 2} more"
        alone = {r.locator for r in record.impact_scope} if len(record.impact_scope) == 1 else ()
        duties = ", ".join(
            p.predicate.value
            + (f"={p.expected[:12]}" if p.expected else "")
            # The scope's one resource is not named twice.
            + ("" if p.target.locator in alone else f" {_tail(p.target.locator)}")
            for p in record.obligations
        )
        retry = f"; retry of {_short_id(record.retry_of)}" if record.retry_of else ""
        if record.approval_id is not None:
            retry += f"; under approval {_short_id(record.approval_id)}"
        step = f"; step {shortened(compact_json(record.step), _STEP_SHOWN)}" if record.step else ""
        args = (
            ""
            if record.args is None
            else f"; args {shortened(compact_json(record.args), _VALUE_SHOWN)}"
        )
        return (
            record.effect_id,
            f"{record.operation.name} ({record.kind.value}) on {scope}{retry}"
            + (f"; expects {duties}" if duties else "")
            + f"; key {_short_id(record.idempotency_key)}{step}{args}",
        )
    if isinstance(record, EffectOutcome):
        replayed = " (recovery)" if record.replayed else ""
        result = (
            f"; result {shortened(compact_json(record.result), _VALUE_SHOWN)}"
            if record.result_recorded
            else ""
        )
        return (
            record.effect_id,
            f"{record.execution.value}, impact {record.impact.value}{replayed}{result}",
        )
    seen = {True: "exists", False: "absent", None: "existence unknown"}[record.exists]
    extra = "".join(
        f", {name} {value[:12]}"
        for name, value in (("sha256", record.sha256), ("revision", record.revision))
        if value
    )
    how = f"{record.mechanism.value}, {record.coverage.value}"
    return record.observation_id, f"{_tail(record.resource.locator)}: {seen}{extra}; by {how}"


@click.command(short_help="A run's timeline and the verdict on each effect.")
@click.argument("run", required=False)
@store_option
@json_option
def show(run: str | None, store: storage.Location | None, as_json: bool) -> None:
    """A run's timeline, every record in seq order, and the verdict on each effect.

    RUN is a run id or a unique prefix of one; without RUN, the run that wrote last
    (said on stderr). Long fields (ids, keys, paths, recorded values) are cut to fit
    the lines in about 120 columns; --json holds everything whole.
    """
    from ledger import _inspect  # noqa: PLC0415 - see the imports

    location = locate(store)
    with library_errors():
        if run is None:
            run = _newest_run(location)
        report = _inspect.show_run(location, run)
    if as_json:
        print_json(report.to_dict())
        return
    writer = "unknown" if report.writer is None else report.writer.label()
    records = report.history.records()
    day, times = _times([r.recorded_at or "" for r in records])
    on = f"  on {day} (UTC)" if day else ""
    click.echo(printable(f"run {report.run_id}  writer {writer}{on}") + "\n")
    rows = []
    for record, time in zip(records, times, strict=True):
        ident, what = _describe(record)
        rows.append((record.seq, time, record.record_type, _short_id(ident), what))
    table(("SEQ", "RECORDED", "KIND", "ID", "WHAT"), rows, wrap=_WIDTH)
    click.echo()
    operations = {c.effect_id: c.operation.name for c in report.history.claims}
    table(
        (
            "EFFECT",
            "OPERATION",
            "EXECUTION",
            "IMPACT",
            "VERDICT",
            "UNRESOLVED",
            "NEXT",
            "EVIDENCE",
            "STALE",
        ),
        [
            (
                _short_id(a.effect_id),
                _cut(operations[a.effect_id], _OPERATION_SHOWN),
                None if a.execution is None else a.execution.value,
                None if a.impact is None else a.impact.value,
                a.verdict.value,
                "yes" if a.unresolved_impact else "no",
                d.step.value,
                _ids(a.evidence),
                _ids(a.stale),
            )
            for a, d in zip(report.assessments, report.decisions, strict=True)
        ],
    )
    click.echo()
    if report.approvals:
        _approvals_table(report.approvals)
        click.echo()
    for d in report.decisions:  # each effect's whole id, to copy; the reason wrapped
        advice = printable(f"{d.effect_id}: {d.step.value.upper()}: {d.reason}")
        click.echo(
            "\n".join(
                textwrap.wrap(
                    advice,
                    _WIDTH,
                    subsequent_indent="    ",
                    break_long_words=False,
                    break_on_hyphens=False,
                )
            )
        )


def _approvals_table(views: Sequence[ApprovalView]) -> None:
    """Each approval request of the run: its state, who decided and when, the claim that used it."""
    table(
        ("APPROVAL", "OPERATION", "STATE", "DECIDED BY", "DECIDED AT", "USED BY", "EXPIRES"),
        [
            (
                _short_id(v.approval_id),
                _cut(v.request.operation, _OPERATION_SHOWN),
                v.state,
                None if v.decision is None else f"{v.decision.by} ({v.decision.source.value})",
                None if v.decision is None else v.decision.decided_at,
                None if v.used_by is None else _short_id(v.used_by),
                v.expires_at if v.decision is None else None,
            )
            for v in views
        ],
    )


def _newest_run(location: storage.Location) -> str:
    """The id of the run that wrote last, said on stderr; a usage mistake if there is none."""
    from ledger import _inspect  # noqa: PLC0415 - see the imports

    summaries = _inspect.list_runs(location)
    if not summaries:
        raise UsageMistake("no RUN given, and the store holds no run yet")
    newest = max(summaries, key=lambda s: (s.last_at or "", s.run_id))
    click.echo(
        printable(f"no RUN given: the run that wrote last, {newest.run_id}, at {newest.last_at}"),
        err=True,
    )
    return newest.run_id


def _times(stamps: Sequence[str]) -> tuple[str | None, list[str]]:
    """The day of a run's records and their times of day (to the millisecond), if one day.

    A run whose records span days, or any time not in UTC, keeps its times whole.
    """
    days = {stamp[:10] for stamp in stamps}
    if len(days) == 1 and all(len(t) > 23 and t.endswith("+00:00") for t in stamps):
        return days.pop(), [stamp[11:23] for stamp in stamps]
    return None, list(stamps)


# How many ids a cell of evidence or stale observations names before it counts the rest,
# and how much of each: two such cells and the verdict's columns fit about 120 columns.
_IDS_SHOWN = 2
_CELL_ID_SHOWN = 8


def _ids(idents: Sequence[str]) -> str | None:
    shown = ",".join(_cut(i, _CELL_ID_SHOWN + 3) for i in idents[:_IDS_SHOWN])
    more = f" +{len(idents) - _IDS_SHOWN} more" if len(idents) > _IDS_SHOWN else ""
    return shown + more or None
