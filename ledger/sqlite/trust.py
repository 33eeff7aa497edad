"""Whether a store's files may be handed to SQLite, and private copies of those that may not.

SQLite trusts the files beside a database: it replays a ``-wal`` into the database
at the next checkpoint, and maps, rewrites and (as root) chowns a ``-shm``. Whoever
can plant or link those files can forge history or make a privileged reader change a
file outside the store. So every path, readers included, checks the directory and
each file before SQLite opens any of them:

- the directory is a real directory (not a symlink), writable by its owner only;
- each file is a regular file (not a symlink, fifo or directory) with one link and
  no group or other write bit;
- a writer owns all of them; a reader needs every file owned by the directory's owner;
- no directory above the store lets a user other than this one and root replace the
  next one down (it is theirs, or writable by group or others without the sticky bit
  protecting an entry of ours or root's): whoever can, can swap the store's path
  between the check and SQLite opening it, which SQLite does by path again. A writer
  refuses such a path; a reader reads a private copy of it instead.

The path is followed one component at a time from ``/`` on descriptors (a symlink
above the store is read and followed by hand, its own directory checked), so what is
checked is what was reached, and the copy reads the files beneath that very directory.
A reader who does not own the store, or reaches it through such a directory, never lets
SQLite open its files: the database and its ``-wal`` are copied (opened ``O_NOFOLLOW``
beneath the directory checked, checked again on the open descriptor) into a private
directory, and SQLite reads the copy.
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import errno
import os
import shutil
import stat
import tempfile
from collections.abc import Iterator
from pathlib import Path

from ledger.errors import StoreFileRefusedError, StoreUnavailableError

# The files of a store beside its database, by suffix. SQLite opens all of them.
SIDECARS = ("-wal", "-shm")
_WAL_HEADER = 32
_COPY_ATTEMPTS = 8
_UNSAFE_BITS = stat.S_IWGRP | stat.S_IWOTH
# Never through a link, never blocking on a fifo, never becoming a controlling terminal.
_READ = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC | os.O_NOCTTY
_CREATE = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
# A directory held only to walk beneath it: O_PATH needs no read permission on it (a
# 0711 home directory is fine) and opens nothing but the name.
_WALK = getattr(os, "O_PATH", os.O_RDONLY) | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_MAX_LINKS = 40  # the kernel's own limit on symlinks in one path
_TRUSTED_ROOT = 0


def sidecar(db: Path, suffix: str) -> Path:
    """The file ``db`` + ``suffix`` (``-wal``, ``-shm``) beside the database."""
    return db.with_name(db.name + suffix)


def store_files(db: Path) -> tuple[Path, ...]:
    """Every file of a store that is checked: the database first, then its sidecars."""
    return (db, *(sidecar(db, s) for s in SIDECARS))


def _name(path: Path) -> str:
    del path  # the -wal and -shm are part of the database: one name for all three
    return "database file"


@dataclasses.dataclass(frozen=True, slots=True)
class Exposure:
    """A directory above a store whose entry on the store's path others may replace."""

    directory: Path
    reason: str  # why others may: "owned by uid 65534", "writable by group or others ..."
    fix: str  # what its owner may do instead of moving the store ("" when nothing)

    def refusal(self, store: Path) -> str:
        """The writer's one line: what is wrong and what to do."""
        return (
            f"store directory {store} lies under {self.directory}, which is {self.reason}, "
            "so another user could swap the store's path while it is opened; "
            "move the store under directories only you and root may write"
            + (f", or run: {self.fix}" if self.fix else "")
        )


def _exposure(
    parent: Path, parent_st: os.stat_result, name: str, entry: os.stat_result
) -> Exposure | None:
    """Whether a user other than this one and root may rename or replace ``name`` in ``parent``."""
    trusted = (_TRUSTED_ROOT, os.geteuid())
    if parent_st.st_uid not in trusted:
        return Exposure(parent, f"owned by uid {parent_st.st_uid}", "")
    if not parent_st.st_mode & _UNSAFE_BITS:
        return None
    mode = f"mode {stat.S_IMODE(parent_st.st_mode):04o}"
    if not parent_st.st_mode & stat.S_ISVTX:
        return Exposure(parent, f"writable by group or others ({mode})", f"chmod go-w {parent}")
    # Sticky (/tmp): only an entry's owner, or the directory's, may rename or replace it.
    if entry.st_uid in trusted:
        return None
    return Exposure(parent, f"shared ({mode}) and {name} in it is owned by uid {entry.st_uid}", "")


def _same(a: os.stat_result, b: os.stat_result) -> bool:
    return (a.st_dev, a.st_ino) == (b.st_dev, b.st_ino)


def _changed(path: Path) -> StoreUnavailableError:
    return StoreUnavailableError(f"{path} changed while it was checked; try again")


def _descend(fd: int, name: str, entry: os.stat_result, path: Path) -> int:
    """Open the directory ``name`` beneath ``fd`` (which is then closed), as ``entry`` saw it."""
    if stat.S_ISLNK(entry.st_mode) or not stat.S_ISDIR(entry.st_mode):
        raise NotADirectoryError(errno.ENOTDIR, os.strerror(errno.ENOTDIR), str(path))
    try:
        child = os.open(name, _WALK, dir_fd=fd)
    except OSError as e:
        if e.errno in (errno.ELOOP, errno.ENOTDIR):  # replaced since its stat
            raise _changed(path) from e
        raise
    if not _same(os.fstat(child), entry):
        os.close(child)
        raise _changed(path)
    os.close(fd)
    return child


def _link_target(fd: int, name: str, path: Path, links: int) -> str:
    if links > _MAX_LINKS:
        raise OSError(errno.ELOOP, os.strerror(errno.ELOOP), str(path))
    return os.readlink(name, dir_fd=fd)


def _walk(parts: collections.deque[str]) -> tuple[int, Path, Exposure | None]:
    """Open the directory that ``parts`` name from ``/``, one component at a time.

    Each component is opened beneath the previous one's descriptor and never through a
    link: a symlink on the way is read and its target walked the same way, so every
    directory the kernel would pass is one that is checked here. Returns the descriptor
    (``O_PATH``), the directory's path as walked, and the first place where another user
    could replace what comes next.
    """
    fd = os.open("/", _WALK)
    where = Path("/")
    exposure: Exposure | None = None
    links = 0
    try:
        here = os.fstat(fd)
        while parts:
            name = parts.popleft()
            if name in ("", "."):
                continue
            entry = os.stat(name, dir_fd=fd, follow_symlinks=False)
            if name != ".." and exposure is None:
                # ".." is no entry to replace: the directory above was passed on the way down.
                exposure = _exposure(where, here, name, entry)
            if stat.S_ISLNK(entry.st_mode):
                links += 1
                target = _link_target(fd, name, where / name, links)
                parts.extendleft(reversed(Path(target).parts))
                if target.startswith("/"):
                    parts.popleft()  # the "/" itself: walk on from the root
                    os.close(fd)
                    fd = -1  # not closed again should the open fail
                    fd = os.open("/", _WALK)
                    here, where = os.fstat(fd), Path("/")
                continue
            fd = _descend(fd, name, entry, where / name)
            here = entry
            where = where.parent if name == ".." else where / name
    except BaseException:
        if fd >= 0:
            os.close(fd)
        raise
    return fd, where, exposure


@dataclasses.dataclass(frozen=True, slots=True)
class Opened:
    """A store directory reached from ``/`` without following a swapped link."""

    fd: int  # O_PATH: a directory to open and stat files beneath
    st: os.stat_result
    exposure: Exposure | None


@contextlib.contextmanager
def open_directory(directory: Path, *, writer: bool) -> Iterator[Opened]:
    """The store directory, opened as checked, for the block: see :func:`check_directory`.

    The directory itself must be no symlink; directories above may be (each is followed
    by hand). A writer is refused a path with an :class:`Exposure`.
    """
    path = directory.absolute()
    parts = collections.deque(path.parts[1:])
    name = parts.pop() if parts else "."
    parent, where, exposure = _walk(parts)
    try:
        seen = os.stat(name, dir_fd=parent, follow_symlinks=False)
        _check_directory_stat(directory, seen, writer=writer)
        if exposure is None and name != "..":
            exposure = _exposure(where, os.fstat(parent), name, seen)
        if writer and exposure is not None:
            raise StoreFileRefusedError(exposure.refusal(directory))
        try:
            fd = os.open(name, _WALK, dir_fd=parent)
        except OSError as e:
            if e.errno in (errno.ELOOP, errno.ENOTDIR):
                raise _changed(directory) from e
            raise
    finally:
        os.close(parent)
    try:
        st = os.fstat(fd)
        if not _same(st, seen):
            raise _changed(directory)
        yield Opened(fd, st, exposure)
    finally:
        os.close(fd)


def check_directory(directory: Path, *, writer: bool) -> os.stat_result:
    """Refuse a store directory that is a symlink, not a directory, shared, or (writer) not ours.

    A writer is also refused a directory that another user could swap: see :class:`Exposure`.
    """
    with open_directory(directory, writer=writer) as opened:
        return opened.st


def _check_directory_stat(directory: Path, st: os.stat_result, *, writer: bool) -> os.stat_result:
    if stat.S_ISLNK(st.st_mode):
        raise StoreFileRefusedError(
            f"store directory {directory} is a symlink; refusing it: give the real directory"
        )
    if not stat.S_ISDIR(st.st_mode):
        raise StoreFileRefusedError(f"store directory {directory} is not a directory")
    if st.st_mode & _UNSAFE_BITS:
        raise StoreFileRefusedError(
            f"store directory {directory} is writable by group or others "
            f"(mode {stat.S_IMODE(st.st_mode):04o}), so others could plant files in it; "
            f"check its files, then run: chmod go-w {directory}"
        )
    if writer and st.st_uid != os.geteuid():
        raise StoreFileRefusedError(
            f"store directory {directory} is owned by uid {st.st_uid}, not by this user "
            f"(uid {os.geteuid()}); write to it as its owner"
        )
    return st


def check_file_stat(path: Path, st: os.stat_result, *, owner: int) -> None:
    """Refuse a store file (as ``lstat`` or ``fstat`` saw it) that SQLite must not be given."""
    what = _name(path)
    if stat.S_ISLNK(st.st_mode):
        raise StoreFileRefusedError(f"{what} {path} is a symlink; refusing it")
    if not stat.S_ISREG(st.st_mode):
        raise StoreFileRefusedError(f"{what} {path} is not a regular file; refusing it")
    if st.st_nlink != 1:
        raise StoreFileRefusedError(
            f"{what} {path} has {st.st_nlink} hard links; a store file must have one: "
            "remove the other links"
        )
    if st.st_mode & _UNSAFE_BITS:
        raise StoreFileRefusedError(
            f"{what} {path} is writable by group or others "
            f"(mode {stat.S_IMODE(st.st_mode):04o}); run: chmod go-w {path}"
        )
    if st.st_uid != owner:
        raise StoreFileRefusedError(
            f"{what} {path} is owned by uid {st.st_uid}, not by uid {owner} "
            "(the store's owner); refusing it"
        )


def check_file(path: Path, *, owner: int, required: bool = True) -> os.stat_result | None:
    """:func:`check_file_stat` on ``lstat(path)``; None when it is missing and not ``required``."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        if required:
            raise StoreUnavailableError(f"database file {path} is missing") from None
        return None
    check_file_stat(path, st, owner=owner)
    return st


@dataclasses.dataclass(frozen=True, slots=True)
class Checked:
    """A store that passed the reader's checks, and what was seen of it."""

    directory: Path
    db: Path
    owner: int
    wal_size: int  # -1 when there is no -wal
    has_shm: bool
    identity: tuple[int, int] = (-1, -1)  # the directory's st_dev, st_ino
    exposure: Exposure | None = None

    @property
    def ours(self) -> bool:
        """Whether this user owns the store, so SQLite may open its files in place."""
        return self.owner == os.geteuid()


def check_store(directory: Path, db: Path, *, writer: bool) -> Checked:
    """Every check on the directory and the files, for a writer or a reader.

    The files are stat'ed beneath the directory reached (see :func:`open_directory`).
    """
    with open_directory(directory, writer=writer) as opened:
        owner = opened.st.st_uid
        seen: list[os.stat_result | None] = []
        for i, path in enumerate(store_files(db)):
            try:
                st = os.stat(path.name, dir_fd=opened.fd, follow_symlinks=False)
            except FileNotFoundError:
                if i == 0:
                    raise StoreUnavailableError(f"database file {path} is missing") from None
                seen.append(None)
                continue
            check_file_stat(path, st, owner=owner)
            seen.append(st)
        identity = (opened.st.st_dev, opened.st.st_ino)
        exposure = opened.exposure
    wal, shm = seen[1], seen[2]
    return Checked(
        directory,
        db,
        owner,
        -1 if wal is None else wal.st_size,
        shm is not None,
        identity,
        exposure,
    )


# --------------------------------------------------------------------------- copies


def _open_checked(dir_fd: int, path: Path, *, owner: int) -> int | None:
    """Open a store file read-only, never through a link or into a fifo, checked on the fd."""
    try:
        fd = os.open(path.name, _READ, dir_fd=dir_fd)
    except FileNotFoundError:
        return None
    except OSError as e:
        if path.is_symlink():
            raise StoreFileRefusedError(f"{_name(path)} {path} is a symlink; refusing it") from e
        raise
    try:
        check_file_stat(path, os.fstat(fd), owner=owner)
    except BaseException:
        os.close(fd)
        raise
    return fd


def _copy_fd(fd: int, target: Path) -> bytes:
    """Copy the open file to a new private ``target``; returns its first bytes (a WAL header)."""
    head = b""
    out = os.open(
        target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600
    )
    try:
        os.lseek(fd, 0, os.SEEK_SET)
        while chunk := os.read(fd, 1 << 20):
            if len(head) < _WAL_HEADER:
                head += chunk[: _WAL_HEADER - len(head)]
            os.write(out, chunk)
    finally:
        os.close(out)
    return head


def _wal_salt(dir_fd: int, checked: Checked) -> bytes | None:
    """The WAL's salts (bytes 16-24 of its header): they change whenever the WAL restarts.

    The ``-wal`` is opened and checked as the copy opens it: a link or a fifo planted
    since the store was checked is refused, not read.
    """
    fd = _open_checked(dir_fd, sidecar(checked.db, "-wal"), owner=checked.owner)
    if fd is None:
        return None
    try:
        return _salt(os.pread(fd, _WAL_HEADER, 0))
    finally:
        os.close(fd)


def _salt(header: bytes) -> bytes | None:
    # A WAL shorter than its header holds no commit: as good as none.
    return header[16:24] if len(header) >= _WAL_HEADER else None


def _copy_once(dir_fd: int, checked: Checked, target: Path) -> bool:
    """Copy the database and its ``-wal`` once; False when the store changed meanwhile.

    A checkpoint may write the database while it is copied: harmless while the copied
    ``-wal`` still holds those pages, which holds unless the WAL restarted (its salts
    change) or was removed (the last connection closed) between the two copies.
    """
    db, wal = checked.db, sidecar(checked.db, "-wal")
    salt_before = _wal_salt(dir_fd, checked)
    db_fd = _open_checked(dir_fd, db, owner=checked.owner)
    if db_fd is None:
        raise StoreUnavailableError(f"database file {db} is missing")
    try:
        before = os.fstat(db_fd)
        _copy_fd(db_fd, target)
    finally:
        os.close(db_fd)
    wal_fd = _open_checked(dir_fd, wal, owner=checked.owner)
    if wal_fd is None:
        copied_salt = None
    else:
        try:
            copied_salt = _salt(_copy_fd(wal_fd, sidecar(target, "-wal")))
        finally:
            os.close(wal_fd)
    after = os.stat(db.name, dir_fd=dir_fd, follow_symlinks=False)
    if salt_before is None and copied_salt is None:
        # No WAL at all: the database file alone is the store, if nobody wrote it meanwhile.
        return (before.st_size, before.st_mtime_ns, before.st_ino) == (
            after.st_size,
            after.st_mtime_ns,
            after.st_ino,
        )
    return salt_before == copied_salt == _wal_salt(dir_fd, checked)


def _check_room(dir_fd: int, checked: Checked, scratch: Path) -> None:
    """Refuse a copy that would not fit where temporary files go, before writing a byte.

    The temporary directory is often a small shared file system (a tmpfs in memory):
    filling it would fail the copy and, meanwhile, every other program writing there.
    """
    size = 0
    for name in (checked.db.name, sidecar(checked.db, "-wal").name):
        with contextlib.suppress(FileNotFoundError):
            size += os.stat(name, dir_fd=dir_fd, follow_symlinks=False).st_size
    room = os.statvfs(scratch)
    free = room.f_bavail * room.f_frsize
    if size > free:
        raise StoreUnavailableError(
            f"the store {checked.directory} is read from a private copy, which needs "
            f"{_mib(size)} where temporary files go "
            f"({scratch.parent}: {_mib(free)} free); set TMPDIR to a directory with room"
        )


def _mib(size: int) -> str:
    return f"{size / (1 << 20):.1f} MiB"


@contextlib.contextmanager
def private_copy(checked: Checked) -> Iterator[Path]:
    """A copy of the store's database and ``-wal`` in a new 0700 directory, removed afterwards.

    The copy, not the store, is what SQLite opens: it may rebuild the WAL index and
    checkpoint there without touching a file of the store.
    """
    scratch = Path(tempfile.mkdtemp(prefix="ledger-read-"))  # 0700, ours
    try:
        with open_directory(checked.directory, writer=False) as opened:
            dir_fd = opened.fd
            # The directory reached is the one checked: nobody swapped the path meanwhile.
            if (opened.st.st_dev, opened.st.st_ino) != checked.identity:
                raise StoreFileRefusedError(
                    f"store directory {checked.directory} was replaced since it was checked"
                    + (
                        f" ({checked.exposure.directory} above it is {checked.exposure.reason})"
                        if checked.exposure is not None
                        else ""
                    )
                    + "; refusing it"
                )
            _check_directory_stat(checked.directory, opened.st, writer=False)
            _check_room(dir_fd, checked, scratch)
            target = scratch / checked.db.name
            for _ in range(_COPY_ATTEMPTS):
                if _copy_once(dir_fd, checked, target):
                    break
                for path in (target, sidecar(target, "-wal")):
                    with contextlib.suppress(FileNotFoundError):
                        path.unlink()
            else:
                raise StoreUnavailableError(
                    f"the store {checked.directory} kept changing while it was copied "
                    f"({_COPY_ATTEMPTS} attempts); try again"
                )
        yield target
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
