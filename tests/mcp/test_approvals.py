"""``ledger mcp-proxy --approve``: a gated tool runs only under a person's yes to that exact call.

A real SDK client and the test server, through the real proxy process. The server's
own record of the calls it ran (``calls.jsonl``) says what reached it; the store says
what was asked, who answered, and which claim used the answer. ``ledger approve`` is
the real command, run as the error tells a person to run it.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import re
import shlex
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp.shared.exceptions import MCPError
from mcp.types import TextContent

from ledger import effects as fx
from ledger._mcp.approvals import (
    APPROVAL_DENIED,
    APPROVAL_REQUIRED,
    Client,
    gated,
    read_answer,
    read_client,
)
from ledger.effect_log import EffectLog
from tests.builders import PYTHON, ledger
from tests.mcp.asking import CLIENT_NAME, Person
from tests.mcp.driver import (
    SERVER,
    RawClient,
    Setup,
    run_id_in,
    run_session,
    session,
    wait_until,
)

pytestmark = pytest.mark.program

EMAIL = {"to": "bob@example.org", "body": "the refund is on its way"}


def _text(result: Any) -> str:
    return "".join(c.text for c in result.content if isinstance(c, TextContent))


async def _refused(client: Any, tool: str, args: dict[str, Any]) -> MCPError:
    """The JSON-RPC error a call gets (the test fails if it gets a result)."""
    with pytest.raises(MCPError) as caught:
        await client.call_tool(tool, args)
    return caught.value


def _approve(data: dict[str, Any], by: str) -> str:
    """Run the ``ledger approve`` command the error gives, as a person would; its output."""
    argv = shlex.split(data["command"])
    assert argv[:2] == ["ledger", "approve"], argv
    argv[argv.index("NAME")] = by
    result = ledger(*argv[1:])
    assert result.returncode == 0, result.stderr
    return result.stdout


def _approvals(setup: Setup, run_id: str) -> list[fx.ApprovalView]:
    with EffectLog.load(run_id, setup.store) as log:
        return log.approvals()


def _emails(setup: Setup) -> list[dict[str, Any]]:
    return [c for c in setup.calls() if c["tool"] == "send_email"]


def _tee(setup: Setup) -> list[str]:
    """The test server behind a tee that keeps every line it receives (``_received``)."""
    return [PYTHON, str(SERVER.parent / "tee_server.py"), str(setup.state)]


def _received(setup: Setup) -> list[dict[str, Any]]:
    """Every message that reached the server, in order."""
    lines = (setup.state / "lines.bin").read_bytes().splitlines()
    return [json.loads(line) for line in lines if line.strip()]


def test_a_gated_call_without_a_grant_never_reaches_the_server(tmp_path: Path) -> None:
    """The client gets the approval error with the ledger approve command; ungated tools run."""
    setup = Setup.make(tmp_path)
    errlog = tmp_path / "proxy.err"

    async def scenario() -> tuple[MCPError, str]:
        async with session(setup, "--approve", "send_*", errlog=errlog) as client:
            refused = await _refused(client, "send_email", EMAIL)
            wrote = await client.call_tool("write_file", {"path": "a.txt", "text": "one"})
            return refused, _text(wrote)

    refused, wrote = run_session(scenario)
    assert wrote == "wrote 3 characters"
    assert [c["tool"] for c in setup.calls()] == ["write_file"]
    assert not (setup.state / "outbox.txt").exists()
    run_id = run_id_in(errlog.read_text())
    assert refused.code == APPROVAL_REQUIRED
    data = refused.data
    [view] = _approvals(setup, run_id)
    assert view.state == "pending"
    assert data["approval_id"] == view.approval_id
    assert data["action_digest"] == view.action_digest
    assert data["expires_at"] == view.expires_at
    assert data["run_id"] == run_id
    assert data["command"] == (
        f"ledger approve {run_id} {view.approval_id} --by NAME "
        f"--expect-digest {view.action_digest[:12]} --store {setup.store}"
    )
    assert data["command"] in refused.message
    assert view.request.operation == "send_email"
    assert view.request.args == EMAIL
    # Only the ungated call was claimed: the gated one has a request, not a claim.
    assert [c.operation.name for c in setup.history(run_id).claims] == ["write_file"]


def test_after_ledger_approve_the_identical_call_runs_once(tmp_path: Path) -> None:
    """One grant, one use: the approved call runs; the next identical call asks again."""
    setup = Setup.make(tmp_path)
    errlog = tmp_path / "proxy.err"
    said: list[str] = []

    async def scenario() -> tuple[MCPError, MCPError, str]:
        async with session(setup, "--approve", "send_email", errlog=errlog) as client:
            first = await _refused(client, "send_email", EMAIL)
            said.append(_approve(first.data, "alice"))
            ran = await client.call_tool("send_email", EMAIL)
            again = await _refused(client, "send_email", EMAIL)
            return first, again, _text(ran)

    first, again, ran = run_session(scenario)
    assert ran == "sent"
    assert (setup.state / "outbox.txt").read_text() == f"{EMAIL['to']}: {EMAIL['body']}\n"
    assert len(_emails(setup)) == 1
    assert again.code == APPROVAL_REQUIRED
    assert again.data["approval_id"] != first.data["approval_id"]
    assert again.data["action_digest"] == first.data["action_digest"]
    run_id = run_id_in(errlog.read_text())
    [claim] = setup.history(run_id).claims
    assert claim.approval_id == first.data["approval_id"]
    # The effect its request reserved, and an action id a later proxy of the name finds.
    assert claim.action_id == f"mcp-proxy/ledger-test-server/{claim.effect_id}"
    assert _emails(setup)[0]["key"] == claim.idempotency_key
    views = {v.approval_id: v for v in _approvals(setup, run_id)}
    used = views[first.data["approval_id"]]
    assert used.state == "used"
    assert used.used_by == claim.effect_id
    assert used.decision is not None
    assert (used.decision.by, used.decision.source) == ("alice", fx.ApprovalSource.COMMAND)
    assert views[again.data["approval_id"]].state == "pending"
    assert first.data["approval_id"] in said[0]


def test_a_changed_argument_is_not_covered_by_the_grant(tmp_path: Path) -> None:
    """A grant for one body does not let another body through, however small the change."""
    setup = Setup.make(tmp_path)
    errlog = tmp_path / "proxy.err"
    changed = {**EMAIL, "body": EMAIL["body"] + "!"}

    async def scenario() -> tuple[MCPError, MCPError, str]:
        async with session(setup, "--approve", "send_email", errlog=errlog) as client:
            first = await _refused(client, "send_email", EMAIL)
            _approve(first.data, "alice")
            other = await _refused(client, "send_email", changed)
            ran = await client.call_tool("send_email", EMAIL)
            return first, other, _text(ran)

    first, other, ran = run_session(scenario)
    assert ran == "sent"
    assert [c["args"] for c in _emails(setup)] == [EMAIL]
    assert other.code == APPROVAL_REQUIRED
    assert other.data["approval_id"] != first.data["approval_id"]
    assert other.data["action_digest"] != first.data["action_digest"]


def test_the_gate_through_the_proxy_on_each_backend(location: Path | str, tmp_path: Path) -> None:
    """SQLite and PostgreSQL: the error, a grant from the client's form, one call sent."""
    setup = dataclasses.replace(Setup.make(tmp_path), store=location)
    errlog = tmp_path / "proxy.err"
    person = Person("approve")

    async def scenario() -> tuple[MCPError, str]:
        async with session(setup, "--approve", "send_email", errlog=errlog) as client:
            refused = await _refused(client, "send_email", EMAIL)
        async with session(
            setup, "--approve", "send_email", errlog=errlog, **person.callbacks()
        ) as client:
            return refused, _text(await client.call_tool("send_email", EMAIL))

    refused, ran = run_session(scenario)
    assert refused.code == APPROVAL_REQUIRED
    assert refused.data["command"].endswith(f"--store {shlex.quote(str(location))}")
    assert ran == "sent"
    assert len(_emails(setup)) == 1
    first, second = re.findall(r": run ([0-9a-f]{32}) in ", errlog.read_text())
    [pending] = _approvals(setup, first)  # each proxy is a run: the first one's still waits
    assert pending.state == "pending"
    [used] = _approvals(setup, second)
    assert used.state == "used"
    assert used.decision is not None
    assert (used.decision.by, used.decision.source) == (CLIENT_NAME, fx.ApprovalSource.ELICITATION)


def test_a_client_that_declares_elicitation_is_asked_and_its_grant_recorded(
    tmp_path: Path,
) -> None:
    """The person approves in the client's form: recorded as theirs, and the call runs once."""
    setup = Setup.make(tmp_path)
    errlog = tmp_path / "proxy.err"
    person = Person("approve", note="checked with Bob")

    async def scenario() -> str:
        async with session(
            setup, "--approve", "send_email", errlog=errlog, **person.callbacks()
        ) as client:
            return _text(await client.call_tool("send_email", EMAIL))

    assert run_session(scenario) == "sent"
    assert len(_emails(setup)) == 1
    run_id = run_id_in(errlog.read_text())
    [view] = _approvals(setup, run_id)
    [claim] = setup.history(run_id).claims
    assert view.state == "used"
    assert view.used_by == claim.effect_id
    assert claim.approval_id == view.approval_id
    assert view.decision is not None
    assert view.decision.decision == "granted"
    assert view.decision.by == CLIENT_NAME
    assert view.decision.source is fx.ApprovalSource.ELICITATION
    assert view.decision.note == "checked with Bob"
    [form] = person.forms
    assert "send_email" in form.message
    assert view.action_digest in form.message
    assert json.dumps(EMAIL, sort_keys=True) in form.message
    assert form.requested_schema["required"] == ["decision"]
    assert form.requested_schema["properties"]["decision"]["enum"] == ["approve", "deny"]


@pytest.mark.parametrize("answer", ["deny", "decline"])
def test_a_denial_at_the_client_is_recorded_and_the_call_not_forwarded(
    tmp_path: Path, answer: str
) -> None:
    """Deny (or decline) in the form: the client's name recorded, the error, no call."""
    setup = Setup.make(tmp_path)
    errlog = tmp_path / "proxy.err"
    person = Person(answer)

    async def scenario() -> tuple[MCPError, MCPError]:
        async with session(
            setup, "--approve", "send_email", errlog=errlog, **person.callbacks()
        ) as client:
            first = await _refused(client, "send_email", EMAIL)
            again = await _refused(client, "send_email", EMAIL)
            return first, again

    first, again = run_session(scenario)
    assert _emails(setup) == []
    run_id = run_id_in(errlog.read_text())
    [view] = _approvals(setup, run_id)
    assert view.state == "denied"
    assert view.decision is not None
    assert view.decision.by == CLIENT_NAME
    assert view.decision.source is fx.ApprovalSource.ELICITATION
    for refused in (first, again):
        assert refused.code == APPROVAL_DENIED
        assert refused.data["approval_id"] == view.approval_id
        assert refused.data["by"] == CLIENT_NAME
    assert len(person.forms) == 1  # a denied call is not asked about again
    assert setup.history(run_id).claims == ()


def test_a_client_that_does_not_answer_in_time_gets_the_error(tmp_path: Path) -> None:
    """No answer in time is nobody's answer: the approval error, no decision, no call."""
    setup = Setup.make(tmp_path)
    errlog = tmp_path / "proxy.err"
    person = Person("never")

    async def scenario() -> MCPError:
        async with session(
            setup,
            "--approve",
            "send_email",
            "--elicitation-timeout",
            "0.5",
            errlog=errlog,
            **person.callbacks(),
        ) as client:
            return await _refused(client, "send_email", EMAIL)

    refused = run_session(scenario)
    assert refused.code == APPROVAL_REQUIRED
    assert f"{CLIENT_NAME} gave no answer within 0.5 s" in refused.message
    assert _emails(setup) == []
    assert len(person.forms) == 1
    run_id = run_id_in(errlog.read_text())
    [view] = _approvals(setup, run_id)
    assert view.state == "pending"  # a person may still approve it
    assert view.decision is None
    assert refused.data["approval_id"] == view.approval_id


def test_a_dismissed_form_records_no_decision(tmp_path: Path) -> None:
    """Cancel in the client: no decision, the approval error, and ledger approve still works."""
    setup = Setup.make(tmp_path)
    errlog = tmp_path / "proxy.err"
    person = Person("cancel")

    async def scenario() -> tuple[MCPError, str]:
        async with session(
            setup, "--approve", "send_email", errlog=errlog, **person.callbacks()
        ) as client:
            refused = await _refused(client, "send_email", EMAIL)
            _approve(refused.data, "carol")
            return refused, _text(await client.call_tool("send_email", EMAIL))

    refused, ran = run_session(scenario)
    assert refused.code == APPROVAL_REQUIRED
    assert "dismissed" in refused.message
    assert ran == "sent"
    assert len(_emails(setup)) == 1
    assert len(person.forms) == 1  # the granted call is not asked about
    [view] = _approvals(setup, run_id_in(errlog.read_text()))
    assert view.decision is not None
    assert view.decision.by == "carol"


def test_the_proxy_reads_the_client_while_it_waits_for_an_answer(tmp_path: Path) -> None:
    """Another call made before the person answers is answered first: nothing waits on the form."""
    setup = Setup.make(tmp_path)
    errlog = tmp_path / "proxy.err"
    holder: dict[str, Any] = {}
    seen: list[str] = []

    async def read_first() -> None:
        seen.append(_text(await holder["client"].call_tool("read_note", {"name": "a"})))

    person = Person("approve", before=read_first)

    async def scenario() -> str:
        async with session(
            setup, "--approve", "send_email", errlog=errlog, **person.callbacks()
        ) as client:
            holder["client"] = client
            return _text(await client.call_tool("send_email", EMAIL))

    assert run_session(scenario) == "sent"
    assert seen == [""]
    assert [c["tool"] for c in setup.calls()] == ["read_note", "send_email"]


def test_an_identical_call_while_the_person_is_asked_gets_the_error(tmp_path: Path) -> None:
    """One form per approval: the identical call made meanwhile is refused, the first runs once."""
    setup = Setup.make(tmp_path)
    errlog = tmp_path / "proxy.err"
    holder: dict[str, Any] = {}
    meanwhile: list[MCPError] = []

    async def call_again() -> None:
        meanwhile.append(await _refused(holder["client"], "send_email", EMAIL))

    person = Person("approve", before=call_again)

    async def scenario() -> str:
        async with session(
            setup, "--approve", "send_email", errlog=errlog, **person.callbacks()
        ) as client:
            holder["client"] = client
            return _text(await client.call_tool("send_email", EMAIL))

    assert run_session(scenario) == "sent"
    assert len(person.forms) == 1
    assert len(_emails(setup)) == 1
    [view] = _approvals(setup, run_id_in(errlog.read_text()))
    [refused] = meanwhile
    assert refused.code == APPROVAL_REQUIRED
    assert refused.data["approval_id"] == view.approval_id
    assert view.state == "used"


def test_a_call_cancelled_while_its_form_is_open_is_dropped(tmp_path: Path) -> None:
    """The client gives up on the call: the form is withdrawn, nothing recorded, nothing sent."""
    setup = Setup.make(tmp_path)
    errlog = tmp_path / "proxy.err"
    person = Person("never")

    async def scenario() -> str:
        async with session(
            setup,
            "--approve",
            "send_email",
            "--elicitation-timeout",
            "600",  # far beyond the test's own waits: only the cancel can withdraw the form
            errlog=errlog,
            server=_tee(setup),
            **person.callbacks(),
        ) as client:
            scope = anyio.CancelScope()

            async def call() -> None:
                with scope:
                    await client.call_tool("send_email", EMAIL)

            async with anyio.create_task_group() as tasks:
                tasks.start_soon(call)
                await wait_until(lambda: person.forms, "the form")
                scope.cancel()
            await wait_until(lambda: person.withdrawn == 1, "the form withdrawn")
            return _text(await client.call_tool("read_note", {"name": "a"}))

    assert run_session(scenario) == ""
    assert [c["tool"] for c in setup.calls()] == ["read_note"]
    # Neither the call nor its cancellation reached the server.
    received = _received(setup)
    assert [m["params"]["name"] for m in received if m.get("method") == "tools/call"] == [
        "read_note"
    ]
    assert not [m for m in received if m.get("method") == "notifications/cancelled"]
    [view] = _approvals(setup, run_id_in(errlog.read_text()))
    assert view.state == "pending"
    assert view.decision is None


def test_the_approval_ttl_sets_when_a_request_expires(tmp_path: Path) -> None:
    """--approval-ttl 2h: the request expires two hours on; its reason, the patterns that gate it."""
    setup = Setup.make(tmp_path)
    errlog = tmp_path / "proxy.err"
    options = ("--approve", "read_*", "--approve", "send_*", "--approve", "*_email")

    async def scenario() -> MCPError:
        async with session(setup, *options, "--approval-ttl", "2h", errlog=errlog) as client:
            return await _refused(client, "send_email", EMAIL)

    run_session(scenario)
    [view] = _approvals(setup, run_id_in(errlog.read_text()))
    requested = dt.datetime.fromisoformat(view.request.requested_at)
    expires = dt.datetime.fromisoformat(view.request.expires_at)
    assert expires - requested == dt.timedelta(hours=2)
    assert view.request.reason == "ledger mcp-proxy --approve 'send_*' --approve '*_email'"


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["--approval-ttl", "soon"], "is not a duration"),
        (["--approval-ttl", "0"], "is not a duration"),
        (["--approval-ttl", "2w"], "is not a duration"),
        (["--elicitation-timeout", "0"], "Invalid value for '--elicitation-timeout'"),
        (["--elicitation-timeout", "x"], "Invalid value for '--elicitation-timeout'"),
    ],
)
def test_approval_option_mistakes_are_one_line_and_exit_2(
    tmp_path: Path, args: list[str], words: str
) -> None:
    """A bad --approval-ttl or --elicitation-timeout: a usage error, nothing started."""
    result = ledger("mcp-proxy", "--store", str(tmp_path / "store"), *args, "--", "true")
    assert result.returncode == 2
    assert words in result.stderr
    assert "Traceback" not in result.stderr
    assert not (tmp_path / "store").exists()


def test_a_late_answer_is_dropped_and_never_reaches_the_server(tmp_path: Path) -> None:
    """An answer after the time allowed records nothing, and the server never sees it."""
    setup = Setup.make(tmp_path)
    argv = setup.argv(
        "--approve",
        "send_email",
        "--elicitation-timeout",
        "0.5",
        "--name",
        "gate",
        server=_tee(setup),
    )
    client = RawClient(argv, tmp_path / "proxy.err")
    try:
        init = {
            "jsonrpc": "2.0",
            "id": 0,
            "method": "initialize",
            "params": {
                "protocolVersion": "2025-11-25",
                "capabilities": {"elicitation": {}},
                "clientInfo": {"name": "raw asking client", "version": "0"},
            },
        }
        client.send(init)
        client.answer(0)
        client.send({"jsonrpc": "2.0", "method": "notifications/initialized"})
        client.send(
            {
                "jsonrpc": "2.0",
                "id": 1,
                "method": "tools/call",
                "params": {"name": "send_email", "arguments": EMAIL},
            }
        )
        ask = client.message()
        assert ask["method"] == "elicitation/create"
        assert ask["params"]["mode"] == "form"
        withdrawn = client.message()
        assert withdrawn["method"] == "notifications/cancelled"
        assert withdrawn["params"]["requestId"] == ask["id"]
        refused = client.answer(1)
        assert refused["error"]["code"] == APPROVAL_REQUIRED
        late = {"action": "accept", "content": {"decision": "approve"}}
        client.send({"jsonrpc": "2.0", "id": ask["id"], "result": late})
        # A call after it: the server has seen every line before it by the time it answers.
        assert client.call(2, "read_note", name="a")["result"]["isError"] is False
    finally:
        assert client.close() == 0
    assert [m.get("method") for m in _received(setup)] == [
        "initialize",
        "notifications/initialized",
        "tools/call",
    ]
    assert [c["tool"] for c in setup.calls()] == ["read_note"]
    run_id = run_id_in((tmp_path / "proxy.err").read_text())
    [view] = _approvals(setup, run_id)
    assert view.state == "pending"


# ---------------------------------------------------------------------- the messages alone


@pytest.mark.parametrize(
    ("tool", "patterns", "expected"),
    [
        ("send_email", ("send_*",), True),
        ("send_email", ("read_*", "send_email"), True),
        ("send_email", ("*",), True),
        ("send_email", ("Send_*",), False),  # tool names are case-sensitive
        ("resend_email", ("send_*",), False),
        ("send_email", (), False),
    ],
)
def test_approve_patterns_are_shell_style_and_case_sensitive(
    tool: str, patterns: tuple[str, ...], expected: bool
) -> None:
    """--approve TOOL_PATTERN matches the whole tool name, as a shell pattern."""
    assert gated(tool, patterns) is expected


@pytest.mark.parametrize(
    ("capabilities", "asks"),
    [
        ({"elicitation": {}}, True),  # before URL elicitation: form only
        ({"elicitation": {"form": {}}}, True),
        ({"elicitation": {"form": {}, "url": {}}}, True),
        ({"elicitation": {"url": {}}}, False),  # cannot show a form
        ({}, False),
        ({"sampling": {}}, False),
    ],
)
def test_the_client_is_asked_only_when_it_declares_form_elicitation(
    capabilities: dict[str, Any], asks: bool
) -> None:
    """capabilities.elicitation, empty or with form: asked; URL only or none: the error."""
    params = {
        "protocolVersion": "2025-11-25",
        "capabilities": capabilities,
        "clientInfo": {"name": "  a\tclient\n", "version": "1"},
    }
    assert read_client(params) == Client("a client", asks)
    assert read_client({"capabilities": "no"}) is None


@pytest.mark.parametrize(
    ("message", "granted", "note"),
    [
        ({"result": {"action": "accept", "content": {"decision": "approve"}}}, True, ""),
        (
            {"result": {"action": "accept", "content": {"decision": "deny", "note": " no "}}},
            False,
            "no",
        ),
        ({"result": {"action": "decline"}}, False, "declined at the client"),
        ({"result": {"action": "cancel"}}, None, ""),
        # Accepted with nothing filled in: the person confirmed the action.
        ({"result": {"action": "accept"}}, True, ""),
        ({"result": {"action": "accept", "content": {"note": "fine"}}}, True, "fine"),
        # A client that fills in a confirmation its own way.
        ({"result": {"action": "accept", "content": {"decision": "Yes"}}}, True, ""),
        ({"result": {"action": "accept", "content": {"approved": True}}}, True, ""),
        ({"result": {"action": "accept", "content": {"confirm": False}}}, False, ""),
        ({"result": {"action": "accept", "content": {"decision": "later"}}}, None, ""),
        ({"result": {"action": "accept", "content": {"decision": 3}}}, None, ""),
        ({"result": {"action": "accept", "content": {"colour": "blue"}}}, None, ""),
        ({"result": {"action": "maybe"}}, None, ""),
        ({"error": {"code": -32600, "message": "Elicitation not supported"}}, None, ""),
    ],
)
def test_an_accepted_form_or_a_decline_is_a_decision(
    message: dict[str, Any], granted: bool | None, note: str
) -> None:
    """accept (its answer, or a bare confirmation) or decline: a decision; else nobody's."""
    answer = read_answer(message)
    assert (answer.granted, answer.note) == (granted, note)
    assert bool(answer.why) is (granted is None)
