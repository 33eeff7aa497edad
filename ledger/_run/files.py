"""Looking at files: what ``log.observe_file`` records and what ``log.effect`` sees of its targets.

A file is read as a reader of its path would read it (symlinks followed) and recorded as
its SHA-256, or as absent; what has no content to read is recorded as existing. A file
that cannot be observed at all is logged and left out by :func:`look_at`, so a verdict
then stays ``UNVERIFIED``, which is the truth.
"""

from __future__ import annotations

import hashlib
import logging
import os
import stat
from collections.abc import Iterable
from pathlib import Path
from typing import NamedTuple, Protocol, TypeAlias

from ledger._run.requests import ObservationRequest, new_effect_id
from ledger.effects import (
    Coverage,
    InvalidTypeError,
    Observation,
    ObservationMechanism,
    ResourceRef,
    check_identifier,
)
from ledger.resources import FilesystemResource

__all__ = ["FileState", "FileTarget", "Observer", "look_at", "observe_file", "read_file"]

log = logging.getLogger("ledger")

FileTarget: TypeAlias = FilesystemResource | ResourceRef


class Observer(Protocol):
    """What :func:`observe_file` needs of a log: its public ``observe``."""

    def observe(
        self,
        *,
        observation_id: str,
        resource: ResourceRef,
        mechanism: ObservationMechanism,
        coverage: Coverage,
        source_action_id: str,
        exists: bool | None = ...,
        sha256: str | None = ...,
        revision: str | None = ...,
    ) -> Observation: ...


class FileState(NamedTuple):
    """What one look at a path found: by which mechanism, whether it exists, its digest.

    A named tuple: each ``log.effect`` makes two, and a frozen dataclass costs several
    times as much to build.
    """

    mechanism: ObservationMechanism
    exists: bool
    sha256: str | None


_ABSENT = FileState(ObservationMechanism.FILESYSTEM_READ, exists=False, sha256=None)
_PRESENT = FileState(ObservationMechanism.FILESYSTEM_STAT, exists=True, sha256=None)
# O_NONBLOCK: opening a FIFO for reading would otherwise wait for a writer; it changes
# nothing for a regular file. O_NOCTTY: a terminal opened here must not become ours.
_OPEN_FLAGS = os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC
_CHUNK = 1 << 16  # below malloc's mmap threshold: no fresh pages for each read


def read_file(path: str) -> FileState:
    """Look at ``path`` as a reader would: its SHA-256, or that it is absent.

    Symlinks are followed (the content is what a reader of the path gets); a dangling
    one, or a path through a file, reads as absent. Anything there that has no content to
    read (a directory, a FIFO, a socket, a device) or that this process may not read
    exists without a digest, found by ``FILESYSTEM_STAT``. ``OSError`` when not even its
    existence can be told (a parent directory that may not be searched, a symlink loop).
    """
    try:
        fd = os.open(path, _OPEN_FLAGS)
    except (FileNotFoundError, NotADirectoryError):
        return _ABSENT
    except OSError:
        return _stat_only(path)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return _PRESENT
        # Read straight from the descriptor: hashlib.file_digest's buffered file and its
        # zeroed 256 KiB buffer cost more than the hashing of a small file.
        digest = hashlib.sha256()
        while chunk := os.read(fd, _CHUNK):
            digest.update(chunk)
    finally:
        os.close(fd)
    return FileState(ObservationMechanism.FILESYSTEM_READ, exists=True, sha256=digest.hexdigest())


def _stat_only(path: str) -> FileState:
    try:
        Path(path).stat()
    except (FileNotFoundError, NotADirectoryError):
        return _ABSENT  # removed meanwhile
    return _PRESENT


def _file_ref(resource: object) -> ResourceRef:
    if isinstance(resource, FilesystemResource):
        return resource.to_ref("target")
    if isinstance(resource, ResourceRef):
        if resource.kind != "fs":
            raise ValueError(
                f"observe_file reads files, not a resource of kind {resource.kind!r}: "
                "record what the system holding it says with observe()"
            )
        return resource
    raise InvalidTypeError(
        f"resource must be a FilesystemResource or an fs ResourceRef, not {type(resource).__name__}"
    )


def observe_file(
    log_: Observer,
    resource: FileTarget,
    *,
    source_action_id: str,
    observation_id: str | None = None,
) -> Observation:
    """Read a file and record what it holds (``EffectLog.observe_file``)."""
    ref = _file_ref(resource)
    check_identifier(source_action_id, "source_action_id")
    if observation_id is None:
        observation_id = new_effect_id()
    check_identifier(observation_id, "observation_id")
    state = read_file(ref.locator)
    return log_.observe(
        observation_id=observation_id,
        resource=ref,
        mechanism=state.mechanism,
        coverage=Coverage.COMPLETE,
        source_action_id=source_action_id,
        exists=state.exists,
        sha256=state.sha256,
    )


def look_at(targets: Iterable[ResourceRef], what: str, when: str) -> list[ObservationRequest]:
    """Read each file target: what its observation records (one unreadable is logged, left out)."""
    seen = []
    for target in targets:
        try:
            state = read_file(target.locator)
        except OSError as e:
            log.warning("%s: %s could not be observed %s: %s", what, target.locator, when, e)
            continue
        seen.append(
            ObservationRequest(new_effect_id(), target, state.mechanism, state.exists, state.sha256)
        )
    return seen
