"""The words of the ledger: every enum a record or a verdict is made of.

Each member's value is the lowercase word records, exports and the stores hold.
"""

from __future__ import annotations

import enum


class Predicate(enum.Enum):
    """What a postcondition asserts about its target."""

    EXISTS = "exists"
    ABSENT = "absent"
    SHA256 = "sha256"
    REVISION = "revision"


class ExecutionOutcome(enum.Enum):
    """How the invocation of an effect ended, as the worker saw it."""

    RUNNING = "running"
    REPORTED_SUCCESS = "reported_success"
    FAILED = "failed"
    INTERRUPTED = "interrupted"


class Impact(enum.Enum):
    """Whether the effect may have changed the world."""

    NONE = "none"
    POSSIBLE = "possible"
    CERTAIN = "certain"


class ObservationMechanism(enum.Enum):
    """How an observation was made."""

    FILESYSTEM_READ = "filesystem_read"
    FILESYSTEM_STAT = "filesystem_stat"
    RECORD_READ = "record_read"
    BACKEND_QUERY = "backend_query"


class Coverage(enum.Enum):
    """Whether an observation saw the whole resource or only part of it."""

    COMPLETE = "complete"
    PARTIAL = "partial"


class EffectKind(enum.Enum):
    """What repeating an effect after a crash could do, which decides whether it may be."""

    READ = "read"  # looks, changes nothing: may always run again
    IDEMPOTENT = "idempotent"  # the system it calls honours the idempotency key
    WRITE = "write"  # may duplicate; its postconditions can be observed
    IRREVERSIBLE = "irreversible"  # cannot be observed or undone by the worker


class NextStep(enum.Enum):
    """What a worker should do about an effect (:func:`decide`)."""

    DONE = "done"
    WAIT = "wait"
    RETRY = "retry"
    ESCALATE = "escalate"
    DENIED = "denied"  # a person refused the call: do not run it, tell the agent


class ResolutionOrigin(enum.Enum):
    """What kind of process wrote a resolution (:attr:`Resolution.origin`)."""

    PERSON = "person"  # the ``ledger resolve`` command
    WORKER = "worker"  # a program's ``EffectLog.resolve``
    RECONCILER = "reconciler"  # a program's ``EffectLog.resolve(..., allow_self=True)``


class ApprovalSource(enum.Enum):
    """Through what a person's answer to an approval request reached the store."""

    COMMAND = "command"  # the ``ledger approve`` / ``ledger deny`` commands
    PROGRAM = "program"  # a program's ``EffectLog.approve`` / ``EffectLog.deny``
    ELICITATION = "elicitation"  # an MCP client asked by ``ledger mcp-proxy``


class EffectVerdict(enum.Enum):
    """What the history says about one claimed effect."""

    PENDING = "pending"
    VERIFIED = "verified"
    UNVERIFIED = "unverified"
    CONTRADICTED = "contradicted"
    FAILED = "failed"
