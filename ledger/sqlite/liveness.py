"""Which runs a live process holds: locks the kernel drops when their process dies.

A pid, host name and start time can only guess whether a run's writer lives: a process
in its own pid namespace (a container, ``unshare --pid``) has pids this one cannot see,
and a worker that has loaded its run but not written yet has recorded nothing. So every
log holds a POSIX record lock on its run, one byte of ``<store>/ledger.lock``:

- a log takes its run SHARED (readers and writers of one run never stop each other);
- recovery takes it EXCLUSIVE without waiting, so it can only succeed once every
  process that had the run loaded has closed it or died;
- recovery by the ``ledger`` command also takes a second byte of the run exclusive, so
  that a second recoverer can tell "someone is recovering it" from "a worker uses it";
- one byte above them all orders the store's writing processes (ledger.sqlite.turn).

One file for every run, not one per run: per-run files would litter the store and could
never be removed safely. The offset of a run is its first 15 hex digits (60 bits).

POSIX locks belong to a process, not to a descriptor, and closing *any* descriptor of the
file drops *all* of the process's locks on it. Hence one descriptor per process and store,
opened here and nowhere else, with a count per run of the shared and exclusive holds the
process's logs have (the kernel sees one lock per byte: exclusive while any exclusive hold
remains, else shared). Locks are not inherited across ``fork``: the child starts with an
empty registry, and the leases its parent's logs carried over are void in it.
"""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import fcntl
import os
import stat
import struct
import threading
from collections.abc import Iterator
from pathlib import Path

from ledger import _lifetime
from ledger.errors import StoreFileRefusedError
from ledger.sqlite.errors import classify
from ledger.sqlite.trust import check_directory
from ledger.storage import Mode, RecoveryHold

LOCK_NAME = "ledger.lock"

_RUN_SPAN = 1 << 60  # run bytes live below it, recovery bytes the same distance above
TURN_OFFSET = 1 << 62  # the writers' queue (ledger.sqlite.turn), above both

# File systems whose record locks are not those of the local kernel: a lock there may
# be granted to two hosts, or lost when a server restarts, so it proves nothing.
NETWORK_FS = frozenset(
    {
        "9p",
        "afs",
        "ceph",
        "cifs",
        "coda",
        "fuse.sshfs",
        "glusterfs",
        "fuse.glusterfs",
        "lustre",
        "ncpfs",
        "nfs",
        "nfs4",
        "smb3",
        "smbfs",
    }
)

_MOUNTINFO = Path("/proc/self/mountinfo")


def _offset(run_id: str) -> int:
    # Run ids are 32 hex digits (checked by the log); 15 of them keep the byte under 2**60.
    return int(run_id[:15], 16)


@dataclasses.dataclass(slots=True)
class _Counts:
    shared: int = 0
    exclusive: int = 0


class _LockFile:
    """This process's one descriptor of a store's lock file, and what it holds there."""

    def __init__(self, path: Path, fd: int) -> None:
        self.path = path
        self.fd = fd
        self.bytes: dict[int, _Counts] = {}
        self.pins = 0  # holders of the descriptor itself (ledger.sqlite.turn)


_registry_lock = threading.Lock()
# Keyed by the store directory's device and inode, not its path: two paths to one store
# (a symlinked parent, a bind mount) must share one descriptor, or closing one would drop
# the locks taken through the other.
_registry: dict[tuple[int, int], _LockFile] = {}
_local: set[Path] = set()  # store directories found on a local file system
_generation = 0  # bumped in a forked child: leases made before the fork are void there


class Lease:
    """One hold on a run byte: released by :meth:`release` (idempotent), never twice."""

    __slots__ = ("_generation", "_key", "_mode", "_offset", "_released")

    def __init__(self, key: tuple[int, int], offset: int, mode: Mode) -> None:
        self._key = key
        self._offset = offset
        self._mode = mode
        self._generation = _generation
        self._released = False

    @property
    def held(self) -> bool:
        """Whether this process still holds the run through this lease (not after a fork)."""
        return not self._released and self._generation == _generation

    def release(self) -> None:
        """Give the hold back; the kernel's lock goes once no hold of this process remains."""
        with _registry_lock:
            if self._released:
                return
            self._released = True
            if self._generation != _generation:
                return  # made before a fork: the lock is the parent's, not this process's
            _drop(self._key, self._offset, self._mode)


def hold(directory: Path, run_id: str, mode: Mode) -> Lease | None:
    """Hold ``run_id`` of the store at ``directory`` in ``mode`` without waiting.

    Returns None when another process holds it in a conflicting mode. The store
    directory must exist; the lock file is created (0600) if missing. Raises
    :class:`EffectPersistenceError` when the lock file cannot be trusted or locks on its
    file system prove nothing.
    """
    return _hold(directory.absolute(), _offset(run_id), mode)


def hold_recovery(directory: Path, run_id: str) -> Lease | None:
    """Mark ``run_id`` as being recovered by this process; None if another process is."""
    return _hold(directory.absolute(), _RUN_SPAN + _offset(run_id), Mode.EXCLUSIVE)


Claim = RecoveryHold  # what recovering() yields


@contextlib.contextmanager
def recovering(directory: Path, run_id: str) -> Iterator[Claim]:
    """Hold ``run_id`` for recovery (both of its bytes, exclusive) while the block runs.

    Yields :attr:`Claim.TAKEN` only if this process got both; otherwise says who has it,
    and holds nothing.
    """
    marker = hold_recovery(directory, run_id)
    if marker is None:
        yield Claim.RECOVERING
        return
    try:
        lease = hold(directory, run_id, Mode.EXCLUSIVE)
        if lease is None:
            yield Claim.IN_USE
            return
        try:
            yield Claim.TAKEN
        finally:
            lease.release()
    finally:
        marker.release()


def held(directory: Path, run_id: str) -> bool:
    """Whether a live process holds ``run_id`` (a log has it loaded, or recovery has it).

    A question, not a hold: the lock file is opened read-only and never created, and
    the kernel is asked (``F_OFD_GETLK``) whether a lock would conflict, so that a worker
    starting at that moment never finds its run taken by a reader. No lock file: no
    process has ever held a run of the store.
    """
    directory = directory.absolute()
    offset = _offset(run_id)
    with _registry_lock:
        lock_file = _registry.get(_key(directory))
        if lock_file is not None:
            # This process's own descriptor: closing another one of the file would drop
            # every lock the process holds on it.
            return _conflicts(lock_file.fd, lock_file.path, offset)
        path = directory / LOCK_NAME
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
        except FileNotFoundError:
            return False
        except OSError as e:
            if e.errno == errno.ELOOP:
                raise _refuse(path, "is a symlink") from e
            raise classify(e)(f"cannot open the lock file {path}: {e.strerror or e}") from e
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                raise _refuse(path, "is not a regular file")
            return _conflicts(fd, path, offset)
        finally:
            os.close(fd)


_FLOCK = "hhqqi4x"  # struct flock: l_type, l_whence, l_start, l_len, l_pid


def _conflicts(fd: int, path: Path, offset: int) -> bool:
    query = struct.pack(_FLOCK, fcntl.F_WRLCK, os.SEEK_SET, offset, 1, 0)
    try:
        answer = fcntl.fcntl(fd, fcntl.F_OFD_GETLK, query)
    except OSError as e:
        raise classify(e)(f"cannot read the locks of {path}: {e.strerror or e}") from e
    found: int = struct.unpack(_FLOCK, answer)[0]
    return found != fcntl.F_UNLCK


@dataclasses.dataclass(frozen=True, slots=True)
class Pin:
    """The process's descriptor of a store's lock file, kept open until :func:`unpin`."""

    key: tuple[int, int]
    fd: int
    generation: int


def pin(directory: Path) -> Pin:
    """Keep this process's descriptor of the store's lock file open, for locks of its own.

    The descriptor is the one every lease of the process uses: closing another would
    drop all of them (see the module's doc).
    """
    directory = directory.absolute()
    key = _key(directory)
    with _registry_lock:
        lock_file = _registry.get(key)
        if lock_file is None:
            lock_file = _registry[key] = _open(directory)
        lock_file.pins += 1
        return Pin(key, lock_file.fd, _generation)


def unpin(pinned: Pin) -> None:
    """Undo :func:`pin` (the caller has released its locks); void after a fork."""
    with _registry_lock:
        if pinned.generation != _generation:
            return
        lock_file = _registry[pinned.key]
        lock_file.pins -= 1
        _close_idle(pinned.key, lock_file)


def _key(directory: Path) -> tuple[int, int]:
    try:
        st = directory.stat()
    except OSError as e:
        raise classify(e)(f"cannot lock runs of the store {directory}: {e.strerror or e}") from e
    return st.st_dev, st.st_ino


def _hold(directory: Path, offset: int, mode: Mode) -> Lease | None:
    key = _key(directory)
    with _registry_lock:
        lock_file = _registry.get(key)
        if lock_file is None:
            lock_file = _registry[key] = _open(directory)
        counts = lock_file.bytes.setdefault(offset, _Counts())
        try:
            if mode is Mode.SHARED:
                # Held already, in either mode: the kernel's lock covers this hold too.
                held = counts.shared or counts.exclusive
                if not held and not _lock(lock_file, offset, fcntl.LOCK_SH | fcntl.LOCK_NB):
                    return None
                counts.shared += 1
            else:
                # From shared, the kernel converts in place: on a conflict it keeps the
                # shared lock as it was.
                if not counts.exclusive and not _lock(
                    lock_file, offset, fcntl.LOCK_EX | fcntl.LOCK_NB
                ):
                    return None
                counts.exclusive += 1
        finally:
            _forget_idle(key, lock_file, offset)
        return Lease(key, offset, mode)


def _drop(key: tuple[int, int], offset: int, mode: Mode) -> None:
    """Undo one hold; registry lock held."""
    lock_file = _registry[key]
    counts = lock_file.bytes[offset]
    if mode is Mode.SHARED:
        counts.shared -= 1
    else:
        counts.exclusive -= 1
    if not counts.exclusive:
        # Unlocking or downgrading never waits and cannot conflict.
        _lock(lock_file, offset, fcntl.LOCK_SH if counts.shared else fcntl.LOCK_UN)
    _forget_idle(key, lock_file, offset)


def _forget_idle(key: tuple[int, int], lock_file: _LockFile, offset: int) -> None:
    counts = lock_file.bytes[offset]
    if not counts.shared and not counts.exclusive:
        del lock_file.bytes[offset]
    _close_idle(key, lock_file)


def _close_idle(key: tuple[int, int], lock_file: _LockFile) -> None:
    if not lock_file.bytes and not lock_file.pins:
        # Nothing held: closing the descriptor drops nothing, and a store removed later
        # is not kept open.
        del _registry[key]
        os.close(lock_file.fd)


def _lock(lock_file: _LockFile, offset: int, command: int) -> bool:
    try:
        fcntl.lockf(lock_file.fd, command, 1, offset, os.SEEK_SET)
    except OSError as e:
        if e.errno in (errno.EAGAIN, errno.EACCES):
            return False  # another process holds it
        raise classify(e)(f"cannot lock {lock_file.path}: {e.strerror or e}") from e
    return True


# --------------------------------------------------------------------------- the file


def _refuse(path: Path, problem: str) -> StoreFileRefusedError:
    return StoreFileRefusedError(
        f"lock file {path} {problem}; remove it while no worker uses the store "
        "(the library creates it again)"
    )


def _open(directory: Path) -> _LockFile:
    """Open (creating it 0600 if missing) and check the store's lock file."""
    path = directory / LOCK_NAME
    if directory not in _local:
        refuse_network_fs(directory)
        _local.add(directory)
    try:
        # Refused before anything is created in a directory that is not this user's.
        check_directory(directory, writer=True)
        owner = os.geteuid()
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    except OSError as e:
        if e.errno == errno.ELOOP:
            raise _refuse(path, "is a symlink") from e
        raise classify(e)(f"cannot open the lock file {path}: {e.strerror or e}") from e
    try:
        _check(path, os.fstat(fd), owner)
    except BaseException:
        os.close(fd)
        raise
    return _LockFile(path, fd)


def _check(path: Path, st: os.stat_result, owner: int) -> None:
    # Another user able to replace or write the file could drop or fake every lock in it.
    if not stat.S_ISREG(st.st_mode):
        raise _refuse(path, "is not a regular file")
    if st.st_nlink != 1:
        raise _refuse(path, f"has {st.st_nlink} hard links where a store file has one")
    if st.st_uid != owner:
        raise _refuse(path, f"is owned by uid {st.st_uid}, not by the store's owner (uid {owner})")
    if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        raise _refuse(path, f"is writable by others (mode {stat.S_IMODE(st.st_mode):04o})")


def file_system(directory: Path, mountinfo: str | None = None) -> str | None:
    """The type of the file system ``directory`` is on, from ``/proc/self/mountinfo``.

    None when it cannot be told (no ``/proc``). ``mountinfo`` is the table's text, read
    from ``/proc`` when not given.
    """
    if mountinfo is None:
        try:
            mountinfo = _MOUNTINFO.read_text()
        except OSError:
            return None
    target = os.path.realpath(directory)
    best, kind = -1, None
    for line in mountinfo.splitlines():
        fields = line.split()
        if " - " not in line or len(fields) < 5:
            continue
        # Spaces and other odd characters in mount points are written as octal escapes.
        point = _unescape(fields[4])
        after = line.split(" - ", 1)[1].split()
        inside = target == point or target.startswith(point.rstrip("/") + "/")
        # Later lines are mounted over earlier ones at the same point.
        if inside and after and len(point) >= best:
            best, kind = len(point), after[0]
    return kind


def _unescape(text: str) -> str:
    out, i = [], 0
    while i < len(text):
        if text[i] == "\\" and i + 3 < len(text) and text[i + 1 : i + 4].isdigit():
            out.append(chr(int(text[i + 1 : i + 4], 8)))
            i += 4
        else:
            out.append(text[i])
            i += 1
    return "".join(out)


def refuse_network_fs(directory: Path, mountinfo: str | None = None) -> None:
    """Refuse a store on a network file system, where locks do not prove a process lives."""
    kind = file_system(directory, mountinfo)
    if kind is not None and (kind in NETWORK_FS or kind.split(".")[0] in NETWORK_FS):
        raise StoreFileRefusedError(
            f"store directory {directory} is on a {kind} file system, whose locks cannot "
            "tell whether a worker lives (nor does SQLite's WAL work there): "
            "keep the store on a local disk"
        )


# --------------------------------------------------------------------------- fork


def _after_fork_in_child() -> None:
    # The child holds none of its parent's locks. Its copies of the descriptors are
    # closed (that drops only the child's own locks: none), and every lease made before
    # the fork is void.
    global _registry_lock, _generation  # noqa: PLW0603 - the lock may have been held at fork
    _registry_lock = threading.Lock()
    _generation += 1
    for lock_file in _registry.values():
        with contextlib.suppress(OSError):
            os.close(lock_file.fd)
    _registry.clear()


_lifetime.at_fork(_after_fork_in_child)
