"""Liveness on the SQLite backend: the lock file, its trust checks, and the file system it is on.

A run is held by a kernel lock on one byte of the store's ``ledger.lock``: two paths to
one store share it; the file is private and refused when it is not a plain file of the
store's owner; a store on a network file system, whose locks this kernel does not
hold, is refused. Liveness on any backend is in ``tests/contract/test_liveness.py``.
"""

from __future__ import annotations

import gc
import os
import textwrap
from pathlib import Path

import pytest

from ledger.effect_log import EffectLog, EffectPersistenceError, new_run_id
from ledger.sqlite import liveness as _liveness
from tests.builders import Child, claim_bare, orphan_run

# --------------------------------------------------------------------------- shared holds


@pytest.mark.program
def test_two_paths_to_one_store_share_its_locks(
    store_dir: Path, run_id: str, tmp_path: Path, spawn: type[Child]
) -> None:
    """Closing a log opened through a symlinked parent keeps the run held by a log opened directly."""
    orphan_run(store_dir, run_id)
    alias = tmp_path / "alias"
    alias.symlink_to(store_dir.parent)
    first = EffectLog.load(run_id, store_dir)
    try:
        with EffectLog.load(run_id, alias / store_dir.name):
            pass
        assert "another live process" in str(spawn("recover", store_dir, run_id).answer["error"])
    finally:
        first.close()


# --------------------------------------------------------------------------- recovery holds


# --------------------------------------------------------------------------- fork


# --------------------------------------------------------------------------- trust


def _store(store_dir: Path, run_id: str) -> Path:
    orphan_run(store_dir, run_id)
    gc.collect()  # no lease of this process keeps the lock file open
    return store_dir / _liveness.LOCK_NAME


def _refused(store_dir: Path, run_id: str) -> str:
    with pytest.raises(EffectPersistenceError) as e:
        EffectLog.load(run_id, store_dir)
    message = str(e.value)
    assert "\n" not in message
    assert str(store_dir / _liveness.LOCK_NAME) in message
    return message


def test_the_lock_file_is_created_private(store_dir: Path, run_id: str) -> None:
    """The lock file is a regular file of this user, mode 0600, created with the store."""
    lock = _store(store_dir, run_id)
    st = lock.lstat()
    assert (st.st_mode & 0o777, st.st_uid, st.st_nlink) == (0o600, os.geteuid(), 1)


def test_a_symlinked_lock_file_is_refused(store_dir: Path, run_id: str, tmp_path: Path) -> None:
    """A lock file that is a symlink is refused, even one pointing at a good file."""
    lock = _store(store_dir, run_id)
    elsewhere = tmp_path / "elsewhere"
    lock.rename(elsewhere)
    lock.symlink_to(elsewhere)
    assert "is a symlink" in _refused(store_dir, run_id)


def test_a_hard_linked_lock_file_is_refused(store_dir: Path, run_id: str, tmp_path: Path) -> None:
    """A lock file with a second hard link (someone may hold it under another name) is refused."""
    lock = _store(store_dir, run_id)
    os.link(lock, tmp_path / "twin")
    assert "2 hard links" in _refused(store_dir, run_id)


def test_a_lock_file_others_can_write_is_refused(store_dir: Path, run_id: str) -> None:
    """A group- or world-writable lock file is refused."""
    lock = _store(store_dir, run_id)
    lock.chmod(0o620)
    assert "writable by others" in _refused(store_dir, run_id)


def test_a_lock_file_that_is_a_directory_is_refused(store_dir: Path, run_id: str) -> None:
    """A directory in the lock file's place is refused."""
    lock = _store(store_dir, run_id)
    lock.unlink()
    lock.mkdir()
    message = _refused(store_dir, run_id)
    assert "not a regular file" in message or "Is a directory" in message


@pytest.mark.usefixtures("root")  # only root can give a file to another user
def test_a_lock_file_of_another_user_is_refused(store_dir: Path, run_id: str) -> None:
    """A lock file owned by another user than the store's is refused."""
    lock = _store(store_dir, run_id)
    os.chown(lock, 65534, 65534)
    assert "owned by uid 65534" in _refused(store_dir, run_id)


def test_a_refused_lock_file_fails_a_new_runs_first_claim(store_dir: Path, run_id: str) -> None:
    """A new run on a store with a bad lock file cannot claim: the claim says why, in one line."""
    lock = _store(store_dir, run_id)
    lock.chmod(0o666)
    with EffectLog(new_run_id(), store_dir) as log, pytest.raises(EffectPersistenceError) as e:
        claim_bare(log, "e1")
    assert "writable by others" in str(e.value)
    assert "\n" not in str(e.value)


# --------------------------------------------------------------------------- network file systems

MOUNTINFO = textwrap.dedent(
    """\
    22 1 8:1 / / rw,relatime shared:1 - ext4 /dev/sda1 rw
    40 22 0:35 / /mnt/shared rw,relatime shared:20 - nfs4 server:/export rw,vers=4.2
    41 22 0:36 / /mnt/with\\040space rw,relatime - cifs //server/share rw
    42 40 8:2 / /mnt/shared/local rw,relatime - ext4 /dev/sdb1 rw
    """
)


@pytest.mark.parametrize(
    ("directory", "kind"),
    [
        ("/home/me/.local/state/ledger", "ext4"),
        ("/mnt/shared/ledger", "nfs4"),
        ("/mnt/shared", "nfs4"),
        ("/mnt/sharedness/ledger", "ext4"),
        ("/mnt/with space/ledger", "cifs"),
        ("/mnt/shared/local/ledger", "ext4"),
    ],
)
def test_the_file_system_of_a_store_is_read_from_mountinfo(directory: str, kind: str) -> None:
    """The deepest mount holding the directory gives its type (escaped spaces decoded)."""
    assert _liveness.file_system(Path(directory), MOUNTINFO) == kind


def test_a_store_on_a_network_file_system_is_refused() -> None:
    """A store on NFS or CIFS is refused with one line saying to keep it on a local disk."""
    for directory in ("/mnt/shared/ledger", "/mnt/with space/ledger"):
        with pytest.raises(EffectPersistenceError) as e:
            _liveness.refuse_network_fs(Path(directory), MOUNTINFO)
        assert "keep the store on a local disk" in str(e.value)
        assert directory in str(e.value)
    _liveness.refuse_network_fs(Path("/mnt/shared/local/ledger"), MOUNTINFO)


def test_this_machines_temporary_store_is_local(store_dir: Path) -> None:
    """The test's own store is on a file system this machine's kernel locks."""
    store_dir.mkdir()
    kind = _liveness.file_system(store_dir)
    assert kind is not None
    assert kind not in _liveness.NETWORK_FS
