"""The stock ``sqlite3`` shell on a store: read-only, in its safe mode, never through a link.

``-safe`` allows no ``.open``, ``ATTACH``, ``.shell``, file output or ``writefile()`` in
the session, which also stops a view planted in the store from calling them;
``-nofollow`` never opens the database through a symlink. sqlite3 reads options after
the database name too, so the user's arguments pass through in order.
"""

from __future__ import annotations

import contextlib
import os
import shutil
from collections.abc import Iterator, Sequence
from pathlib import Path

from ledger import _paths
from ledger.sqlite import trust
from ledger.sqlite.errors import storage_errors
from ledger.sqlite.reads import check_readable, needs_copy, read_only_uri
from ledger.storage import Shell, ShellMissingError

OPTIONS = ("-safe", "-readonly", "-nofollow")


def _program(db: Path) -> str:
    program = shutil.which("sqlite3")
    if program is None:
        raise ShellMissingError(
            "the sqlite3 shell is not installed (Debian/Ubuntu: apt install sqlite3); "
            f"any SQLite client can open {db} read-only"
        )
    return program


@contextlib.contextmanager
def session(directory: Path, args: Sequence[str]) -> Iterator[Shell]:
    """The shell on the store at ``directory``, or on a private copy (see ``reads.needs_copy``).

    The copy lives as long as the block: the shell must be waited for inside it.
    """
    db = directory / _paths.DB_NAME
    program = _program(db)
    with storage_errors(f"cannot read the store {directory}"):
        checked = check_readable(directory)
    if needs_copy(checked):
        why = (
            f"the store belongs to uid {checked.owner}"
            if checked.exposure is None
            else f"{checked.exposure.directory} above the store is {checked.exposure.reason}"
        )
        note = (
            f"note: {why}; the shell reads a private copy made now, which later writes do not reach"
        )
        with contextlib.ExitStack() as stack:
            with storage_errors(f"cannot copy the store {directory}"):
                copy = stack.enter_context(trust.private_copy(checked))
            uri = read_only_uri(copy, immutable=False)
            yield Shell([program, *OPTIONS, uri, *args], (note,), wait=True)
        return
    # mode=ro keeps the session consistent while workers write (SQLite may create the
    # -wal/-shm index files for it); a user who cannot write the directory gets an
    # immutable view instead, which cannot see later writes.
    immutable = checked.wal_size <= 0 and not os.access(directory, os.W_OK)
    notes: tuple[str, ...] = ()
    if immutable:
        notes = (
            (
                "note: you cannot write this store's directory, so it is opened immutable: "
                "quit before workers write to it again"
            ),
        )
    yield Shell([program, *OPTIONS, read_only_uri(db, immutable=immutable), *args], notes)


def query_command(directory: Path, query: str) -> list[str]:
    """The shell command that runs ``query`` on a store of this user, read-only, as a box."""
    db = directory / _paths.DB_NAME
    return ["sqlite3", "-box", read_only_uri(db, immutable=False), query]
