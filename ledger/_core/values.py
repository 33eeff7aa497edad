"""Value checks, keys and canonical JSON: what every record field is held to.

The checks raise ``InvalidTypeError`` (both a ``TypeError`` and a ``ValueError``) for a
wrong type and ``ValueError`` for a bad value; ``_Fields`` reads a ``to_dict()`` form
back strictly. Records, the assessment and the decision build on these.
"""

from __future__ import annotations

import dataclasses
import enum
import functools
import hashlib
import json
import math
import re
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime
from typing import Any, TypeVar

MAX_IDENTIFIER = 200
MAX_LOCATOR = 4096
MAX_STEP = 1000
RESOURCE_KINDS = ("fs", "owned", "external")
_HEX64 = re.compile(r"[0-9a-f]{64}")
_HEX32 = re.compile(r"[0-9a-f]{32}")


# --------------------------------------------------------------------------- checks


class InvalidTypeError(TypeError, ValueError):
    """A value of the wrong type.

    Both a ``TypeError`` (what it is) and a ``ValueError`` (the contract promises a
    ``ValueError`` for any invalid identifier or run id, whatever its type).
    """


_E = TypeVar("_E", bound=enum.Enum)


def check_identifier(value: object, field: str, *, optional: bool = False) -> None:
    """Raise unless ``value`` is a valid identifier.

    Identifiers are non-empty printable strings of at most 200 characters
    without NUL. ``optional`` also admits ``None``.
    """
    if value is None and optional:
        return
    if not isinstance(value, str):
        raise InvalidTypeError(f"{field} must be a str, not {type(value).__name__}")
    if not value:
        raise ValueError(f"{field} must not be empty")
    if len(value) > MAX_IDENTIFIER:
        raise ValueError(f"{field} is longer than {MAX_IDENTIFIER} characters")
    if not value.isprintable():
        raise ValueError(f"{field} must be printable text without NUL or control characters")
    _check_encodable(value, field)


def _check_encodable(value: str, field: str) -> None:
    if value.isascii():  # nearly every id: no surrogate, and no bytes made to find out
        return
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise ValueError(f"{field} must be Unicode text (no lone surrogate)") from None


def _check_str(value: object, field: str, *, empty: bool = False, limit: int = MAX_LOCATOR) -> None:
    if not isinstance(value, str):
        raise InvalidTypeError(f"{field} must be a str, not {type(value).__name__}")
    if not value and not empty:
        raise ValueError(f"{field} must not be empty")
    if len(value) > limit:
        raise ValueError(f"{field} is longer than {limit} characters")
    if "\x00" in value:
        raise ValueError(f"{field} must not contain NUL")
    _check_encodable(value, field)


def _check_hex64(value: object, field: str) -> None:
    if not isinstance(value, str):
        raise InvalidTypeError(f"{field} must be a str, not {type(value).__name__}")
    if not _HEX64.fullmatch(value):
        raise ValueError(f"{field} must be 64 lowercase hex characters, got {value!r:.80}")


def _check_enum(value: object, cls: type[_E], field: str) -> None:
    if not isinstance(value, cls):
        raise InvalidTypeError(f"{field} must be a {cls.__name__}, not {type(value).__name__}")


def _check_seq(value: object, field: str = "seq") -> None:
    if not isinstance(value, int) or isinstance(value, bool):
        raise InvalidTypeError(f"{field} must be an int, not {type(value).__name__}")
    if value < 1:
        raise ValueError(f"{field} must be at least 1, got {value}")


def _check_optional_bool(value: object, field: str) -> None:
    if value is not None and not isinstance(value, bool):
        raise InvalidTypeError(f"{field} must be a bool or None, not {type(value).__name__}")


def _check_timestamp(value: object, field: str = "recorded_at") -> None:
    if not isinstance(value, str):
        raise InvalidTypeError(f"{field} must be a str, not {type(value).__name__}")
    try:
        parsed = datetime.fromisoformat(value)
    except ValueError:
        raise ValueError(f"{field} is not an ISO-8601 timestamp: {value!r:.80}") from None
    if parsed.utcoffset() is None or parsed.utcoffset() != UTC.utcoffset(None):
        raise ValueError(f"{field} must be in UTC with an explicit offset: {value!r:.80}")


def _tuple_of(value: object, cls: type[Any], field: str) -> tuple[Any, ...]:
    if type(value) is tuple or type(value) is list:  # no abstract class asked (Python code)
        items = tuple(value)
    elif isinstance(value, (str, bytes, Mapping)) or not isinstance(value, Iterable):
        raise InvalidTypeError(f"{field} must be a sequence of {cls.__name__}")
    else:
        items = tuple(value)
    for item in items:
        if not isinstance(item, cls):
            raise InvalidTypeError(
                f"{field} must hold only {cls.__name__}, not {type(item).__name__}"
            )
    return items


def utc_now() -> str:
    """Return the current time as the UTC ISO-8601 string records carry."""
    return datetime.now(UTC).isoformat(timespec="microseconds")


def _check_key(value: object, field: str = "idempotency_key") -> None:
    if not isinstance(value, str):
        raise InvalidTypeError(f"{field} must be a str, not {type(value).__name__}")
    if value and not _HEX32.fullmatch(value):
        raise ValueError(f"{field} must be 32 lowercase hex characters, got {value!r:.80}")


def idempotency_key(run_id: str, effect_id: str) -> str:
    """The idempotency key of an effect first attempted as ``effect_id`` in ``run_id``.

    32 lowercase hex characters, the same on every machine: a retry carries the key of
    the attempt it repeats, so the system it calls can tell a repeat from a new request.
    The first half of SHA3-256 of ``ledger-key-v1<len>:<run_id><len>:<effect_id>``, which
    the stock ``sqlite3`` shell can compute too (docs/forensics.md).
    """
    if type(run_id) is str and type(effect_id) is str:
        return _checked_key(run_id, effect_id)
    check_identifier(run_id, "run_id")  # raises for anything but a str
    check_identifier(effect_id, "effect_id")
    return _derived_key(run_id, effect_id)  # a str subclass: not cached


# A claim's key is derived when it is made and again when the chain encodes it: the
# second time, neither id is checked again. An id that fails its check raises, and a
# raised call leaves nothing in the cache.
@functools.lru_cache(maxsize=1024)
def _checked_key(run_id: str, effect_id: str) -> str:
    check_identifier(run_id, "run_id")
    check_identifier(effect_id, "effect_id")
    return _derived_key(run_id, effect_id)


def _derived_key(run_id: str, effect_id: str) -> str:
    seed = f"ledger-key-v1{len(run_id)}:{run_id}{len(effect_id)}:{effect_id}"
    return hashlib.sha3_256(seed.encode("utf-8")).hexdigest()[:32]


# Deeper values are refused: JSON's encoders and decoders recurse once per level, and a
# value written from a shallow stack must read back from a deep one.
MAX_JSON_DEPTH = 200


def _check_json(value: object, where: str, name: str = "args", depth: int = 0) -> None:
    # Only what JSON holds exactly: subclasses (an IntEnum, a str subclass) are refused
    # too, since they would come back as something else.
    kind = type(value)
    if value is None or kind in (bool, int, str):
        return
    if depth >= MAX_JSON_DEPTH:
        raise ValueError(f"{name} nest deeper than {MAX_JSON_DEPTH} levels")
    if isinstance(value, float) and kind is float:
        if not math.isfinite(value):
            raise ValueError(f"{name}{where} is {value!r}: JSON has no NaN or infinity")
        return
    if isinstance(value, (list, tuple)) and kind in (list, tuple):
        for i, item in enumerate(value):
            _check_json(item, f"{where}[{i}]", name, depth + 1)
        return
    if isinstance(value, dict) and kind is dict:
        for key, item in value.items():
            if type(key) is not str:
                raise ValueError(f"{name}{where} has a key {key!r:.40} that is not a str")
            _check_json(item, f"{where}[{key!r:.40}]", name, depth + 1)
        return
    raise ValueError(f"{name}{where} is a {kind.__name__}, which JSON cannot hold exactly")


def _json_text(value: object, name: str) -> str:
    """The canonical JSON text of ``value`` (not yet known to encode: a lone surrogate)."""
    _check_json(value, "", name)
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def canonical_args(args: object) -> bytes:
    """The one JSON text of ``args``: sorted keys, no spaces, UTF-8.

    ``ValueError`` for anything JSON cannot hold exactly (NaN, infinities, keys that
    are not strings, sets, bytes, other objects, nesting deeper than 200 levels).
    Tuples are written as arrays.
    """
    text = _json_text(args, "args")
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError:
        raise ValueError("args hold a string that is not valid Unicode") from None


def args_digest(args: object) -> str:
    """The SHA-256 hex digest of :func:`canonical_args` ``(args)``."""
    return hashlib.sha256(canonical_args(args)).hexdigest()


def recorded_json(value: object, name: str = "value") -> str:
    """The text a recorded value (a claim's ``args``, an outcome's ``result``) is stored as.

    :func:`canonical_args` as text: the same value always gives the same text, which the
    hash chain encodes and the store's ``args`` and ``result`` columns hold.
    ``ValueError`` (naming the value ``name``) for anything JSON cannot hold exactly.
    """
    text = _json_text(value, name)
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise ValueError(f"{name} holds a string that is not valid Unicode") from None
    return text


def _recorded(value: object, field: str) -> object:
    """``value`` as it reads back from the store (tuples become lists), or a ValueError."""
    if value is None:
        return None
    return json.loads(recorded_json(value, field))


def check_step(value: object, field: str = "step") -> None:
    """Raise unless ``value`` is a step: printable text of at most 1000 characters.

    The empty string is a claim's "no step" (a claim made without one, through
    :meth:`~ledger.effect_log.EffectLog.claim`); a caller naming a step gives a non-empty one.
    """
    if not isinstance(value, str):
        raise InvalidTypeError(f"{field} must be a str, not {type(value).__name__}")
    if len(value) > MAX_STEP:
        raise ValueError(f"{field} is longer than {MAX_STEP} characters")
    if not value.isprintable():
        raise ValueError(f"{field} must be printable text without NUL or control characters")
    _check_encodable(value, field)


# W3C Trace Context, version 00: version-trace_id-parent_id-flags, lowercase hex.
_TRACEPARENT = re.compile(r"00-([0-9a-f]{32})-([0-9a-f]{16})-[0-9a-f]{2}")


def check_traceparent(value: object, field: str = "traceparent") -> None:
    """Raise unless ``value`` is ``None`` or a W3C ``traceparent`` of version ``00``.

    Its trace and parent ids must not be all zeros (the W3C's invalid ids).
    """
    if value is None:
        return
    if not isinstance(value, str):
        raise InvalidTypeError(f"{field} must be a str, not {type(value).__name__}")
    match = _TRACEPARENT.fullmatch(value)
    if match is None or not match[1].strip("0") or not match[2].strip("0"):
        raise ValueError(
            f"{field} must be a W3C traceparent (00-<32 hex>-<16 hex>-<2 hex>), got {value!r:.80}"
        )


# --------------------------------------------------------------------------- from_dict


class _Fields:
    """Reads one dict strictly: every key expected, no key more, types checked."""

    def __init__(
        self, data: object, cls: type[Any], *, later: Mapping[str, Any] | None = None
    ) -> None:
        # ``later``: fields added after the first format, with the value a dict written
        # before them stands for (old exports keep importing).
        if not isinstance(data, Mapping):
            raise ValueError(  # noqa: TRY004 - from_dict reports all malformed input as ValueError
                f"{cls.__name__} must be a JSON object, not {type(data).__name__}"
            )
        expected = {f.name for f in dataclasses.fields(cls)}
        later = later or {}
        keys = set(data) | set(later)
        if keys != expected:
            missing = sorted(expected - keys)
            extra = sorted(str(k) for k in keys - expected)
            parts = []
            if missing:
                parts.append(f"missing {', '.join(missing)}")
            if extra:
                parts.append(f"unexpected {', '.join(extra)}")
            raise ValueError(f"{cls.__name__}: {'; '.join(parts)}")
        self.data = {**later, **data}
        self.cls = cls

    def raw(self, key: str) -> Any:
        return self.data[key]

    def enum(self, key: str, cls: type[_E]) -> _E:
        word = self.data[key]
        if not isinstance(word, str):
            raise ValueError(f"{self.cls.__name__}.{key} must be a string")  # noqa: TRY004 - as above
        try:
            return cls(word)
        except ValueError:
            allowed = ", ".join(m.value for m in cls)
            raise ValueError(
                f"{self.cls.__name__}.{key}: {word!r:.40} is not one of {allowed}"
            ) from None

    def optional_enum(self, key: str, cls: type[_E]) -> _E | None:
        return None if self.data[key] is None else self.enum(key, cls)

    def items(self, key: str, cls: type[Any]) -> tuple[Any, ...]:
        value = self.data[key]
        if not isinstance(value, list):
            raise ValueError(f"{self.cls.__name__}.{key} must be a list")  # noqa: TRY004 - as above
        return tuple(cls.from_dict(item) for item in value)

    def strings(self, key: str) -> tuple[str, ...]:
        value = self.data[key]
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise ValueError(f"{self.cls.__name__}.{key} must be a list of strings")
        return tuple(value)


_R = TypeVar("_R")


def _build(cls: type[_R], **kwargs: Any) -> _R:
    """Construct a record from parsed input, turning a TypeError into ValueError."""
    try:
        return cls(**kwargs)
    except TypeError as e:
        raise ValueError(f"{cls.__name__}: {e}") from None


# --------------------------------------------------------------------------- records


def _frozen(obj: object, name: str, value: object) -> None:
    object.__setattr__(obj, name, value)
