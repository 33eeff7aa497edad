"""Driver errors into the caller's: one translation, given each backend's classifier.

SQLAlchemy, driver, Alembic and OS errors met while using a store become the leaves of
:class:`~ledger.errors.EffectPersistenceError`, chained to their cause. What is common
to both backends is here: unwrapping SQLAlchemy's wrapper, a pool that ran dry, Alembic's
errors, re-telling an error as part of an action. What a driver's error means (its
result code, its SQLSTATE) is the backend's: the ``classify_driver`` it gives. Anything
else (a bug, a caller's mistake) passes through as it is.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Callable, Iterator

import sqlalchemy.exc

from ledger.errors import (
    EffectPersistenceError,
    SchemaTooNewError,
    StoreUnavailableError,
    retold,
)

# Alembic's words for a revision its scripts do not hold: the store's is newer than ours.
_UNKNOWN_REVISION = "can't locate revision"


def command_error(error: BaseException) -> bool:
    """Whether ``error`` is Alembic's CommandError, without importing Alembic.

    Alembic is imported only by what migrates (a reader never does): when it is not
    imported, nothing raised can be one of its errors.
    """
    exc = sys.modules.get("alembic.util.exc")
    found = getattr(exc, "CommandError", None)
    return isinstance(found, type) and isinstance(error, found)


class Translator:
    """One backend's translation of storage failures into :mod:`ledger.errors`.

    ``driver_errors`` are the driver's exception classes; ``classify_driver`` names the
    leaf an error of the driver (or an OS error) means, or ``None`` to leave it to the
    common rules; ``describe`` tells a driver's error in one line.
    """

    def __init__(
        self,
        driver_errors: tuple[type[BaseException], ...],
        classify_driver: Callable[[BaseException], type[EffectPersistenceError] | None],
        describe: Callable[[BaseException], str],
    ) -> None:
        self._errors: tuple[type[BaseException], ...] = (
            sqlalchemy.exc.SQLAlchemyError,
            *driver_errors,
            OSError,
        )
        self._classify_driver = classify_driver
        self._describe = describe

    def is_storage_error(self, error: BaseException) -> bool:
        """Whether ``error`` is the store's trouble (not a bug, not a caller's mistake)."""
        return isinstance(error, self._errors) or command_error(error)

    def classify(self, error: BaseException) -> type[EffectPersistenceError]:
        """The leaf of :mod:`ledger.errors` that a driver, Alembic or OS ``error`` means.

        :class:`EffectPersistenceError` itself when no leaf fits (a constraint or guard
        the store enforced, a programming error inside the driver): it is still storage
        trouble.
        """
        if isinstance(error, EffectPersistenceError):
            return type(error)
        orig = getattr(error, "orig", None)
        if isinstance(orig, BaseException):  # SQLAlchemy wraps the driver's error
            return self.classify(orig)
        if isinstance(error, sqlalchemy.exc.TimeoutError):  # no pooled connection came free
            return StoreUnavailableError
        leaf = self._classify_driver(error)
        if leaf is not None:
            return leaf
        if isinstance(error, sqlalchemy.exc.DBAPIError) and error.connection_invalidated:
            return StoreUnavailableError
        if command_error(error):
            return (
                SchemaTooNewError
                if _UNKNOWN_REVISION in str(error).lower()
                else EffectPersistenceError
            )
        if isinstance(error, OSError):
            return StoreUnavailableError
        return EffectPersistenceError

    def translated(self, error: BaseException, action: str) -> EffectPersistenceError:
        """``error``, met while doing ``action``, as the leaf it means."""
        try:
            return self.classify(error)(f"{action}: {self._describe_safely(error)}")
        except Exception:  # an error object too broken to read (urllib's HTTPError built bare)
            return EffectPersistenceError(f"{action}: {type(error).__name__}")

    def _describe_safely(self, error: BaseException) -> str:
        # The message must not fail in turn: some exception classes read, in __str__ or
        # even in attribute lookups, what their constructor may not have set.
        try:
            return self._describe(error)
        except Exception:  # any failure here would hide the storage error
            return f"{type(error).__name__}: {error.args!r}"

    @contextlib.contextmanager
    def storage_errors(self, action: str) -> Iterator[None]:
        """Translate every storage failure inside the block into EffectPersistenceError."""
        try:
            yield
        except EffectPersistenceError:
            raise
        except Exception as e:
            if not self.is_storage_error(e):
                raise
            raise self.translated(e, action) from e

    def translate(self, action: str, error: BaseException) -> BaseException:
        """The error a caller sees for ``error`` met doing ``action``; a new one per caller."""
        if isinstance(error, EffectPersistenceError):
            return retold(error, action)  # the same kind of trouble
        if not self.is_storage_error(error):
            return error  # not the store's trouble: a bug, raised as it is
        translated = self.translated(error, action)
        translated.__cause__ = error
        return translated
