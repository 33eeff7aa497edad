"""The library's errors.

Two kinds of trouble, two roots::

    ValueError / TypeError          the caller's mistake, raised before anything is written
    EffectPersistenceError          the store could not do what was asked
    ├── RunExistsError              a new log's run is already in the store
    ├── RunHeldError                another process holds the run (it is recovering it,
    │                               or, for recovery, a live process has it loaded)
    ├── LogDegradedError            a claim or recovery on a log that lost a record
    ├── StoreUnavailableError       the store cannot be reached now: missing, locked too
    │                               long, disk full, an I/O error
    ├── StoreFileRefusedError       a file or directory fails the trust checks: a symlink,
    │                               shared write bits, another owner, extra hard links, a
    │                               network file system, pragmas that do not take
    ├── StoreCorruptError           not a database, a damaged one, or a record or hash
    │                               chain that does not validate
    ├── StoreTamperedError          the schema is not the library's, or a row it was
    │                               given did not land
    ├── SchemaTooNewError           the store is at a schema revision this library does
    │                               not know: a newer version wrote it
    └── StoreSchemaOldError         a read met a store at a revision older than this
                                    library reads; its next write upgrades it

A third kind is not trouble but an answer: a call of a step that already has attempts
(``log.effect(..., step=...)``, a decorated tool, after a restart), or one gated by an
approval, that must not run now::

    StepNotRunError                 the call's step was not run now; nothing was written
    ├── AlreadyDone                 it is done, and there is no recorded result to return
    ├── StillRunning                its earlier attempt has no outcome: it may be running
    ├── NeedsResolution             it may have landed: a person must check (ledger resolve)
    ├── ApprovalPending             it needs a person's yes, not given yet (ledger approve)
    └── ApprovalDenied              a person said no: it must not run

Every SQLAlchemy, sqlite3, Alembic and OS error met while touching a store is
translated into one of these at one boundary, chained with ``from`` so the cause stays
visible. A few failures fit no leaf (an interrupted transaction, a broken install) and
are raised as :class:`EffectPersistenceError` itself: ``except EffectPersistenceError``
catches every kind of storage trouble.
"""

from __future__ import annotations

__all__ = [
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
]


class EffectPersistenceError(Exception):
    """The store could not persist or load records; nothing half-done is believed."""


class RunExistsError(EffectPersistenceError):
    """A new :class:`~ledger.effect_log.EffectLog` met its run already in the store.

    Nothing was written. ``EffectLog.load`` is how a run is continued.
    """


class RunHeldError(EffectPersistenceError):
    """Another process holds the run, so this one must not write to it now.

    Another process is recovering the run (or was, when this log loaded it: what was
    loaded may be stale), or recovery met a live process that has the run loaded, or
    another writer appended to the run meanwhile. Nothing was written; load the run again
    once the other process is done.
    """


class LogDegradedError(EffectPersistenceError):
    """A claim or recovery on a degraded log: an earlier record was not persisted.

    The log writes nothing more, so that the durable rows stay a gap-free prefix; a worker
    must not start an effect it could not account for.
    """


class StoreUnavailableError(EffectPersistenceError):
    """The store cannot be used now: it is missing, locked too long, full, or failing I/O.

    The store itself is not known to be bad; the same call may succeed later.
    """


class StoreFileRefusedError(EffectPersistenceError):
    """A file or directory of the store fails the checks made before SQLite may open it.

    A symlink, a file that is not regular or has more than one hard link, group or other
    write bits, another owner, a store on a network file system, or a connection where
    ``journal_mode=wal``, ``synchronous=FULL`` or ``foreign_keys=ON`` did not take. The
    message says what is wrong and how to put it right.
    """


class StoreCorruptError(EffectPersistenceError):
    """The database is not one, is damaged, or holds records that do not validate.

    A record that does not validate or a broken hash chain names the first record
    affected; ``ledger verify`` lists everything it finds.
    """


class StoreTamperedError(EffectPersistenceError):
    """The store does not behave as its schema promises: it was tampered with.

    A row that an insert did not write (a trigger that is not the library's dropped it),
    or a schema holding objects the library did not install. A log that meets it
    degrades: nothing more is written to a store that may be lying.
    """


class SchemaTooNewError(EffectPersistenceError):
    """The store is at a schema revision this library does not ship.

    A newer version of the library wrote it; nothing was changed. Use that version.
    """


class StoreSchemaOldError(EffectPersistenceError):
    """A read met a store at a schema revision older than this library reads.

    The next write to it by this version upgrades it; nothing was changed.
    """


def retold(error: EffectPersistenceError, action: str | None = None) -> EffectPersistenceError:
    """The same kind of storage trouble, told as part of ``action``: a new error per caller.

    The one way the library passes a storage error on: the leaf is kept (a caller's
    ``except StoreCorruptError`` still catches it), the message says what was being done
    (as it was, without ``action``), and the original is the cause. Each caller that
    shares one failed write gets an error of its own, so that none sees another's
    traceback grow.
    """
    told = type(error)(str(error) if action is None else f"{action}: {error}")
    told.__cause__ = error
    return told


class StepNotRunError(Exception):
    """A call of a step that has attempts was not run, as its decision says; nothing was written.

    ``effect_id`` is the attempt the decision rests on (the one a person resolves),
    ``decision`` the :class:`~ledger.effects.Decision` itself, ``run_id`` its run.
    """

    def __init__(self, message: str, *, run_id: str, effect_id: str, decision: object) -> None:
        super().__init__(message)
        self.run_id = run_id
        self.effect_id = effect_id
        self.decision = decision


class AlreadyDone(StepNotRunError):  # noqa: N818 - the contract's name
    """The step is done and no result of it was recorded: there is nothing true to return.

    A decorated tool raises it instead of inventing a value; the worker goes on as if the
    call had returned (its effect happened), or reads what it needs from the world.
    """


class StillRunning(StepNotRunError):  # noqa: N818 - the contract's name
    """The step's newest attempt has no terminal outcome: a live process may be running it."""


class NeedsResolution(StepNotRunError):  # noqa: N818 - the contract's name
    """The step's call may have landed, or a call's scope overlaps one that may have.

    Running it again could repeat it. A person checks the world and records what they
    found with ``ledger resolve RUN EFFECT --applied|--not-applied --by NAME`` (the
    message gives the command); the next run of the same code then acts on that.
    """


class ApprovalPending(StepNotRunError):  # noqa: N818 - the contract's name
    """The call needs a person's yes, and has none yet: it was not claimed, nor run.

    Its request is recorded (the first time; the same call again raises this again
    without a second request). ``approval_id`` is what a person approves with ``ledger
    approve RUN APPROVAL --by NAME`` (the message gives the command), ``action_digest``
    the call's :func:`~ledger.effects.action_digest`, ``expires_at`` when the request
    lapses (store clock; a call made after that asks again). ``decision`` says ``WAIT``.
    """

    def __init__(
        self,
        message: str,
        *,
        run_id: str,
        effect_id: str,
        decision: object,
        approval_id: str,
        action_digest: str,
        expires_at: str,
    ) -> None:
        super().__init__(message, run_id=run_id, effect_id=effect_id, decision=decision)
        self.approval_id = approval_id
        self.action_digest = action_digest
        self.expires_at = expires_at


class ApprovalDenied(StepNotRunError):  # noqa: N818 - the contract's name
    """A person refused the call: it was not claimed, nor run, and must not be.

    ``by`` and ``note`` are the person's answer; ``decision`` says ``DENIED``. Tell the
    agent; the same call asks no more.
    """

    def __init__(
        self,
        message: str,
        *,
        run_id: str,
        effect_id: str,
        decision: object,
        approval_id: str,
        by: str,
        note: str,
    ) -> None:
        super().__init__(message, run_id=run_id, effect_id=effect_id, decision=decision)
        self.approval_id = approval_id
        self.by = by
        self.note = note


# Documented (and long imported) as ledger.effect_log.EffectPersistenceError: shown there.
EffectPersistenceError.__module__ = "ledger.effect_log"
