"""The schema's history, for both backends: the Alembic configuration and the revisions.

Where the migrations are installed, which revisions this library ships (read from the
scripts' text, without importing Alembic), and the errors for a store at a revision it
does not know or whose tables its recorded revision does not match.
"""

from __future__ import annotations

import ast
import functools
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from sqlalchemy import Connection

from ledger._sql.tables import metadata
from ledger.errors import EffectPersistenceError, SchemaTooNewError, StoreCorruptError

# Alembic (a third of a reading command's start-up, most of it the DDL of every
# database it supports) is imported by what migrates: readers only need the revisions.
if TYPE_CHECKING:
    from alembic.config import Config


def _migrations_dir() -> Path:
    package = Path(__file__).resolve().parent.parent  # ledger/
    for candidate in (package / "_migrations", package.parent / "migrations"):
        if (candidate / "env.py").is_file():
            return candidate
    raise EffectPersistenceError("the store migrations are not installed with the package")


def alembic_config(connection: Connection | None = None) -> Config:
    """An Alembic configuration driven from code, sharing ``connection`` if given."""
    from alembic.config import Config  # noqa: PLC0415 - see the imports

    cfg = Config()
    cfg.set_main_option("script_location", str(_migrations_dir()))
    if connection is not None:
        cfg.attributes["connection"] = connection
    return cfg


@functools.cache
def _revisions(location: str) -> tuple[str | None, tuple[str, ...], frozenset[str]]:
    # Once per process, not per open.
    ordered = _read_revisions(Path(location) / "versions") or _walk_revisions(location)
    return (ordered[-1] if ordered else None), ordered, frozenset(ordered)


def _walk_revisions(location: str) -> tuple[str, ...]:
    """The revisions, oldest first, as Alembic finds them: it imports every script."""
    from alembic.config import Config  # noqa: PLC0415 - see the imports
    from alembic.script import ScriptDirectory  # noqa: PLC0415

    cfg = Config()
    cfg.set_main_option("script_location", location)
    script = ScriptDirectory.from_config(cfg)
    return tuple(reversed([r.revision for r in script.walk_revisions()]))


def create_at_head(connection: Connection, install_derived: Callable[[Connection], None]) -> None:
    """Create a new store's schema as it is at head, stamped so, in the caller's transaction.

    A new store does not replay the schema's history: its tables are created from the
    library's tables as they are now, then its guards and views, and its version is
    stamped, as Alembic's own recipe for a database built from scratch does. Replaying
    every revision took five times as long (most of a worker's first start on a new
    store), and ends in the same schema: the store's schema check compares every object
    with the library's on every open, and a test compares both ways, column by column.
    """
    from alembic.runtime.migration import MigrationContext  # noqa: PLC0415 - see the imports
    from alembic.script import ScriptDirectory  # noqa: PLC0415

    metadata.create_all(connection)
    install_derived(connection)
    MigrationContext.configure(connection).stamp(
        ScriptDirectory.from_config(alembic_config()), "head"
    )


def _read_revisions(versions: Path) -> tuple[str, ...] | None:
    """The revisions, oldest first, read from the scripts' text without running them.

    Each script names its ``revision`` and ``down_revision`` as string literals, one
    line of history from a single root to a single head: read so, they are what Alembic
    would find by importing every script (with SQLAlchemy and Alembic's DDL for every
    database). ``None`` for anything else (a branch, a merge, a name that is not a
    literal): Alembic's own walk then decides.
    """
    down: dict[str, str | None] = {}
    for path in sorted(versions.glob("*.py")):
        names: dict[str, object] = {}
        for node in ast.parse(path.read_bytes(), str(path)).body:
            target, value = None, None
            if isinstance(node, ast.Assign) and len(node.targets) == 1:
                target, value = node.targets[0], node.value
            elif isinstance(node, ast.AnnAssign):
                target, value = node.target, node.value
            if isinstance(target, ast.Name) and target.id in ("revision", "down_revision"):
                if not isinstance(value, ast.Constant):
                    return None
                names[target.id] = value.value
        revision, parent = names.get("revision"), names.get("down_revision")
        if (
            not isinstance(revision, str)
            or not (parent is None or isinstance(parent, str))
            or revision in down
        ):
            return None
        down[revision] = parent
    children: dict[str | None, str] = {}
    for revision, parent in down.items():
        if parent in children or (parent is not None and parent not in down):
            return None  # a branch, or a parent no script holds
        children[parent] = revision
    ordered: list[str] = []
    current = children.get(None)
    while current is not None:
        ordered.append(current)
        current = children.get(current)
    return tuple(ordered) if len(ordered) == len(down) else None


def head_revision() -> str:
    """The newest schema revision this library ships."""
    head = _revisions(str(_migrations_dir()))[0]
    if head is None:  # pragma: no cover - the package always ships migrations
        raise EffectPersistenceError("no schema revision is shipped")
    return head


def known_revisions() -> frozenset[str]:
    """Every schema revision this library ships, the newest included."""
    return _revisions(str(_migrations_dir()))[2]


PACKAGE = "tool-ledger"


def _the_store(store: object) -> str:
    return f"the store {store}" if store else "the store"


def check_known(revision: str | None, store: object) -> None:
    """Refuse, in one line naming both revisions, a store at a revision this library lacks.

    Such a store was written by a newer version of the library (or its version row was
    forged): its tables may hold what this version would misread, or a migration it
    does not know may be half of what they are. Nothing is read from it or written to it.
    """
    if revision is None or revision in known_revisions():
        return
    raise SchemaTooNewError(
        f"{_the_store(store)} is at schema revision {revision}, which this version of the "
        f"library does not know (the newest it knows is {head_revision()}): a newer version "
        f"wrote it; upgrade the {PACKAGE} package to read or write it; nothing was changed"
    )


def revision_mismatch(
    store: object, recorded: str | None, failure: str, *, tables_are: str | None, with_: str
) -> StoreCorruptError:
    """The error for a store whose migration met objects its recorded revision lacks.

    Its ``alembic_version`` says ``recorded`` (or nothing) while its tables are already
    further on (the version row was set back or deleted by hand, or copied from another
    store): migrating it would apply again what is there. The migration was rolled back
    whole. When its tables are one revision's (``tables_are``), recording that revision
    is the repair, done with ``with_``; when none can be named, its runs are moved
    to a new store.
    """
    head = head_revision()
    if tables_are is not None:
        then = "the next write migrates it" if tables_are != head else "writes go on"
        record = (
            f"UPDATE alembic_version SET version_num = '{tables_are}'"
            if recorded
            else f"INSERT INTO alembic_version VALUES ('{tables_are}')"
        )
        advice = (
            f"its tables are revision {tables_are}'s: if ledger verify finds nothing else "
            f"wrong, record that revision (with {with_}: {record}) and {then}"
        )
    else:
        advice = (
            "its tables match no revision this library can name: see ledger verify, then "
            "move its runs to a new store (ledger export, ledger import)"
        )
    records = f"schema revision {recorded}" if recorded else "no schema revision"
    return StoreCorruptError(
        f"{_the_store(store)} records {records} but its tables do not match it (migrating "
        f"it to {head} failed: {failure}); nothing was changed; {advice}"
    )


def revisions() -> tuple[str, ...]:
    """Every schema revision this library ships, oldest first."""
    return _revisions(str(_migrations_dir()))[1]
