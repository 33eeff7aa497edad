"""What needs a person now, most urgent first: ``ledger status --attention`` and the page's top.

An effect needs a person when the worker cannot settle it by itself:
- ``escalate``: only someone who checks the world can say whether it landed
  (``ledger resolve``); a reported success the evidence contradicts comes first, then
  an irreversible effect, then a write that may have landed;
- ``wait`` whose run no live process holds: the claim has no outcome and its writer is
  gone, so none will come until the run is recovered (``ledger recover``, or the
  worker's own ``EffectLog.resume``); or the call was reported running, which recovery
  leaves alone, and a person must check (``ledger resolve``).

A call waiting for a person's approval needs one too (``ledger approve`` or ``deny``):
it is listed after the effects, oldest request first.

Everything else is the worker's own business (``retry``) or settled (``done``), however
unverified: listing it would bury the few effects that need someone.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable
from typing import Any

from ledger import _inspect, storage
from ledger.effects import ApprovalView
from ledger.storage import EffectRow

__all__ = [
    "ApprovalWait",
    "Attention",
    "AttentionRows",
    "approval_summary",
    "approve_command",
    "attention",
    "needs_person",
]

# Most urgent first; the number is what --json calls the urgency (1 is the most urgent).
CONTRADICTED, IRREVERSIBLE, WRITE, ABANDONED, APPROVAL = 1, 2, 3, 4, 5


@dataclasses.dataclass(frozen=True, slots=True)
class Attention:
    """One effect a person must look at: why, how urgent, and the command that settles it."""

    row: EffectRow
    urgency: int  # 1 (most urgent) .. 4
    reason: str
    action: str  # the command that settles it, with a placeholder for what only a person knows
    approval: ApprovalView | None = None  # the approval the effect was claimed under, if any

    def to_dict(self) -> dict[str, Any]:
        """The JSON shape of ``ledger status --attention --json``: a status row and more."""
        return {
            **self.row.to_dict(),
            "approval": None if self.approval is None else approval_summary(self.approval),
            "urgency": self.urgency,
            "reason": self.reason,
            "action": self.action,
        }


def approve_command(view: ApprovalView) -> str:
    """The command that grants ``view``, bound to the digest of the call it asks for."""
    return (
        f"ledger approve {view.run_id} {view.approval_id} --by NAME "
        f"--expect-digest {view.action_digest[:12]}"
    )


def approval_summary(view: ApprovalView) -> dict[str, Any]:
    """What a status row says of an approval: its id, state, and who decided and when."""
    decision = view.decision
    return {
        "approval_id": view.approval_id,
        "state": view.state,
        "decided_by": None if decision is None else decision.by,
        "decided_at": None if decision is None else decision.decided_at,
        "source": None if decision is None else decision.source.value,
    }


@dataclasses.dataclass(frozen=True, slots=True)
class ApprovalWait:
    """A call waiting for a person's approval: the request, and the command that grants it."""

    view: ApprovalView
    urgency: int = APPROVAL

    @property
    def reason(self) -> str:
        """Why it needs a person."""
        return f"waits for a person's approval until {self.view.expires_at}: it has not run"

    @property
    def action(self) -> str:
        """The command that grants it, bound to the digest of the call it asks for."""
        return approve_command(self.view)

    def to_dict(self) -> dict[str, Any]:
        """The JSON shape of ``ledger status --attention --json``: a status row's keys and more.

        What a request has of a status row is said (its run, the seq of the request, the
        effect id its claim will carry, the operation, the step, the approval); what only
        a claim has is null.
        """
        request = self.view.request
        return {
            "run_id": self.view.run_id,
            "seq": request.seq,
            "effect_id": request.effect_id,
            "operation": request.operation,
            "execution": None,
            "impact": None,
            "verdict": None,
            "unresolved_impact": False,
            "claimed_at": None,
            "kind": None,
            "idempotency_key": None,
            "resolution": None,
            "next_step": "wait",
            "run_problem": None,
            "step": request.step,
            "approval": approval_summary(self.view),
            "urgency": self.urgency,
            "reason": self.reason,
            "action": self.action,
        }


class AttentionRows(list[Attention]):
    """What needs a person, most urgent first, and every run of the scope that does not validate.

    ``approvals``: the calls waiting for a person's approval, oldest request first.
    """

    def __init__(
        self,
        found: Iterable[Attention],
        problems: dict[str, str],
        approvals: Iterable[ApprovalWait] = (),
    ) -> None:
        super().__init__(found)
        self.problems = problems
        self.approvals = list(approvals)


def attention(directory: storage.Location, run: str | None = None) -> AttentionRows:
    """The effects (across runs, or of one) that need a person, most urgent first.

    Then the calls waiting for a person's approval. Runs that do not validate are in the
    result's ``problems``: their effects are listed as their rows say, which is not to
    be believed (their approval requests are not listed).
    """
    read = _inspect.reader(directory)
    rows = read.effects(run, unresolved=True)
    asked = _inspect.list_approvals(directory, run, every=True)
    used = {(v.run_id, v.used_by): v for v in asked if v.used_by is not None}
    found = [
        dataclasses.replace(a, approval=used.get((a.row.run_id, a.row.effect_id)))
        for a in needs_person(rows, read.held)
    ]
    problems = dict(sorted({**asked.problems, **rows.problems}.items()))
    waiting = (ApprovalWait(v) for v in asked if v.state == "pending")
    return AttentionRows(found, problems, waiting)


def needs_person(
    rows: Iterable[EffectRow], held: Callable[[set[str]], set[str]]
) -> list[Attention]:
    """The rows that need a person, most urgent first, the oldest claim first within each.

    ``rows``: status rows, oldest claim first. ``held``: which of the given runs a live
    process holds (asked only for runs with an effect waiting).
    """
    found: list[Attention] = []
    waiting: list[EffectRow] = []
    for row in rows:
        if row.next_step == "escalate":
            found.append(_escalation(row))
        elif row.next_step == "wait" and row.execution in (None, "running"):
            # An attempt with an outcome of its own waits on its newest retry, which is
            # listed itself.
            waiting.append(row)
    if waiting:
        alive = held({row.run_id for row in waiting})
        found.extend(_abandoned(row) for row in waiting if row.run_id not in alive)
    found.sort(key=lambda a: a.urgency)  # stable: claim order within an urgency
    return found


def _resolve_command(row: EffectRow) -> str:
    return f"ledger resolve {row.run_id} {row.effect_id} --applied|--not-applied --by NAME"


def _escalation(row: EffectRow) -> Attention:
    action = _resolve_command(row)
    if row.verdict == "contradicted":
        reason = "its success was reported, and the evidence contradicts it"
        return Attention(row, CONTRADICTED, reason, action)
    if row.kind == "irreversible":
        reason = "irreversible, and it may have happened: a person must check"
        return Attention(row, IRREVERSIBLE, reason, action)
    impact = row.impact or "unknown"
    reason = f"a write that may have landed (impact {impact}): a person must check"
    return Attention(row, WRITE, reason, action)


def _abandoned(row: EffectRow) -> Attention:
    if row.execution is None:
        reason = "claimed, no outcome, and no live process holds its run: none will come"
        return Attention(row, ABANDONED, reason, f"ledger recover {row.run_id}")
    # Recovery leaves a call reported running alone (it said it had started): only a
    # person can say whether it landed.
    reason = "reported running, and no live process holds its run: a person must check"
    return Attention(row, ABANDONED, reason, _resolve_command(row))
