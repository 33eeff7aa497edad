"""`ledger report` on large runs: only what the page shows is held, and it says what the run says.

A run drawn is validated as it streams and only the records the page shows, and those
their verdicts consult, are kept (ledger._report.excerpt): the count of records alive
when the page draws a run of 10,000 records stays near the page's caps, and a verdict
that depends on a claim the page does not draw is still the run's.
"""

from __future__ import annotations

import datetime as dt
import gc
import json
from pathlib import Path
from typing import Any

import pytest

from ledger import effects as fx
from ledger._report import assemble
from ledger._report.model import ATTENTION_LIMIT, INCIDENT_LIMIT, LANE_LIMIT
from ledger.effect_log import new_run_id
from tests.builders import fs_ref, ledger, op, sha
from tests.cli.test_report import Dom, _large_run

RECORDS = (fx.EffectClaim, fx.EffectOutcome, fx.Observation, fx.Resolution)


def _alive() -> int:
    """How many records this process holds."""
    gc.collect()
    return sum(1 for o in gc.get_objects() if isinstance(o, RECORDS))


@pytest.mark.program
def test_a_large_run_drawn_is_not_held_whole(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Drawing a run of 10,000 records holds a few hundred of them, not the run."""
    store = tmp_path / "store"
    imported = ledger(
        "import", str(_large_run(tmp_path, 10_000)), "--store", str(store), timeout=300
    )
    assert imported.returncode == 0, imported.stderr
    held: list[int] = []
    draw = assemble.run_page

    def counted(*args: Any, **kwargs: Any) -> Any:
        held.append(_alive())
        return draw(*args, **kwargs)

    monkeypatch.setattr(assemble, "run_page", counted)
    report = assemble.build(store)
    assert report.drawn == 1
    (page,) = report.runs
    assert page.records == 10_000
    assert page.timeline is not None
    assert len(page.timeline.lanes) == LANE_LIMIT
    # The effects drawn and those the two lists name, with their outcomes and observations.
    assert held
    assert held[0] <= 3 * (LANE_LIMIT + INCIDENT_LIMIT + ATTENTION_LIMIT)


def _jsonl(directory: Path, records: list[fx.Record]) -> Path:
    path = directory / f"{new_run_id()}.jsonl"
    path.write_text(
        "".join(
            json.dumps({"v": 1, "type": r.record_type, "record": r.to_dict()}) + "\n"
            for r in records
        )
    )
    return path


@pytest.mark.program
def test_a_verdict_drawn_counts_a_claim_the_page_leaves_out(tmp_path: Path) -> None:
    """A file and a directory verified, then claims over them the page does not draw.

    The page draws the first 200 effects with unresolved impact; a claim on the file's
    directory and one on a file in the other directory come after 250 of them, so they
    are not drawn, and yet they make the evidence stale: each lane says UNVERIFIED, as
    `ledger status` does, not VERIFIED.
    """
    start = dt.datetime(2026, 3, 1, 9, 0, tzinfo=dt.UTC)
    seq = 0

    def at() -> str:
        return (start + dt.timedelta(seconds=seq)).isoformat(timespec="microseconds")

    records: list[fx.Record] = []

    def verified(effect_id: str, name: str, target: fx.ResourceRef, p: fx.Postcondition) -> None:
        """A claim with one postcondition, its reported success, and a look that meets it."""
        nonlocal seq
        seq += 1
        records.append(
            fx.EffectClaim(effect_id, seq, f"a-{effect_id}", op(*name), (target,), (p,), at())
        )
        seq += 1
        records.append(
            fx.EffectOutcome(
                effect_id,
                seq,
                fx.ExecutionOutcome.REPORTED_SUCCESS,
                fx.Impact.CERTAIN,
                recorded_at=at(),
            )
        )
        seq += 1
        records.append(
            fx.Observation(
                f"o-{effect_id}",
                seq,
                target,
                fx.ObservationMechanism.FILESYSTEM_READ,
                fx.Coverage.COMPLETE,
                "a-look",
                True,
                p.expected if p.predicate is fx.Predicate.SHA256 else None,
                None,
                at(),
            )
        )

    file = fs_ref("/srv/data/report.txt")
    digest = sha(b"report")
    verified(
        "file", ("write_file", b"report"), file, fx.Postcondition(file, fx.Predicate.SHA256, digest)
    )
    logs = fs_ref("/srv/logs")  # a directory that must exist, seen to exist
    verified("logs", ("make_dir",), logs, fx.Postcondition(logs, fx.Predicate.EXISTS))
    for i in range(250):  # pending: each drawn before the directory's claim
        seq += 1
        records.append(
            fx.EffectClaim(
                f"e{i}",
                seq,
                f"a{i}",
                op("write_file", str(i).encode()),
                (fs_ref(f"/srv/other/{i}.txt"),),
                (),
                at(),
            )
        )
    seq += 1  # the directory above the file
    records.append(
        fx.EffectClaim("dir", seq, "a-dir", op("remove_tree"), (fs_ref("/srv/data"),), (), at())
    )
    seq += 1  # a file below the directory of logs
    records.append(
        fx.EffectClaim(
            "log", seq, "a-log", op("write_file"), (fs_ref("/srv/logs/today.txt"),), (), at()
        )
    )
    store = tmp_path / "store"
    imported = ledger("import", str(_jsonl(tmp_path, records)), "--store", str(store))
    assert imported.returncode == 0, imported.stderr
    status = ledger("status", "--json", "--store", str(store))
    verdicts = {row["effect_id"]: row["verdict"] for row in json.loads(status.stdout)}
    assert verdicts["file"] == verdicts["logs"] == "unverified"
    out = tmp_path / "page.html"
    made = ledger("report", "--store", str(store), "-o", str(out), timeout=300)
    assert made.returncode == 0, made.stderr
    dom = Dom.of(out.read_text(encoding="utf-8"))
    (found,) = dom.lane_titles.values()
    titles = [t for t in found if not t.startswith("seq: ")]  # a lane's, not a mark's
    assert len(titles) == LANE_LIMIT
    assert not any(t.startswith(("dir:", "log:")) for t in titles)
    for effect_id in ("file", "logs"):
        (drawn,) = [t for t in titles if t.startswith(f"{effect_id}:")]
        assert ", unverified; impact unresolved" in drawn
    for title in titles:
        effect_id, _, rest = title.partition(": ")
        assert f", {verdicts[effect_id]}" in rest
