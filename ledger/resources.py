"""What an effect can touch: files inside a sealed root, owned records, external resources.

A :class:`FilesystemRoot` is the sandbox agent file tools work in. Sealing one,
and resolving a path with :meth:`FilesystemResource.resolve`, refuses anything
that escapes the root and anything that is, lies inside or contains a ledger
store -- a store this process knows of, or any directory holding a ledger
database -- so an agent's own tools can never reach the ledger that accounts
for them.

An :class:`ExternalResource` is held by another system (an HTTP API, a mailbox, an
MCP server's tool) and named by a URI.
"""

from __future__ import annotations

import dataclasses
import os
import re
from pathlib import Path
from typing import Self

from ledger import _paths
from ledger.effects import MAX_LOCATOR, InvalidTypeError, ResourceRef, check_identifier

__all__ = ["ExternalResource", "FilesystemResource", "FilesystemRoot", "OwnedResource"]


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


def _sensitive(path: Path, relation: str, store: Path) -> ValueError:
    if store == path:
        relation = "is"
    return ValueError(
        f"{path} is sensitive: it {relation} the ledger store {store}, "
        "which agent tools must never touch"
    )


def _refuse_inside_store(path: Path) -> None:
    """Refuse ``path`` if it is or lies inside a store: a known one, or one on disk."""
    for store in _paths.sensitive_dirs():
        for candidate in {store, _real(store)}:
            if _within(path, candidate):
                raise _sensitive(path, "lies inside", candidate)
    found = _paths.store_around(path)
    if found is not None:
        raise _sensitive(path, "lies inside", found)


def _refuse_containing_store(path: Path, scan_limit: int) -> None:
    """Refuse ``path`` if a store lies below it: a known one, or one on disk.

    Deleting, moving or rewriting a directory reaches everything in it, so a
    directory holding a store is as sensitive as the store. Finding one on disk
    reads the tree below ``path`` (at most ``scan_limit`` entries): a file costs
    nothing, a directory one listing per subdirectory.
    """
    known = _paths.known_store_within(path)
    if known is not None:
        raise _sensitive(path, "contains", known)
    if not path.is_dir():
        return
    try:
        found = _paths.store_within(path, scan_limit)
    except _paths.ScanLimitError:
        # An unchecked tree may hold a store: refuse it rather than trust it.
        raise ValueError(
            f"{path} cannot be checked for ledger stores: it holds more than {scan_limit} "
            "entries (pass a larger scan_limit to FilesystemRoot.seal, or seal a smaller directory)"
        ) from None
    if found is not None:
        raise _sensitive(path, "contains", found)


def _check_scan_limit(value: object) -> int:
    if type(value) is not int:
        raise InvalidTypeError(f"scan_limit must be an int, not {type(value).__name__}")
    if value < 1:
        raise ValueError(f"scan_limit must be at least 1, got {value}")
    return value


@dataclasses.dataclass(frozen=True, slots=True)
class FilesystemRoot:
    """A sealed directory: the real path of the sandbox agent file tools work in.

    ``scan_limit`` bounds how many directory entries a search for stores below a
    directory may read, when sealing and when resolving a directory.
    """

    path: Path
    scan_limit: int = dataclasses.field(default=_paths.SCAN_LIMIT, compare=False, repr=False)

    @classmethod
    def seal(cls, path: str | os.PathLike[str], *, scan_limit: int = _paths.SCAN_LIMIT) -> Self:
        """Seal an existing directory, resolved to its real path.

        Raises ``ValueError`` when it is not an existing directory and, saying
        "sensitive", when it is, lies inside or contains a ledger store: the
        default store, one this process opened, or any directory holding a
        ledger database. Stores below it are searched for without following
        symlinks; a tree of more than ``scan_limit`` entries is refused unchecked.
        """
        text = _check_path_text(path, "path")
        limit = _check_scan_limit(scan_limit)
        real = _real(Path(text).expanduser().absolute())
        if not real.is_dir():
            raise ValueError(f"{text} is not an existing directory")
        _refuse_inside_store(real)
        _refuse_containing_store(real, limit)
        return cls(real, limit)


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
        and, saying "sensitive", when it is, lies inside or contains a ledger
        store (see :meth:`FilesystemRoot.seal`). Resolving a directory searches
        the tree below it, up to the root's ``scan_limit`` entries.
        """
        if not isinstance(root, FilesystemRoot):
            raise InvalidTypeError(f"root must be a FilesystemRoot, not {type(root).__name__}")
        text = _check_path_text(path, "path")
        real = _real(root.path / text)
        # A path into a store is refused as such wherever it lies.
        _refuse_inside_store(real)
        if not _within(real, root.path):
            raise ValueError(f"{text} escapes the root {root.path}")
        # Only inside the root: a path outside is refused anyway, without reading its tree.
        _refuse_containing_store(real, root.scan_limit)
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


_SCHEME = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*")


def _external_locator(uri: str) -> str:
    """The locator of ``uri``: scheme and host lower-cased, everything else as given."""
    scheme, colon, rest = uri.partition(":")
    if not colon or not _SCHEME.fullmatch(scheme):
        raise ValueError(f"uri must start with a scheme (https:, mailto:, mcp:, ...): {uri!r:.80}")
    if not rest:
        raise ValueError(f"uri has nothing after its scheme: {uri!r:.80}")
    if not rest.startswith("//"):  # no authority (mailto:, urn:): only the scheme is folded
        return f"{scheme.lower()}:{rest}"
    end = len(rest)
    for mark in "/?#":
        found = rest.find(mark, 2)
        if found != -1:
            end = min(end, found)
    authority, tail = rest[2:end], rest[end:]
    userinfo, at, host_port = authority.rpartition("@")
    if host_port.startswith("["):  # an IPv6 literal, whose colons are not a port's
        close = host_port.find("]")
        host, port = (
            (host_port, "") if close == -1 else (host_port[: close + 1], host_port[close + 1 :])
        )
    else:
        host, colon, port = host_port.partition(":")
        port = colon + port
    if not host:
        raise ValueError(f"uri has an empty host: {uri!r:.80}")
    return f"{scheme.lower()}://{userinfo}{at}{host.lower()}{port}{tail}"


@dataclasses.dataclass(frozen=True, slots=True)
class ExternalResource:
    """A resource held by another system (an HTTP API, a mailbox, an MCP server's tool).

    ``uri`` names it; its ``external`` locator is ``uri`` with the scheme and the host
    lower-cased (user information, port, path, query and fragment are kept as given,
    since other systems may tell them apart by case). ``ValueError`` for a URI without a
    scheme, with nothing after it, with ``//`` and an empty host, or with whitespace or
    control characters. ``revision`` is carried in the :class:`ResourceRef`.
    """

    uri: str
    revision: str | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.uri, str):
            raise InvalidTypeError(f"uri must be a str, not {type(self.uri).__name__}")
        if not self.uri:
            raise ValueError("uri must not be empty")
        if len(self.uri) > MAX_LOCATOR:
            raise ValueError(f"uri is longer than {MAX_LOCATOR} characters")
        if not self.uri.isprintable() or any(c.isspace() for c in self.uri):
            raise ValueError(
                f"uri must not contain whitespace or control characters: {self.uri!r:.80}"
            )
        try:
            self.uri.encode("utf-8")
        except UnicodeEncodeError:
            raise ValueError("uri must be Unicode text (no lone surrogate)") from None
        _external_locator(self.uri)
        check_identifier(self.revision, "revision", optional=True)

    @property
    def locator(self) -> str:
        """The ``external`` locator: the URI with its scheme and host lower-cased."""
        return _external_locator(self.uri)

    def to_ref(self, role: str) -> ResourceRef:
        """Return this resource's :class:`ResourceRef` with ``role`` and its revision."""
        return ResourceRef("external", self.locator, role, self.revision)
