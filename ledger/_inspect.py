"""What the ``ledger`` command asks of a store: summaries, timelines, verdicts, checks.

The reads are the backend's (:class:`ledger.storage.Reader`: one snapshot each, never
a write, every run shown validated); what is made of them is here, the same for every
backend: the verdicts of a run, and the policy of recovery. Only recovery writes,
through :class:`ledger.effect_log.EffectLog` like any worker.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable
from typing import Any

from ledger import storage
from ledger._owner import Writer
from ledger._run.book import ApprovalBook
from ledger._run.index import RunIndex
from ledger.effect_log import EffectLog
from ledger.effects import (
    ApprovalDecision,
    ApprovalView,
    Assessment,
    Decision,
    EffectOutcome,
    History,
    Resolution,
    assess,
)
from ledger.storage import (
    VERDICTS,
    ApprovalNotFoundError,
    EffectNotFoundError,
    EffectRow,
    EffectRows,
    Head,
    RecoveryHold,
    RunNotFoundError,
    RunSummary,
    VerifyReport,
)

__all__ = [
    "VERDICTS",
    "ApprovalNotFoundError",
    "Approvals",
    "EffectNotFoundError",
    "EffectRow",
    "EffectRows",
    "Head",
    "Recovery",
    "RunInUseError",
    "RunNotFoundError",
    "RunReport",
    "RunSummary",
    "VerifyReport",
    "approval_views",
    "assess_all",
    "decide_approval",
    "effect_statuses",
    "list_approvals",
    "list_runs",
    "recover_dead",
    "recover_run",
    "run_count",
    "run_head",
    "show_run",
    "verify",
]


def reader(directory: storage.Location) -> storage.Reader:
    """The forensic reads of the store at ``directory``, from its backend."""
    return storage.backend(directory).reader(directory)


def list_runs(directory: storage.Location) -> list[RunSummary]:
    """Every run of the store, oldest first, with its writer and its verdict counts.

    Each run is validated (rows and hash chain); one that does not validate carries its
    ``problem``.
    """
    return reader(directory).runs()


@dataclasses.dataclass(frozen=True, slots=True)
class RunReport:
    """One run in full: its validated history and the assessment of every claim."""

    run_id: str
    writer: Writer | None
    history: History
    assessments: tuple[Assessment, ...]
    decisions: tuple[Decision, ...] = ()
    approvals: tuple[ApprovalView, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        """The documented JSON shape of ``ledger show --json``."""
        return {
            "run_id": self.run_id,
            "writer": None
            if self.writer is None
            else {"host": self.writer.host, "pid": self.writer.pid, "name": self.writer.name},
            "records": [
                {"type": r.record_type, "record": r.to_dict()} for r in self.history.records()
            ],
            "effects": [a.to_dict() for a in self.assessments],
            "decisions": [d.to_dict() for d in self.decisions],
            "approvals": [a.to_dict() for a in self.approvals],
        }


def show_run(directory: storage.Location, prefix: str) -> RunReport:
    """The run matching ``prefix``, validated like ``EffectLog.load`` does."""
    read = reader(directory)
    run_id, history, writer = read.run(prefix)
    index = RunIndex.of(history)  # one index serves the verdicts and the decisions
    approvals: tuple[ApprovalView, ...] = ()
    if history.approval_requests:
        # The state of a request is judged by the store's clock.
        approvals = tuple(approval_views(run_id, history, read.now()))
    return RunReport(
        run_id,
        writer,
        history,
        assess_all(history, index),
        decide_all(history, index),
        approvals,
    )


def assess_all(history: History, index: RunIndex | None = None) -> tuple[Assessment, ...]:
    """The assessment of every claim of ``history``, in claim order.

    Each claim is assessed on the part of the run its rules consult, as a loaded log
    does: assessing every claim against the whole history grows with the square of the
    run (30 s for a run of 10,000 records), this grows with the run. ``index``: the
    history's, if the caller has it already.
    """
    index = RunIndex.of(history) if index is None else index
    return tuple(assess(claim, index.relevant(claim)) for claim in history.claims)


def decide_all(history: History, index: RunIndex | None = None) -> tuple[Decision, ...]:
    """The decision on every claim of ``history``, in claim order (as :func:`assess_all`)."""
    index = RunIndex.of(history) if index is None else index
    return tuple(index.decide(claim) for claim in history.claims)


def effect_statuses(
    directory: storage.Location, run: str | None = None, *, unresolved: bool = False
) -> EffectRows:
    """Effects across runs (or of one run) with their verdicts; optionally only unresolved ones.

    Every run of the scope is validated (rows and hash chain): the effects of one that
    does not validate carry its ``run_problem``, and the result's ``problems`` names it
    even when no row is of it. Its verdicts are not believed: ``unresolved`` shows all
    its effects, since a forged row may have settled any of them.
    """
    return reader(directory).effects(run, unresolved=unresolved)


# --------------------------------------------------------------------------- recovery


@dataclasses.dataclass(frozen=True, slots=True)
class Recovery:
    """What recovery did to one run, or why it left the run alone."""

    run_id: str
    outcomes: tuple[EffectOutcome, ...] = ()
    skipped: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """The documented JSON shape of one entry of ``ledger recover --json``."""
        return {
            "run_id": self.run_id,
            "outcomes": [o.to_dict() for o in self.outcomes],
            "skipped": self.skipped,
        }


def _recover(directory: storage.Location, run_id: str, *, force: bool = False) -> Recovery:
    """Recover ``run_id`` unless a live process has it loaded, or another one recovers it.

    The run is taken before it is read: what is then read stays the run's state until
    recovery has written, and a second recoverer finds the run taken.
    """
    with reader(directory).recovering(run_id) as hold:
        if hold is RecoveryHold.RECOVERING:
            return Recovery(run_id, skipped=hold.value)
        if hold is RecoveryHold.IN_USE and not force:
            return Recovery(run_id, skipped=hold.value)
        with EffectLog._visit(run_id, directory, "ledger recover") as log:  # noqa: SLF001 - the command's own way in
            # --force: recovering under a process that holds the run, known dead or hung
            # by its user. The library offers this to nobody else.
            return Recovery(run_id, log._recover(force=force))  # noqa: SLF001


class RunInUseError(ValueError):
    """A live process has the run loaded: recovering it under that process would break it."""


def recover_run(directory: storage.Location, prefix: str, *, force: bool = False) -> Recovery:
    """Mark the matching run's claims that have no outcome as interrupted.

    Refused while a live process has the run loaded (it holds the run's lock), unless
    ``force``: that process's next write then fails, since recovery took the seq it was
    about to use. A run another process is recovering at that moment is left alone.
    """
    run_id, writer = reader(directory).writer(prefix)
    recovery = _recover(directory, run_id, force=force)
    if recovery.skipped == RecoveryHold.IN_USE.value:
        last = "" if writer is None else f" (its last writer: pid {writer.pid} on {writer.host})"
        raise RunInUseError(
            f"run {run_id} is loaded by a live process{last}; recovering it would break "
            "that process (use --force if you know it is dead or hung)"
        )
    return recovery


def recover_dead(directory: storage.Location, runs: Iterable[str] | None = None) -> list[Recovery]:
    """Recover every run with unsettled claims that no live process has loaded.

    A run is taken for dead when no process holds it (see docs/storage.md, "Liveness"),
    whatever process, pid namespace or host wrote it. A run a live process has loaded,
    or that another process is recovering, is left alone, and said so. ``runs``: only
    those of these runs (``ledger mcp-proxy`` recovers its own predecessors).
    """
    unsettled = reader(directory).unsettled()
    if runs is not None:
        wanted = set(runs)
        unsettled = [run_id for run_id in unsettled if run_id in wanted]
    return [_recover(directory, run_id) for run_id in unsettled]


def resolve_effect(
    directory: storage.Location,
    prefix: str,
    effect_id: str,
    *,
    applied: bool,
    by: str,
    note: str = "",
) -> Resolution:
    """Record a person's word on an effect of the matching run: it landed, or it did not.

    ``effect_id`` is an effect id of the run or a unique prefix of one
    (:class:`EffectNotFoundError` otherwise), matched on the run as the log loads it.
    """
    run_id, _writer = reader(directory).writer(prefix)
    with EffectLog._visit(run_id, directory, "ledger resolve") as log:  # noqa: SLF001 - the command's own way in
        effect_id = _match_effect(run_id, log.history(), effect_id)
        return log.resolve(effect_id, applied=applied, by=by, note=note)


# How many candidates a message about an ambiguous effect prefix names.
_CANDIDATES_SHOWN = 4


def _match_effect(run_id: str, history: History, given: str) -> str:
    """The effect of the run that ``given`` names: its whole id, or a unique prefix of one.

    A whole id wins over the ids it is a prefix of. One that names no effect, or more
    than one, raises :class:`EffectNotFoundError` naming a few of the candidates.
    """
    ids = list(dict.fromkeys(claim.effect_id for claim in history.claims))
    if given in ids:
        return given
    found = [effect_id for effect_id in ids if given and effect_id.startswith(given)]
    if len(found) == 1:
        return found[0]
    if not found:
        raise EffectNotFoundError(f"no effect of run {run_id} matches {given!r}")
    shown = ", ".join(found[:_CANDIDATES_SHOWN])
    more = f" and {len(found) - _CANDIDATES_SHOWN} more" if len(found) > _CANDIDATES_SHOWN else ""
    raise EffectNotFoundError(
        f"{given!r} matches {len(found)} effects of run {run_id} ({shown}{more}); "
        "give more characters"
    )


# --------------------------------------------------------------------------- approvals


def approval_views(run_id: str, history: History, now: str) -> list[ApprovalView]:
    """The approval requests of a validated run as a person reads them at ``now``, oldest first.

    ``now`` is the store's clock: an unanswered request past its expiry is expired.
    """
    book = ApprovalBook.of(history)
    return [book.view(run_id, request, now) for request in book.requests]


class Approvals(list[ApprovalView]):
    """Approval requests across runs, oldest first; the store's clock; runs not believed.

    ``problems`` names each run holding requests that does not validate (its requests
    are left out: its rows are not believed); ``now`` is the store's clock they were
    judged by.
    """

    def __init__(self, views: Iterable[ApprovalView], now: str, problems: dict[str, str]) -> None:
        super().__init__(views)
        self.now = now
        self.problems = problems


def list_approvals(
    directory: storage.Location, run: str | None = None, *, every: bool = False
) -> Approvals:
    """The pending approval requests across runs (or of one run), oldest first.

    ``every``: every request, whatever its state. Each run read is validated; one that
    does not validate is in the result's ``problems`` and none of its requests is shown.
    """
    found = reader(directory).approvals(run)
    views = [
        view
        for run_id, history in found.histories.items()
        for view in approval_views(run_id, history, found.now)
        if every or view.state == "pending"
    ]
    views.sort(key=lambda v: (v.request.requested_at, v.run_id, v.request.seq))
    return Approvals(views, found.now, found.problems)


def _match_approval(run_id: str, views: list[ApprovalView], given: str) -> ApprovalView:
    """The request of the run ``given`` names: its whole id, or a unique prefix of one."""
    for view in views:
        if view.approval_id == given:
            return view
    found = [v for v in views if given and v.approval_id.startswith(given)]
    if len(found) == 1:
        return found[0]
    if not found:
        raise ApprovalNotFoundError(f"no approval request of run {run_id} matches {given!r}")
    shown = ", ".join(v.approval_id for v in found[:_CANDIDATES_SHOWN])
    more = f" and {len(found) - _CANDIDATES_SHOWN} more" if len(found) > _CANDIDATES_SHOWN else ""
    raise ApprovalNotFoundError(
        f"{given!r} matches {len(found)} approval requests of run {run_id} ({shown}{more}); "
        "give more characters"
    )


def decide_approval(
    directory: storage.Location,
    prefix: str,
    approval: str,
    *,
    granted: bool,
    by: str,
    note: str = "",
    expect_digest: str | None = None,
) -> tuple[ApprovalView, ApprovalDecision]:
    """Record a person's answer to an approval request of the matching run.

    ``approval`` is a request id of the run or a unique prefix of one
    (:class:`ApprovalNotFoundError` otherwise). Written through the run's log as the
    ``ledger approve`` (or ``deny``) command: ``ValueError`` for a request already
    decided or expired by the store's clock, or whose digest does not start with
    ``expect_digest``; nothing is written then. Returns the request as it now reads, and
    the decision.
    """
    run_id, _writer = reader(directory).writer(prefix)
    program = "ledger approve" if granted else "ledger deny"
    with EffectLog._visit(run_id, directory, program) as log:  # noqa: SLF001 - the command's own way in
        view = _match_approval(run_id, log.approvals(), approval)
        if granted:
            decision = log.approve(view.approval_id, by=by, expect_digest=expect_digest, note=note)
        else:
            decision = log.deny(view.approval_id, by=by, note=note)
        (now,) = [v for v in log.approvals() if v.approval_id == view.approval_id]
    return now, decision


# --------------------------------------------------------------------------- verify


def run_head(directory: storage.Location, prefix: str) -> Head:
    """The matching run's head, after checking its whole chain."""
    return reader(directory).head(prefix)


def verify(
    directory: storage.Location,
    progress: Callable[[int], None] | None = None,
    anchors: tuple[Head, ...] = (),
) -> VerifyReport:
    """Check the file, the schema, the guards, every row and chain of every run, and anchors.

    ``progress`` is called with the number of runs checked so far.
    """
    return reader(directory).verify(progress, anchors)


def run_count(directory: storage.Location) -> int:
    """How many runs the store holds (for progress bars)."""
    return reader(directory).run_count()
