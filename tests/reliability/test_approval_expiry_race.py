"""A person's grant racing the request's expiry, and the worker's claim racing both.

Two real processes share one run. The worker makes a gated call with a short ``ttl``
and makes it again and again while it waits; a person's process grants each request at
a moment drawn around its deadline (before it, at it, just after it). Round after
round, whatever the order the two processes and the store's clock fall in:

- no decision is recorded at or after its request's expiry (the store's clock refuses
  it, and refusing it writes nothing: an expired request has no decision row);
- no claim is made under an approval after its expiry, nor without a grant before it,
  and no approval is used twice;
- every refused grant left the store as it was, and every body that ran, ran once,
  under a grant.
"""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest

from ledger import effects as fx
from ledger.effect_log import EffectLog, new_run_id
from tests.backends import Backend
from tests.builders import finish_children, kill_children, ledger, start_child

pytestmark = pytest.mark.program

ROUNDS = 24
TTL_MS = 400

WORKER = """
import json, sys, time
from datetime import timedelta
from pathlib import Path
import ledger
from ledger import effects as fx
from ledger.effect_log import EffectLog, EffectPersistenceError

store, run_id, workdir, rounds, ttl_ms = sys.argv[1:6]
work = Path(workdir)
policy = fx.ApprovalPolicy(ttl=timedelta(milliseconds=int(ttl_ms)))
ran, refused = [], []
with open(work / "asked", "a") as asked, EffectLog(run_id, store) as log:
    for i in range(int(rounds)):
        first, deadline = None, time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                with log.effect("refund", args={"round": i}, kind=fx.EffectKind.IRREVERSIBLE,
                                approval=policy) as call:
                    ran.append(call.effect_id)
                break
            except ledger.ApprovalPending as e:
                if first is None:
                    first = e.approval_id
                    asked.write(f"{e.approval_id} {e.expires_at}\\n")
                    asked.flush()
                elif e.approval_id != first:
                    break  # it expired (or lapsed) unused: the call asked anew
            except EffectPersistenceError as e:
                refused.append(str(e))  # the store refused a claim under it: not run
            time.sleep(0.001)
        else:
            raise SystemExit(f"round {i} never ended")
    asked.write("done\\n")
print(json.dumps({"ran": ran, "refused": refused}), flush=True)
"""

PERSON = """
import json, random, sys, time
from datetime import datetime, timedelta, timezone
from pathlib import Path
from ledger.effect_log import EffectLog, EffectPersistenceError

store, run_id, workdir, ttl_ms, seed = sys.argv[1:6]
rng = random.Random(int(seed))
ttl = int(ttl_ms) / 1000
asked = Path(workdir) / "asked"
answers, seen = [], 0
deadline = time.monotonic() + 300
while time.monotonic() < deadline:
    lines = asked.read_text().splitlines() if asked.exists() else []
    if seen == len(lines):
        time.sleep(0.002)
        continue
    line = lines[seen]
    seen += 1
    if line == "done":
        break
    approval_id, expires_at = line.split()
    # Loaded first, so that the grant leaves at the moment aimed at: before, at, or just
    # after the deadline. The worker writes nothing while it waits, so the log is current
    # until the worker asks anew, after the expiry.
    log = EffectLog._visit(run_id, store, "ledger approve")
    at = datetime.fromisoformat(expires_at) + timedelta(seconds=rng.uniform(-0.5, 0.1) * ttl)
    time.sleep(max(0.0, (at - datetime.now(timezone.utc)).total_seconds()))
    for _ in range(50):
        try:
            log.approve(approval_id, by="alice")
            answers.append([approval_id, "granted", ""])
            break
        except ValueError as e:
            answers.append([approval_id, "refused", str(e)])
            break
        except EffectPersistenceError as e:  # the worker wrote meanwhile: load it again
            last = str(e)
            log.close()
            log = EffectLog._visit(run_id, store, "ledger approve")
    else:
        answers.append([approval_id, "error", last])
    log.close()
print(json.dumps(answers), flush=True)
"""


def test_grants_racing_the_expiry_never_outlive_it(
    backend: Backend, location: Path | str, tmp_path: Path
) -> None:
    """Over many rounds: no decision at or after expiry, no claim after it or without a grant."""
    run_id = new_run_id()
    procs = [
        start_child(textwrap.dedent(WORKER), location, run_id, tmp_path, ROUNDS, TTL_MS),
        start_child(textwrap.dedent(PERSON), location, run_id, tmp_path, TTL_MS, 32),
    ]
    try:
        worker_out, person_out = finish_children(procs)
    except BaseException:
        print(kill_children(procs))
        raise
    worker = json.loads(worker_out)
    answers = {a: (word, why) for a, word, why in json.loads(person_out)}
    assert not [a for a, (word, _) in answers.items() if word == "error"], answers
    checked = ledger("verify", "--store", str(location))
    assert checked.returncode == 0, checked.stdout + checked.stderr

    with EffectLog.load(run_id, location) as log:
        history = log.history()
        views = {v.approval_id: v for v in log.approvals()}
    requests = {r.approval_id: r for r in history.approval_requests}
    decisions = {d.approval_id: d for d in history.approval_decisions}

    # A grant is recorded exactly when the person was told so, and always before the expiry.
    assert {a for a, (word, _) in answers.items() if word == "granted"} == set(decisions)
    for approval_id, decision in decisions.items():
        assert decision.decision == "granted"
        assert decision.decided_at < requests[approval_id].expires_at
    # A refused grant wrote nothing: its request is expired, no one's answer.
    for approval_id, (word, why) in answers.items():
        if word == "refused":
            assert "expired" in why, why
            assert views[approval_id].state == "expired"
            assert views[approval_id].decision is None

    # Every claim under an approval follows its grant, precedes its expiry, and is alone.
    under = [c for c in history.claims if c.approval_id is not None]
    assert len({c.approval_id for c in under}) == len(under)
    for claim in under:
        assert claim.approval_id is not None
        grant = decisions[claim.approval_id]
        assert grant.seq < claim.seq
        assert claim.recorded_at < requests[claim.approval_id].expires_at
        assert claim.effect_id == requests[claim.approval_id].effect_id
    assert len(under) == len(history.claims)
    # What ran, ran once, under a grant; a grant not used lapsed.
    assert sorted(worker["ran"]) == sorted(c.effect_id for c in under)
    assert len(set(worker["ran"])) == len(worker["ran"])
    used = {c.approval_id for c in under}
    for approval_id in set(decisions) - used:
        assert views[approval_id].used_by is None
    # The race happened both ways: some grants in time, some refused as expired.
    granted = sum(word == "granted" for word, _ in answers.values())
    refused = sum(word == "refused" for word, _ in answers.values())
    print(
        f"{backend.name}: {ROUNDS} rounds, {granted} granted ({len(used)} used), "
        f"{refused} refused as expired, {len(worker['refused'])} claims refused by the store"
    )
    assert granted + refused == ROUNDS
    assert granted > 0
    assert refused > 0
    for error in worker["refused"]:
        assert "expired" in error, error
    assert {d.source for d in decisions.values()} == {fx.ApprovalSource.COMMAND}
