"""What the proxy's tests share: the test server, the proxy in front of it, a client.

``Setup`` names a store and the test server's state directory. ``session`` connects
the SDK's own stdio client to ``ledger mcp-proxy`` (run as the installed console
script) in front of ``server.py``; ``RawClient`` writes bytes to a proxy's stdin and
reads its stdout line by line, for what no SDK client would send. Every wait fails
the test after ``WAIT`` (one step) or ``SESSION_TIMEOUT`` (a whole conversation).
"""

from __future__ import annotations

import dataclasses
import json
import os
import queue
import re
import signal
import subprocess
import threading
import time
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
from mcp import ClientSession, StdioServerParameters, stdio_client

from ledger import effects as fx
from ledger.effect_log import EffectLog
from tests.builders import CHILD_TIMEOUT, LEDGER, PYTHON, ledger, subprocess_env

HERE = Path(__file__).resolve().parent
SERVER = HERE / "server.py"
# Every step starts or crosses Python processes that import the SDK (a second or more
# of CPU each): on a loaded machine a step may take far longer than in-process waits.
WAIT = float(CHILD_TIMEOUT)
SESSION_TIMEOUT = 3 * WAIT  # one whole conversation through the proxy
INIT = {
    "jsonrpc": "2.0",
    "id": 0,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-11-25",
        "capabilities": {},
        "clientInfo": {"name": "raw-test-client", "version": "0"},
    },
}
INITIALIZED = {"jsonrpc": "2.0", "method": "notifications/initialized"}


@dataclasses.dataclass(frozen=True)
class Setup:
    """A store and the state directory of the test server."""

    store: Path | str  # a directory, or a PostgreSQL URL
    state: Path

    @classmethod
    def make(cls, tmp_path: Path) -> Setup:
        state = tmp_path / "server"
        state.mkdir()
        return cls(tmp_path / "store", state)

    def argv(self, *options: str, server: Sequence[str] | None = None) -> list[str]:
        """The proxy's command line, in front of ``server`` (default: server.py)."""
        command = list(server) if server is not None else [PYTHON, str(SERVER), str(self.state)]
        return [LEDGER, "mcp-proxy", "--store", str(self.store), *options, "--", *command]

    def calls(self) -> list[dict[str, Any]]:
        """What the server received, one entry per tool call, in order."""
        path = self.state / "calls.jsonl"
        if not path.exists():
            return []
        return [json.loads(line) for line in path.read_text().splitlines()]

    def ledger(self, *args: str) -> subprocess.CompletedProcess[str]:
        return ledger(*args, "--store", str(self.store))

    def history(self, run_id: str) -> fx.History:
        with EffectLog.load(run_id, self.store) as log:
            return log.history()

    def status(self, *args: str) -> list[dict[str, Any]]:
        result = self.ledger("status", "--json", *args)
        assert result.returncode == 0, result.stderr
        rows: list[dict[str, Any]] = json.loads(result.stdout)
        return rows


def run_id_in(stderr: str) -> str:
    """The run id the proxy announced on stderr."""
    found = re.findall(r": run ([0-9a-f]{32}) in ", stderr)
    assert len(found) == 1, stderr
    return found[0]


def outcome_of(history: fx.History, effect_id: str) -> tuple[fx.ExecutionOutcome, fx.Impact]:
    outcomes = [o for o in history.outcomes if o.effect_id == effect_id]
    assert len(outcomes) == 1, outcomes
    return outcomes[0].execution, outcomes[0].impact


@asynccontextmanager
async def session(
    setup: Setup,
    *options: str,
    errlog: Path,
    server: Sequence[str] | None = None,
    **callbacks: Any,
) -> AsyncIterator[ClientSession]:
    """An initialized SDK client session with the test server, through the proxy.

    The proxy's stderr goes to ``errlog``; ``server`` replaces the test server's command.
    """
    argv = setup.argv(*options, server=server)
    params = StdioServerParameters(command=argv[0], args=argv[1:], env=subprocess_env())
    with errlog.open("a") as err:
        async with (
            stdio_client(params, errlog=err) as (read, write),
            ClientSession(read, write, **callbacks) as client,
        ):
            with anyio.fail_after(WAIT):
                await client.initialize()
            yield client


def run_session(scenario: Any) -> Any:
    """Run an async scenario to its end; fail after ``SESSION_TIMEOUT``."""

    async def bounded() -> Any:
        with anyio.fail_after(SESSION_TIMEOUT):
            return await scenario()

    return anyio.run(bounded)


async def wait_until(predicate: Any, what: str) -> None:
    """Wait (without blocking the loop) until ``predicate()``; fail after ``WAIT``."""
    with anyio.fail_after(WAIT):
        while not predicate():  # noqa: ASYNC110 - a file or a store another process writes
            await anyio.sleep(0.01)
    del what


def wait_file(path: Path) -> None:
    """Wait until ``path`` exists (a test server's marker); fail after ``WAIT``."""
    deadline = time.monotonic() + WAIT
    while not path.exists():
        assert time.monotonic() < deadline, f"timed out waiting for {path.name}"
        time.sleep(0.01)


class RawClient:
    """A proxy driven with raw bytes: what no SDK client would send."""

    def __init__(self, argv: Sequence[str], stderr: Path) -> None:
        self._err = stderr.open("wb")
        self.proc = subprocess.Popen(
            argv,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._err,
            env=subprocess_env(),
        )
        self._lines: queue.Queue[bytes] = queue.Queue()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self._lines.put(line)
        self._lines.put(b"")

    def send(self, message: dict[str, Any] | bytes) -> None:
        data = message if isinstance(message, bytes) else json.dumps(message).encode() + b"\n"
        assert self.proc.stdin is not None
        self.proc.stdin.write(data)
        self.proc.stdin.flush()

    def line(self) -> bytes:
        """The next line the proxy writes; b"" once its stdout ends."""
        try:
            return self._lines.get(timeout=WAIT)
        except queue.Empty:
            raise AssertionError("the proxy wrote nothing in time") from None

    def message(self) -> dict[str, Any]:
        line = self.line()
        assert line, "the proxy's stdout ended"
        value: dict[str, Any] = json.loads(line)
        return value

    def answer(self, request_id: object) -> dict[str, Any]:
        """The next message answering ``request_id`` (anything else on the way is skipped)."""
        while True:
            line = self.line()
            assert line, "the proxy's stdout ended"
            try:
                message = json.loads(line)
            except ValueError:
                continue
            if (
                isinstance(message, dict)
                and message.get("id") == request_id
                and "method" not in message
            ):
                return message

    def start(self) -> dict[str, Any]:
        """The initialize handshake; the server's answer."""
        self.send(INIT)
        answer = self.answer(0)
        self.send(INITIALIZED)
        return answer

    def call(self, request_id: int | str, tool: str, **arguments: Any) -> dict[str, Any]:
        self.send(
            {
                "jsonrpc": "2.0",
                "id": request_id,
                "method": "tools/call",
                "params": {"name": tool, "arguments": arguments},
            }
        )
        return self.answer(request_id)

    def close(self) -> int:
        """Close the proxy's stdin and wait for it to exit: its status."""
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        try:
            return self.proc.wait(2 * WAIT)
        finally:
            self._release()

    def kill(self) -> None:
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.wait(WAIT)
        self._release()

    def _release(self) -> None:
        self._reader.join(WAIT)
        assert self.proc.stdout is not None
        self.proc.stdout.close()
        self._err.close()
