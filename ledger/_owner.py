"""Who writes a run: this machine, this boot, this process, and whether such a writer lives.

A run's writer is identified by host name, boot id and pid plus the process's start
time, so that a pid reused after the writer died is never mistaken for it.
"""

from __future__ import annotations

import dataclasses
import os
import socket
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

    @classmethod
    def current(cls) -> Writer:
        """This process."""
        pid = os.getpid()
        return cls(socket.gethostname(), _boot_id(), pid, process_start(pid))

    def on_this_host(self) -> bool:
        """Whether the writer ran on this machine (same host name)."""
        return self.host == socket.gethostname()

    def is_alive(self) -> bool:
        """Whether the writer still runs. Only meaningful on this host."""
        boot = _boot_id()
        if self.boot_id is not None and boot is not None and self.boot_id != boot:
            return False  # the machine rebooted since: every process of that boot is gone
        if self.started is not None and Path("/proc").is_dir():
            return process_start(self.pid) == self.started
        try:
            os.kill(self.pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True  # it exists, as another user
        return True
