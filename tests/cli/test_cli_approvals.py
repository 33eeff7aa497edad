"""Approvals through the real ``ledger`` command: the inbox, approve, deny, and where they show.

The worker is this process: a log whose gated call asks for approval
(``ApprovalPending``); the person is the ``ledger`` command in a process of its own, as
the log refuses to approve its own requests. Each test runs once per storage backend.
"""

from __future__ import annotations

import json
import os
import pwd
import re
import socket
import sqlite3
import time
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from ledger import effects as fx
from ledger.effect_log import EffectLog, new_run_id
from ledger.errors import ApprovalDenied, ApprovalPending
from tests.backends import BACKENDS, Backend
from tests.builders import BURST_TIMEOUT, ledger, ledger_json, ledger_ok

pytestmark = pytest.mark.program

POLICY = fx.ApprovalPolicy(ttl=timedelta(hours=1), reason="refunds over 100")
ARGS = {"amount": 150, "order": "A-1017"}


@pytest.fixture(params=BACKENDS, ids=lambda b: b.name)
def backend(request: pytest.FixtureRequest) -> Backend:
    """Each storage backend in turn."""
    found: Backend = request.param
    return found


@pytest.fixture
def store(backend: Backend, tmp_path: Path) -> Path | str:
    """A fresh store location of the backend."""
    return backend.location(tmp_path)


class Worker:
    """A worker whose refunds need a person's approval; it counts the calls that ran."""

    def __init__(self, store: Path | str, policy: fx.ApprovalPolicy = POLICY) -> None:
        self.log = EffectLog(new_run_id(), store, writer_name="refund-bot")
        self.policy = policy
        self.ran: list[dict[str, Any]] = []

    @property
    def run_id(self) -> str:
        return self.log.run_id

    def refund(self, args: dict[str, Any] = ARGS) -> str:
        """Make the call; its effect id if it ran (else the gate raises)."""
        with self.log.effect(
            "refund", args=args, kind=fx.EffectKind.IRREVERSIBLE, approval=self.policy
        ) as call:
            self.ran.append(args)
            return call.effect_id

    def ask(self, args: dict[str, Any] = ARGS) -> ApprovalPending:
        """Make the call, which must wait for a person: what the gate says."""
        with pytest.raises(ApprovalPending) as pending:
            self.refund(args)
        return pending.value


@pytest.fixture
def worker(store: Path | str) -> Iterator[Worker]:
    """The worker of one run of the store, closed after the test."""
    made = Worker(store)
    yield made
    made.log.close()


def _refused(*args: str, code: int = 1) -> str:
    """The one-line message of a command that must fail with ``code``."""
    result = ledger(*args)
    assert result.returncode == code, (result.stdout, result.stderr)
    assert "Traceback" not in result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    return lines[0]


def _records(store: Path | str, run_id: str) -> list[dict[str, Any]]:
    records: list[dict[str, Any]] = ledger_json("show", run_id, "--store", str(store), "--json")[
        "records"
    ]
    return records


def _user() -> str:
    return pwd.getpwuid(os.getuid()).pw_name


# --------------------------------------------------------------------------- the inbox


def test_the_inbox_lists_a_pending_request_with_its_arguments_and_requester(
    store: Path | str, worker: Worker
) -> None:
    """A run whose first record is a request: the inbox shows tool, args, digest, requester, expiry."""
    asked = worker.ask()
    at = ("--store", str(store))
    (listed,) = ledger_json("approvals", *at, "--json")
    assert listed["run_id"] == worker.run_id
    assert listed["approval_id"] == asked.approval_id
    assert listed["state"] == "pending"
    assert listed["decision"] is None
    request = listed["request"]
    assert request["operation"] == "refund"
    assert request["args"] == ARGS
    assert request["action_digest"] == asked.action_digest
    assert request["expires_at"] == asked.expires_at
    assert (request["os_user"], request["host"], request["pid"]) == (
        _user(),
        socket.gethostname(),
        os.getpid(),
    )
    text = ledger_ok("approvals", *at)
    row = text.splitlines()[1]
    assert "pending" in row
    assert "refund" in row
    assert asked.action_digest[:12] in row
    assert f"{_user()}@{socket.gethostname()}" in row
    assert f"pid {os.getpid()}" in row
    assert '{"amount":150,"order":"A-1017"}' in row
    assert re.search(r"\bin \d+m\b", row)  # expires in about an hour
    command = (
        f"ledger approve {worker.run_id} {asked.approval_id} --by NAME "
        f"--expect-digest {asked.action_digest[:12]}"
    )
    assert command in text
    # The run holds nothing but the request: its times are the request's.
    (run,) = ledger_json("runs", *at, "--json")
    assert (run["first_at"], run["last_at"]) == (asked_at := request["requested_at"], asked_at)
    # The same with RUN given as a prefix; an unknown RUN is a usage mistake.
    assert (
        ledger_json("approvals", worker.run_id[:6], *at, "--json")[0]["approval_id"]
        == asked.approval_id
    )
    other = "f" * 32 if not worker.run_id.startswith("f") else "e" * 32
    assert "no run matches" in _refused("approvals", other, *at, code=2)


def test_the_inbox_without_all_leaves_out_what_is_decided(
    store: Path | str, worker: Worker
) -> None:
    """Decided requests leave the inbox; --all lists every request with its state."""
    first = worker.ask()
    second = worker.ask({"amount": 420, "order": "A-1018"})
    at = ("--store", str(store))
    ledger_ok("deny", worker.run_id, first.approval_id, "--by", "bob", *at)
    assert [v["approval_id"] for v in ledger_json("approvals", *at, "--json")] == [
        second.approval_id
    ]
    every = {v["approval_id"]: v["state"] for v in ledger_json("approvals", "--all", *at, "--json")}
    assert every == {first.approval_id: "denied", second.approval_id: "pending"}
    (row,) = [
        line
        for line in ledger_ok("approvals", "--all", *at).splitlines()
        if first.approval_id[:12] in line
    ]
    assert "denied" in row
    assert "bob (command)" in row
    ledger_ok("deny", worker.run_id, second.approval_id, "--by", "bob", *at)
    assert ledger_ok("approvals", *at).strip() == "no approval request is pending"


# --------------------------------------------------------------------------- approve, deny


def test_a_wrong_expected_digest_is_refused_and_writes_nothing(
    store: Path | str, worker: Worker
) -> None:
    """--expect-digest that the request's digest does not start with: exit 1, no record written."""
    asked = worker.ask()
    at = ("--store", str(store))
    before = _records(store, worker.run_id)
    wrong = "0123456789ab" if not asked.action_digest.startswith("0123") else "fedcba987654"
    message = _refused(
        "approve", worker.run_id, asked.approval_id, "--by", "alice", "--expect-digest", wrong, *at
    )
    assert asked.action_digest in message
    assert _records(store, worker.run_id) == before
    assert ledger_json("approvals", *at, "--json")[0]["state"] == "pending"
    worker.ask()  # still waiting, and the call did not run
    assert worker.ran == []


def test_approve_then_the_identical_call_runs_once(store: Path | str, worker: Worker) -> None:
    """After `ledger approve` the worker's identical call runs; the next identical call asks again."""
    asked = worker.ask()
    at = ("--store", str(store))
    printed = ledger_ok(
        "approve",
        worker.run_id[:8],
        asked.approval_id[:8],
        "--by",
        "alice",
        "--expect-digest",
        asked.action_digest[:12].upper(),
        "--note",
        "customer called",
        *at,
    )
    assert f"run {worker.run_id}, approval {asked.approval_id}" in printed
    assert re.search(r"tool\s+refund", printed)
    assert '{"amount":150,"order":"A-1017"}' in printed
    assert asked.action_digest in printed
    assert asked.effect_id in printed
    assert re.search(r"^granted by alice at .*: customer called$", printed, re.MULTILINE)
    effect_id = worker.refund()
    assert effect_id == asked.effect_id
    assert worker.ran == [ARGS]
    again = worker.ask()  # the grant is used: the same call needs a new approval
    assert again.approval_id != asked.approval_id
    assert worker.ran == [ARGS]
    (decision,) = [
        r["record"] for r in _records(store, worker.run_id) if r["type"] == "approval_decision"
    ]
    assert (decision["by"], decision["source"], decision["program"]) == (
        "alice",
        "command",
        "ledger approve",
    )
    assert decision["pid"] != os.getpid()


def test_deny_makes_the_call_raise_approval_denied(store: Path | str, worker: Worker) -> None:
    """After `ledger deny` the call raises ApprovalDenied with the name and note; it never runs."""
    asked = worker.ask()
    at = ("--store", str(store))
    printed = ledger_json(
        "deny", worker.run_id, asked.approval_id, "--by", "bob", "--note", "no", *at, "--json"
    )
    assert printed["state"] == "denied"
    assert (printed["decision"]["decision"], printed["decision"]["by"]) == ("denied", "bob")
    assert printed["decision"]["program"] == "ledger deny"
    with pytest.raises(ApprovalDenied) as denied:
        worker.refund()
    assert (denied.value.by, denied.value.note) == ("bob", "no")
    assert worker.ran == []
    assert worker.log.decide(asked.effect_id).step is fx.NextStep.DENIED


def test_a_request_is_decided_once(store: Path | str, worker: Worker) -> None:
    """Approving twice, or denying what was approved, fails in one line and writes nothing."""
    asked = worker.ask()
    at = ("--store", str(store))
    ledger_ok("approve", worker.run_id, asked.approval_id, "--by", "alice", *at)
    written = _records(store, worker.run_id)
    again = _refused("approve", worker.run_id, asked.approval_id, "--by", "carol", *at)
    assert "already decided: granted by alice" in again
    assert "already decided" in _refused(
        "deny", worker.run_id, asked.approval_id, "--by", "bob", *at
    )
    assert _records(store, worker.run_id) == written


def test_an_unknown_or_ambiguous_approval_is_a_usage_mistake(
    store: Path | str, worker: Worker
) -> None:
    """An APPROVAL that names no request, or several, exits 2 naming the run."""
    asked = [worker.ask({"amount": n, "order": f"A-{n}"}) for n in range(101, 121)]
    at = ("--store", str(store))
    message = _refused("approve", worker.run_id, "x", "--by", "alice", *at, code=2)
    assert f"no approval request of run {worker.run_id} matches 'x'" in message
    # Twenty ids of 32 hex characters: some share their first character.
    firsts = [a.approval_id[0] for a in asked]
    shared = next(c for c in firsts if firsts.count(c) > 1)
    message = _refused("deny", worker.run_id, shared, "--by", "bob", *at, code=2)
    assert "give more characters" in message


def test_an_expired_request_shows_expired_and_cannot_be_approved(store: Path | str) -> None:
    """A request left unanswered past its ttl is `expired` (nobody's answer) and refused."""
    worker = Worker(store, fx.ApprovalPolicy(ttl=timedelta(seconds=1)))
    try:
        asked = worker.ask()
        at = ("--store", str(store))
        deadline = time.monotonic() + BURST_TIMEOUT
        while ledger_json("approvals", "--all", *at, "--json")[0]["state"] == "pending":
            assert time.monotonic() < deadline, "the request never expired"
            time.sleep(0.2)
        (view,) = ledger_json("approvals", "--all", *at, "--json")
        assert (view["state"], view["decision"]) == ("expired", None)
        assert ledger_json("approvals", *at, "--json") == []
        assert "ago" in ledger_ok("approvals", "--all", *at).splitlines()[1]
        message = _refused("approve", worker.run_id, asked.approval_id, "--by", "alice", *at)
        assert f"expired at {asked.expires_at}" in message
        assert not [r for r in _records(store, worker.run_id) if r["type"] == "approval_decision"]
        assert worker.log.decide(asked.effect_id).step is fx.NextStep.ESCALATE
    finally:
        worker.log.close()


# --------------------------------------------------------------------------- where they show


def _decided_run(store: Path | str, worker: Worker) -> tuple[ApprovalPending, str, ApprovalPending]:
    """One request granted and used, one still pending: (used, its claim, pending)."""
    used = worker.ask()
    ledger_ok("approve", worker.run_id, used.approval_id, "--by", "alice", "--store", str(store))
    effect_id = worker.refund()
    pending = worker.ask({"amount": 420, "order": "A-1018"})
    return used, effect_id, pending


def test_show_says_each_approvals_state_decider_and_claim(
    store: Path | str, worker: Worker
) -> None:
    """`ledger show` (text and --json): state, who decided and when, the claim that used it."""
    used, effect_id, pending = _decided_run(store, worker)
    at = ("--store", str(store))
    shown = ledger_json("show", worker.run_id, *at, "--json")
    by_id = {a["approval_id"]: a for a in shown["approvals"]}
    assert by_id[used.approval_id]["state"] == "used"
    assert by_id[used.approval_id]["used_by"] == effect_id
    assert by_id[used.approval_id]["decision"]["by"] == "alice"
    assert by_id[pending.approval_id]["state"] == "pending"
    (claim,) = [r["record"] for r in shown["records"] if r["type"] == "claim"]
    assert claim["approval_id"] == used.approval_id
    text = ledger_ok("show", worker.run_id, *at)
    (line,) = [ln for ln in text.splitlines() if ln.startswith(used.approval_id[:12])]
    decided_at = by_id[used.approval_id]["decision"]["decided_at"]
    assert "used" in line
    assert "alice (command)" in line
    assert decided_at in line
    assert effect_id[:12] in line
    assert f"under approval {used.approval_id[:12]}" in text


def test_status_says_which_approval_each_claim_was_made_under(
    store: Path | str, worker: Worker
) -> None:
    """`ledger status --json` rows carry their approval; the text lists every request."""
    used, effect_id, pending = _decided_run(store, worker)
    at = ("--store", str(store))
    (row,) = ledger_json("status", *at, "--json")
    assert row["effect_id"] == effect_id
    approval = row["approval"]
    assert (approval["approval_id"], approval["state"], approval["decided_by"]) == (
        used.approval_id,
        "used",
        "alice",
    )
    assert approval["source"] == "command"
    assert approval["decided_at"]
    text = ledger_ok("status", *at)
    lines = {ln.split()[1]: ln for ln in text.splitlines() if ln.startswith(worker.run_id)}
    assert "used" in lines[used.approval_id]
    assert "alice (command)" in lines[used.approval_id]
    assert effect_id in lines[used.approval_id]
    assert "pending" in lines[pending.approval_id]


def test_status_attention_lists_a_pending_approval_with_the_command(
    store: Path | str, worker: Worker
) -> None:
    """A pending request needs a person: listed with `ledger approve`, exit 1; none once decided."""
    asked = worker.ask()
    at = ("--store", str(store))
    result = ledger("status", "--attention", "--json", *at)
    assert result.returncode == 1, result.stderr
    (listed,) = json.loads(result.stdout)
    assert (listed["run_id"], listed["effect_id"], listed["operation"]) == (
        worker.run_id,
        asked.effect_id,
        "refund",
    )
    assert listed["approval"]["approval_id"] == asked.approval_id
    assert listed["approval"]["state"] == "pending"
    assert listed["urgency"] == 5
    assert listed["next_step"] == "wait"
    assert listed["action"] == (
        f"ledger approve {worker.run_id} {asked.approval_id} --by NAME "
        f"--expect-digest {asked.action_digest[:12]}"
    )
    text = ledger("status", "--attention", *at)
    assert text.returncode == 1
    assert f"{asked.approval_id}: {listed['action']}" in text.stdout
    ledger_ok("deny", worker.run_id, asked.approval_id, "--by", "bob", *at)
    assert ledger_ok("status", "--attention", *at).strip() == "nothing needs a person"


def test_the_report_says_each_approvals_state_decider_and_claim(
    store: Path | str, worker: Worker, tmp_path: Path
) -> None:
    """The page lists the pending request among what needs a person, and every approval."""
    used, effect_id, pending = _decided_run(store, worker)
    page = tmp_path / "page.html"
    ledger_ok("report", "--store", str(store), "-o", str(page))
    html = page.read_text(encoding="utf-8")
    waiting = re.findall(r'<tr class="approval-waiting"[^>]*data-approval="(\w+)"', html)
    assert waiting == [pending.approval_id]
    assert f"ledger approve {worker.run_id} {pending.approval_id} --expect-digest" in html
    rows = dict(
        re.findall(r'<tr class="approval" [^>]*data-approval="(\w+)"(.*?)</tr>', html, re.DOTALL)
    )
    assert set(rows) == {used.approval_id, pending.approval_id}
    assert 'data-state="used"' in rows[used.approval_id]
    assert "alice" in rows[used.approval_id]
    assert f'data-id="{effect_id}"' in rows[used.approval_id]
    decided_at = ledger_json("show", worker.run_id, "--store", str(store), "--json")["approvals"][
        0
    ]["decision"]["decided_at"]
    assert decided_at.replace("T", " ").removesuffix("+00:00") in rows[used.approval_id]
    assert 'data-state="pending"' in rows[pending.approval_id]


# --------------------------------------------------------------------------- export, import


def test_export_then_import_keeps_the_approvals_and_verifies(
    backend: Backend, store: Path | str, worker: Worker, tmp_path: Path
) -> None:
    """A run with a used, a denied and a pending approval round-trips through JSON lines."""
    _decided_run(store, worker)
    denied = worker.ask({"amount": 99, "order": "A-1019"})
    ledger_ok("deny", worker.run_id, denied.approval_id, "--by", "bob", "--store", str(store))
    worker.log.close()
    exported = tmp_path / f"{worker.run_id}.jsonl"
    ledger_ok("export", worker.run_id, "--store", str(store), "-o", str(exported))
    types = [json.loads(line)["type"] for line in exported.read_text().splitlines()]
    assert types.count("approval_request") == 3
    assert types.count("approval_decision") == 2
    other = backend.location(tmp_path / "other")
    ledger_ok("import", str(exported), "--store", str(other))
    assert ledger_json("verify", "--store", str(other), "--json")["ok"]
    before = ledger_json("approvals", "--all", "--store", str(store), "--json")
    after = ledger_json("approvals", "--all", "--store", str(other), "--json")
    assert after == before
    assert {v["state"] for v in after} == {"used", "denied", "pending"}
    assert ledger_json("show", worker.run_id, "--store", str(other), "--json")[
        "records"
    ] == _records(store, worker.run_id)


# --------------------------------------------------------------------------- forged rows


def test_a_request_whose_arguments_were_changed_is_not_shown_nor_approved(tmp_path: Path) -> None:
    """Arguments changed in the store after the request (triggers dropped): refused, not shown."""
    store = tmp_path / "store"
    worker = Worker(store)
    try:
        asked = worker.ask()
    finally:
        worker.log.close()
    conn = sqlite3.connect(store / "ledger.sqlite3", isolation_level=None)
    try:
        conn.execute("DROP TRIGGER approval_requests_no_update")
        conn.execute(
            "UPDATE approval_requests SET args = ? WHERE approval_id = ?",
            ('{"amount":15000,"order":"A-1017"}', asked.approval_id),
        )
    finally:
        conn.close()
    at = ("--store", str(store))
    shown = ledger("approvals", "--json", *at)
    assert shown.returncode == 1
    assert json.loads(shown.stdout) == []
    assert f"run {worker.run_id} does not validate" in shown.stderr
    approved = ledger("approve", worker.run_id, asked.approval_id, "--by", "alice", *at)
    assert approved.returncode == 1
    assert "Traceback" not in approved.stderr
    # The writer says it put the dropped trigger back, then refuses the run.
    assert "chain broken at seq 1" in approved.stderr.strip().splitlines()[-1]
    assert json.loads(ledger("approvals", "--json", *at).stdout) == []
