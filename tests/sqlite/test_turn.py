"""The writers' turn: processes queue in the kernel for a store's write lock, never for ever.

Another process is a real one, holding the turn byte of the store's ``ledger.lock`` by
the same kernel lock the library takes; whether this process holds the byte is asked of
yet another process, since POSIX locks never conflict inside one.
"""

from __future__ import annotations

import gc
import threading
from pathlib import Path

import pytest

from ledger.effect_log import EffectLog
from ledger.sqlite import liveness, store, turn
from tests.builders import CHILD_TIMEOUT, claim_target
from tests.sqlite.driver import other_process_holds_the_turn, turn_seen_from_another_process


def _in_thread(work: object) -> threading.Thread:
    thread = threading.Thread(target=work, daemon=True)  # type: ignore[arg-type]
    thread.start()
    return thread


@pytest.fixture
def opened(log: EffectLog, store_dir: Path) -> EffectLog:
    """A log whose store exists and holds a claim (so ``ledger.lock`` exists too)."""
    claim_target(log, "e0")
    return log


def test_a_transaction_holds_the_turn_until_it_ends(opened: EffectLog, store_dir: Path) -> None:
    """Inside a write transaction this process holds the turn; after it, nobody does."""
    seen: list[str] = []
    the_store = store.acquire(store_dir.absolute())
    try:
        job = the_store.commit(
            "probe",
            [],
            before=lambda _cursor: seen.append(turn_seen_from_another_process(store_dir)),
        )
    finally:
        store.release(the_store)
    assert job.error is None
    assert seen == ["taken"]
    assert turn_seen_from_another_process(store_dir) == "free"


def test_a_writer_waits_in_line_for_its_turn(opened: EffectLog, store_dir: Path) -> None:
    """While another process holds the turn, a claim waits (SQLite's lock is free); then lands."""
    with other_process_holds_the_turn(store_dir) as holder:
        writer = _in_thread(lambda: claim_target(opened, "e1"))
        writer.join(0.5)
        assert writer.is_alive(), "the claim did not wait for its turn"
        assert holder.stdin is not None
        holder.stdin.write("go\n")
        holder.stdin.flush()
        writer.join(CHILD_TIMEOUT)
        assert not writer.is_alive()
    with EffectLog.load(opened.run_id, store_dir) as loaded:
        assert [c.effect_id for c in loaded.history().claims] == ["e0", "e1"]


def test_a_turn_never_released_costs_patience_not_a_hang(
    opened: EffectLog, store_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A holder that never lets go (stopped, say): writers go on without the turn.

    Once the holder is gone, the process takes its turn again.
    """
    monkeypatch.setattr(turn, "PATIENCE", 0.2)
    with other_process_holds_the_turn(store_dir):
        for effect_id in ("e1", "e2", "e3"):
            writer = _in_thread(lambda e=effect_id: claim_target(opened, e))
            writer.join(CHILD_TIMEOUT)
            assert not writer.is_alive(), f"{effect_id} hung waiting for the turn"
            place = turn._turns[store_dir.absolute()]
            assert place._stuck, "the next writer would wait its patience again"
    # The waiter thread, still queued, gets the byte nobody wants any more: it lets it go.
    for _ in range(1000):
        if turn_seen_from_another_process(store_dir) == "free":
            break
    assert turn_seen_from_another_process(store_dir) == "free"
    seen: list[str] = []
    the_store = store.acquire(store_dir.absolute())
    try:
        for _ in range(200):  # the waiter thread gives the byte back as it gets it
            the_store.commit(
                "probe",
                [],
                before=lambda _c: seen.append(turn_seen_from_another_process(store_dir)),
            )
            if seen[-1] == "taken":
                break
    finally:
        store.release(the_store)
    assert seen[-1] == "taken"
    with EffectLog.load(opened.run_id, store_dir) as loaded:
        assert [c.effect_id for c in loaded.history().claims] == ["e0", "e1", "e2", "e3"]


def test_a_closed_turn_lets_the_lock_file_go(
    store_dir: Path, opened: EffectLog, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A turn closed while its waiter thread is still queued keeps no descriptor once that ends."""
    monkeypatch.setattr(turn, "PATIENCE", 0.2)
    opened.close()
    gc.collect()
    key = (store_dir.stat().st_dev, store_dir.stat().st_ino)
    assert key not in liveness._registry
    place = turn.Turn(store_dir)
    with other_process_holds_the_turn(store_dir):
        assert place.take() is False  # out of patience; the waiter thread still queues
        place.close()
        assert key in liveness._registry
    for _ in range(1000):
        if key not in liveness._registry:
            break
        threading.Event().wait(0.01)
    assert key not in liveness._registry


def test_a_turn_taken_and_given_back_in_turn(store_dir: Path, opened: EffectLog) -> None:
    """take() holds the byte against other processes; give_back() frees it; again after close."""
    place = turn.Turn(store_dir)
    for _ in range(2):
        assert place.take() is True
        assert turn_seen_from_another_process(store_dir) == "taken"
        place.give_back()
        assert turn_seen_from_another_process(store_dir) == "free"
        place.close()


def test_a_store_opened_again_keeps_its_place(
    store_dir: Path, opened: EffectLog, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Closing every log of a store while its turn still queues keeps that turn for the next open."""
    monkeypatch.setattr(turn, "PATIENCE", 0.2)
    with other_process_holds_the_turn(store_dir):
        claim_target(opened, "e1")  # out of patience: written without the turn
        place = turn._turns[store_dir.absolute()]
        opened.close()
        gc.collect()
        again = EffectLog.load(opened.run_id, store_dir)
        try:
            claim_target(again, "e2")
            assert turn._turns[store_dir.absolute()] is place
        finally:
            again.close()
