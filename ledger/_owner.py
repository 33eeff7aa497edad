"""Who wrote a run last: this machine, this boot, this process.

Recorded for people (``ledger runs``, ``ledger show``): host name, boot id and pid plus
the process's start time, which tell one process from another that reused its pid.
Whether a run's writer still lives is never decided from it (a process in another pid
namespace has pids this one cannot see): see :mod:`ledger.sqlite.liveness`.
"""

from __future__ import annotations

import dataclasses
import os
import pwd
import socket
import sys
from pathlib import Path

_BOOT_ID = Path("/proc/sys/kernel/random/boot_id")


def _boot_id() -> str | None:
    try:
        return _BOOT_ID.read_text().strip() or None
    except OSError:
        return None


def process_start(pid: int) -> str | None:
    """The start time of ``pid`` in clock ticks since boot, or None if unknown or gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # The command name (field 2) may hold spaces and parentheses: split after its end.
    fields = stat[stat.rindex(")") + 2 :].split()
    return fields[19] if len(fields) > 19 else None


@dataclasses.dataclass(frozen=True, slots=True)
class Writer:
    """The process that writes a run."""

    host: str
    boot_id: str | None
    pid: int
    started: str | None
    name: str | None = None  # what the worker calls itself (``EffectLog(writer_name=...)``)

    @classmethod
    def current(cls, name: str | None = None) -> Writer:
        """This process, under ``name`` if it gave one."""
        pid = os.getpid()
        return cls(socket.gethostname(), _boot_id(), pid, process_start(pid), name)

    def label(self) -> str:
        """How ``ledger runs`` and ``ledger show`` print it: ``name (host:pid)`` or ``host:pid``."""
        where = f"{self.host}:{self.pid}"
        return where if self.name is None else f"{self.name} ({where})"


def host_name() -> str:
    """This machine's host name, as a resolution records it ("?" when it has none)."""
    return socket.gethostname()[:200] or "?"


def os_user() -> str:
    """The name of this process's effective user, or its uid when it has no name."""
    uid = os.geteuid()
    try:
        return pwd.getpwuid(uid).pw_name or str(uid)
    except KeyError:  # a uid with no entry (a container's)
        return str(uid)


def program() -> str:
    """A short, printable name of the program this process runs, for people.

    The script's file name (``agent.py``), ``python -m PACKAGE`` for a package run
    so, ``python -c`` or ``python`` for code given otherwise.
    """
    argv0 = sys.argv[0] if sys.argv else ""
    if argv0 in ("", "-c"):
        name = f"python {argv0}".strip()
    else:
        path = Path(argv0)
        name = f"python -m {path.parent.name}" if path.name == "__main__.py" else path.name
    text = "".join(c if c.isprintable() else "?" for c in name)[:200]
    return text or "python"
