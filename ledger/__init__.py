"""A write-ahead effect ledger for AI-agent workers.

The public API is at the package top (``__all__``): the log (:class:`EffectLog`), the tool
decorator and the call in progress (:func:`tool`, :func:`current_call`), the record values
and their assessment (from :mod:`ledger.effects`), the resources an effect can touch
(from :mod:`ledger.resources`) and every error (from :mod:`ledger.errors`)::

    import ledger

    @ledger.tool(kind=ledger.EffectKind.IDEMPOTENT)
    def charge(order: str, cents: int) -> dict: ...

    with ledger.EffectLog.resume(run_id, "/var/lib/worker/ledger") as log:
        charge("o-17", 1200)   # after a restart: replayed, retried or refused, never blind

The modules those names come from stay public and import the same: :mod:`ledger.effects`,
:mod:`ledger.resources`, :mod:`ledger.effect_log`, :mod:`ledger.errors` and
:mod:`ledger.cli` (the ``ledger`` command). :mod:`ledger.storage`, :mod:`ledger.sqlite` and
:mod:`ledger.postgresql` are the backends' internals: open a log with :class:`EffectLog`.

Importing :mod:`ledger` alone loads nothing of storage: these names load on first use.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ledger._run.calls import AsyncEffectCall, EffectCall, EffectScope, current_call
    from ledger._run.tool import tool
    from ledger.effect_log import (
        ClaimRequest,
        EffectLog,
        ObservationRequest,
        OutcomeRequest,
        RecordingOptions,
        effects_dir,
        new_effect_id,
        new_run_id,
    )
    from ledger.effects import (
        ApprovalDecision,
        ApprovalPolicy,
        ApprovalRequest,
        ApprovalSource,
        ApprovalView,
        Assessment,
        Coverage,
        Decision,
        EffectClaim,
        EffectKind,
        EffectOutcome,
        EffectVerdict,
        ExecutionOutcome,
        History,
        Impact,
        InvalidTypeError,
        NextStep,
        Observation,
        ObservationMechanism,
        OperationRef,
        Postcondition,
        Predicate,
        Resolution,
        ResolutionOrigin,
        ResourceRef,
        action_digest,
        args_digest,
        assess,
        decide,
        idempotency_key,
        resource_ref,
    )
    from ledger.errors import (
        AlreadyDone,
        ApprovalDenied,
        ApprovalPending,
        EffectPersistenceError,
        LogDegradedError,
        NeedsResolution,
        RunExistsError,
        RunHeldError,
        SchemaTooNewError,
        StepNotRunError,
        StillRunning,
        StoreCorruptError,
        StoreFileRefusedError,
        StoreSchemaOldError,
        StoreTamperedError,
        StoreUnavailableError,
    )
    from ledger.resources import (
        ExternalResource,
        FilesystemResource,
        FilesystemRoot,
        OwnedResource,
    )

__version__ = "0.1.0"

# What EffectLog.effect returns (EffectScope) and what entering it gives (EffectCall, or
# AsyncEffectCall with ``async with``): defined beside ``current_call``.
_CALL_TYPES = ("AsyncEffectCall", "EffectCall", "EffectScope")
_EFFECT_LOG = (
    "ClaimRequest",
    "EffectLog",
    "ObservationRequest",
    "OutcomeRequest",
    "RecordingOptions",
    "effects_dir",
    "new_effect_id",
    "new_run_id",
)
_EFFECTS = (
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
    "Resolution",
    "ResolutionOrigin",
    "ResourceRef",
    "action_digest",
    "args_digest",
    "assess",
    "decide",
    "idempotency_key",
    "resource_ref",
)
_ERRORS = (
    "AlreadyDone",
    "ApprovalDenied",
    "ApprovalPending",
    "EffectPersistenceError",
    "LogDegradedError",
    "NeedsResolution",
    "RunExistsError",
    "RunHeldError",
    "SchemaTooNewError",
    "StepNotRunError",
    "StillRunning",
    "StoreCorruptError",
    "StoreFileRefusedError",
    "StoreSchemaOldError",
    "StoreTamperedError",
    "StoreUnavailableError",
)
_RESOURCES = ("ExternalResource", "FilesystemResource", "FilesystemRoot", "OwnedResource")

# Where each public name is defined, so that it loads on first use.
_WHERE = {
    "tool": "ledger._run.tool",
    "current_call": "ledger._run.calls",
    **dict.fromkeys(_EFFECT_LOG, "ledger.effect_log"),
    **dict.fromkeys(_EFFECTS, "ledger.effects"),
    **dict.fromkeys(_ERRORS, "ledger.errors"),
    **dict.fromkeys(_RESOURCES, "ledger.resources"),
}
_WHERE.update(dict.fromkeys(_CALL_TYPES, "ledger._run.calls"))

__all__ = [
    "AlreadyDone",
    "ApprovalDecision",
    "ApprovalDenied",
    "ApprovalPending",
    "ApprovalPolicy",
    "ApprovalRequest",
    "ApprovalSource",
    "ApprovalView",
    "Assessment",
    "AsyncEffectCall",
    "ClaimRequest",
    "Coverage",
    "Decision",
    "EffectCall",
    "EffectClaim",
    "EffectKind",
    "EffectLog",
    "EffectOutcome",
    "EffectPersistenceError",
    "EffectScope",
    "EffectVerdict",
    "ExecutionOutcome",
    "ExternalResource",
    "FilesystemResource",
    "FilesystemRoot",
    "History",
    "Impact",
    "InvalidTypeError",
    "LogDegradedError",
    "NeedsResolution",
    "NextStep",
    "Observation",
    "ObservationMechanism",
    "ObservationRequest",
    "OperationRef",
    "OutcomeRequest",
    "OwnedResource",
    "Postcondition",
    "Predicate",
    "RecordingOptions",
    "Resolution",
    "ResolutionOrigin",
    "ResourceRef",
    "RunExistsError",
    "RunHeldError",
    "SchemaTooNewError",
    "StepNotRunError",
    "StillRunning",
    "StoreCorruptError",
    "StoreFileRefusedError",
    "StoreSchemaOldError",
    "StoreTamperedError",
    "StoreUnavailableError",
    "action_digest",
    "args_digest",
    "assess",
    "current_call",
    "decide",
    "effects_dir",
    "idempotency_key",
    "new_effect_id",
    "new_run_id",
    "resource_ref",
    "tool",
]


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module 'ledger' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
