"""File attributes read without timestamps: the same answers as ``lstat``, and its fallback."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from ledger.sqlite import statx


def _expected(path: Path) -> statx.Attributes:
    st = os.lstat(path)
    return statx.Attributes(st.st_mode, st.st_nlink, st.st_uid)


@pytest.fixture
def files(tmp_path: Path) -> list[Path]:
    """A private file, a shared one with two links, a directory, a fifo and a dangling symlink."""
    private = tmp_path / "private"
    private.write_bytes(b"x")
    private.chmod(0o600)
    shared = tmp_path / "shared"
    shared.write_bytes(b"y")
    shared.chmod(0o666)
    os.link(shared, tmp_path / "second-link")
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    link = tmp_path / "link"
    link.symlink_to(tmp_path / "nowhere")
    return [private, shared, tmp_path, fifo, link]


def test_attributes_are_those_of_lstat(files: list[Path]) -> None:
    """Type, mode, links and owner as lstat has them; a symlink is not followed."""
    for path in files:
        assert statx.attributes(str(path)) == _expected(path)


def test_a_missing_file_raises_as_lstat_does(tmp_path: Path) -> None:
    """FileNotFoundError for a missing file, NotADirectoryError through a file."""
    with pytest.raises(FileNotFoundError):
        statx.attributes(str(tmp_path / "missing"))
    (tmp_path / "file").write_bytes(b"")
    with pytest.raises(NotADirectoryError):
        statx.attributes(str(tmp_path / "file" / "below"))


def test_without_statx_lstat_answers(files: list[Path], monkeypatch: pytest.MonkeyPatch) -> None:
    """Where libc has no statx (or the kernel refuses it) the answers are the same."""
    monkeypatch.setattr(statx, "_statx", None)
    for path in files:
        assert statx.attributes(str(path)) == _expected(path)


def test_statx_is_used_on_linux() -> None:
    """The suite runs on Linux with glibc: the library asks the kernel without the times."""
    assert os.uname().sysname == "Linux"
    assert statx._statx is not None
