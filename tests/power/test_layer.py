"""The FUSE layer itself: what a cut keeps and what it takes, mode by mode.

Real mounts, real system calls (``os.write``, ``os.fsync``, ``os.rename``, a directory
opened and fsynced), and a real server killed to leave a stale mount behind.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.power.layer import PAGE, Mount, clean_stale, mounts

pytestmark = pytest.mark.program


@pytest.fixture
def mount(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Mount]:
    """A mounted layer in the mode the test is parametrized with; unmounted at the end."""
    mode: str = request.param
    layer = Mount(tmp_path / "disk", tmp_path / "mnt", mode, "layer-tests")
    layer.start()
    try:
        yield layer
    finally:
        layer.stop()
    assert str(layer.mountpoint) not in {point for _, point, _ in mounts()}


def write(path: Path, data: bytes, *, sync: bool, offset: int = 0) -> None:
    """Write ``data`` at ``offset`` with one descriptor; fsync it when ``sync``."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        os.pwrite(fd, data, offset)
        if sync:
            os.fsync(fd)
    finally:
        os.close(fd)


def sync_directory(path: Path) -> None:
    """fsync a directory, as a careful writer does after creating or renaming in it."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def restart(mount: Mount) -> Path:
    """Cut the power and mount again: the mount point, now holding what was synced."""
    mount.cut()
    mount.start()
    return mount.mountpoint


@pytest.mark.parametrize("mount", ["drop", "torn", "dirent"], indirect=True)
def test_a_synced_write_stays(mount: Mount) -> None:
    """Data fsynced before the cut reads back after it, in every mode."""
    target = mount.mountpoint / "synced"
    write(target, b"kept " * 3000, sync=True)
    sync_directory(mount.mountpoint)
    assert (restart(mount) / "synced").read_bytes() == b"kept " * 3000


@pytest.mark.parametrize("mount", ["drop", "dirent"], indirect=True)
def test_a_write_not_synced_is_gone(mount: Mount) -> None:
    """What was written after the last fsync, and a truncation, are gone after the cut."""
    target = mount.mountpoint / "file"
    write(target, b"a" * (3 * PAGE), sync=True)
    sync_directory(mount.mountpoint)
    write(target, b"b" * PAGE, offset=PAGE, sync=False)  # an overwrite
    write(target, b"c" * PAGE, offset=3 * PAGE, sync=False)  # an append
    assert target.read_bytes() == b"a" * PAGE + b"b" * PAGE + b"a" * PAGE + b"c" * PAGE
    after = restart(mount) / "file"
    assert after.read_bytes() == b"a" * (3 * PAGE)
    os.truncate(after, PAGE)
    assert after.stat().st_size == PAGE
    assert (restart(mount) / "file").read_bytes() == b"a" * (3 * PAGE)


@pytest.mark.parametrize("mount", ["torn"], indirect=True)
def test_a_torn_cut_keeps_whole_pages_old_or_new(mount: Mount) -> None:
    """In torn mode each unsynced page is either as synced or as written, never mixed."""
    target = mount.mountpoint / "file"
    old = bytes(range(256)) * (16 * PAGE // 256)
    write(target, old, sync=True)
    sync_directory(mount.mountpoint)
    kinds = set()
    for round_ in range(8):
        new = bytes([round_ + 1]) * len(old)
        write(target, new, sync=False)
        data = (restart(mount) / "file").read_bytes()
        assert len(data) == len(old)
        for page in range(16):
            chunk = data[page * PAGE : (page + 1) * PAGE]
            assert chunk in (old[page * PAGE : (page + 1) * PAGE], new[:PAGE]), page
            kinds.add(chunk == new[:PAGE])
        old = data
    assert kinds == {True, False}, "no torn cut kept part of the unsynced pages"


@pytest.mark.parametrize("mount", ["dirent"], indirect=True)
def test_a_rename_without_a_directory_sync_is_undone(mount: Mount) -> None:
    """In dirent mode a rename not followed by a sync of its directory is undone; one followed by it stays."""
    root = mount.mountpoint
    write(root / "old", b"content", sync=True)
    sync_directory(root)
    os.rename(root / "old", root / "new")
    assert sorted(os.listdir(root)) == ["new"]
    root = restart(mount)
    assert sorted(os.listdir(root)) == ["old"]
    assert (root / "old").read_bytes() == b"content"
    os.rename(root / "old", root / "new")
    sync_directory(root)
    root = restart(mount)
    assert sorted(os.listdir(root)) == ["new"]


@pytest.mark.parametrize("mount", ["dirent"], indirect=True)
def test_a_new_file_needs_a_sync_of_itself_or_its_directory(mount: Mount) -> None:
    """A file created and never synced vanishes in dirent mode; fsync of the file keeps its name."""
    root = mount.mountpoint
    (root / "sub").mkdir()
    write(root / "sub" / "lost", b"x", sync=False)
    write(root / "sub" / "kept", b"y", sync=True)  # its name and its directory's too
    root = restart(mount)
    assert sorted(os.listdir(root / "sub")) == ["kept"]
    assert (root / "sub" / "kept").read_bytes() == b"y"


@pytest.mark.parametrize("mount", ["drop"], indirect=True)
def test_directory_entries_are_durable_at_once_outside_dirent_mode(mount: Mount) -> None:
    """In drop mode a rename needs no directory sync; the renamed file's unsynced data still goes."""
    root = mount.mountpoint
    write(root / "old", b"synced", sync=True)
    write(root / "old", b"SYNCED", sync=False)
    os.rename(root / "old", root / "new")
    root = restart(mount)
    assert sorted(os.listdir(root)) == ["new"]
    assert (root / "new").read_bytes() == b"synced"


def test_a_stale_mount_is_cleaned(tmp_path: Path) -> None:
    """A server killed without unmounting (a test run killed midway) leaves a mount the next run removes."""
    layer = Mount(tmp_path / "disk", tmp_path / "mnt", "drop", "stale")
    layer.start()
    try:
        assert layer.server is not None
        os.kill(layer.server.pid, signal.SIGKILL)
        layer.server.wait()
        assert str(layer.mountpoint) in {point for _, point, _ in mounts()}
        assert str(layer.mountpoint) in clean_stale()
        assert str(layer.mountpoint) not in {point for _, point, _ in mounts()}
    finally:
        layer.stop()


def test_a_server_left_by_its_parent_unmounts(tmp_path: Path) -> None:
    """A server whose parent died (its stdin closed) lazily unmounts before it ends."""
    layer = Mount(tmp_path / "disk", tmp_path / "mnt", "drop", "orphan")
    layer.start()
    try:
        assert layer.server is not None
        assert layer.server.stdin is not None
        layer.server.stdin.close()
        assert layer.server.wait(timeout=30) == 0
        assert str(layer.mountpoint) not in {point for _, point, _ in mounts()}
    finally:
        layer.stop()
