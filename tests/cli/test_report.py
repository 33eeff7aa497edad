"""`ledger report`: one self-contained HTML page, opened in a real headless Chromium.

One store (an ordinary run, a recovered crash, a run full of hostile text) is reported
once, and that page is loaded once for its DOM (after its script ran) and once for a
screenshot; the tests read those. A run of 10,000 records gets its own store and page.
"""

from __future__ import annotations

import base64
import dataclasses
import datetime as dt
import hashlib
import json
import os
import re
import shutil
import sqlite3
import struct
import subprocess
import sys
import zlib
from collections import Counter, defaultdict
from html.parser import HTMLParser
from pathlib import Path

import pytest

from ledger import _text
from ledger import effects as fx
from ledger._report.assemble import parse_since
from ledger._report.model import ATTENTION_LIMIT, INCIDENT_LIMIT, LANE_LIMIT, TABLE_LIMIT
from ledger.effect_log import EffectLog, new_run_id
from tests.builders import (
    LEDGER,
    fingerprint,
    fs_ref,
    ledger,
    op,
    require_tool,
    sha,
    subprocess_env,
)

# Hostile text, each carrying a side effect the DOM would show if it ran.
SCRIPT_ID = "<script>document.title='PWNED'</script>"
ONERROR_OP = "<img id=pwned-img src=x onerror=\"document.body.dataset.pwned='1'\">"
SVG_BREAK = "/srv/</svg><svg onload=\"document.body.dataset.pwned='2'\"><script>document.title='PWNED'</script>"
JS_URL = "javascript:document.body.dataset.pwned='3'"
ATTR_BREAK = 'x" onmouseover="document.body.dataset.pwned=\'4\'" data-x="'
IFRAME = "<iframe id=pwned-frame src=\"javascript:parent.document.title='PWNED'\"></iframe>"
BIDI = "invoice\u202etxt.exe"
HOSTILE = (SCRIPT_ID, ONERROR_OP, SVG_BREAK, JS_URL, ATTR_BREAK, IFRAME)
# A claim's recorded arguments and an outcome's recorded result, shown as compact JSON.
HOSTILE_ARGS = {"html": ONERROR_OP, "frame": IFRAME, "bidi": BIDI}
HOSTILE_RESULT = [SVG_BREAK, ATTR_BREAK]
# Effect ids as workers make them (32 hex); two share their first 16 characters.
PAY = "9f1c2e7a4b3d5c6e8f0a1b2c3d4e5f60"
TWIN = "9f1c2e7a4b3d5c6e7777777777777777"
LOST = "0b8e61d2f3a4c5b6d7e8f90a1b2c3d4e"
PAY_ARGS = {"amount": 12, "to": ONERROR_OP}
RESOLVER = "alice (on-call) <b onmouseover=x>"
RESOLVE_NOTE = "bank says no transfer </td></tr><script>document.title='PWNED'</script>"


def chromium(*args: str, profile: Path) -> subprocess.CompletedProcess[bytes]:
    """Headless Chromium with nothing to reach: no network, no background services."""
    return subprocess.run(
        [
            require_tool("chromium"),
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--hide-scrollbars",
            "--host-resolver-rules=MAP * ~NOTFOUND",
            f"--user-data-dir={profile}",
            *args,
        ],
        capture_output=True,
        timeout=120,
        check=True,
    )


# --------------------------------------------------------------------------- the DOM


@dataclasses.dataclass
class TableRow:
    """A <tr> of the page: its classes, attributes, text, and its links with the id each shows."""

    classes: list[str]
    attrs: dict[str, str | None]
    text: str = ""
    links: list[tuple[str, str]] = dataclasses.field(default_factory=list)
    ids: list[str] = dataclasses.field(default_factory=list)  # the whole ids it shows


@dataclasses.dataclass
class Dom(HTMLParser):
    """What the tests read from Chromium's DOM: elements, text, lanes, incident and attention rows."""

    elements: list[tuple[str, dict[str, str | None]]] = dataclasses.field(default_factory=list)
    text: list[str] = dataclasses.field(default_factory=list)
    lanes: Counter[str] = dataclasses.field(default_factory=Counter)
    lane_titles: dict[str, list[str]] = dataclasses.field(default_factory=lambda: defaultdict(list))
    incidents: list[dict[str, str]] = dataclasses.field(default_factory=list)
    attention: list[dict[str, str]] = dataclasses.field(default_factory=list)
    commands: list[str] = dataclasses.field(default_factory=list)
    ids: list[tuple[str, str]] = dataclasses.field(default_factory=list)  # (shown, whole)
    # Every table row: its class, its attributes, its text and the links in it (href, id).
    rows: list[TableRow] = dataclasses.field(default_factory=list)
    title: str = ""
    _run: str | None = None
    _capture: str | None = None
    _in_lane: bool = False
    _row: dict[str, str] | None = None
    _in_tr: bool = False

    def __post_init__(self) -> None:
        super().__init__(convert_charrefs=True)

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        found = dict(attrs)
        self.elements.append((tag, found))
        classes = (found.get("class") or "").split()
        if tag == "section" and "run" in classes:
            self._run = found.get("data-run")
        if tag == "g" and "lane" in classes and self._run is not None:
            self.lanes[self._run] += 1
            self._in_lane = True
        if tag == "tr":
            self._row = None
            self.rows.append(TableRow(classes, found))
            self._in_tr = True
        if tag == "a" and self._in_tr:
            self.rows[-1].links.append((found.get("href") or "", ""))
        if tag == "tr" and "incident" in classes:
            self._row = {
                "run_id": found["data-run"] or "",
                "seq": found["data-seq"] or "",
                "verdict": found["data-verdict"] or "",
                "kind": found["data-kind"] or "",
                "next_step": found["data-next"] or "",
                "effect_id": "",
            }
            self.incidents.append(self._row)
        if tag == "tr" and "needs" in classes:
            self._row = {
                "run_id": found["data-run"] or "",
                "effect_id": found["data-effect"] or "",
                "urgency": found["data-urgency"] or "",
                "action": found["data-action"] or "",
                "verdict": found["data-verdict"] or "",
                "text": "",
                "commands": "",
            }
            self.attention.append(self._row)
        if tag == "code" and "id" in classes:
            self.ids.append(("", found.get("data-id") or ""))
            self._capture = "id"
            if self._in_tr:
                self.rows[-1].ids.append(found.get("data-id") or "")
            if self._in_tr and self.rows[-1].links and not self.rows[-1].links[-1][1]:
                href, _ = self.rows[-1].links[-1]
                self.rows[-1].links[-1] = (href, found.get("data-id") or "")
            if "effect-id" in classes and self._row is not None and "seq" in self._row:
                self._row["effect_id"] = found.get("data-id") or ""
        if tag == "code" and "command" in classes:
            self.commands.append("")
            self._capture = "command"
        if tag == "title" and self._in_lane:
            self._capture = "lane_title"
        if tag == "title" and not self._run and not self.title:
            self._capture = "page_title"

    def handle_endtag(self, tag: str) -> None:
        if tag in ("code", "title"):
            self._capture = None
        if tag == "g":
            self._in_lane = False
        if tag in ("tr", "table"):
            self._row = None
            self._in_tr = False

    def handle_data(self, data: str) -> None:
        self.text.append(data)
        if self._in_tr:
            self.rows[-1].text += data
        if self._row is not None and "text" in self._row:
            self._row["text"] += data
        if self._capture == "id":
            self.ids[-1] = (self.ids[-1][0] + data, self.ids[-1][1])
        elif self._capture == "command":
            self.commands[-1] += data
            if self._row is not None and "commands" in self._row:
                self._row["commands"] += data + "\n"
        elif self._capture == "lane_title" and self._run is not None:
            self.lane_titles[self._run].append(data)
        elif self._capture == "page_title":
            self.title += data

    @classmethod
    def of(cls, html: str) -> Dom:
        dom = cls()
        dom.feed(html)
        dom.close()
        return dom

    def all_text(self) -> str:
        return "".join(self.text)

    def rows_of(self, kind: str) -> list[TableRow]:
        return [row for row in self.rows if kind in row.classes]


def png_colours(png: bytes) -> tuple[int, float]:
    """How many distinct colours an 8-bit RGB(A) PNG holds, and the share of non-white pixels."""
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    pos, idat = 8, b""
    width = height = channels = 0
    while pos < len(png):
        (length,) = struct.unpack(">I", png[pos : pos + 4])
        kind, body = png[pos + 4 : pos + 8], png[pos + 8 : pos + 8 + length]
        if kind == b"IHDR":
            width, height, depth, colour = struct.unpack(">IIBB", body[:10])
            assert depth == 8, depth
            assert colour in (2, 6), colour
            channels = 3 if colour == 2 else 4
        elif kind == b"IDAT":
            idat += body
        pos += 12 + length
    raw = zlib.decompress(idat)
    stride = width * channels
    previous = bytearray(stride)
    colours: set[bytes] = set()
    inked = 0
    for y in range(height):
        line = raw[y * (stride + 1) : (y + 1) * (stride + 1)]
        kind, row = line[0], bytearray(line[1:])
        for i in range(stride):
            left = row[i - channels] if i >= channels else 0
            up = previous[i]
            corner = previous[i - channels] if i >= channels else 0
            if kind == 1:
                row[i] = (row[i] + left) & 0xFF
            elif kind == 2:
                row[i] = (row[i] + up) & 0xFF
            elif kind == 3:
                row[i] = (row[i] + (left + up) // 2) & 0xFF
            elif kind == 4:
                p = left + up - corner
                pa, pb, pc = abs(p - left), abs(p - up), abs(p - corner)
                predictor = left if pa <= pb and pa <= pc else up if pb <= pc else corner
                row[i] = (row[i] + predictor) & 0xFF
        for x in range(0, stride, channels):
            pixel = bytes(row[x : x + 3])
            colours.add(pixel)
            inked += pixel != b"\xff\xff\xff"
        previous = row
    return len(colours), inked / (width * height)


# --------------------------------------------------------------------------- the store


def _write_store(store: Path | str) -> tuple[str, str]:
    """An ordinary run with a recovered crash, and a run whose text is hostile."""
    ordinary, hostile = new_run_id(), new_run_id()
    done, torn, tmp = fs_ref("/srv/work/done.txt"), fs_ref("/srv/work/torn.txt"), fs_ref("/srv/tmp")
    with EffectLog(ordinary, store) as log:
        for effect_id, ref in (("write-done", done), ("write-torn", torn), ("clean-tmp", tmp)):
            log.claim(
                effect_id=effect_id,
                action_id=f"step-{effect_id}",
                operation=op("write_file", effect_id.encode()),
                impact_scope=[ref],
                obligations=[fx.Postcondition(ref, fx.Predicate.SHA256, sha(b"x"))],
            )
        log.outcome(
            effect_id="write-done",
            execution=fx.ExecutionOutcome.REPORTED_SUCCESS,
            impact=fx.Impact.CERTAIN,
        )
        log.outcome(
            effect_id="clean-tmp", execution=fx.ExecutionOutcome.FAILED, impact=fx.Impact.NONE
        )
        log.observe(
            observation_id="look-done",
            resource=done,
            mechanism=fx.ObservationMechanism.FILESYSTEM_READ,
            coverage=fx.Coverage.COMPLETE,
            source_action_id="look",
            exists=True,
            sha256=sha(b"x"),
        )
        log.claim(
            effect_id="notify",
            action_id="step-notify",
            operation=op("send_mail"),
            impact_scope=[fx.ResourceRef("owned", "mail:ops", "target")],
        )
        log.outcome(
            effect_id="notify", execution=fx.ExecutionOutcome.RUNNING, impact=fx.Impact.POSSIBLE
        )
    with EffectLog.load(ordinary, store) as log:
        (recovered,) = log.recover_interrupted()
        assert recovered.effect_id == "write-torn"
        log.observe(
            observation_id="look-torn",
            resource=torn,
            mechanism=fx.ObservationMechanism.FILESYSTEM_READ,
            coverage=fx.Coverage.COMPLETE,
            source_action_id="look",
            exists=True,
            sha256=sha(b"half"),
        )
    svg = fx.ResourceRef("fs", SVG_BREAK, "target")
    url = fx.ResourceRef("owned", JS_URL, "target")
    with EffectLog(hostile, store) as log:
        log.claim(
            effect_id=SCRIPT_ID,
            action_id=IFRAME,
            operation=fx.OperationRef(ONERROR_OP, ONERROR_OP, sha(b"h")),
            impact_scope=[svg, url, fx.ResourceRef("owned", BIDI, "target")],
            obligations=[fx.Postcondition(svg, fx.Predicate.EXISTS)],
            step=SCRIPT_ID,
            args=HOSTILE_ARGS,
        )
        log.outcome(
            effect_id=SCRIPT_ID,
            execution=fx.ExecutionOutcome.REPORTED_SUCCESS,
            impact=fx.Impact.CERTAIN,
            execution_id=ATTR_BREAK,
            result=HOSTILE_RESULT,
        )
        log.observe(
            observation_id=ATTR_BREAK,
            resource=url,
            mechanism=fx.ObservationMechanism.RECORD_READ,
            coverage=fx.Coverage.PARTIAL,
            source_action_id=JS_URL,
            exists=None,
            revision=SCRIPT_ID,
        )
        log.observe(
            observation_id="other",
            resource=fx.ResourceRef("owned", IFRAME, "seen"),
            mechanism=fx.ObservationMechanism.BACKEND_QUERY,
            coverage=fx.Coverage.COMPLETE,
            source_action_id="look",
            exists=True,
        )
    return ordinary, hostile


def _write_decided_run(store: Path | str) -> tuple[str, str]:
    """A run a person decided on: an irreversible call interrupted, resolved not applied
    with a hostile note, then retried; a write in doubt; a claim its worker left.

    Returns the run id and the id of the retry.
    """
    run_id = new_run_id()
    with EffectLog(run_id, store) as log:
        log.claim(
            effect_id=PAY,
            action_id="pay",
            operation=op("transfer"),
            impact_scope=[fx.ResourceRef("owned", "bank:acct/42", "target")],
            kind=fx.EffectKind.IRREVERSIBLE,
            step="pay-invoice",
            args=PAY_ARGS,
        )
        log.outcome(
            effect_id=PAY,
            execution=fx.ExecutionOutcome.INTERRUPTED,
            impact=fx.Impact.POSSIBLE,
        )
        log.claim(
            effect_id=TWIN,
            action_id="twin",
            operation=op("write_file"),
            impact_scope=[fs_ref("/srv/work/twin.txt")],
        )
        log.outcome(
            effect_id=TWIN, execution=fx.ExecutionOutcome.INTERRUPTED, impact=fx.Impact.POSSIBLE
        )
        log.resolve(PAY, applied=False, by=RESOLVER, note=RESOLVE_NOTE)
        retry = log.retry(PAY)
        log.outcome(
            effect_id=retry.effect_id,
            execution=fx.ExecutionOutcome.REPORTED_SUCCESS,
            impact=fx.Impact.CERTAIN,
        )
        log.claim(
            effect_id=LOST,
            action_id="lost",
            operation=op("send_mail"),
            impact_scope=[fx.ResourceRef("owned", "mail:ops", "target")],
        )
    return run_id, retry.effect_id


@dataclasses.dataclass(frozen=True)
class Page:
    store: Path
    out: Path
    html: str
    dom: Dom
    png: bytes
    ordinary: str
    hostile: str
    decided: str
    retry: str


@pytest.fixture(scope="module")
def page(tmp_path_factory: pytest.TempPathFactory) -> Page:
    tmp = tmp_path_factory.mktemp("report")
    store = tmp / "store"
    ordinary, hostile = _write_store(store)
    decided, retry = _write_decided_run(store)
    out = tmp / "report.html"
    before = fingerprint(store)
    result = ledger("report", "--store", str(store), "-o", str(out), timeout=300)
    assert fingerprint(store) == before, "a report changed the store"
    assert result.returncode == 0, result.stderr
    assert result.stdout == f"{out}\n"
    assert result.stderr == ""
    dumped = chromium("--dump-dom", out.as_uri(), profile=tmp / "profile-dom").stdout.decode()
    shot = tmp / "shot.png"
    chromium(
        f"--screenshot={shot}",
        "--window-size=1280,1000",
        "--force-device-scale-factor=0.5",
        out.as_uri(),
        profile=tmp / "profile-shot",
    )
    return Page(
        store,
        out,
        out.read_text(),
        Dom.of(dumped),
        shot.read_bytes(),
        ordinary,
        hostile,
        decided,
        retry,
    )


# --------------------------------------------------------------------------- the page


@pytest.mark.program
def test_one_lane_per_effect(page: Page) -> None:
    """Each run's timeline in the DOM has exactly one lane per claimed effect."""
    assert page.dom.lanes == {page.ordinary: 4, page.hostile: 1, page.decided: 4}


@pytest.mark.program
def test_incident_list_is_ledger_status_unresolved(page: Page) -> None:
    """The incident rows are `ledger status --unresolved --json`: same effects, order, verdicts, decisions."""
    status = ledger("status", "--unresolved", "--json", "--store", str(page.store))
    assert status.returncode == 0, status.stderr
    expected = [
        {
            "run_id": r["run_id"],
            "seq": str(r["seq"]),
            "verdict": r["verdict"],
            "kind": r["kind"],
            "next_step": r["next_step"],
            "effect_id": r["effect_id"],
        }
        for r in json.loads(status.stdout)
    ]
    assert page.dom.incidents == expected
    assert {r["effect_id"] for r in expected} >= {"write-torn", "notify", SCRIPT_ID}


@pytest.mark.program
def test_recovered_interruption_is_labelled_and_commands_are_exact(page: Page) -> None:
    """Recovery's interrupted outcome is drawn as such; an unanswered claim's step is the exact recover."""
    titles = " ".join(page.dom.lane_titles[page.ordinary])
    assert "write-torn: write_file, interrupted, impact possible" in titles
    assert "interrupted (recovery)" in page.dom.all_text()
    assert "written by: recovery" in page.dom.all_text()
    for applied in ("--applied", "--not-applied"):
        command = f'ledger resolve {page.ordinary} write-torn {applied} --by "$USER"'
        assert f"{command} --store {page.store}" in page.dom.all_text()
    assert "ledger verify: ok." in page.dom.all_text()


@pytest.mark.program
def test_the_page_s_resolve_command_settles_the_incident(page: Page, tmp_path: Path) -> None:
    """Typed into a shell as the page prints it, `ledger resolve` takes the effect off the list."""
    copy = tmp_path / "store"
    shutil.copytree(page.store, copy)
    # The same command settles it in the list of what needs a person and in the incidents.
    (command,) = {c for c in page.dom.commands if " write-torn --not-applied " in c}
    command = command.replace(f"--store {page.store}", f"--store {copy}")
    bin_dir = Path(sys.executable).parent
    env = {**os.environ, "USER": "alice", "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}"}
    done = subprocess.run(
        ["sh", "-c", command], check=False, env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    status = ledger("status", "--unresolved", "--json", "--store", str(copy))
    left = {r["effect_id"] for r in json.loads(status.stdout)}
    assert "write-torn" not in left
    assert left == {r["effect_id"] for r in page.dom.incidents} - {"write-torn"}
    shown = ledger("show", page.ordinary, "--json", "--store", str(copy))
    (decision,) = [
        d for d in json.loads(shown.stdout)["decisions"] if d["effect_id"] == "write-torn"
    ]
    assert decision["step"] == "retry"


@pytest.mark.program
def test_page_loads_nothing(page: Page) -> None:
    """No element points outside the page, a CSP forbids every load, and its own script ran."""
    for tag, attrs in page.dom.elements:
        for name in ("src", "srcset", "action", "xlink:href", "data"):
            assert name not in attrs, (tag, attrs)
        href = attrs.get("href")
        assert href is None or href.startswith("#"), (tag, attrs)
        assert tag not in ("link", "img", "iframe", "object", "embed", "base"), (tag, attrs)
    (csp,) = [
        a["content"]
        for t, a in page.dom.elements
        if a.get("http-equiv") == "Content-Security-Policy"
    ]
    assert csp is not None
    assert csp.startswith("default-src 'none';")
    assert "unsafe-inline" not in csp
    # The filters appear only when the page's own script ran: its hash in the CSP is right.
    (form,) = [a for t, a in page.dom.elements if a.get("id") == "filters"]
    assert "hidden" not in form
    assert "4 lane(s) shown" not in page.dom.all_text()  # written only on a change
    assert (page.store / "ledger.sqlite3").exists()


@pytest.mark.program
def test_screenshot_is_not_blank(page: Page) -> None:
    """The rendered page has ink and the verdict colours, not a white or one-colour screen."""
    colours, inked = png_colours(page.png)
    assert colours > 50
    assert 0.02 < inked < 0.9


@pytest.mark.program
def test_hostile_text_shows_as_text_and_runs_nothing(page: Page) -> None:
    """<script>, onerror=, </svg>, javascript: and attribute breaks in ids, locators and fields stay text."""
    dom = page.dom
    assert dom.title.startswith("ledger report")
    scripts = [a for t, a in dom.elements if t == "script"]
    assert len(scripts) == 1
    for tag, attrs in dom.elements:
        assert tag not in ("img", "iframe"), (tag, attrs)
        assert not any(name.startswith("on") for name in attrs), (tag, attrs)
        assert "data-pwned" not in attrs
        assert attrs.get("id", "") not in ("pwned-img", "pwned-frame")
        assert "data-x" not in attrs
    text = dom.all_text()
    for planted in HOSTILE:
        assert planted in text, planted
    # </svg> did not close the drawing: the hostile run's lane is whole, with its title.
    assert (
        any(SVG_BREAK in t for t in dom.lane_titles[page.hostile]) or dom.lanes[page.hostile] == 1
    )
    # Recorded values are compact JSON, as text.
    for value in (HOSTILE_ARGS, HOSTILE_RESULT):
        assert _text.compact_json(value).replace("\u202e", "\\u202e") in text
    # A person's name and note, and recorded arguments, stay text too.
    for planted in (RESOLVER, RESOLVE_NOTE, _text.compact_json(PAY_ARGS)):
        assert planted in text, planted
    # A bidi override is spelled out, as the command line prints it.
    assert "invoice\\u202etxt.exe" in text
    assert "\u202e" not in page.html


@pytest.mark.program
def test_the_page_leads_with_what_needs_a_person(page: Page) -> None:
    """First on the page: `ledger status --attention`, same effects and order, why, and
    the commands that settle each, exact and ready to copy."""
    status = ledger("status", "--attention", "--json", "--store", str(page.store))
    assert status.returncode == 1, status.stderr
    expected = json.loads(status.stdout)
    rows = page.dom.rows_of("needs")
    assert [(r.attrs["data-run"], r.attrs["data-effect"]) for r in rows] == [
        (e["run_id"], e["effect_id"]) for e in expected
    ]
    assert {TWIN, LOST, "write-torn"} <= {e["effect_id"] for e in expected}
    assert PAY not in {e["effect_id"] for e in expected}  # a person settled it
    for row, e in zip(rows, expected, strict=True):
        assert row.attrs["data-urgency"] == str(e["urgency"])
        assert row.attrs["data-action"] == e["action"]
        text = " ".join(row.text.split())
        assert e["reason"] in text
        store = f"--store {page.store}"
        if e["next_step"] == "escalate":
            resolve = f"ledger resolve {e['run_id']} {e['effect_id']}"
            for word in ("--applied", "--not-applied"):
                assert f'{resolve} {word} --by "$USER" {store}' in text
        else:
            assert f"ledger recover {e['run_id']} {store}" in text
    # Before anything else: the first section of the page, above the incidents.
    order = [a.get("id") for t, a in page.dom.elements if t == "section" and a.get("id")]
    assert order[:2] == ["attention", "incidents"]
    text = " ".join(page.dom.all_text().split())
    assert text.index("Needs a person") < text.index("Incidents:")


@pytest.mark.program
def test_targets_and_arguments_are_in_the_incident_and_attention_rows(page: Page) -> None:
    """Each row says what the call touched (its impact scope) and the arguments recorded."""
    (hostile,) = [r for r in page.dom.rows_of("incident") if r.attrs["data-run"] == page.hostile]
    assert f"target: {SVG_BREAK}" in hostile.text
    # Cut to fit the row; `ledger show --json` has them whole.
    args = _text.compact_json(HOSTILE_ARGS).replace("\u202e", "\\u202e")
    assert "args: " + args[:100] in hostile.text
    (twin,) = [r for r in page.dom.rows_of("needs") if r.attrs["data-effect"] == TWIN]
    assert "target: /srv/work/twin.txt" in twin.text


@pytest.mark.program
def test_a_resolution_shows_who_when_and_the_note(page: Page) -> None:
    """The person's word on an effect: applied or not, by whom, when, the note, on its lane too."""
    shown = ledger("show", page.decided, "--json", "--store", str(page.store))
    (resolution,) = [
        r["record"] for r in json.loads(shown.stdout)["records"] if r["type"] == "resolution"
    ]
    (row,) = page.dom.rows_of("resolution")
    text = row.text
    assert "not applied" in text
    assert RESOLVER in text
    assert RESOLVE_NOTE in text
    assert resolution["recorded_at"].replace("T", " ").removesuffix("+00:00") in text
    # Its effect links to the effect's claim in the record table.
    ((href, effect),) = row.links
    assert effect == PAY
    (claim,) = [r for r in page.dom.rows_of("record") if r.attrs.get("id") == href[1:]]
    assert "kind-claim" in claim.classes
    titles = " ".join(page.dom.lane_titles[page.decided])
    assert f"{PAY}: transfer (step pay-invoice)" in titles
    assert f"resolved not applied by {RESOLVER}" in titles


@pytest.mark.program
def test_a_retry_and_the_attempt_it_repeats_link_to_each_other(page: Page) -> None:
    """The retry's claim says "retry of" and links to the first attempt's claim, and back."""
    records = {r.attrs.get("id"): r for r in page.dom.rows_of("record")}

    def claim_row(effect_id: str) -> tuple[str, TableRow]:
        (found,) = [
            (anchor or "", r)
            for anchor, r in records.items()
            if "kind-claim" in r.classes and r.ids[0] == effect_id
        ]
        return found

    first_anchor, first = claim_row(PAY)
    retry_anchor, retry = claim_row(page.retry)
    assert (f"#{first_anchor}", PAY) in retry.links
    assert "retry of" in retry.text
    assert (f"#{retry_anchor}", page.retry) in first.links
    assert "retried by" in first.text


@pytest.mark.program
def test_long_ids_are_cut_to_unique_prefixes_with_the_whole_id_in_the_title(page: Page) -> None:
    """A 32-hex id shows 10-12 characters, more where two ids share a prefix; the whole id
    is the element's title and what a click copies."""
    shown_as: dict[str, set[str]] = defaultdict(set)
    for shown, whole in page.dom.ids:
        shown_as[shown].add(whole)
    for shown, wholes in shown_as.items():
        assert len(wholes) == 1, (shown, wholes)  # a prefix names one id on the page
    cut = {whole: shown for shown, whole in page.dom.ids}
    for whole in (LOST, page.retry, page.ordinary, page.hostile, page.decided):
        assert cut[whole].endswith("…")
        assert whole.startswith(cut[whole][:-1])
        assert 10 <= len(cut[whole]) - 1 <= 12, cut[whole]
    for whole in (PAY, TWIN):  # they share 16 characters: 17 tell them apart
        assert cut[whole] == whole[:17] + "…"
    for tag, attrs in page.dom.elements:
        if tag == "code" and "id" in (attrs.get("class") or "").split():
            assert attrs["title"] == attrs["data-id"]
    assert cut["write-torn"] == "write-torn"  # a short id is shown whole


@pytest.mark.program
def test_a_click_on_a_cut_id_shows_it_whole(page: Page, tmp_path: Path) -> None:
    """The page's own script, in Chromium: a click on a cut id (not a link) shows it whole.

    The page is given one more script, allowed by its hash like the page's own, that
    clicks the first cut id outside a link and the first one inside a link.
    """
    clicker = (
        'const ids = Array.from(document.querySelectorAll("code.id[data-id]"))'
        '.filter((c) => c.textContent.endsWith("\u2026"));'
        'const plain = ids.find((c) => !c.closest("a"));'
        'const linked = ids.find((c) => c.closest("a") && c.dataset.id !== plain.dataset.id);'
        "plain.click(); linked.click();"
        "document.body.dataset.plain = plain.dataset.id;"
        "document.body.dataset.linked = linked.dataset.id;"
    )
    digest = base64.b64encode(hashlib.sha256(clicker.encode()).digest()).decode()
    html = page.html.replace("script-src ", f"script-src 'sha256-{digest}' ", 1)
    html = html.replace("</body>", f"<script>{clicker}</script></body>", 1)
    clicked = tmp_path / "clicked.html"
    clicked.write_text(html)
    dom = Dom.of(
        chromium("--dump-dom", clicked.as_uri(), profile=tmp_path / "profile").stdout.decode()
    )
    ((_, body),) = [(t, a) for t, a in dom.elements if t == "body"]
    plain, linked = body["data-plain"], body["data-linked"]
    assert plain
    assert linked
    # Every id is cut alike on the page: the one clicked alone is now whole.
    assert plain in [text for text, whole in dom.ids if whole == plain]
    assert all(text.endswith("…") for text, whole in dom.ids if whole == linked)


@pytest.mark.program
def test_page_is_private(page: Page) -> None:
    """The page holds what the store holds: it is written 0600."""
    assert page.out.stat().st_mode & 0o777 == 0o600


# --------------------------------------------------------------------------- choosing runs


@pytest.mark.program
def test_runs_unresolved_and_since_choose_what_is_drawn(page: Page, tmp_path: Path) -> None:
    """RUN prefixes, --unresolved and --since choose the runs; bad ones are one-line usage errors."""
    out = tmp_path / "one.html"
    one = ledger("report", page.ordinary[:6], "--store", str(page.store), "-o", str(out))
    assert one.returncode == 0, one.stderr
    assert Dom.of(out.read_text()).lanes == {page.ordinary: 4}
    later = ledger(
        "report", "--since", "1d", "--unresolved", "--store", str(page.store), "-o", str(out)
    )
    assert later.returncode == 0, later.stderr
    assert set(Dom.of(out.read_text()).lanes) == {page.ordinary, page.hostile, page.decided}
    future = ledger("report", "--since", "2999-01-01", "--store", str(page.store), "-o", str(out))
    assert future.returncode == 0
    assert Dom.of(out.read_text()).lanes == {}
    for args, code, message in (
        (["ffff"], 2, "no run matches 'ffff'"),
        (["--since", "yesterday"], 2, "is not a time"),
    ):
        bad = ledger("report", *args, "--store", str(page.store), "-o", str(out))
        assert bad.returncode == code, (args, bad.stderr)
        assert message in bad.stderr
        assert "Traceback" not in bad.stderr
    unwritable = ledger("report", "--store", str(page.store), "-o", str(tmp_path / "no" / "r.html"))
    assert unwritable.returncode == 1
    assert unwritable.stderr.startswith("Error: cannot write ")
    assert unwritable.stderr.count("\n") == 1
    missing = ledger("report", "--store", str(tmp_path / "nothing"), "-o", str(out))
    assert missing.returncode == 1
    assert missing.stderr.count("\n") == 1


@pytest.mark.program
def test_a_run_that_does_not_validate_is_listed_not_drawn(tmp_path: Path) -> None:
    """A forged record: the page is written, says so, draws no lane for it, and the exit is 1."""
    store = tmp_path / "store"
    good, bad = _write_store(store)
    conn = sqlite3.connect(store / "ledger.sqlite3", isolation_level=None)
    conn.execute("DROP TRIGGER outcomes_no_update")
    conn.execute("UPDATE outcomes SET execution_id = 'forged' WHERE run_id = ?", (bad,))
    conn.close()
    out = tmp_path / "forged.html"
    made = ledger("report", "--store", str(store), "-o", str(out), timeout=300)
    assert made.returncode == 1
    assert made.stdout == f"{out}\n"
    assert made.stderr.startswith(f"warning: run {bad} does not validate")
    dom = Dom.of(out.read_text())
    assert dom.lanes == {good: 4}
    text = " ".join(dom.all_text().split())
    assert f"Run {bad} does not validate" in text
    assert "chain broken at seq 2" in text
    assert "ledger verify found" in text
    assert "schema: " in text  # the dropped trigger, a problem of the store itself


def test_since_takes_dates_times_and_durations() -> None:
    """--since reads ISO dates and times (UTC unless an offset is given) and 90s/30m/2h/7d."""
    now = dt.datetime(2026, 3, 1, 12, 0, tzinfo=dt.UTC)
    assert parse_since("2h", now) == "2026-03-01T10:00:00.000000+00:00"
    assert parse_since("7d", now) == "2026-02-22T12:00:00.000000+00:00"
    assert parse_since("2026-03-01") == "2026-03-01T00:00:00.000000+00:00"
    assert parse_since("2026-03-01T09:15:00+01:00") == "2026-03-01T08:15:00.000000+00:00"
    with pytest.raises(ValueError, match="is not a time"):
        parse_since("2 hours")


# --------------------------------------------------------------------------- a large run


def _large_run(directory: Path, records: int) -> Path:
    """A JSON-lines log of ``records`` records: claim, outcome, observation per effect."""
    run_id = new_run_id()
    start = dt.datetime(2026, 3, 1, 9, 0, tzinfo=dt.UTC)
    lines = []
    seq = 0

    def at() -> str:
        return (start + dt.timedelta(milliseconds=10 * seq)).isoformat(timespec="microseconds")

    def add(record: fx.EffectClaim | fx.EffectOutcome | fx.Observation) -> None:
        lines.append(json.dumps({"v": 1, "type": record.record_type, "record": record.to_dict()}))

    i = 0
    while seq < records:
        ref = fs_ref(f"/srv/work/out/{i}.txt")
        digest = sha(str(i).encode())
        seq += 1
        add(
            fx.EffectClaim(
                f"e{i}",
                seq,
                f"a{i}",
                op("write_file", str(i).encode()),
                (ref,),
                (fx.Postcondition(ref, fx.Predicate.SHA256, digest),),
                at(),
            )
        )
        if seq < records and i % 10:  # every 10th claim is left without an outcome
            seq += 1
            add(
                fx.EffectOutcome(
                    f"e{i}",
                    seq,
                    fx.ExecutionOutcome.REPORTED_SUCCESS,
                    fx.Impact.CERTAIN,
                    recorded_at=at(),
                )
            )
        if seq < records:
            seq += 1
            add(
                fx.Observation(
                    f"o{i}",
                    seq,
                    ref,
                    fx.ObservationMechanism.FILESYSTEM_READ,
                    fx.Coverage.COMPLETE,
                    f"c{i}",
                    True,
                    digest,
                    None,
                    at(),
                )
            )
        i += 1
    path = directory / f"{run_id}.jsonl"
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.mark.program
def test_a_run_of_ten_thousand_records_renders_summarised(tmp_path: Path) -> None:
    """10,000 records: the page opens, draws 200 lanes (unresolved first), lists at most 1,000 rows."""
    store = tmp_path / "store"
    imported = ledger(
        "import", str(_large_run(tmp_path, 10_000)), "--store", str(store), timeout=300
    )
    assert imported.returncode == 0, imported.stderr
    out = tmp_path / "large.html"
    made = ledger("report", "--store", str(store), "-o", str(out), timeout=300)
    assert made.returncode == 0, made.stderr
    assert out.stat().st_size < 3_000_000
    dom = Dom.of(chromium("--dump-dom", out.as_uri(), profile=tmp_path / "profile").stdout.decode())
    (lanes,) = dom.lanes.values()
    assert lanes == LANE_LIMIT
    text = " ".join(dom.all_text().split())
    assert re.search(r"200 of \d+ effects drawn: every effect with unresolved impact first", text)
    unanswered = [r for r in dom.incidents if r["verdict"] == "pending"]
    assert len(unanswered) == len(dom.incidents) > 0
    drawn_titles = " ".join(next(iter(dom.lane_titles.values())))
    assert all(f"{r['effect_id']}: write_file, no outcome" in drawn_titles for r in unanswered)
    rows = sum(
        1 for tag, attrs in dom.elements if tag == "tr" and "record" in (attrs.get("class") or "")
    )
    assert 0 < rows <= TABLE_LIMIT
    # What needs a person and the incidents outgrow their lists: the page says how many it
    # left out, and the command that lists them all.
    status = ledger("status", "--attention", "--json", "--store", str(store))
    waiting = len(json.loads(status.stdout))
    assert waiting > ATTENTION_LIMIT
    assert len(dom.rows_of("needs")) == ATTENTION_LIMIT
    assert len(dom.incidents) == INCIDENT_LIMIT
    shown = f"{ATTENTION_LIMIT} of {waiting} shown"
    assert f"{shown}, the most urgent first; ledger status --attention --store {store}" in text
    assert f"{shown}, the oldest claims first; ledger status --unresolved --store {store}" in text
    assert f"ledger status --attention --store {store}" in dom.commands


def _store_with_an_open_claim(store: Path) -> str:
    run_id = new_run_id()
    with EffectLog(run_id, store) as log:
        log.claim(
            effect_id="e1",
            action_id="act-1",
            operation=op(),
            impact_scope=(fs_ref("/srv/app/out.txt"),),
        )
    return run_id


def _temporaries(directory: Path) -> list[str]:
    return [name for name in os.listdir(directory) if name.endswith(".tmp")]


@pytest.mark.program
def test_a_store_path_that_is_not_utf8_is_reported_and_its_commands_reach_it(
    tmp_path: Path,
) -> None:
    """A store (and a page) named with bytes that are not UTF-8: the page is written, no .tmp.

    The page shows the path spelled out, as the other commands print it, and its commands
    name it so that a shell reaches that very directory.
    """
    store = Path(os.fsdecode(os.fsencode(tmp_path) + b"/st\xffore"))
    run_id = _store_with_an_open_claim(store)
    out = store / os.fsdecode(b"page\xfe.html")
    made = ledger("report", "--store", str(store), "-o", str(out))
    assert made.returncode == 0, made.stderr
    assert made.stdout == f"{out}\n"
    assert not _temporaries(store)
    dom = Dom.of(out.read_text(encoding="utf-8"))
    text = dom.all_text()
    assert "st\\xffore" in text  # spelled out, as `ledger` prints the path
    (command,) = {c for c in dom.commands if c.startswith(f"ledger recover {run_id} ")}
    assert command.endswith(" --store $'" + str(tmp_path) + "/st\\xffore'")
    # Typed into bash as the page shows it, the command names the store (read with status).
    status = command.replace(f"ledger recover {run_id}", "ledger status --json")
    bin_dir = Path(sys.executable).parent
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}"}
    done = subprocess.run(
        ["bash", "-c", status], check=False, env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert [row["run_id"] for row in json.loads(done.stdout)] == [run_id]


@pytest.mark.program
def test_a_page_that_cannot_be_written_fails_in_one_line_leaving_no_tmp(tmp_path: Path) -> None:
    """The page outgrows the file size limit (EFBIG) mid-write: one line, exit 1, nothing left."""
    store = tmp_path / "store"
    _store_with_an_open_claim(store)
    out = tmp_path / "out" / "page.html"
    out.parent.mkdir()
    made = subprocess.run(
        ["prlimit", "--fsize=4096", "--", LEDGER, "report", "--store", str(store), "-o", str(out)],
        check=False,
        env=subprocess_env(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert made.returncode == 1, made.stderr
    assert "Traceback" not in made.stderr
    assert made.stderr.splitlines() == [f"Error: cannot write {out}: File too large"]
    assert os.listdir(out.parent) == []
