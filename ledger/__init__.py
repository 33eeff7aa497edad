"""A write-ahead effect ledger for AI-agent workers.

Public modules: :mod:`ledger.effects` (record values and the pure assessment),
:mod:`ledger.resources` (what an effect can touch), :mod:`ledger.effect_log`
(the durable log of one run), :mod:`ledger.errors` and :mod:`ledger.cli` (the ``ledger``
command). What a worker needs is here too::

    import ledger

    @ledger.tool(kind=ledger.EffectKind.IDEMPOTENT)
    def charge(order: str, cents: int) -> dict: ...

    with ledger.EffectLog.resume(run_id, "/var/lib/worker/ledger") as log:
        charge("o-17", 1200)   # after a restart: replayed, retried or refused, never blind

Importing :mod:`ledger` alone loads nothing of storage: these names load on first use.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ledger._run.calls import current_call
    from ledger._run.tool import tool
    from ledger.effect_log import EffectLog, new_run_id
    from ledger.effects import EffectKind
    from ledger.errors import (
        AlreadyDone,
        EffectPersistenceError,
        NeedsResolution,
        RunHeldError,
        StepNotRunError,
        StillRunning,
    )

__version__ = "0.1.0"

__all__ = [
    "AlreadyDone",
    "EffectKind",
    "EffectLog",
    "EffectPersistenceError",
    "NeedsResolution",
    "RunHeldError",
    "StepNotRunError",
    "StillRunning",
    "current_call",
    "new_run_id",
    "tool",
]

_WHERE = {
    "tool": "ledger._run.tool",
    "current_call": "ledger._run.calls",
    "EffectLog": "ledger.effect_log",
    "new_run_id": "ledger.effect_log",
    "EffectKind": "ledger.effects",
    "AlreadyDone": "ledger.errors",
    "EffectPersistenceError": "ledger.errors",
    "NeedsResolution": "ledger.errors",
    "RunHeldError": "ledger.errors",
    "StepNotRunError": "ledger.errors",
    "StillRunning": "ledger.errors",
}


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module 'ledger' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
