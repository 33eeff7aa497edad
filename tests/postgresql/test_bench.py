"""ledger bench --store URL: a PostgreSQL server measured in a scratch schema, then left as it was."""

from __future__ import annotations

import json

from tests.builders import ledger
from tests.postgresql import driver


def test_bench_measures_claims_against_a_raw_commit_and_leaves_no_trace(url: str) -> None:
    """The report holds the raw commit, the claim and claims/s for 1, 4, 16 processes and 1, 8 threads; no schema stays."""
    done = ledger("bench", "--quick", "--json", "--store", url, timeout=600)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["raw_insert_commit"]["samples"] == report["claim"]["samples"] == 50
    assert set(report["claims_per_second"]) == {"1", "4", "16"}
    assert all(rate > 0 for rate in report["claims_per_second"].values())
    assert set(report["claims_per_second_threads"]) == {"1", "8"}
    assert all(rate > 0 for rate in report["claims_per_second_threads"].values())
    left = driver.POSTGRESQL.query(
        url, "SELECT nspname FROM pg_namespace WHERE nspname LIKE 'ledger_bench_%'"
    )
    assert left == []
    assert not driver.POSTGRESQL.exists(url)
