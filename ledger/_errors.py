"""The library's errors, under the private name they were first imported by.

They live in :mod:`ledger.errors`, where the tree is drawn; this module only re-exports
them so that code importing ``ledger._errors`` keeps working.
"""

from __future__ import annotations

from ledger.errors import (
    EffectPersistenceError,
    LogDegradedError,
    RunExistsError,
    RunHeldError,
    SchemaTooNewError,
    StoreCorruptError,
    StoreFileRefusedError,
    StoreTamperedError,
    StoreUnavailableError,
)

__all__ = [
    "EffectPersistenceError",
    "LogDegradedError",
    "RunExistsError",
    "RunHeldError",
    "SchemaTooNewError",
    "StoreCorruptError",
    "StoreFileRefusedError",
    "StoreTamperedError",
    "StoreUnavailableError",
]
