"""What an effect can touch: files inside a sealed root, and owned records.

A :class:`FilesystemRoot` is the sandbox agent file tools work in. Resolving a
path with :meth:`FilesystemResource.resolve` refuses anything that escapes the
root and anything inside a ledger store, so an agent's own tools can never
reach the ledger that accounts for them.
"""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path
from typing import Self

from ledger import _paths
from ledger.effects import InvalidTypeError, ResourceRef, check_identifier

__all__ = ["FilesystemResource", "FilesystemRoot", "OwnedResource"]


def _real(path: Path) -> Path:
    return Path(os.path.realpath(path))


def _within(path: Path, ancestor: Path) -> bool:
    return path == ancestor or ancestor in path.parents


def _check_path_text(path: object, field: str) -> str:
    if isinstance(path, os.PathLike):
        path = os.fspath(path)
    if not isinstance(path, str):
        raise InvalidTypeError(f"{field} must be a str or os.PathLike, not {type(path).__name__}")
    if not path:
        raise ValueError(f"{field} must not be empty")
    if "\x00" in path:
        raise ValueError(f"{field} must not contain NUL")
    return path


def _refuse_sensitive(path: Path) -> None:
    for store in _paths.sensitive_dirs():
        for candidate in {store, _real(store)}:
            if _within(path, candidate):
                raise ValueError(
                    f"{path} is sensitive: it lies inside the ledger store {candidate}, "
                    "which agent tools must never touch"
                )


@dataclasses.dataclass(frozen=True, slots=True)
class FilesystemRoot:
    """A sealed directory: the real path of the sandbox agent file tools work in."""

    path: Path

    @classmethod
    def seal(cls, path: str | os.PathLike[str]) -> Self:
        """Seal an existing directory, resolved to its real path."""
        text = _check_path_text(path, "path")
        real = _real(Path(text).expanduser().absolute())
        if not real.is_dir():
            raise ValueError(f"{text} is not an existing directory")
        _refuse_sensitive(real)
        return cls(real)


@dataclasses.dataclass(frozen=True, slots=True)
class FilesystemResource:
    """A file or directory inside a :class:`FilesystemRoot`, by its real absolute path."""

    root: FilesystemRoot
    path: Path

    @classmethod
    def resolve(
        cls, root: FilesystemRoot, path: str | os.PathLike[str], *, allow_missing: bool = False
    ) -> Self:
        """Resolve ``path`` (absolute, or relative to ``root``) inside ``root``.

        Raises ``ValueError`` when the path escapes the root (``..``, a symlink
        pointing out), when it does not exist and ``allow_missing`` is false,
        and, saying "sensitive", when it is or lies inside a ledger store.
        """
        if not isinstance(root, FilesystemRoot):
            raise InvalidTypeError(f"root must be a FilesystemRoot, not {type(root).__name__}")
        text = _check_path_text(path, "path")
        real = _real(root.path / text)
        # Sensitivity first: a path into a store is refused as such wherever it lies.
        _refuse_sensitive(real)
        if not _within(real, root.path):
            raise ValueError(f"{text} escapes the root {root.path}")
        if not allow_missing and not os.path.lexists(real):
            raise ValueError(f"{text} does not exist under {root.path}")
        return cls(root, real)

    @property
    def locator(self) -> str:
        """The ``fs`` locator: the real absolute path."""
        return str(self.path)

    def to_ref(self, role: str) -> ResourceRef:
        """Return this file's :class:`ResourceRef` with ``role``."""
        return ResourceRef("fs", self.locator, role)


def _escape(field: str) -> str:
    # '%' first, so that an escaped '/' cannot be forged from literal text.
    return field.replace("%", "%25").replace("/", "%2F")


@dataclasses.dataclass(frozen=True, slots=True)
class OwnedResource:
    """An application record (a note, a ticket) owned by a service and a tenant."""

    service: str
    owner: str
    tenant: str
    collection: str
    record_id: str
    revision: str | None = None

    def __post_init__(self) -> None:
        for name in ("service", "owner", "tenant", "collection", "record_id"):
            check_identifier(getattr(self, name), name)
        check_identifier(self.revision, "revision", optional=True)

    @property
    def locator(self) -> str:
        """The ``owned`` locator: the five identity fields, each escaped, joined by ``/``."""
        fields = (self.service, self.owner, self.tenant, self.collection, self.record_id)
        return "/".join(_escape(f) for f in fields)

    def to_ref(self, role: str) -> ResourceRef:
        """Return this record's :class:`ResourceRef` with ``role`` and its revision."""
        return ResourceRef("owned", self.locator, role, self.revision)
