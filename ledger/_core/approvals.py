"""Approvals: a person's yes or no to one exact call, asked before it is claimed.

An :class:`ApprovalRequest` names the call by its :func:`action_digest` (everything its
claim will say) and reserves the effect id the claim will carry; an
:class:`ApprovalDecision` answers it, at most once. A claim made under a grant carries
its ``approval_id``; the store lets one approval be used by one claim. Both records are
chained in their run like the others. Pure: the state of a request
(:func:`approval_state`) is a function of the run's records and of the time given.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from datetime import timedelta
from typing import TYPE_CHECKING, Any, ClassVar, Self

from ledger._core.enums import ApprovalSource, EffectKind
from ledger._core.values import (
    InvalidTypeError,
    _build,
    _check_enum,
    _check_hex64,
    _check_seq,
    _check_str,
    _check_timestamp,
    _Fields,
    _frozen,
    _recorded,
    check_identifier,
    check_step,
)

if TYPE_CHECKING:
    from collections.abc import Iterable

    from ledger._core.records import OperationRef, Postcondition, ResourceRef

__all__ = [
    "APPROVAL_STATES",
    "DECISIONS",
    "ApprovalDecision",
    "ApprovalPolicy",
    "ApprovalRequest",
    "ApprovalView",
    "action_digest",
    "approval_state",
]

DECISIONS = ("granted", "denied")
# What a request is: no answer yet and time left; answered yes (and not yet used) or no;
# unanswered past its expiry; or granted and used by a claim.
APPROVAL_STATES = ("pending", "granted", "denied", "expired", "used")
MAX_NOTE = 2000
MAX_TTL = timedelta(days=366)


def action_digest(claim_like: Any) -> str:
    """SHA-256 (hex) of everything a call's claim will say of the call.

    Over the operation's name and backend (its version), the arguments digest, the kind,
    the impact scope and the postconditions of ``claim_like`` (an
    :class:`~ledger.effects.EffectClaim`, a ``ClaimRequest`` or anything with those
    attributes). Two calls that differ in any of them, however little, differ here; the
    effect id, the step, the time and the recorded arguments (the arguments digest
    covers them) are not part of it.
    """
    operation: OperationRef = claim_like.operation
    kind: EffectKind = claim_like.kind
    scope: Iterable[ResourceRef] = claim_like.impact_scope
    duties: Iterable[Postcondition] = claim_like.obligations
    document = {
        "v": 1,
        "operation": operation.name,
        "backend": operation.backend,
        "args_sha256": operation.args_sha256,
        "kind": kind.value,
        "impact_scope": [r.to_dict() for r in scope],
        "obligations": [p.to_dict() for p in duties],
    }
    text = json.dumps(document, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


@dataclasses.dataclass(frozen=True, slots=True)
class ApprovalPolicy:
    """That a call needs a person's yes first: how long a request waits, and why asked."""

    ttl: timedelta = timedelta(hours=24)
    reason: str = ""

    def __post_init__(self) -> None:
        if not isinstance(self.ttl, timedelta):
            raise InvalidTypeError(f"ttl must be a timedelta, not {type(self.ttl).__name__}")
        if not timedelta(0) < self.ttl <= MAX_TTL:
            raise ValueError(f"ttl must be positive and at most {MAX_TTL.days} days")
        _check_str(self.reason, "reason", empty=True, limit=MAX_NOTE)


def check_process(record: Any) -> None:
    """Check the writing process a record names: OS user, host, program and pid."""
    for name in ("os_user", "host", "program"):
        check_identifier(getattr(record, name), name)
    if type(record.pid) is not int:
        raise InvalidTypeError(f"pid must be an int, not {type(record.pid).__name__}")
    if not 0 < record.pid < 2**31:  # a 32-bit column on PostgreSQL
        raise ValueError(f"pid must be a positive integer, not {record.pid}")


@dataclasses.dataclass(frozen=True, slots=True)
class ApprovalRequest:
    """A call waiting for a person's yes: what it is, until when, and who asks.

    ``effect_id`` is the id its claim will carry once granted; ``action_digest`` the
    call's :func:`action_digest`; ``operation``, ``step`` and ``args`` (as recorded, JSON;
    None: not recorded) what a person is shown. ``expires_at`` is on the store's clock.
    The requesting process: ``os_user``, ``host``, ``program``, ``pid``.
    """

    approval_id: str
    seq: int
    effect_id: str
    action_digest: str
    operation: str
    requested_at: str
    expires_at: str
    os_user: str
    host: str
    program: str
    pid: int
    step: str = ""
    args: Any = dataclasses.field(default=None, hash=False)
    reason: str = ""

    record_type: ClassVar[str] = "approval_request"

    @property
    def recorded_at(self) -> str:
        """When it was written: its ``requested_at``."""
        return self.requested_at

    def __post_init__(self) -> None:
        check_identifier(self.approval_id, "approval_id")
        _check_seq(self.seq)
        check_identifier(self.effect_id, "effect_id")
        _check_hex64(self.action_digest, "action_digest")
        check_identifier(self.operation, "operation")
        _check_timestamp(self.requested_at, "requested_at")
        _check_timestamp(self.expires_at, "expires_at")
        if self.expires_at <= self.requested_at:
            raise ValueError("an approval request must expire after it is made")
        check_process(self)
        check_step(self.step)
        _frozen(self, "args", _recorded(self.args, "args"))
        _check_str(self.reason, "reason", empty=True, limit=MAX_NOTE)

    def to_dict(self) -> dict[str, Any]:
        """Return the request as JSON types."""
        return {
            "approval_id": self.approval_id,
            "seq": self.seq,
            "effect_id": self.effect_id,
            "action_digest": self.action_digest,
            "operation": self.operation,
            "requested_at": self.requested_at,
            "expires_at": self.expires_at,
            "os_user": self.os_user,
            "host": self.host,
            "program": self.program,
            "pid": self.pid,
            "step": self.step,
            "args": self.args,
            "reason": self.reason,
        }

    @classmethod
    def from_dict(cls, data: object) -> Self:
        """Validate and rebuild a request from :meth:`to_dict` output."""
        f = _Fields(data, cls)
        return _build(cls, **{name: f.raw(name) for name in _REQUEST_FIELDS})


@dataclasses.dataclass(frozen=True, slots=True)
class ApprovalDecision:
    """A person's answer to an approval request: ``"granted"`` or ``"denied"``, once.

    ``by`` is whom the writer names; the process that wrote it is recorded beside it
    (``source``: the ``ledger approve``/``deny`` command, a program, or an MCP client
    asked by the proxy; and its OS user, host, program and pid).
    """

    approval_id: str
    seq: int
    decision: str
    by: str
    decided_at: str
    source: ApprovalSource
    os_user: str
    host: str
    program: str
    pid: int
    note: str = ""

    record_type: ClassVar[str] = "approval_decision"

    @property
    def recorded_at(self) -> str:
        """When it was written: its ``decided_at``."""
        return self.decided_at

    def __post_init__(self) -> None:
        check_identifier(self.approval_id, "approval_id")
        _check_seq(self.seq)
        if not isinstance(self.decision, str):
            raise InvalidTypeError(f"decision must be a str, not {type(self.decision).__name__}")
        if self.decision not in DECISIONS:
            raise ValueError(f"decision must be 'granted' or 'denied', not {self.decision!r:.40}")
        check_identifier(self.by, "by")
        _check_timestamp(self.decided_at, "decided_at")
        _check_enum(self.source, ApprovalSource, "source")
        check_process(self)
        _check_str(self.note, "note", empty=True, limit=MAX_NOTE)

    @property
    def granted(self) -> bool:
        """Whether the answer is yes."""
        return self.decision == "granted"

    def to_dict(self) -> dict[str, Any]:
        """Return the decision as JSON types."""
        return {
            "approval_id": self.approval_id,
            "seq": self.seq,
            "decision": self.decision,
            "by": self.by,
            "decided_at": self.decided_at,
            "source": self.source.value,
            "os_user": self.os_user,
            "host": self.host,
            "program": self.program,
            "pid": self.pid,
            "note": self.note,
        }

    @classmethod
    def from_dict(cls, data: object) -> Self:
        """Validate and rebuild a decision from :meth:`to_dict` output."""
        f = _Fields(data, cls)
        fields = {name: f.raw(name) for name in _DECISION_FIELDS if name != "source"}
        return _build(cls, source=f.enum("source", ApprovalSource), **fields)


_REQUEST_FIELDS = tuple(f.name for f in dataclasses.fields(ApprovalRequest))
_DECISION_FIELDS = tuple(f.name for f in dataclasses.fields(ApprovalDecision))


def approval_state(
    request: ApprovalRequest,
    decision: ApprovalDecision | None,
    used_by: str | None,
    now: str,
) -> str:
    """One of :data:`APPROVAL_STATES`: what ``request`` is at ``now`` (store clock).

    ``used_by`` is the effect id of the claim made under it, if any. An unanswered
    request is ``expired`` from its ``expires_at`` on: derived from the clock, never an
    answer anyone gave.
    """
    if decision is not None:
        if not decision.granted:
            return "denied"
        return "used" if used_by is not None else "granted"
    return "pending" if now < request.expires_at else "expired"


@dataclasses.dataclass(frozen=True, slots=True)
class ApprovalView:
    """An approval request as a person reads it: the request, its answer, its use.

    ``state`` is one of ``"pending"``, ``"granted"`` (and unused), ``"denied"``,
    ``"expired"``, ``"used"``; ``decision`` is None until answered; ``used_by`` the effect
    id of the claim made under it; ``run_id`` the run it belongs to.
    """

    run_id: str
    request: ApprovalRequest
    decision: ApprovalDecision | None
    state: str
    used_by: str | None = None

    @property
    def approval_id(self) -> str:
        """The request's id."""
        return self.request.approval_id

    @property
    def action_digest(self) -> str:
        """The digest of the call it is for."""
        return self.request.action_digest

    @property
    def effect_id(self) -> str:
        """The effect id its claim carries (once granted and used)."""
        return self.request.effect_id

    @property
    def expires_at(self) -> str:
        """When an unanswered request expires (store clock)."""
        return self.request.expires_at

    def to_dict(self) -> dict[str, Any]:
        """Return the view as JSON types."""
        return {
            "run_id": self.run_id,
            "approval_id": self.approval_id,
            "state": self.state,
            "request": self.request.to_dict(),
            "decision": None if self.decision is None else self.decision.to_dict(),
            "used_by": self.used_by,
        }
