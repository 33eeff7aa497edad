"""Runs as JSON lines: the format of the earlier file-based effect logs.

One ``<run_id>.jsonl`` file per run, one record per line, in ``seq`` order::

    {"v": 1, "type": "claim" | "outcome" | "observation" | "resolution"
              | "approval_request" | "approval_decision", "record": <to_dict()>}

Those logs were written with fsynced appends, so a crash could leave a torn final
line: it is ignored. Anything else that does not validate refuses the whole file,
naming the line, and nothing of it is written. A file is held to the rules a store's
run is held to on load and verify (:func:`~ledger.effects.check_history`: among them,
every ``recorded_at`` exactly in :func:`~ledger.effects.utc_now`'s form, and no
outcome recorded before its claim), and every record must carry its ``recorded_at``.
A claim written before idempotency keys existed gets the key its run and effect id
derive.

Fields added to the records since keep the format at version 1: a claim carries its
``step`` and recorded ``args``, an outcome its recorded ``result`` and
``result_recorded``, and a line written before they existed reads as a claim without a
step or recorded arguments, an outcome without a recorded result. Approval requests and
decisions are lines of their own types, and a claim made under an approval carries its
``approval_id``; a file without them imports as before. Imported, a run is chained
afresh by the store (:mod:`ledger._chain`), covering those values.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import stat
from pathlib import Path
from typing import Any

from ledger import storage
from ledger._chain import GENESIS
from ledger._inspect import reader
from ledger.effects import (
    ApprovalDecision,
    ApprovalRequest,
    EffectClaim,
    EffectOutcome,
    History,
    Observation,
    Record,
    Resolution,
    check_history,
    idempotency_key,
    utc_now,
)
from ledger.errors import RunExistsError
from ledger.storage import RUN_ID as _RUN_ID

FORMAT_VERSION = 1
_TYPES: dict[str, type[Record]] = {
    "claim": EffectClaim,
    "outcome": EffectOutcome,
    "observation": Observation,
    "resolution": Resolution,
    "approval_request": ApprovalRequest,
    "approval_decision": ApprovalDecision,
}


class ImportRefusedError(ValueError):
    """A JSON-lines file that cannot be imported; nothing of it was written."""


def export_lines(directory: storage.Location, prefix: str) -> tuple[str, list[str]]:
    """The run matching ``prefix`` as JSON lines (without newlines), validated first."""
    run_id, history, _writer = reader(directory).run(prefix)
    lines = [
        json.dumps(
            {"v": FORMAT_VERSION, "type": record.record_type, "record": record.to_dict()},
            ensure_ascii=False,
            separators=(",", ":"),
        )
        for record in history.records()
    ]
    return run_id, lines


@dataclasses.dataclass(frozen=True, slots=True)
class Imported:
    """One imported file."""

    path: Path
    run_id: str
    records: int
    torn_tail: bool

    def to_dict(self) -> dict[str, Any]:
        """The documented JSON shape of one entry of ``ledger import --json``."""
        return {
            "file": str(self.path),
            "run_id": self.run_id,
            "records": self.records,
            "torn_tail_ignored": self.torn_tail,
        }


def _read(path: Path) -> bytes:
    try:
        return _read_file(path)
    except OSError as e:
        raise ImportRefusedError(f"{path}: {e.strerror or e}") from None


def _read_file(path: Path) -> bytes:
    st = os.lstat(path)
    if stat.S_ISLNK(st.st_mode):
        raise ImportRefusedError(f"{path}: a symlink; refusing it")
    if not stat.S_ISREG(st.st_mode):
        raise ImportRefusedError(f"{path}: not a regular file")
    if st.st_nlink > 1:
        raise ImportRefusedError(f"{path}: has {st.st_nlink} hard links; refusing it")
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    with os.fdopen(fd, "rb") as f:
        return f.read()


def _record(line: bytes, number: int, path: Path) -> Record:
    where = f"{path}: line {number}"
    try:
        entry = json.loads(line)
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ImportRefusedError(f"{where}: not JSON ({e})") from None
    except RecursionError:
        raise ImportRefusedError(f"{where}: JSON nested too deeply") from None
    if not isinstance(entry, dict) or set(entry) != {"v", "type", "record"}:
        raise ImportRefusedError(f'{where}: not an object with exactly "v", "type", "record"')
    if type(entry["v"]) is not int or entry["v"] != FORMAT_VERSION:
        raise ImportRefusedError(f"{where}: format version {entry['v']!r} is not {FORMAT_VERSION}")
    kind = _TYPES.get(entry["type"]) if isinstance(entry["type"], str) else None
    if kind is None:
        raise ImportRefusedError(f"{where}: unknown record type {entry['type']!r}")
    try:
        record = kind.from_dict(entry["record"])
    except ValueError as e:
        raise ImportRefusedError(f"{where}: invalid {entry['type']}: {e}") from None
    except RecursionError:  # a recorded value nested as deeply as json.loads allows
        raise ImportRefusedError(f"{where}: JSON nested too deeply") from None
    if record.recorded_at is None:
        raise ImportRefusedError(f"{where}: invalid {entry['type']}: recorded_at is missing")
    return record


def parse(path: Path) -> tuple[History, bool]:
    """Read and validate a whole file; return its history and whether a torn tail was dropped."""
    data = _read(path)
    lines = data.split(b"\n")
    torn = False
    if lines and lines[-1] == b"":
        lines.pop()  # the file ends with a newline, as every complete append does
    elif lines:
        # The final append was cut short by a crash: it never was a record.
        try:
            json.loads(lines[-1])
        except (UnicodeDecodeError, json.JSONDecodeError):
            lines.pop()
            torn = True
        except RecursionError:
            pass  # complete, but nested too deeply: refused below, naming the line
    records = [_record(line, number, path) for number, line in enumerate(lines, start=1)]
    for number, record in enumerate(records, start=1):
        if record.seq != number:
            raise ImportRefusedError(
                f"{path}: line {number}: seq {record.seq} where {number} was due"
            )
    history = History(
        tuple(r for r in records if isinstance(r, EffectClaim)),
        tuple(r for r in records if isinstance(r, EffectOutcome)),
        tuple(r for r in records if isinstance(r, Observation)),
        tuple(r for r in records if isinstance(r, Resolution)),
        tuple(r for r in records if isinstance(r, ApprovalRequest)),
        tuple(r for r in records if isinstance(r, ApprovalDecision)),
    )
    try:
        check_history(history)
    except ValueError as e:
        seq = re.search(r"at seq (\d+)", str(e))
        line = f"line {seq.group(1)}: " if seq else ""
        raise ImportRefusedError(f"{path}: {line}{e}") from None
    return history, torn


def _run_id_for(path: Path, run_id: str | None) -> str:
    if run_id is not None:
        chosen = run_id
    elif path.name.endswith(".jsonl"):
        chosen = path.name.removesuffix(".jsonl")
    else:
        chosen = ""
    if not _RUN_ID.fullmatch(chosen):
        raise ImportRefusedError(
            f"{path}: the run id comes from a file named <run_id>.jsonl (32 lowercase hex) "
            "or from --run"
        )
    return chosen


def _keyed(run_id: str, records: tuple[Record, ...]) -> tuple[Record, ...]:
    """The records with every claim keyed: one exported before keys existed has none."""
    keys: dict[str, str] = {}
    out: list[Record] = []
    for record in records:
        if isinstance(record, EffectClaim) and not record.idempotency_key:
            key = (
                keys.get(record.retry_of, "")
                if record.retry_of is not None
                else idempotency_key(run_id, record.effect_id)
            )
            out.append(dataclasses.replace(record, idempotency_key=key))
        else:
            out.append(record)
        if isinstance(out[-1], EffectClaim):
            keys[out[-1].effect_id] = out[-1].idempotency_key
    return tuple(out)


def import_file(directory: storage.Location, path: Path, run_id: str | None = None) -> Imported:
    """Import one file as a new run, all or nothing."""
    chosen = _run_id_for(path, run_id)
    history, torn = parse(path)
    records = _keyed(chosen, history.records())
    if not records:
        raise ImportRefusedError(f"{path}: holds no record")
    backend = storage.backend(directory)
    store = backend.acquire(directory)
    try:
        store.open_for_writing()
        written = store.append(
            storage.Batch(
                action=f"cannot import {path}",
                run_id=chosen,
                records=records,
                head=GENESIS,
                now=utc_now(),
                start=True,  # a new run: refused if the store holds it already
                imported=True,  # history: the store's clock does not judge its approvals
            )
        )
    finally:
        backend.release(store)
    if isinstance(written.error, RunExistsError):
        raise ImportRefusedError(f"{path}: run {chosen} is already in the store")
    if written.interrupt is not None:
        raise written.interrupt
    if written.error is not None:
        raise written.error
    return Imported(path, chosen, len(records), torn)
