"""Whether a store's files may be handed to SQLite, and private copies of those that may not.

SQLite trusts the files beside a database: it replays a ``-wal`` into the database
at the next checkpoint, and maps, rewrites and (as root) chowns a ``-shm``. Whoever
can plant or link those files can forge history or make a privileged reader change a
file outside the store. So every path, readers included, checks the directory and
each file before SQLite opens any of them:

- the directory is a real directory (not a symlink), writable by its owner only;
- each file is a regular file (not a symlink, fifo or directory) with one link and
  no group or other write bit;
- a writer owns all of them; a reader needs every file owned by the directory's owner.

A reader who does not own the store never lets SQLite open its files: the database
and its ``-wal`` are copied (opened ``O_NOFOLLOW``, checked on the open descriptor)
into a private directory, and SQLite reads the copy.
"""

from __future__ import annotations

import contextlib
import dataclasses
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


def sidecar(db: Path, suffix: str) -> Path:
    """The file ``db`` + ``suffix`` (``-wal``, ``-shm``) beside the database."""
    return db.with_name(db.name + suffix)


def store_files(db: Path) -> tuple[Path, ...]:
    """Every file of a store that is checked: the database first, then its sidecars."""
    return (db, *(sidecar(db, s) for s in SIDECARS))


def _name(path: Path) -> str:
    del path  # the -wal and -shm are part of the database: one name for all three
    return "database file"


def check_directory(directory: Path, *, writer: bool) -> os.stat_result:
    """Refuse a store directory that is a symlink, not a directory, shared, or (writer) not ours."""
    st = os.lstat(directory)
    return _check_directory_stat(directory, st, writer=writer)


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

    @property
    def ours(self) -> bool:
        """Whether this user owns the store, so SQLite may open its files in place."""
        return self.owner == os.geteuid()


def check_store(directory: Path, db: Path, *, writer: bool) -> Checked:
    """Every check on the directory and the files, for a writer or a reader."""
    owner = check_directory(directory, writer=writer).st_uid
    seen = [
        check_file(path, owner=owner, required=i == 0) for i, path in enumerate(store_files(db))
    ]
    wal, shm = seen[1], seen[2]
    return Checked(directory, db, owner, -1 if wal is None else wal.st_size, shm is not None)


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
        dir_fd = os.open(
            checked.directory, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
        )
        try:
            # The directory opened is the one checked: nobody swapped it meanwhile.
            _check_directory_stat(checked.directory, os.fstat(dir_fd), writer=False)
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
        finally:
            os.close(dir_fd)
        yield target
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
