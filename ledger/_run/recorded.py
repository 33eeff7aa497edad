"""What of a call's arguments and result is recorded: JSON values, bounded, never an error.

``log.effect``, ``@log.tool`` and ``ledger mcp-proxy`` record a call's arguments in its
claim and its result in its outcome (``EffectClaim.args``, ``EffectOutcome.result``). A
value JSON cannot hold exactly, or whose canonical text is larger than the bound, is
stored as *not recorded* (``None``): recording is a convenience for people and for replay,
and must never cost the call its claim or its outcome.
"""

from __future__ import annotations

import dataclasses
import json
import logging
from collections.abc import Callable
from typing import Any, cast

from ledger.effects import InvalidTypeError, recorded_json

__all__ = [
    "MAX_RECORDED_BYTES",
    "Recording",
    "Redact",
    "check_max_bytes",
    "check_redact",
    "fits",
    "recordable",
    "redacted_args",
    "redacted_result",
]

log = logging.getLogger("ledger")

MAX_RECORDED_BYTES = 65_536

Redact = Callable[[dict[str, Any]], object]  # a dict, or the caller's mistake


def check_max_bytes(value: object) -> int:
    """``value`` if it is a whole number of bytes of at least 0, else a caller's error."""
    if not isinstance(value, int) or isinstance(value, bool):
        raise TypeError(f"max_recorded_bytes must be an int, not {type(value).__name__}")
    if value < 0:
        raise ValueError(f"max_recorded_bytes must be at least 0, got {value}")
    return value


def check_redact(value: object) -> Redact | None:
    """``value`` if it is ``None`` or callable, else a caller's error."""
    if value is not None and not callable(value):
        raise TypeError(f"redact must be a callable (dict -> dict), not {type(value).__name__}")
    return value


def redacted_args(args: object, redact: Redact | None) -> object:
    """``args`` as ``redact`` lets them be stored; a caller's error if it raises or misbehaves.

    Called before anything is written, so a ``redact`` that fails costs nothing.
    """
    if redact is None or not isinstance(args, dict):
        return args
    try:
        out = redact(dict(args))
    except Exception as e:
        raise ValueError(f"redact raised {type(e).__name__} on the arguments: {e}") from e
    if not isinstance(out, dict):
        raise TypeError(f"redact must return a dict, not {type(out).__name__}")
    return out


def fits(size: int, max_bytes: int, *, what: str) -> bool:
    """Whether a value whose canonical JSON is ``size`` bytes may be recorded (else logged)."""
    if size > max_bytes:
        log.info("%s not recorded: %d bytes, more than %d", what, size, max_bytes)
        return False
    return True


def recordable(value: object, max_bytes: int, *, what: str) -> tuple[object, bool]:
    """``(value, True)`` if it can be recorded as it is, else ``(None, False)`` (logged)."""
    try:
        text = recorded_json(value)
    except ValueError as e:
        log.info("%s not recorded: %s", what, e)
        return None, False
    if not fits(len(text.encode("utf-8")), max_bytes, what=what):
        return None, False
    return value, True


def redacted_result(value: object, redact: Redact | None, *, what: str) -> tuple[object, bool]:
    """A dict result as ``redact`` lets it be stored; ``(None, False)`` if redact fails."""
    if redact is None or not isinstance(value, dict):
        return value, True
    try:
        out = redact(dict(value))
    except Exception as e:  # a result is never lost to its redaction
        log.warning("%s not recorded: redact raised %s: %s", what, type(e).__name__, e)
        return None, False
    if not isinstance(out, dict):
        log.warning("%s not recorded: redact returned a %s, not a dict", what, type(out).__name__)
        return None, False
    return out, True


def _copy(value: object) -> object:
    """A JSON value checked by ``canonical_args``, as reading its canonical text gives it.

    Objects with their keys sorted, tuples as lists: the log's own copy, made without
    encoding the value once more.
    """
    if type(value) is dict:
        return {key: _copy(value[key]) for key in sorted(value)}
    if type(value) is list or type(value) is tuple:
        return [_copy(item) for item in value]
    return value  # None, a bool, an int, a float or a str: immutable


@dataclasses.dataclass(frozen=True, slots=True)
class Recording:
    """What a log records of a call: its arguments, its result, through ``redact``, bounded."""

    args: bool = True
    result: bool = True
    redact: Redact | None = None
    max_bytes: int = MAX_RECORDED_BYTES

    @classmethod
    def of(cls, args: object, result: object, redact: object, max_bytes: object) -> Recording:
        """Checked options (a caller's error for a wrong type)."""
        for name, value in (("record_args", args), ("record_result", result)):
            if not isinstance(value, bool):
                raise InvalidTypeError(f"{name} must be a bool, not {type(value).__name__}")
        return cls(
            cast("bool", args),
            cast("bool", result),
            check_redact(redact),
            check_max_bytes(max_bytes),
        )

    def given(self, args: object, result: object, redact: object) -> Recording:
        """These options, with those a call gives (``None``: the log's) in their place."""
        if args is None and result is None and redact is None:
            return self
        return Recording.of(
            self.args if args is None else args,
            self.result if result is None else result,
            self.redact if redact is None else redact,
            self.max_bytes,
        )

    def stored_args(self, args: object, canonical: bytes, what: str) -> object:
        """What a claim records of ``args`` (``canonical``: their canonical JSON, checked).

        The log's own copy, as the claim holds it: later changes to the caller's ``args``
        do not reach it. A caller's error if ``redact`` fails on them, before anything is
        written.
        """
        if not self.args:
            return None
        if self.redact is not None:
            stored, ok = recordable(redacted_args(args, self.redact), self.max_bytes, what=what)
            return json.loads(recorded_json(stored)) if ok else None
        return _copy(args) if fits(len(canonical), self.max_bytes, what=what) else None

    def stored_result(self, value: object, what: str) -> tuple[object, bool]:
        """What an outcome records of a result: ``(value, recorded)``; never an error."""
        if not self.result:
            return None, False
        value, ok = redacted_result(value, self.redact, what=what)
        if not ok:
            return None, False
        return recordable(value, self.max_bytes, what=what)
