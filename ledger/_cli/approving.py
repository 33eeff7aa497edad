"""The approval commands: approvals (the inbox), approve and deny.

``approvals`` reads, as the other reading commands do (every run shown validated, the
store opened read-only); ``approve`` and ``deny`` write a person's answer through the
run's log, as ``ledger resolve`` writes a resolution, and the store judges it (an
answer after the request expired, by the store's clock, is refused).
"""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING

import click

from ledger._cli.common import (
    json_option,
    library_errors,
    locate,
    print_json,
    refuse_to_vouch,
    store_option,
    table,
)
from ledger._text import compact_json, printable, shortened

# The storage layer, the page and the MCP SDK are imported inside the commands that use
# them, so that --version, --help and a usage mistake answer at once (see ledger/_cli).
if TYPE_CHECKING:
    from ledger import storage
    from ledger.effects import ApprovalDecision, ApprovalRequest, ApprovalView

__all__ = [
    "approval_table",
    "approvals",
    "approve",
    "deny",
    "requester",
    "span",
]

# How much of the recorded arguments a row of the inbox holds (--json holds them whole),
# and of an id: a prefix is enough to name a run or a request (as git's).
_ARGS_SHOWN = 60
_ID_SHOWN = 12


def requester(request: ApprovalRequest) -> str:
    """Who asks: the requesting process's OS user and host, program and pid."""
    return f"{request.os_user}@{request.host}, {request.program}, pid {request.pid}"


def span(start: str, end: str) -> str:
    """The time from ``start`` to ``end`` (times as the library writes them), roughly: 3m, 2h."""
    seconds = int((datetime.fromisoformat(end) - datetime.fromisoformat(start)).total_seconds())
    sign, seconds = ("-" if seconds < 0 else ""), abs(seconds)
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{sign}{seconds // size}{unit}"
    return f"{sign}{seconds}s"


def _expiry(view: ApprovalView, now: str) -> str:
    if view.state == "pending":
        return f"in {span(now, view.expires_at)}"
    if view.state == "expired":
        return f"{span(view.expires_at, now)} ago"
    return "-"


def _decider(view: ApprovalView) -> str | None:
    decision = view.decision
    return None if decision is None else f"{decision.by} ({decision.source.value})"


def _args(request: ApprovalRequest, limit: int) -> str:
    return "not recorded" if request.args is None else shortened(compact_json(request.args), limit)


def approval_table(views: list[ApprovalView]) -> None:
    """Each request: its run, state, who decided and when, and the claim that used it."""
    table(
        ("RUN", "APPROVAL", "TOOL", "STATE", "DECIDED BY", "DECIDED AT", "USED BY"),
        [
            (
                v.run_id,
                v.approval_id,
                v.request.operation,
                v.state,
                None if v.decision is None else f"{v.decision.by} ({v.decision.source.value})",
                None if v.decision is None else v.decision.decided_at,
                v.used_by,
            )
            for v in views
        ],
    )


@click.command(short_help="The approval requests waiting for a person: the inbox.")
@click.argument("run", required=False)
@click.option("--all", "every", is_flag=True, help="Every request, whatever its state.")
@store_option
@json_option
def approvals(run: str | None, every: bool, store: storage.Location | None, as_json: bool) -> None:
    """The calls waiting for a person's approval, oldest first, across runs or of RUN.

    Each with the tool, the arguments as recorded, the action digest (what an approval
    is bound to), the requesting process, its age and when it expires (by the store's
    clock), and the command that approves it. RUN is a run id or a unique prefix of
    one. With --all, every request and its state: pending, granted (not yet used),
    used (by the claim named), denied, or expired (unanswered in time).
    """
    from ledger import _inspect  # noqa: PLC0415 - see the imports
    from ledger._report.attention import approve_command  # noqa: PLC0415

    with library_errors():
        found = _inspect.list_approvals(locate(store), run, every=every)
    if as_json:
        print_json([v.to_dict() for v in found])
    elif found:
        # With --all, who answered each request and the claim that used it, too.
        decided = ("DECIDED BY", "USED BY") if every else ()
        table(
            (
                "RUN",
                "APPROVAL",
                "STATE",
                "TOOL",
                "DIGEST",
                "REQUESTER",
                "AGE",
                "EXPIRES",
                *decided,
                "ARGS",
            ),
            [
                (
                    v.run_id[:_ID_SHOWN],
                    v.approval_id[:_ID_SHOWN],
                    v.state,
                    v.request.operation,
                    v.action_digest[:_ID_SHOWN],
                    requester(v.request),
                    span(v.request.requested_at, found.now),
                    _expiry(v, found.now),
                    *(_decider(v), None if v.used_by is None else v.used_by[:_ID_SHOWN])[
                        : len(decided)
                    ],
                    _args(v.request, _ARGS_SHOWN),
                )
                for v in found
            ],
        )
        waiting = [v for v in found if v.state == "pending"]
        if waiting:
            click.echo()
        for v in waiting:
            click.echo(printable(approve_command(v)))
    else:
        click.echo("no approval request" if every else "no approval request is pending")
    refuse_to_vouch(found.problems)


def _decided(view: ApprovalView, decision: ApprovalDecision) -> None:
    request = view.request
    click.echo(printable(f"run {view.run_id}, approval {view.approval_id}"))
    lines = [
        ("tool", request.operation),
        ("args", _args(request, 2000)),
        ("digest", request.action_digest),
        ("effect", request.effect_id),
        ("requested", f"{request.requested_at} by {requester(request)}"),
    ]
    if request.reason:
        lines.append(("reason", request.reason))
    for name, value in lines:
        click.echo(printable(f"  {name:<10} {value}"))
    note = f": {decision.note}" if decision.note else ""
    click.echo(
        printable(
            f"{decision.decision} by {decision.by} at {decision.decided_at} "
            f"(seq {decision.seq}){note}"
        )
    )


@click.command(short_help="Grant an approval request: the call it asks for may run, once.")
@click.argument("run")
@click.argument("approval")
@click.option("--by", "by", required=True, metavar="NAME", help="Who approves (an identifier).")
@click.option(
    "--expect-digest",
    default=None,
    metavar="PREFIX",
    help="The start (8 hex characters or more) of the action digest you were shown: "
    "refused, and nothing written, unless the request's digest starts with it.",
)
@click.option("--note", default="", metavar="TEXT", help="Why, for whoever reads it later.")
@store_option
@json_option
def approve(
    run: str,
    approval: str,
    *,
    by: str,
    expect_digest: str | None,
    note: str,
    store: storage.Location | None,
    as_json: bool,
) -> None:
    """Grant APPROVAL of RUN: the exact call it asks for may run, once.

    Prints what it approves (the tool, the recorded arguments, the action digest, the
    effect id) and the decision. Refused (exit 1, nothing written) when the request is
    already decided, has expired by the store's clock, or its digest does not start with
    --expect-digest. The decision is a record of the run, chained like the others, with
    the writing process (OS user, host, program) beside the name given. RUN is a run
    id or a unique prefix of one; APPROVAL a request id of that run, or a unique prefix.
    """
    _decide(
        run,
        approval,
        granted=True,
        by=by,
        note=note,
        expect=expect_digest,
        store=store,
        as_json=as_json,
    )


@click.command(short_help="Deny an approval request: the call it asks for must not run.")
@click.argument("run")
@click.argument("approval")
@click.option("--by", "by", required=True, metavar="NAME", help="Who denies (an identifier).")
@click.option("--note", default="", metavar="TEXT", help="Why: the worker is told.")
@store_option
@json_option
def deny(
    run: str,
    approval: str,
    *,
    by: str,
    note: str,
    store: storage.Location | None,
    as_json: bool,
) -> None:
    """Deny APPROVAL of RUN: the call it asks for must not run.

    The worker's next attempt at the call raises ApprovalDenied, with the name and note
    given. Refused (exit 1, nothing written) when the request is already decided or has
    expired by the store's clock. RUN and APPROVAL as for ledger approve.
    """
    _decide(
        run, approval, granted=False, by=by, note=note, expect=None, store=store, as_json=as_json
    )


def _decide(
    run: str,
    approval: str,
    *,
    granted: bool,
    by: str,
    note: str,
    expect: str | None,
    store: storage.Location | None,
    as_json: bool,
) -> None:
    """The shared part of approve and deny: write the answer, then print it."""
    from ledger import _inspect  # noqa: PLC0415 - see the imports

    with library_errors():
        view, decision = _inspect.decide_approval(
            locate(store),
            run,
            approval,
            granted=granted,
            by=by,
            note=note,
            expect_digest=expect,
        )
    if as_json:
        print_json(view.to_dict())
    else:
        _decided(view, decision)
