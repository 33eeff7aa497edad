"""What a log knows of its run's approvals: requests, answers, and the claims that used them.

Pure memory, kept by :class:`~ledger._run.state.RunState` as records are remembered; the
time an approval's state depends on is given by the caller (the store's clock).
"""

from __future__ import annotations

from ledger.effects import (
    ApprovalDecision,
    ApprovalRequest,
    ApprovalView,
    History,
    approval_state,
)

__all__ = ["ApprovalBook"]


class ApprovalBook:
    """A run's approval requests and decisions, in ``seq`` order, and their uses."""

    def __init__(self) -> None:
        self.requests: list[ApprovalRequest] = []
        self.decisions: list[ApprovalDecision] = []
        self.by_id: dict[str, ApprovalRequest] = {}
        self.answer: dict[str, ApprovalDecision] = {}
        self.used: dict[str, str] = {}  # approval id -> the effect id of the claim using it
        self.reserved: set[str] = set()  # the effect ids requests hold
        # Granted approvals a call passed the gate under and is claiming now: until that
        # claim is durable (then used) or failed, no other call passes under them.
        self.passing: set[str] = set()
        # The action digests a request is being written for: a thread making the same
        # call meanwhile waits for that request rather than write a second one.
        self.asking: set[str] = set()
        self._by_digest: dict[str, list[ApprovalRequest]] = {}

    @classmethod
    def of(cls, history: History) -> ApprovalBook:
        """The book of a whole (validated) run."""
        book = cls()
        records: list[ApprovalRequest | ApprovalDecision] = [
            *history.approval_requests,
            *history.approval_decisions,
        ]
        for record in sorted(records, key=lambda r: r.seq):
            book.remember(record)
        for claim in history.claims:
            if claim.approval_id is not None:
                book.used[claim.approval_id] = claim.effect_id
        return book

    def remember(self, record: ApprovalRequest | ApprovalDecision) -> None:
        """Add a durable record (in ``seq`` order)."""
        if isinstance(record, ApprovalRequest):
            self.requests.append(record)
            self.by_id[record.approval_id] = record
            self.reserved.add(record.effect_id)
            self._by_digest.setdefault(record.action_digest, []).append(record)
        else:
            self.decisions.append(record)
            self.answer[record.approval_id] = record

    def latest(self, digest: str) -> ApprovalRequest | None:
        """The newest request for the call of ``digest``, if any."""
        found = self._by_digest.get(digest)
        return found[-1] if found else None

    def state(self, request: ApprovalRequest, now: str) -> str:
        """What ``request`` is at ``now`` (see :func:`~ledger.effects.approval_state`)."""
        return approval_state(
            request,
            self.answer.get(request.approval_id),
            self.used.get(request.approval_id),
            now,
        )

    def view(self, run_id: str, request: ApprovalRequest, now: str) -> ApprovalView:
        """``request`` as a person reads it at ``now``."""
        return ApprovalView(
            run_id=run_id,
            request=request,
            decision=self.answer.get(request.approval_id),
            state=self.state(request, now),
            used_by=self.used.get(request.approval_id),
        )

    def of_effect(self, effect_id: str) -> ApprovalRequest | None:
        """The request that reserved ``effect_id``, if one did."""
        if effect_id not in self.reserved:
            return None
        for request in self.requests:
            if request.effect_id == effect_id:
                return request
        return None
