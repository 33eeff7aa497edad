"""The `ledger` commands, run as the installed console script against real stores.

One store, built with the library, holds five runs: "ok" (every effect verified),
"crash" (claims interrupted by a crash, then recovered: one contradicted, one
unverified), "slow" (an effect still RUNNING), "fail" (a FAILED / NONE effect, a
FAILED / POSSIBLE one and a stale observation) and "orphan" (a claim never given an
outcome). "ok" and "crash" share their first character, so that character is an
ambiguous prefix; every other run starts with a character of its own. Commands that
write get a store of their own. Every expectation is computed with the library
(``EffectLog.load`` and ``assess``), never copied from the command's output.

Each command costs a Python start-up with SQLAlchemy and Alembic (most of a second), so
independent invocations run concurrently and read-only results are shared.
"""

from __future__ import annotations

import dataclasses
import importlib.metadata
import json
import os
import pty
import random
import re
import shutil
import signal
import socket
import sqlite3
import subprocess
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest

from ledger import effects as fx
from ledger.effect_log import EffectLog, new_run_id
from ledger.resources import FilesystemRoot
from ledger.sqlite.store import acquire, release
from tests.builders import LEDGER, PYTHON, file_ref, ledger, ledger_all, op, sha, subprocess_env

HEX = "0123456789abcdef"
RUN_NAMES = ("ok", "crash", "slow", "fail", "orphan")
SHOWN = ("crash", "slow", "fail")  # between them: every execution, verdict and evidence kind

RUNS_KEYS = {
    "run_id",
    "first_at",
    "last_at",
    "host",
    "pid",
    "writer_name",
    "claims",
    "pending",
    "unverified",
    "contradicted",
    "verified",
    "failed",
    "problem",
}
STATUS_KEYS = {
    "run_id",
    "seq",
    "effect_id",
    "operation",
    "execution",
    "impact",
    "verdict",
    "unresolved_impact",
    "claimed_at",
    "kind",
    "idempotency_key",
    "resolution",
    "next_step",
    "run_problem",
    "step",
    "approval",
}
ASSESSMENT_KEYS = {
    "effect_id",
    "verdict",
    "execution",
    "impact",
    "unresolved_impact",
    "evidence",
    "stale",
    "resolution",
}
OUTCOME_KEYS = {
    "effect_id",
    "seq",
    "execution",
    "impact",
    "execution_id",
    "replayed",
    "recorded_at",
    "result",
    "result_recorded",
}

VERDICTS = ("pending", "unverified", "contradicted", "verified", "failed")
RUNS_HEADER = ["RUN", "FIRST", "LAST", "WRITER", "CLAIMS", *(v.upper() for v in VERDICTS)]
STATUS_HEADER = [
    "RUN",
    "SEQ",
    "EFFECT",
    "OPERATION",
    "KIND",
    "EXECUTION",
    "IMPACT",
    "VERDICT",
    "UNRESOLVED",
    "NEXT",
]

Result = subprocess.CompletedProcess[str]


# --------------------------------------------------------------------------- running


def _ok(result: Result) -> str:
    assert result.returncode == 0, result.stderr
    assert result.stderr == ""
    assert "\x1b[" not in result.stdout  # no colours when stdout is a pipe
    return result.stdout


def _json(result: Result) -> object:
    return json.loads(_ok(result))


def _one_line_error(result: Result, code: int) -> str:
    assert result.returncode == code, (result.stdout, result.stderr)
    assert "Traceback" not in result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("Error: "), result.stderr
    assert result.stdout == ""
    return lines[0]


def _split(line: str) -> list[str]:
    return re.split(r" {2,}", line.strip())


def _table(text: str) -> list[dict[str, str]]:
    """An aligned table as one dict per row, split on runs of two or more spaces.

    A line that starts with a space goes on the last cell of the row above (a wrapped
    table's text, broken after "; ").
    """
    header, *lines = [line for line in text.splitlines() if line.strip()]
    names = _split(header)
    rows: list[str] = []
    for line in lines:
        if line.startswith(" "):
            rows[-1] += " " + line.strip()
        else:
            rows.append(line)
    parsed = []
    for row in rows:
        cells = _split(row)
        assert len(cells) == len(names), (names, row)
        parsed.append(dict(zip(names, cells, strict=True)))
    return parsed


# --------------------------------------------------------------------------- the store


@dataclasses.dataclass(frozen=True)
class Built:
    """A store built with the library, and what the library says about it."""

    directory: Path
    ids: dict[str, str]
    histories: dict[str, fx.History]

    def run(self, name: str) -> str:
        return self.ids[name]

    def history(self, name: str) -> fx.History:
        return self.histories[self.ids[name]]

    def assessments(self, run_id: str) -> list[fx.Assessment]:
        history = self.histories[run_id]
        return [fx.assess(claim, history) for claim in history.claims]

    def status_rows(self, run_id: str | None = None) -> list[dict[str, object]]:
        """The expected `ledger status --json`, oldest claim first."""
        rows = []
        for rid, history in self.histories.items():
            if run_id is not None and rid != run_id:
                continue
            for claim in history.claims:
                a = fx.assess(claim, history)
                decision = fx.decide(claim, history)
                rows.append(
                    {
                        "run_id": rid,
                        "seq": claim.seq,
                        "effect_id": claim.effect_id,
                        "operation": claim.operation.name,
                        "execution": None if a.execution is None else a.execution.value,
                        "impact": None if a.impact is None else a.impact.value,
                        "verdict": a.verdict.value,
                        "unresolved_impact": a.unresolved_impact,
                        "claimed_at": claim.recorded_at,
                        "kind": claim.kind.value,
                        "idempotency_key": claim.idempotency_key,
                        "resolution": a.resolution,
                        "next_step": decision.step.value,
                        "run_problem": None,
                        "step": claim.step,
                        "approval": None,  # none of these claims needed one
                    }
                )
        return sorted(rows, key=lambda r: (r["claimed_at"], r["run_id"], r["seq"]))


def _run_ids() -> dict[str, str]:
    """Fresh run ids: "ok" and "crash" share a first character, the others do not."""
    ids = {"ok": new_run_id()}
    twin = new_run_id()
    while twin[0] != ids["ok"][0]:
        twin = new_run_id()
    ids["crash"] = twin
    for name in RUN_NAMES[2:]:
        rid = new_run_id()
        while rid[0] in {i[0] for i in ids.values()}:
            rid = new_run_id()
        ids[name] = rid
    return ids


def _observe(log: EffectLog, obs_id: str, ref: fx.ResourceRef, data: bytes | None) -> None:
    log.observe(
        observation_id=obs_id,
        resource=ref,
        mechanism=fx.ObservationMechanism.FILESYSTEM_READ,
        coverage=fx.Coverage.COMPLETE,
        source_action_id=f"check-{obs_id}",
        exists=data is not None,
        sha256=None if data is None else sha(data),
    )


def _load_all(directory: Path, run_ids: Sequence[str]) -> dict[str, fx.History]:
    histories = {}
    for rid in run_ids:
        with EffectLog.load(rid, directory) as log:
            histories[rid] = log.history()
    return histories


def _build(tmp: Path) -> Built:
    directory = tmp / "store"
    (tmp / "sandbox" / "logs").mkdir(parents=True)
    root = FilesystemRoot.seal(tmp / "sandbox")
    ids = _run_ids()
    success = {"execution": fx.ExecutionOutcome.REPORTED_SUCCESS, "impact": fx.Impact.CERTAIN}

    # ok: every effect done and observed in place.
    a, out = file_ref(root, "a.txt"), file_ref(root, "out")
    with EffectLog(ids["ok"], directory) as log:
        log.claim(
            effect_id="e-write",
            action_id="act-1",
            operation=op("write_file", b'{"path": "a.txt"}'),
            impact_scope=(a,),
            obligations=(fx.Postcondition(a, fx.Predicate.SHA256, sha(b"alpha")),),
        )
        (root.path / "a.txt").write_bytes(b"alpha")
        log.outcome(effect_id="e-write", **success)
        _observe(log, "o-a", a, b"alpha")
        log.claim(
            effect_id="e-mkdir",
            action_id="act-2",
            operation=op("make_dir"),
            impact_scope=(out,),
            obligations=(fx.Postcondition(out, fx.Predicate.EXISTS),),
        )
        (root.path / "out").mkdir()
        log.outcome(effect_id="e-mkdir", **success)
        _observe(log, "o-out", out, b"")

    # crash: two claims, then the worker dies; a restart recovers and observes.
    b, c = file_ref(root, "b.txt"), file_ref(root, "c.txt")
    with EffectLog(ids["crash"], directory) as log:
        log.claim(
            effect_id="e-torn",
            action_id="act-1",
            operation=op("write_file", b'{"path": "b.txt"}'),
            impact_scope=(b,),
            obligations=(fx.Postcondition(b, fx.Predicate.SHA256, sha(b"bravo bravo")),),
        )
        log.claim(
            effect_id="e-lost",
            action_id="act-2",
            operation=op("send_report"),
            impact_scope=(c,),
            obligations=(fx.Postcondition(c, fx.Predicate.EXISTS),),
        )
    (root.path / "b.txt").write_bytes(b"bravo")  # half of it
    with EffectLog.load(ids["crash"], directory) as log:
        assert len(log.recover_interrupted()) == 2
        _observe(log, "o-b", b, b"bravo")

    # slow: one call still running, one done.
    up, done = file_ref(root, "upload.bin"), file_ref(root, "done.txt")
    with EffectLog(ids["slow"], directory) as log:
        log.claim(
            effect_id="e-upload",
            action_id="act-1",
            operation=op("upload"),
            impact_scope=(up,),
            obligations=(fx.Postcondition(up, fx.Predicate.EXISTS),),
        )
        log.outcome(
            effect_id="e-upload",
            execution=fx.ExecutionOutcome.RUNNING,
            impact=fx.Impact.POSSIBLE,
        )
        log.claim(
            effect_id="e-done",
            action_id="act-2",
            operation=op("write_file", b'{"path": "done.txt"}'),
            impact_scope=(done,),
            obligations=(fx.Postcondition(done, fx.Predicate.EXISTS),),
        )
        log.outcome(effect_id="e-done", **success)
        _observe(log, "o-done", done, b"done")

    # fail: a clean failure, a failure that may have done something, and an observation
    # made stale by a later claim on its directory.
    lock, retry = file_ref(root, "stale.lock"), file_ref(root, "retry.txt")
    logs, log_txt = file_ref(root, "logs"), file_ref(root, "logs/app.log")
    with EffectLog(ids["fail"], directory) as log:
        log.claim(
            effect_id="e-rm",
            action_id="act-1",
            operation=op("delete_file"),
            impact_scope=(lock,),
            obligations=(fx.Postcondition(lock, fx.Predicate.ABSENT),),
        )
        log.outcome(effect_id="e-rm", execution=fx.ExecutionOutcome.FAILED, impact=fx.Impact.NONE)
        log.claim(
            effect_id="e-retry",
            action_id="act-2",
            operation=op("write_file", b'{"path": "retry.txt"}'),
            impact_scope=(retry,),
        )
        log.outcome(
            effect_id="e-retry",
            execution=fx.ExecutionOutcome.FAILED,
            impact=fx.Impact.POSSIBLE,
        )
        log.claim(
            effect_id="e-log",
            action_id="act-3",
            operation=op("append_file"),
            impact_scope=(log_txt,),
            obligations=(fx.Postcondition(log_txt, fx.Predicate.SHA256, sha(b"line\n")),),
        )
        log.outcome(effect_id="e-log", **success)
        _observe(log, "o-log", log_txt, b"line\n")
        log.claim(
            effect_id="e-rotate",
            action_id="act-4",
            operation=op("rotate_logs"),
            impact_scope=(logs,),
        )
        log.outcome(effect_id="e-rotate", **success)

    # orphan: claimed, then nothing, and nobody recovered it.
    with EffectLog(ids["orphan"], directory) as log:
        log.claim(
            effect_id="e-orphan",
            action_id="act-1",
            operation=op("charge_card"),
            impact_scope=(file_ref(root, "invoice.txt"),),
        )

    return Built(directory, ids, _load_all(directory, list(ids.values())))


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Built:
    """The shared five-run store; commands run against it only read."""
    store = _build(tmp_path_factory.mktemp("cli-commands"))
    # Pin the verdicts this module relies on, so a change in assess is noticed here first.
    verdicts = {
        (name, a.effect_id): a.verdict.value
        for name in RUN_NAMES
        for a in store.assessments(store.run(name))
    }
    assert verdicts == {
        ("ok", "e-write"): "verified",
        ("ok", "e-mkdir"): "verified",
        ("crash", "e-torn"): "contradicted",
        ("crash", "e-lost"): "unverified",
        ("slow", "e-upload"): "pending",
        ("slow", "e-done"): "verified",
        ("fail", "e-rm"): "failed",
        ("fail", "e-retry"): "unverified",
        ("fail", "e-log"): "unverified",
        ("fail", "e-rotate"): "unverified",
        ("orphan", "e-orphan"): "pending",
    }
    return store


class Cached:
    """Read-only invocations on the shared store, run once, concurrently, on first use."""

    def __init__(self, store: Built) -> None:
        self.store = store
        self._results: dict[tuple[str, ...], Result] = {}

    def _argv(self, args: Sequence[str]) -> tuple[str, ...]:
        return (*args, "--store", str(self.store.directory))

    def prefetch(self, argvs: Sequence[Sequence[str]]) -> None:
        wanted = [self._argv(a) for a in argvs if self._argv(a) not in self._results]
        self._results.update(zip(wanted, ledger_all(*wanted), strict=True))

    def __call__(self, *args: str) -> Result:
        self.prefetch([args])
        return self._results[self._argv(args)]


@pytest.fixture(scope="module")
def cli(built: Built) -> Cached:
    """`ledger … --store SHARED`, memoised; the common invocations are run up front."""
    ids = built.ids
    cached = Cached(built)
    argvs: list[list[str]] = [
        ["runs"],
        ["runs", "--json"],
        ["status"],
        ["status", "--json"],
        ["status", "--unresolved"],
        ["status", "--unresolved", "--json"],
        ["status", "--run", ids["fail"][:6], "--json"],
        ["status", "--run", ids["crash"], "--unresolved"],
        ["status", "--run", ids["ok"], "--unresolved"],
        ["status", "--run", ids["ok"], "--unresolved", "--json"],
        ["path", "--json"],
    ]
    argvs += [["show", ids[name], "--json"] for name in SHOWN]
    argvs += [["show", ids["crash"]], ["show", ids["fail"][:1]]]
    for command in BAD_PREFIX_COMMANDS:
        for kind, _message in BAD_PREFIXES:
            argvs.append([*command.split(), _bad_prefix(built, command, kind)])
    cached.prefetch(argvs)
    return cached


def _unused_first_char(store: Built) -> str:
    used = {rid[0] for rid in store.ids.values()}
    return next(c for c in HEX if c not in used)


# --------------------------------------------------------------------------- runs


def test_runs_json_has_one_entry_per_run_with_writer_and_verdict_counts(built, cli) -> None:
    """`runs --json` gives every run, oldest first, with exactly the documented keys and values."""
    entries = _json(cli("runs", "--json"))
    assert isinstance(entries, list)
    assert [e["run_id"] for e in entries] == [built.run(n) for n in RUN_NAMES]
    for entry in entries:
        assert set(entry) == RUNS_KEYS
        history = built.histories[entry["run_id"]]
        times = [r.recorded_at for r in history.records()]
        verdicts = [a.verdict.value for a in built.assessments(entry["run_id"])]
        assert entry == {
            "run_id": entry["run_id"],
            "first_at": min(times),
            "last_at": max(times),
            "host": socket.gethostname(),
            "pid": os.getpid(),
            "writer_name": None,
            "claims": len(history.claims),
            **{v: verdicts.count(v) for v in VERDICTS},
            "problem": None,
        }


def test_runs_table_has_the_documented_columns_and_counts(built, cli) -> None:
    """`runs` prints an aligned table: run, first and last record, writer, claim and verdict counts."""
    rows = _table(_ok(cli("runs")))
    entries = _json(cli("runs", "--json"))
    assert list(rows[0]) == RUNS_HEADER
    assert [r["RUN"] for r in rows] == [built.run(n) for n in RUN_NAMES]
    for row, entry in zip(rows, entries, strict=True):
        assert row["FIRST"] == entry["first_at"]
        assert row["LAST"] == entry["last_at"]
        assert row["WRITER"] == f"{socket.gethostname()}:{os.getpid()}"
        assert row["CLAIMS"] == str(entry["claims"])
        for verdict in VERDICTS:
            assert row[verdict.upper()] == str(entry[verdict])
    crash = rows[RUN_NAMES.index("crash")]
    assert (crash["CLAIMS"], crash["CONTRADICTED"], crash["UNVERIFIED"]) == ("2", "1", "1")


def test_runs_on_a_store_without_runs_prints_only_the_header(tmp_path) -> None:
    """`runs` on a created store that holds no run yet prints the header row and exits 0."""
    store = acquire(tmp_path / "store")
    try:
        store.open_for_writing()  # what a worker's first write does before its transaction
    finally:
        release(store)
    out = _ok(ledger("runs", "--store", str(tmp_path / "store")))
    assert _split(out) == RUNS_HEADER


# --------------------------------------------------------------------------- show


@pytest.mark.parametrize("name", SHOWN)
def test_show_json_is_the_run_its_writer_its_records_and_assessments(built, cli, name) -> None:
    """`show RUN --json` gives the writer, every record, assess's verdicts and decide's steps."""
    report = _json(cli("show", built.run(name), "--json"))
    history = built.history(name)
    assert set(report) == {"run_id", "writer", "records", "effects", "decisions", "approvals"}
    assert report["approvals"] == []
    assert report["decisions"] == [fx.decide(c, history).to_dict() for c in history.claims]
    assert report["run_id"] == built.run(name)
    assert report["writer"] == {"host": socket.gethostname(), "pid": os.getpid(), "name": None}
    assert report["records"] == [
        {"type": r.record_type, "record": r.to_dict()} for r in history.records()
    ]
    assert report["effects"] == [a.to_dict() for a in built.assessments(built.run(name))]
    for effect in report["effects"]:
        assert set(effect) == ASSESSMENT_KEYS


def test_show_prints_the_timeline_and_the_verdicts(built, cli) -> None:
    """`show RUN` prints the writer, each record in seq order and each effect's verdict."""
    out = _ok(cli("show", built.run("crash")))
    title, timeline, effects, reasons = out.strip().split("\n\n")
    history = built.history("crash")
    stamps = [r.recorded_at or "" for r in history.records()]
    assert _split(title) == [
        f"run {built.run('crash')}",
        f"writer {socket.gethostname()}:{os.getpid()}",
        f"on {stamps[0][:10]} (UTC)",
    ]
    rows = _table(timeline)
    assert list(rows[0]) == ["SEQ", "RECORDED", "KIND", "ID", "WHAT"]
    # One day: the title says which, each record its time of day.
    assert [(r["SEQ"], r["RECORDED"], r["KIND"]) for r in rows] == [
        (str(r.seq), stamp[11:23], r.record_type)
        for r, stamp in zip(history.records(), stamps, strict=True)
    ]
    assert [r["ID"] for r in rows] == ["e-torn", "e-lost", "e-torn", "e-lost", "o-b"]
    b = history.claims[0].impact_scope[0].locator
    shown = b if len(b) <= 40 else "..." + b[-37:]  # a long path's end: its file name
    key = history.claims[0].idempotency_key
    # The scope's one file is named once; the key by a prefix, as ids are.
    assert rows[0]["WHAT"] == (
        f"write_file (write) on {shown}; expects sha256={sha(b'bravo bravo')[:12]}; "
        f"key {key[:12]}..."
    )
    assert rows[2]["WHAT"] == "interrupted, impact possible (recovery)"
    assert rows[4]["WHAT"] == (
        f"{shown}: exists, sha256 {sha(b'bravo')[:12]}; by filesystem_read, complete"
    )
    verdicts = _table(effects)
    assert list(verdicts[0]) == [
        "EFFECT",
        "OPERATION",
        "EXECUTION",
        "IMPACT",
        "VERDICT",
        "UNRESOLVED",
        "NEXT",
        "EVIDENCE",
        "STALE",
    ]
    assert [list(r.values()) for r in verdicts] == [
        [
            "e-torn",
            "write_file",
            "interrupted",
            "possible",
            "contradicted",
            "yes",
            "escalate",
            "o-b",
            "-",
        ],
        [
            "e-lost",
            "send_report",
            "interrupted",
            "possible",
            "unverified",
            "yes",
            "escalate",
            "-",
            "-",
        ],
    ]
    assert reasons.splitlines() == [
        f"{c.effect_id}: {d.step.value.upper()}: {d.reason}"
        for c in history.claims
        for d in [fx.decide(c, history)]
    ]


def test_show_table_matches_assess_for_failed_and_stale_effects(built, cli) -> None:
    """Failed, unverified and stale-evidence effects print the words assess gives them."""
    _title, _timeline, effects, _reasons = (
        _ok(cli("show", built.run("fail")[:1])).strip().split("\n\n")
    )
    rows = _table(effects)
    expected = [
        [
            a.effect_id,
            a.execution.value if a.execution else "-",
            a.impact.value if a.impact else "-",
            a.verdict.value,
            "yes" if a.unresolved_impact else "no",
            ",".join(a.evidence) or "-",
            ",".join(a.stale) or "-",
        ]
        for a in built.assessments(built.run("fail"))
    ]
    got = [
        [r[c] for c in ("EFFECT", "EXECUTION", "IMPACT", "VERDICT", "UNRESOLVED")]
        + [r["EVIDENCE"], r["STALE"]]
        for r in rows
    ]
    assert got == expected
    assert got[0][:5] == ["e-rm", "failed", "none", "failed", "no"]
    assert got[2] == ["e-log", "reported_success", "certain", "unverified", "yes", "-", "o-log"]


# --------------------------------------------------------------------------- status


def test_status_json_lists_every_effect_with_assess_verdicts(built, cli) -> None:
    """`status --json` gives every effect of every run, oldest claim first, as assess judges it."""
    rows = _json(cli("status", "--json"))
    for row in rows:
        assert set(row) == STATUS_KEYS
    assert rows == built.status_rows()


def test_status_table_has_the_documented_columns(built, cli) -> None:
    """`status` prints run, seq, effect, operation, kind, execution, impact, verdict, unresolved, next."""
    rows = _table(_ok(cli("status")))
    assert list(rows[0]) == STATUS_HEADER
    assert [list(r.values()) for r in rows] == [
        [
            e["run_id"],
            str(e["seq"]),
            e["effect_id"],
            e["operation"],
            e["kind"],
            e["execution"] or "-",
            e["impact"] or "-",
            e["verdict"],
            "yes" if e["unresolved_impact"] else "no",
            e["next_step"],
        ]
        for e in built.status_rows()
    ]


def test_status_unresolved_is_exactly_the_incident_list(built, cli) -> None:
    """`status --unresolved` lists exactly the effects whose assessment has unresolved impact."""
    incidents = {
        (rid, a.effect_id)
        for rid in built.histories
        for a in built.assessments(rid)
        if a.unresolved_impact
    }
    assert incidents == {
        (built.run("crash"), "e-torn"),
        (built.run("crash"), "e-lost"),
        (built.run("slow"), "e-upload"),
        (built.run("fail"), "e-retry"),
        (built.run("fail"), "e-log"),
        (built.run("fail"), "e-rotate"),
        (built.run("orphan"), "e-orphan"),
    }
    rows = _json(cli("status", "--unresolved", "--json"))
    assert {(r["run_id"], r["effect_id"]) for r in rows} == incidents
    assert rows == [r for r in built.status_rows() if r["unresolved_impact"]]
    table = _table(_ok(cli("status", "--unresolved")))
    assert {(r["RUN"], r["EFFECT"]) for r in table} == incidents
    assert {r["UNRESOLVED"] for r in table} == {"yes"}


def test_status_run_takes_a_unique_prefix(built, cli) -> None:
    """`status --run PREFIX` gives only the run the prefix names."""
    rows = _json(cli("status", "--run", built.run("fail")[:6], "--json"))
    assert rows == built.status_rows(built.run("fail"))


def test_status_run_and_unresolved_combine(built, cli) -> None:
    """`status --run RUN --unresolved` lists that run's unresolved effects only."""
    rows = _table(_ok(cli("status", "--run", built.run("crash"), "--unresolved")))
    assert [(r["RUN"], r["EFFECT"], r["VERDICT"]) for r in rows] == [
        (built.run("crash"), "e-torn", "contradicted"),
        (built.run("crash"), "e-lost", "unverified"),
    ]


def test_status_with_no_matching_effect_prints_an_empty_list(built, cli) -> None:
    """A run with nothing unresolved gives `[]` with --json and a bare header without."""
    assert _json(cli("status", "--run", built.run("ok"), "--unresolved", "--json")) == []
    out = _ok(cli("status", "--run", built.run("ok"), "--unresolved"))
    assert _split(out) == STATUS_HEADER


# --------------------------------------------------------------------------- run prefixes


def test_a_unique_prefix_names_its_run_in_show(built, cli) -> None:
    """`show` accepts a unique prefix, down to one character, as git does."""
    title = _ok(cli("show", built.run("fail")[:1])).splitlines()[0]
    assert _split(title)[0] == f"run {built.run('fail')}"
    assert _json(cli("show", built.run("fail"), "--json"))["run_id"] == built.run("fail")


BAD_PREFIX_COMMANDS = ("show", "status --run", "recover")
BAD_PREFIXES = (
    ("ambiguous", "matches more than one run; give more characters"),
    ("unknown", "no run matches"),
    ("not-hex", "is not a run id or a prefix of one (lowercase hex)"),
)


def _bad_prefix(store: Built, command: str, kind: str) -> str:
    if kind == "ambiguous":
        return store.run("ok")[0]  # "crash" starts with it too
    if kind == "unknown":
        return _unused_first_char(store)
    # A different kind of non-hex text for each command: uppercase, too long, empty.
    return {"show": "ABC", "status --run": store.run("ok") + "0", "recover": ""}[command]


@pytest.mark.parametrize(("kind", "message"), BAD_PREFIXES)
@pytest.mark.parametrize("command", BAD_PREFIX_COMMANDS)
def test_a_bad_run_prefix_is_a_usage_mistake(built, cli, command, kind, message) -> None:
    """An ambiguous, unknown or non-hex run is exit 2 with a one-line error and no traceback."""
    assert built.run("ok")[0] == built.run("crash")[0]
    prefix = _bad_prefix(built, command, kind)
    line = _one_line_error(cli(*command.split(), prefix), 2)
    assert message in line
    assert repr(prefix) in line


# --------------------------------------------------------------------------- recover


def _orphan_store(tmp_path: Path) -> tuple[Path, str, fx.History]:
    """A store with one run: two claims without outcome, one RUNNING, one settled."""
    directory = tmp_path / "store"
    run_id = new_run_id()
    with EffectLog(run_id, directory) as log:
        for effect_id in ("e-one", "e-run", "e-two", "e-done"):
            log.claim(
                effect_id=effect_id,
                action_id=f"act-{effect_id}",
                operation=op(),
                impact_scope=(fx.ResourceRef("fs", f"/w/{effect_id}", "target"),),
            )
        log.outcome(
            effect_id="e-run", execution=fx.ExecutionOutcome.RUNNING, impact=fx.Impact.POSSIBLE
        )
        log.outcome(effect_id="e-done", execution=fx.ExecutionOutcome.FAILED, impact=fx.Impact.NONE)
        history = log.history()
    return directory, run_id, history  # closed: no live process has the run loaded


def test_recover_run_refuses_a_run_a_live_process_has_loaded(tmp_path) -> None:
    """`recover RUN` refuses, naming its last writer's pid, while a live process holds the run; --force does it."""
    directory = tmp_path / "store"
    run_id = new_run_id()
    with EffectLog(run_id, directory) as log:  # this process is the run's live writer
        log.claim(effect_id="e1", action_id="a1", operation=op(), impact_scope=[])
        before = log.history()
        line = _one_line_error(ledger("recover", run_id, "--store", str(directory)), 1)
        assert "is loaded by a live process" in line
        assert f"pid {os.getpid()}" in line
        assert _loaded(directory, run_id) == before
        forced = _json(ledger("recover", run_id, "--force", "--json", "--store", str(directory)))
        assert [o["effect_id"] for o in forced[0]["outcomes"]] == ["e1"]
    # Once the log is closed nothing holds the run: recovery needs no --force (and finds
    # nothing left to do).
    again = _json(ledger("recover", run_id, "--json", "--store", str(directory)))
    assert again == [{"run_id": run_id, "outcomes": [], "skipped": None}]


def _loaded(directory: Path, run_id: str) -> fx.History:
    with EffectLog.load(run_id, directory) as log:
        return log.history()


def test_recover_run_appends_and_prints_the_interrupted_outcomes(tmp_path) -> None:
    """`recover RUN` marks claims without outcome interrupted; a second time there is nothing."""
    directory, run_id, before = _orphan_store(tmp_path)
    first = _ok(ledger("recover", run_id, "--store", str(directory)))
    after = _loaded(directory, run_id)
    appended = after.outcomes[len(before.outcomes) :]
    assert [(o.effect_id, o.execution, o.impact, o.replayed) for o in appended] == [
        ("e-one", fx.ExecutionOutcome.INTERRUPTED, fx.Impact.POSSIBLE, True),
        ("e-two", fx.ExecutionOutcome.INTERRUPTED, fx.Impact.POSSIBLE, True),
    ]
    assert first.splitlines() == [
        f"run {run_id}: {o.effect_id} interrupted, impact possible (seq {o.seq})" for o in appended
    ]
    second = _ok(ledger("recover", run_id, "--store", str(directory)))
    assert second.splitlines() == [f"run {run_id}: nothing to recover"]
    assert _loaded(directory, run_id) == after


def test_recover_json_by_prefix_gives_the_appended_outcomes(tmp_path) -> None:
    """`recover PREFIX --json` is a list of {run_id, outcomes, skipped} with the outcomes written."""
    directory, run_id, before = _orphan_store(tmp_path)
    result = _json(ledger("recover", run_id[:4], "--json", "--store", str(directory)))
    appended = _loaded(directory, run_id).outcomes[len(before.outcomes) :]
    assert len(appended) == 2
    assert result == [
        {"run_id": run_id, "outcomes": [o.to_dict() for o in appended], "skipped": None}
    ]
    assert set(result[0]["outcomes"][0]) == OUTCOME_KEYS


def test_recover_needs_a_run_or_dead_but_not_both(tmp_path) -> None:
    """`recover` with neither RUN nor --dead, or with both, is a usage error: exit 2, nothing written."""
    directory, run_id, before = _orphan_store(tmp_path)
    store = ["--store", str(directory)]
    for result in ledger_all(["recover", *store], ["recover", run_id, "--dead", *store]):
        assert result.returncode == 2
        assert "give a RUN or --dead (exactly one)" in result.stderr
        assert "Traceback" not in result.stderr
    assert _loaded(directory, run_id) == before


_CHILD = """
import sys, time
from ledger import effects as fx
from ledger.effect_log import EffectLog
store, run_id = sys.argv[1:3]
log = EffectLog(run_id, store)
log.claim(
    effect_id="e-child",
    action_id="act-child",
    operation=fx.OperationRef("write_file", "test/1", "0" * 64),
    impact_scope=(fx.ResourceRef("fs", "/w/child-" + run_id, "target"),),
)
print("ready", flush=True)
time.sleep(120)
"""


@pytest.fixture
def children() -> Iterator[list[subprocess.Popen[str]]]:
    """Child writer processes, killed (if still alive) and reaped at the end."""
    procs: list[subprocess.Popen[str]] = []
    yield procs
    for proc in procs:
        if proc.poll() is None:
            proc.kill()
        proc.wait(timeout=60)
        if proc.stdout is not None:
            proc.stdout.close()


def _writer(store: Path, run_id: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [PYTHON, "-c", _CHILD, str(store), run_id],
        stdout=subprocess.PIPE,
        text=True,
        env=subprocess_env(),
    )


def test_recover_dead_recovers_a_killed_writer_and_leaves_a_live_one(tmp_path, children) -> None:
    """With one writer SIGKILLed and one alive, `recover --dead` recovers only the dead one's run."""
    directory = tmp_path / "store"
    settled = new_run_id()
    with EffectLog(settled, directory) as log:  # the store exists before the children race
        log.claim(effect_id="e-s", action_id="act-s", operation=op(), impact_scope=())
        log.outcome(
            effect_id="e-s", execution=fx.ExecutionOutcome.REPORTED_SUCCESS, impact=fx.Impact.NONE
        )
    dead_run, live_run = new_run_id(), new_run_id()
    dead, live = _writer(directory, dead_run), _writer(directory, live_run)
    children += [dead, live]
    for child in (dead, live):
        assert child.stdout is not None
        assert child.stdout.readline() == "ready\n"
    dead.send_signal(signal.SIGKILL)
    assert dead.wait(timeout=60) == -signal.SIGKILL

    out = _ok(ledger("recover", "--dead", "--store", str(directory)))

    dead_history = _loaded(directory, dead_run)
    assert [
        (o.effect_id, o.seq, o.execution, o.impact, o.replayed) for o in dead_history.outcomes
    ] == [("e-child", 2, fx.ExecutionOutcome.INTERRUPTED, fx.Impact.POSSIBLE, True)]
    live_history = _loaded(directory, live_run)
    assert [c.effect_id for c in live_history.claims] == ["e-child"]
    assert live_history.outcomes == ()
    assert live.poll() is None
    expected = {
        dead_run: f"run {dead_run}: e-child interrupted, impact possible (seq 2)",
        live_run: f"run {live_run}: left alone, a live process has it loaded",
    }
    assert out.splitlines() == [expected[r] for r in sorted(expected)]

    again = _json(ledger("recover", "--dead", "--json", "--store", str(directory)))
    assert again == [
        {"run_id": live_run, "outcomes": [], "skipped": "a live process has it loaded"}
    ]
    live.kill()
    live.wait(timeout=60)


def test_recover_dead_decides_by_the_lock_not_by_the_recorded_writer(tmp_path) -> None:
    """Runs whose recorded writer is on another host or unknown are recovered once nothing holds them; a loaded one is not."""
    directory = tmp_path / "store"
    remote, unknown, alive = sorted(new_run_id() for _ in range(3))
    for run_id in (remote, unknown):
        with EffectLog(run_id, directory) as log:
            log.claim(effect_id="e-1", action_id="act-1", operation=op(), impact_scope=())
    conn = sqlite3.connect(directory / "ledger.sqlite3")
    try:
        with conn:
            conn.execute(
                "UPDATE run_writers SET host = 'elsewhere.example' WHERE run_id = ?", (remote,)
            )
            conn.execute("DELETE FROM run_writers WHERE run_id = ?", (unknown,))
    finally:
        conn.close()

    with EffectLog(alive, directory) as log:  # held by this live process throughout
        log.claim(effect_id="e-1", action_id="act-1", operation=op(), impact_scope=())
        runs_before = _json(ledger("runs", "--json", "--store", str(directory)))
        result = _json(ledger("recover", "--dead", "--json", "--store", str(directory)))
        assert [(r["run_id"], len(r["outcomes"]), r["skipped"]) for r in result] == [
            (remote, 1, None),
            (unknown, 1, None),
            (alive, 0, "a live process has it loaded"),
        ]
        assert _loaded(directory, alive).outcomes == ()
        for run_id in (remote, unknown):
            (outcome,) = _loaded(directory, run_id).outcomes
            assert (outcome.execution, outcome.replayed) == (fx.ExecutionOutcome.INTERRUPTED, True)
    writers = {e["run_id"]: (e["host"], e["pid"]) for e in runs_before}
    assert writers == {
        remote: ("elsewhere.example", os.getpid()),
        unknown: (None, None),
        alive: (socket.gethostname(), os.getpid()),
    }


def test_recover_dead_with_nothing_unsettled_says_so(tmp_path) -> None:
    """`recover --dead` on a store where every claim has an outcome prints `nothing to recover`."""
    directory = tmp_path / "store"
    with EffectLog(new_run_id(), directory) as log:
        log.claim(effect_id="e-1", action_id="act-1", operation=op(), impact_scope=())
        log.outcome(effect_id="e-1", execution=fx.ExecutionOutcome.FAILED, impact=fx.Impact.NONE)
    assert _ok(ledger("recover", "--dead", "--store", str(directory))) == "nothing to recover\n"


# --------------------------------------------------------------------------- path, sql


def test_path_json_of_an_existing_store(built, cli) -> None:
    """`path --json` gives the database file and says it exists."""
    db = built.directory / "ledger.sqlite3"
    assert _json(cli("path", "--json")) == {"path": str(db), "exists": True}


def test_path_json_of_a_missing_store(tmp_path) -> None:
    """`path --json` on a store that does not exist says so and creates nothing."""
    result = _json(ledger("path", "--json", "--store", str(tmp_path / "none")))
    assert result == {"path": str(tmp_path / "none" / "ledger.sqlite3"), "exists": False}
    assert not (tmp_path / "none").exists()


@pytest.mark.usefixtures("sqlite3_shell")
def test_sql_runs_the_sqlite3_shell_read_only(built, cli) -> None:
    """`ledger sql -json QUERY` hands the query to sqlite3 and prints its JSON."""
    result = cli("sql", "-json", "SELECT count(*) AS n FROM claims")
    claims = sum(len(h.claims) for h in built.histories.values())
    assert json.loads(_ok(result)) == [{"n": claims}]
    refused = cli("sql", "CREATE TABLE probe (x)")
    assert refused.returncode != 0
    assert "readonly" in refused.stderr


def test_sql_without_the_sqlite3_shell_names_how_to_install_it(built, tmp_path) -> None:
    """With no sqlite3 on PATH, `ledger sql` exits 1 with one line saying how to install it."""
    empty = tmp_path / "bin"
    empty.mkdir()
    env = subprocess_env() | {"PATH": str(empty)}
    result = ledger("sql", "--store", str(built.directory), "SELECT 1", env=env)
    line = _one_line_error(result, 1)
    assert "apt install sqlite3" in line
    assert str(built.directory / "ledger.sqlite3") in line


# --------------------------------------------------------------------------- errors


def _read_commands(directory: Path, run_id: str) -> list[list[str]]:
    store = ["--store", str(directory)]
    return [
        ["runs", *store],
        ["show", run_id, *store],
        ["status", "--unresolved", *store],
        ["recover", run_id, *store],
        ["recover", "--dead", *store],
        ["verify", *store],
    ]


def test_a_missing_store_is_one_line_and_exit_1_for_every_command(tmp_path) -> None:
    """Every reading command on a store directory that does not exist exits 1 with one line."""
    missing = tmp_path / "nowhere"
    argvs = _read_commands(missing, new_run_id())
    if shutil.which("sqlite3") is not None:
        argvs.append(["sql", "--store", str(missing), "SELECT 1"])
    for argv, result in zip(argvs, ledger_all(*argvs), strict=True):
        line = _one_line_error(result, 1)
        assert f"there is no store at {missing}" in line, argv
    assert not missing.exists()


def test_a_corrupt_database_is_one_line_and_exit_1_for_every_command(tmp_path) -> None:
    """Every reading command on a database file of random bytes exits 1, one line, no traceback."""
    directory = tmp_path / "store"
    directory.mkdir(mode=0o700)
    garbage = random.Random(7).randbytes(8192)
    (directory / "ledger.sqlite3").write_bytes(garbage)
    argvs = _read_commands(directory, new_run_id())
    for argv, result in zip(argvs, ledger_all(*argvs), strict=True):
        line = _one_line_error(result, 1)
        assert "not a database" in line, argv
    assert (directory / "ledger.sqlite3").read_bytes() == garbage
    assert sorted(p.name for p in directory.iterdir()) == ["ledger.sqlite3"]


# --------------------------------------------------------------------------- colours


def _on_a_terminal(*args: str) -> str:
    """Run `ledger` with stdout on a pseudo-terminal and return what it wrote there."""
    master, slave = pty.openpty()
    try:
        proc = subprocess.Popen(
            [LEDGER, *args],
            stdout=slave,
            stderr=subprocess.PIPE,
            env=subprocess_env(),
        )
    finally:
        os.close(slave)
    chunks = []
    try:
        while True:
            try:
                data = os.read(master, 4096)
            except OSError:  # EIO: the child closed the terminal
                break
            if not data:
                break
            chunks.append(data)
    finally:
        os.close(master)
        _, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    return b"".join(chunks).decode()


def test_status_is_coloured_on_a_terminal_only(built, cli) -> None:
    """On a terminal verdict words are wrapped in ANSI colours; through a pipe there are none."""
    shown = _on_a_terminal("status", "--store", str(built.directory))
    assert re.search(r"\x1b\[32mverified\s*\x1b\[0m", shown)
    assert re.search(r"\x1b\[31mcontradicted\s*\x1b\[0m", shown)
    assert re.search(r"\x1b\[33mpending\s*\x1b\[0m", shown)
    assert re.search(r"\x1b\[34mfailed\s*\x1b\[0m", shown)
    piped = _ok(cli("status"))
    assert "\x1b[" not in piped
    assert re.sub(r"\x1b\[[0-9;]*m", "", shown).replace("\r\n", "\n") == piped


# --------------------------------------------------------------------------- the rest


def test_demo_kills_a_worker_and_reports_the_torn_write(tmp_path) -> None:
    """`ledger demo` exits 0 and reports the SIGKILLed write as interrupted and contradicted."""
    env = subprocess_env() | {"TMPDIR": str(tmp_path)}  # the demo's sandbox goes here
    out = _ok(ledger("demo", "--store", str(tmp_path / "store"), env=env))
    assert "killed with SIGKILL in the middle of e3-report" in out
    assert "recovered: e3-report" in out
    row = next(line for line in out.splitlines() if line.startswith("e3-report "))
    assert _split(row) == [
        "e3-report",
        "write_file",
        "report.txt",
        "interrupted",
        "possible",
        "contradicted",
        "yes",
        "escalate",
    ]


def test_version_is_the_installed_distribution_version() -> None:
    """`ledger --version` prints the version of the installed tool-ledger distribution."""
    version = importlib.metadata.version("tool-ledger")
    assert _ok(ledger("--version")) == f"ledger, version {version}\n"


def test_help_lists_every_command() -> None:
    """`ledger --help` lists every command."""
    listed = _ok(ledger("--help")).split("Commands:")[1].split()
    for command in (
        "demo",
        "export",
        "import",
        "path",
        "recover",
        "runs",
        "show",
        "sql",
        "status",
        "verify",
    ):
        assert command in listed


def test_python_dash_m_ledger_is_the_console_script(built, cli) -> None:
    """`python -m ledger` runs the same commands with the same output."""
    result = subprocess.run(
        [PYTHON, "-m", "ledger", "runs", "--json", "--store", str(built.directory)],
        capture_output=True,
        text=True,
        env=subprocess_env(),
        timeout=60,
        check=False,
    )
    assert _ok(result) == _ok(cli("runs", "--json"))
