"""`ledger report` on each storage backend: the store read in one snapshot (Reader.survey).

The page of a SQLite store and of a PostgreSQL store holding the same runs says the same
things: what needs a person (as `ledger status --attention`), the incidents, a person's
resolution, the retry links and what `ledger verify` found.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.backends import BACKENDS, Backend
from tests.builders import ledger
from tests.cli.test_report import (
    PAY,
    RESOLVE_NOTE,
    RESOLVER,
    Dom,
    _write_decided_run,
    _write_store,
)


@pytest.mark.program
@pytest.mark.parametrize("backend", BACKENDS, ids=lambda b: b.name)
def test_the_page_of_each_backend_says_what_its_commands_say(
    backend: Backend, tmp_path: Path
) -> None:
    """Attention rows, incidents, runs, resolution, retry links and verify, one snapshot."""
    location = backend.location(tmp_path)
    ordinary, hostile = _write_store(location)
    decided, retry = _write_decided_run(location)
    store = ("--store", str(location))
    out = tmp_path / "page.html"
    made = ledger("report", *store, "-o", str(out), timeout=300)
    assert made.returncode == 0, made.stderr
    dom = Dom.of(out.read_text(encoding="utf-8"))
    attention = json.loads(ledger("status", "--attention", "--json", *store).stdout)
    assert [(r.attrs["data-run"], r.attrs["data-effect"]) for r in dom.rows_of("needs")] == [
        (a["run_id"], a["effect_id"]) for a in attention
    ]
    unresolved = json.loads(ledger("status", "--unresolved", "--json", *store).stdout)
    assert [(i["run_id"], i["effect_id"]) for i in dom.incidents] == [
        (u["run_id"], u["effect_id"]) for u in unresolved
    ]
    assert dom.lanes == {ordinary: 4, hostile: 1, decided: 4}
    (resolution,) = dom.rows_of("resolution")
    assert RESOLVER in resolution.text
    assert RESOLVE_NOTE in resolution.text
    claims = {r.ids[0]: r for r in dom.rows_of("record") if "kind-claim" in r.classes}
    assert (f"#{claims[PAY].attrs['id']}", PAY) in claims[retry].links
    assert (f"#{claims[retry].attrs['id']}", retry) in claims[PAY].links
    verified = json.loads(ledger("verify", "--json", *store).stdout)
    text = " ".join(dom.all_text().split())
    assert verified["ok"]
    assert f"all {verified['runs']} run(s) of the store ({verified['records']} records)" in text
