"""The proxy's guard takes a person's word only: ``ledger resolve``, not a worker's own resolve.

An irreversible tool's error leaves its call in doubt; the identical call is refused
until the effect is settled. Settled by ``ledger resolve`` (origin ``person``), the call
goes through; settled by a program's ``EffectLog.resolve`` (origin ``worker``, or
``reconciler`` with ``allow_self=True``), whatever person it names in ``by``, the call
is still refused, and the tool error says the worker resolved it, not a person. Both in
the proxy's own run and in an earlier run of its NAME, through the real proxy.
"""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest
from mcp.types import TextContent

from tests.builders import CHILD_TIMEOUT, PYTHON, subprocess_env
from tests.mcp.driver import Setup, run_id_in, run_session, session

OPTIONS = ("--name", "guarded", "--kind", "explode=irreversible")

AGENT = """
import sys
from ledger.effect_log import EffectLog

run_id, effect_id, store, origin = sys.argv[1:]
with EffectLog.load(run_id, store) as log:
    log.resolve(effect_id, applied=False, by="alice (on-call)", allow_self=origin == "reconciler")
"""


def _text(result: Any) -> str:
    return "".join(c.text for c in result.content if isinstance(c, TextContent))


def _resolve(setup: Setup, tmp_path: Path, run_id: str, effect_id: str, by: str) -> None:
    """Settle the effect as ``by`` says: ``ledger resolve``, or a program of its own."""
    if by == "person":
        resolved = setup.ledger("resolve", run_id, effect_id, "--not-applied", "--by", "alice")
        assert resolved.returncode == 0, resolved.stderr
        return
    script = tmp_path / "agent.py"
    script.write_text(AGENT)
    resolved = subprocess.run(
        [PYTHON, str(script), run_id, effect_id, str(setup.store), by],
        capture_output=True, text=True, env=subprocess_env(), timeout=CHILD_TIMEOUT, check=False,
    )  # fmt: skip
    assert resolved.returncode == 0, resolved.stderr


def _check(setup: Setup, by: str, run_id: str, effect_id: str, answer: tuple[bool, str]) -> None:
    error, text = answer
    calls = [c["args"]["reason"] for c in setup.calls()]
    if by == "person":
        assert "did not forward" not in text
        assert calls == ["boom", "boom"]  # forwarded: the server ran it again
        return
    assert error
    assert calls == ["boom"]  # not forwarded
    kind = "the worker itself" if by == "worker" else "a reconciler"
    assert f"did not forward this call: an identical call (effect {effect_id} of run {run_id})" in (
        text
    )
    assert f"It was resolved by {kind} (agent.py, pid " in text
    assert "as alice (on-call)), not by a person" in text
    assert "recorded with `ledger resolve`" in text
    assert "this call stays refused" in text


@pytest.mark.parametrize("by", ["person", "worker", "reconciler"])
def test_the_guard_in_the_proxys_own_run(tmp_path: Path, by: str) -> None:
    setup = Setup.make(tmp_path)
    errlog = tmp_path / "proxy.err"
    found: dict[str, Any] = {}

    async def scenario() -> None:
        async with session(setup, *OPTIONS, errlog=errlog) as client:
            await client.list_tools()
            first = await client.call_tool("explode", {"reason": "boom"})
            assert first.is_error
            assert "did not forward" not in _text(first)
            run_id = run_id_in(errlog.read_text())
            (claim,) = setup.history(run_id).claims
            _resolve(setup, tmp_path, run_id, claim.effect_id, by)
            again = await client.call_tool("explode", {"reason": "boom"})
            found.update(
                run_id=run_id, effect_id=claim.effect_id, answer=(again.is_error, _text(again))
            )

    run_session(scenario)
    _check(setup, by, found["run_id"], found["effect_id"], found["answer"])


@pytest.mark.parametrize("by", ["person", "worker", "reconciler"])
def test_the_guard_on_an_earlier_run_of_its_name(tmp_path: Path, by: str) -> None:
    setup = Setup.make(tmp_path)
    first_log, second_log = tmp_path / "first.err", tmp_path / "second.err"

    async def first() -> str:
        async with session(setup, *OPTIONS, errlog=first_log) as client:
            await client.list_tools()
            assert (await client.call_tool("explode", {"reason": "boom"})).is_error
        return run_id_in(first_log.read_text())

    run_id = run_session(first)
    (claim,) = setup.history(run_id).claims
    _resolve(setup, tmp_path, run_id, claim.effect_id, by)

    async def second() -> tuple[bool, str]:
        async with session(setup, *OPTIONS, errlog=second_log) as client:
            await client.list_tools()
            again = await client.call_tool("explode", {"reason": "boom"})
            return again.is_error, _text(again)

    _check(setup, by, run_id, claim.effect_id, run_session(second))
