"""Record values of the effect ledger and the pure assessment of a claim.

Every record is a frozen dataclass: hashable, compared by value, validated when
it is built (``TypeError`` for a wrong type, ``ValueError`` for a bad value), and
convertible with ``to_dict()`` / ``from_dict()`` to plain JSON types and back
exactly. ``from_dict`` raises ``ValueError`` for anything malformed: a missing
or extra key, a wrong type, an unknown enum word, a bad digest.

:func:`assess` turns one run's :class:`History` into an :class:`Assessment` of a
claim, and :func:`decide` says what a worker should do about it. They read no
clock, no disk and no global state; the rules are in ``docs/concepts.md``.

This is the public home of these names; they are written in :mod:`ledger._core`, one
module per job. Nothing here imports storage: it is the model every backend shares.
"""

from __future__ import annotations

from ledger._core.approvals import (
    APPROVAL_STATES,
    ApprovalDecision,
    ApprovalPolicy,
    ApprovalRequest,
    ApprovalView,
    action_digest,
    approval_state,
)
from ledger._core.assessment import Assessment, assess
from ledger._core.decision import Decision, decide, newest_attempt
from ledger._core.enums import (
    ApprovalSource,
    Coverage,
    EffectKind,
    EffectVerdict,
    ExecutionOutcome,
    Impact,
    NextStep,
    ObservationMechanism,
    Predicate,
    ResolutionOrigin,
)
from ledger._core.history import History, check_history, check_times, written_by_utc_now
from ledger._core.records import (
    EffectClaim,
    EffectOutcome,
    Observation,
    OperationRef,
    Postcondition,
    Record,
    Resolution,
    ResourceRef,
    overlaps,
    resource_ref,
)
from ledger._core.values import (
    MAX_IDENTIFIER,
    MAX_JSON_DEPTH,
    MAX_LOCATOR,
    MAX_STEP,
    RESOURCE_KINDS,
    InvalidTypeError,
    args_digest,
    canonical_args,
    check_identifier,
    check_step,
    idempotency_key,
    recorded_json,
    utc_now,
)

__all__ = [
    "APPROVAL_STATES",
    "MAX_IDENTIFIER",
    "MAX_JSON_DEPTH",
    "MAX_LOCATOR",
    "MAX_STEP",
    "RESOURCE_KINDS",
    "ApprovalDecision",
    "ApprovalPolicy",
    "ApprovalRequest",
    "ApprovalSource",
    "ApprovalView",
    "Assessment",
    "Coverage",
    "Decision",
    "EffectClaim",
    "EffectKind",
    "EffectOutcome",
    "EffectVerdict",
    "ExecutionOutcome",
    "History",
    "Impact",
    "InvalidTypeError",
    "NextStep",
    "Observation",
    "ObservationMechanism",
    "OperationRef",
    "Postcondition",
    "Predicate",
    "Record",
    "Resolution",
    "ResolutionOrigin",
    "ResourceRef",
    "action_digest",
    "approval_state",
    "args_digest",
    "assess",
    "canonical_args",
    "check_history",
    "check_identifier",
    "check_step",
    "check_times",
    "decide",
    "idempotency_key",
    "newest_attempt",
    "overlaps",
    "recorded_json",
    "resource_ref",
    "utc_now",
    "written_by_utc_now",
]
