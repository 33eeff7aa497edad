"""What needs a person now, most urgent first: ``ledger status --attention`` and the page's top.

An effect needs a person when the worker cannot settle it by itself:
- ``escalate``: only someone who checks the world can say whether it landed
  (``ledger resolve``); a reported success the evidence contradicts comes first, then
  an irreversible effect, then a write that may have landed;
- ``wait`` whose run no live process holds: the claim has no outcome and its writer is
  gone, so none will come until the run is recovered (``ledger recover``, or the
  worker's own ``EffectLog.resume``); or the call was reported running, which recovery
  leaves alone, and a person must check (``ledger resolve``).

Everything else is the worker's own business (``retry``) or settled (``done``), however
unverified: listing it would bury the few effects that need someone.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable
from typing import Any

from ledger import _inspect, storage
from ledger.storage import EffectRow

__all__ = ["Attention", "AttentionRows", "attention", "needs_person"]

# Most urgent first; the number is what --json calls the urgency (1 is the most urgent).
CONTRADICTED, IRREVERSIBLE, WRITE, ABANDONED = 1, 2, 3, 4


@dataclasses.dataclass(frozen=True, slots=True)
class Attention:
    """One effect a person must look at: why, how urgent, and the command that settles it."""

    row: EffectRow
    urgency: int  # 1 (most urgent) .. 4
    reason: str
    action: str  # the command that settles it, with a placeholder for what only a person knows

    def to_dict(self) -> dict[str, Any]:
        """The JSON shape of ``ledger status --attention --json``: a status row and more."""
        return {
            **self.row.to_dict(),
            "urgency": self.urgency,
            "reason": self.reason,
            "action": self.action,
        }


class AttentionRows(list[Attention]):
    """What needs a person, most urgent first, and every run of the scope that does not validate."""

    def __init__(self, found: Iterable[Attention], problems: dict[str, str]) -> None:
        super().__init__(found)
        self.problems = problems


def attention(directory: storage.Location, run: str | None = None) -> AttentionRows:
    """The effects (across runs, or of one) that need a person, most urgent first.

    Runs that do not validate are in the result's ``problems``: their effects are listed
    as their rows say, which is not to be believed.
    """
    read = _inspect.reader(directory)
    rows = read.effects(run, unresolved=True)
    return AttentionRows(needs_person(rows, read.held), rows.problems)


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
