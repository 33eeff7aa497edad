"""Where stores live, and which store directories this process has opened.

Kept free of storage imports so that :mod:`ledger.resources` can refuse paths
inside a store without loading SQLAlchemy.
"""

from __future__ import annotations

import contextlib
import os
import threading
from pathlib import Path

DB_NAME = "ledger.sqlite3"

_lock = threading.Lock()
_opened: set[Path] = set()


def effects_dir() -> Path:
    """Return the default store directory.

    ``$LEDGER_DIR`` when set and non-empty, else ``$XDG_STATE_HOME/ledger``,
    else ``~/.local/state/ledger``. The directory is not created here.
    """
    explicit = os.environ.get("LEDGER_DIR")
    if explicit:
        return Path(explicit).expanduser().absolute()
    state = os.environ.get("XDG_STATE_HOME")
    base = Path(state) if state and Path(state).is_absolute() else Path.home() / ".local" / "state"
    return (base / "ledger").absolute()


def remember_store(directory: Path) -> None:
    """Record that this process opened a store at ``directory``."""
    with _lock:
        _opened.add(directory.absolute())
        with contextlib.suppress(OSError):  # resolve(strict=False) fails only on loops
            _opened.add(directory.resolve())


def sensitive_dirs() -> tuple[Path, ...]:
    """Every directory agent tools must not reach: the default store and opened ones."""
    with _lock:
        opened = tuple(_opened)
    return (effects_dir(), *opened)
