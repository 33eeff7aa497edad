"""What ``log.effect`` and ``observe_file`` see of a file: its SHA-256, read from the file.

Real files of every size around the read size, so that a file read in one piece, in
several, and one ending exactly on a piece's edge all give the digest of their bytes.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest

from ledger._run.files import _CHUNK, read_file
from ledger.effects import ObservationMechanism

SIZES = [0, 1, 4096, _CHUNK - 1, _CHUNK, _CHUNK + 1, 3 * _CHUNK, 5 * _CHUNK // 2 + 7]


@pytest.mark.parametrize("size", SIZES)
def test_a_regular_file_reads_as_the_sha256_of_its_bytes(tmp_path: Path, size: int) -> None:
    content = os.urandom(size)
    path = tmp_path / "f"
    path.write_bytes(content)
    state = read_file(str(path))
    assert state.exists is True
    assert state.mechanism is ObservationMechanism.FILESYSTEM_READ
    assert state.sha256 == hashlib.sha256(content).hexdigest()


def test_a_symlink_reads_as_its_target_and_a_dangling_one_as_absent(tmp_path: Path) -> None:
    target = tmp_path / "target"
    target.write_bytes(b"through the link")
    (tmp_path / "link").symlink_to(target)
    (tmp_path / "dangling").symlink_to(tmp_path / "nothing")
    assert (
        read_file(str(tmp_path / "link")).sha256 == hashlib.sha256(b"through the link").hexdigest()
    )
    dangling = read_file(str(tmp_path / "dangling"))
    assert (dangling.exists, dangling.sha256) == (False, None)


def test_a_directory_and_a_fifo_exist_without_a_digest(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "fifo")  # opened without waiting for a writer
    for name in (".", "fifo"):
        state = read_file(str(tmp_path / name))
        assert (state.exists, state.sha256) == (True, None), name
        assert state.mechanism is ObservationMechanism.FILESYSTEM_STAT, name
