"""Record values of the effect ledger and the pure assessment of a claim.

Every record is a frozen dataclass: hashable, compared by value, validated when
it is built (``TypeError`` for a wrong type, ``ValueError`` for a bad value), and
convertible with ``to_dict()`` / ``from_dict()`` to plain JSON types and back
exactly. ``from_dict`` raises ``ValueError`` for anything malformed: a missing
or extra key, a wrong type, an unknown enum word, a bad digest.

:func:`assess` turns one run's :class:`History` into an :class:`Assessment` of a
claim. It reads no clock, no disk and no global state; the rules are in
``docs/concepts.md``.

This module imports nothing from storage: it is the model every backend shares.
"""

from __future__ import annotations

import dataclasses
import enum
import functools
import hashlib
import itertools
import json
import math
import posixpath
import re
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime
from typing import Any, ClassVar, Self, TypeVar

__all__ = [
    "Assessment",
    "Coverage",
    "Decision",
    "EffectClaim",
    "EffectKind",
    "EffectOutcome",
    "EffectVerdict",
    "ExecutionOutcome",
    "History",
    "Impact",
    "InvalidTypeError",
    "NextStep",
    "Observation",
    "ObservationMechanism",
    "OperationRef",
    "Postcondition",
    "Predicate",
    "Resolution",
    "ResolutionOrigin",
    "ResourceRef",
    "args_digest",
    "assess",
    "canonical_args",
    "check_history",
    "check_identifier",
    "check_step",
    "check_times",
    "decide",
    "idempotency_key",
    "newest_attempt",
    "overlaps",
    "recorded_json",
    "resource_ref",
    "utc_now",
    "written_by_utc_now",
]

MAX_IDENTIFIER = 200
MAX_LOCATOR = 4096
MAX_STEP = 1000
RESOURCE_KINDS = ("fs", "owned", "external")
_HEX64 = re.compile(r"[0-9a-f]{64}")
_HEX32 = re.compile(r"[0-9a-f]{32}")
_URI_SCHEME = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*:")


class Predicate(enum.Enum):
    """What a postcondition asserts about its target."""

    EXISTS = "exists"
    ABSENT = "absent"
    SHA256 = "sha256"
    REVISION = "revision"


class ExecutionOutcome(enum.Enum):
    """How the invocation of an effect ended, as the worker saw it."""

    RUNNING = "running"
    REPORTED_SUCCESS = "reported_success"
    FAILED = "failed"
    INTERRUPTED = "interrupted"


class Impact(enum.Enum):
    """Whether the effect may have changed the world."""

    NONE = "none"
    POSSIBLE = "possible"
    CERTAIN = "certain"


class ObservationMechanism(enum.Enum):
    """How an observation was made."""

    FILESYSTEM_READ = "filesystem_read"
    FILESYSTEM_STAT = "filesystem_stat"
    RECORD_READ = "record_read"
    BACKEND_QUERY = "backend_query"


class Coverage(enum.Enum):
    """Whether an observation saw the whole resource or only part of it."""

    COMPLETE = "complete"
    PARTIAL = "partial"


class EffectKind(enum.Enum):
    """What repeating an effect after a crash could do, which decides whether it may be."""

    READ = "read"  # looks, changes nothing: may always run again
    IDEMPOTENT = "idempotent"  # the system it calls honours the idempotency key
    WRITE = "write"  # may duplicate; its postconditions can be observed
    IRREVERSIBLE = "irreversible"  # cannot be observed or undone by the worker


class NextStep(enum.Enum):
    """What a worker should do about an effect (:func:`decide`)."""

    DONE = "done"
    WAIT = "wait"
    RETRY = "retry"
    ESCALATE = "escalate"


class ResolutionOrigin(enum.Enum):
    """What kind of process wrote a resolution (:attr:`Resolution.origin`)."""

    PERSON = "person"  # the ``ledger resolve`` command
    WORKER = "worker"  # a program's ``EffectLog.resolve``
    RECONCILER = "reconciler"  # a program's ``EffectLog.resolve(..., allow_self=True)``


class EffectVerdict(enum.Enum):
    """What the history says about one claimed effect."""

    PENDING = "pending"
    VERIFIED = "verified"
    UNVERIFIED = "unverified"
    CONTRADICTED = "contradicted"
    FAILED = "failed"


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
    if isinstance(value, (str, bytes, Mapping)) or not isinstance(value, Iterable):
        raise InvalidTypeError(f"{field} must be a sequence of {cls.__name__}")
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
    check_identifier(run_id, "run_id")
    check_identifier(effect_id, "effect_id")
    return _derived_key(run_id, effect_id)


# A claim's key is derived when it is made and again when the chain encodes it.
@functools.lru_cache(maxsize=1024)
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


@dataclasses.dataclass(frozen=True, slots=True)
class ResourceRef:
    """A resource an effect may touch or an observation saw.

    ``kind`` is ``"fs"`` (``locator`` is a normalised absolute path),
    ``"owned"`` (``locator`` joins an application record's identity) or
    ``"external"`` (``locator`` is a URI of another system's resource). ``role``
    says how the effect relates to it; ``revision`` is the record revision the
    reference points at, when known.
    """

    kind: str
    locator: str
    role: str
    revision: str | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.kind, str):
            raise InvalidTypeError(f"kind must be a str, not {type(self.kind).__name__}")
        if self.kind not in RESOURCE_KINDS:
            raise ValueError(
                f"kind must be one of {', '.join(RESOURCE_KINDS)}, got {self.kind!r:.40}"
            )
        _check_str(self.locator, "locator")
        if self.kind == "fs" and (
            not self.locator.startswith("/")
            or self.locator.startswith("//")
            or posixpath.normpath(self.locator) != self.locator
        ):
            raise ValueError(
                f"an fs locator must be a normalised absolute path: {self.locator!r:.80}"
            )
        if self.kind == "external" and (
            not _URI_SCHEME.match(self.locator)
            or any(c.isspace() or not c.isprintable() for c in self.locator)
        ):
            raise ValueError(
                "an external locator must be a URI with a scheme and no white space or "
                f"control characters: {self.locator!r:.80}"
            )
        check_identifier(self.role, "role")
        check_identifier(self.revision, "revision", optional=True)

    def to_dict(self) -> dict[str, Any]:
        """Return the reference as JSON types."""
        return {
            "kind": self.kind,
            "locator": self.locator,
            "role": self.role,
            "revision": self.revision,
        }

    @classmethod
    def from_dict(cls, data: object) -> Self:
        """Validate and rebuild a reference from :meth:`to_dict` output."""
        f = _Fields(data, cls)
        return _build(
            cls,
            kind=f.raw("kind"),
            locator=f.raw("locator"),
            role=f.raw("role"),
            revision=f.raw("revision"),
        )

    def same_target(self, other: ResourceRef) -> bool:
        """Whether both name the same resource (role and revision aside)."""
        return self.kind == other.kind and self.locator == other.locator


def overlaps(a: ResourceRef, b: ResourceRef) -> bool:
    """Whether two references may name intersecting resources.

    Kinds must be equal; then the locators are equal, or (for ``fs`` and
    ``external``) one is a prefix of the other that ends at a ``/`` of it: an
    ancestor directory, or a URI above another. The locator ``/`` is every
    path's ancestor. Role and revision do not matter.
    """
    if a.kind != b.kind:
        return False
    if a.locator == b.locator:
        return True
    if a.kind == "owned":
        return False
    short, long = sorted((a.locator, b.locator), key=len)
    return long.startswith(short) and (short.endswith("/") or long[len(short)] == "/")


def resource_ref(resource: object, role: str) -> ResourceRef:
    """Return the :class:`ResourceRef` of a ``FilesystemResource`` or ``OwnedResource``."""
    to_ref = getattr(resource, "to_ref", None)
    if to_ref is None or not callable(to_ref):
        raise InvalidTypeError(
            f"resource must be a FilesystemResource or OwnedResource, not {type(resource).__name__}"
        )
    ref = to_ref(role)
    if not isinstance(ref, ResourceRef):
        raise InvalidTypeError("resource.to_ref() did not return a ResourceRef")
    return ref


@dataclasses.dataclass(frozen=True, slots=True)
class OperationRef:
    """The tool call an effect makes: its name, backend label and argument digest."""

    name: str
    backend: str
    args_sha256: str

    def __post_init__(self) -> None:
        check_identifier(self.name, "operation name")
        if not isinstance(self.backend, str):
            raise InvalidTypeError(f"backend must be a str, not {type(self.backend).__name__}")
        if self.backend:
            check_identifier(self.backend, "backend")
        _check_hex64(self.args_sha256, "args_sha256")

    def to_dict(self) -> dict[str, Any]:
        """Return the operation as JSON types."""
        return {"name": self.name, "backend": self.backend, "args_sha256": self.args_sha256}

    @classmethod
    def from_dict(cls, data: object) -> Self:
        """Validate and rebuild an operation from :meth:`to_dict` output."""
        f = _Fields(data, cls)
        return _build(
            cls, name=f.raw("name"), backend=f.raw("backend"), args_sha256=f.raw("args_sha256")
        )


@dataclasses.dataclass(frozen=True, slots=True)
class Postcondition:
    """What should hold of ``target`` once the effect has happened."""

    target: ResourceRef
    predicate: Predicate
    expected: str | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.target, ResourceRef):
            raise InvalidTypeError(
                f"target must be a ResourceRef, not {type(self.target).__name__}"
            )
        _check_enum(self.predicate, Predicate, "predicate")
        if self.predicate is Predicate.SHA256:
            if self.expected is None:
                raise ValueError("a SHA256 postcondition needs expected (64 hex characters)")
            _check_hex64(self.expected, "expected")
        elif self.predicate is Predicate.REVISION:
            if self.expected is None:
                raise ValueError("a REVISION postcondition needs expected (the revision)")
            check_identifier(self.expected, "expected")
        elif self.expected is not None:
            raise ValueError(f"a {self.predicate.name} postcondition takes no expected value")

    def to_dict(self) -> dict[str, Any]:
        """Return the postcondition as JSON types."""
        return {
            "target": self.target.to_dict(),
            "predicate": self.predicate.value,
            "expected": self.expected,
        }

    @classmethod
    def from_dict(cls, data: object) -> Self:
        """Validate and rebuild a postcondition from :meth:`to_dict` output."""
        f = _Fields(data, cls)
        return _build(
            cls,
            target=ResourceRef.from_dict(f.raw("target")),
            predicate=f.enum("predicate", Predicate),
            expected=f.raw("expected"),
        )


@dataclasses.dataclass(frozen=True, slots=True)
class EffectClaim:
    """The durable promise, written before the call, that an effect is about to happen."""

    effect_id: str
    seq: int
    action_id: str
    operation: OperationRef
    impact_scope: tuple[ResourceRef, ...]
    obligations: tuple[Postcondition, ...]
    recorded_at: str
    kind: EffectKind = EffectKind.WRITE
    # Empty only on a claim built by hand: the log gives every claim its key.
    idempotency_key: str = ""
    retry_of: str | None = None
    # The call's identity across restarts ("" for a claim made without one), and its
    # arguments as recorded (None: not recorded). Both are stored and chained.
    step: str = ""
    args: Any = dataclasses.field(default=None, hash=False)

    record_type: ClassVar[str] = "claim"

    def __post_init__(self) -> None:
        check_identifier(self.effect_id, "effect_id")
        _check_seq(self.seq)
        check_identifier(self.action_id, "action_id")
        if not isinstance(self.operation, OperationRef):
            raise InvalidTypeError(
                f"operation must be an OperationRef, not {type(self.operation).__name__}"
            )
        _frozen(self, "impact_scope", _tuple_of(self.impact_scope, ResourceRef, "impact_scope"))
        _frozen(self, "obligations", _tuple_of(self.obligations, Postcondition, "obligations"))
        _check_timestamp(self.recorded_at)
        _check_enum(self.kind, EffectKind, "kind")
        _check_key(self.idempotency_key)
        check_identifier(self.retry_of, "retry_of", optional=True)
        if self.retry_of == self.effect_id:
            raise ValueError(f"effect {self.effect_id!r} cannot be a retry of itself")
        check_step(self.step)
        _frozen(self, "args", _recorded(self.args, "args"))

    def to_dict(self) -> dict[str, Any]:
        """Return the claim as JSON types."""
        return {
            "effect_id": self.effect_id,
            "seq": self.seq,
            "action_id": self.action_id,
            "operation": self.operation.to_dict(),
            "impact_scope": [r.to_dict() for r in self.impact_scope],
            "obligations": [p.to_dict() for p in self.obligations],
            "recorded_at": self.recorded_at,
            "kind": self.kind.value,
            "idempotency_key": self.idempotency_key,
            "retry_of": self.retry_of,
            "step": self.step,
            "args": self.args,
        }

    @classmethod
    def from_dict(cls, data: object) -> Self:
        """Validate and rebuild a claim from :meth:`to_dict` output.

        A claim written before kinds existed reads as a ``WRITE`` with no retry and an
        empty key (the import gives it the key its run and effect id derive); one written
        before steps existed has no step and no recorded arguments.
        """
        later = {
            "kind": EffectKind.WRITE.value,
            "idempotency_key": "",
            "retry_of": None,
            "step": "",
            "args": None,
        }
        f = _Fields(data, cls, later=later)
        return _build(
            cls,
            effect_id=f.raw("effect_id"),
            seq=f.raw("seq"),
            action_id=f.raw("action_id"),
            operation=OperationRef.from_dict(f.raw("operation")),
            impact_scope=f.items("impact_scope", ResourceRef),
            obligations=f.items("obligations", Postcondition),
            recorded_at=f.raw("recorded_at"),
            kind=f.enum("kind", EffectKind),
            idempotency_key=f.raw("idempotency_key"),
            retry_of=f.raw("retry_of"),
            step=f.raw("step"),
            args=f.raw("args"),
        )


@dataclasses.dataclass(frozen=True, slots=True)
class EffectOutcome:
    """How the call of a claimed effect ended, or that it is still running."""

    effect_id: str
    seq: int
    execution: ExecutionOutcome
    impact: Impact
    execution_id: str | None = None
    replayed: bool = False
    recorded_at: str | None = None
    # What the call returned, as recorded: a JSON value. ``result_recorded`` tells a
    # recorded ``None`` (JSON null) from none recorded; by default, whether result is set.
    result: Any = dataclasses.field(default=None, hash=False)
    result_recorded: bool | None = None  # None: whether result is set (a bool once built)

    record_type: ClassVar[str] = "outcome"

    def __post_init__(self) -> None:
        check_identifier(self.effect_id, "effect_id")
        _check_seq(self.seq)
        _check_enum(self.execution, ExecutionOutcome, "execution")
        _check_enum(self.impact, Impact, "impact")
        check_identifier(self.execution_id, "execution_id", optional=True)
        if not isinstance(self.replayed, bool):
            raise InvalidTypeError(f"replayed must be a bool, not {type(self.replayed).__name__}")
        if self.recorded_at is not None:
            _check_timestamp(self.recorded_at)
        if self.execution is ExecutionOutcome.INTERRUPTED and self.impact is not Impact.POSSIBLE:
            raise ValueError("an INTERRUPTED outcome must have impact POSSIBLE")
        if self.replayed and self.execution is not ExecutionOutcome.INTERRUPTED:
            raise ValueError("only an INTERRUPTED outcome can be replayed")
        if self.result_recorded is None:
            _frozen(self, "result_recorded", self.result is not None)
        elif not isinstance(self.result_recorded, bool):
            raise InvalidTypeError(
                f"result_recorded must be a bool, not {type(self.result_recorded).__name__}"
            )
        elif not self.result_recorded and self.result is not None:
            raise ValueError("an outcome with a result has it recorded (result_recorded=True)")
        _frozen(self, "result", _recorded(self.result, "result"))

    @property
    def terminal(self) -> bool:
        """Whether this outcome settles the effect (anything but RUNNING)."""
        return self.execution is not ExecutionOutcome.RUNNING

    def to_dict(self) -> dict[str, Any]:
        """Return the outcome as JSON types."""
        return {
            "effect_id": self.effect_id,
            "seq": self.seq,
            "execution": self.execution.value,
            "impact": self.impact.value,
            "execution_id": self.execution_id,
            "replayed": self.replayed,
            "recorded_at": self.recorded_at,
            "result": self.result,
            "result_recorded": self.result_recorded,
        }

    @classmethod
    def from_dict(cls, data: object) -> Self:
        """Validate and rebuild an outcome from :meth:`to_dict` output.

        One written before results were recorded has none.
        """
        f = _Fields(data, cls, later={"result": None, "result_recorded": False})
        recorded = f.raw("result_recorded")
        if not isinstance(recorded, bool):
            raise ValueError("EffectOutcome.result_recorded must be a boolean")  # noqa: TRY004 - as above
        return _build(
            cls,
            effect_id=f.raw("effect_id"),
            seq=f.raw("seq"),
            execution=f.enum("execution", ExecutionOutcome),
            impact=f.enum("impact", Impact),
            execution_id=f.raw("execution_id"),
            replayed=f.raw("replayed"),
            recorded_at=f.raw("recorded_at"),
            result=f.raw("result"),
            result_recorded=recorded,
        )


@dataclasses.dataclass(frozen=True, slots=True)
class Observation:
    """What the worker saw of a resource, by which mechanism, how completely."""

    observation_id: str
    seq: int
    resource: ResourceRef
    mechanism: ObservationMechanism
    coverage: Coverage
    source_action_id: str
    exists: bool | None
    sha256: str | None
    revision: str | None
    recorded_at: str

    record_type: ClassVar[str] = "observation"

    def __post_init__(self) -> None:
        check_identifier(self.observation_id, "observation_id")
        _check_seq(self.seq)
        if not isinstance(self.resource, ResourceRef):
            raise InvalidTypeError(
                f"resource must be a ResourceRef, not {type(self.resource).__name__}"
            )
        _check_enum(self.mechanism, ObservationMechanism, "mechanism")
        _check_enum(self.coverage, Coverage, "coverage")
        check_identifier(self.source_action_id, "source_action_id")
        _check_optional_bool(self.exists, "exists")
        if self.sha256 is not None:
            _check_hex64(self.sha256, "sha256")
        check_identifier(self.revision, "revision", optional=True)
        _check_timestamp(self.recorded_at)

    def to_dict(self) -> dict[str, Any]:
        """Return the observation as JSON types."""
        return {
            "observation_id": self.observation_id,
            "seq": self.seq,
            "resource": self.resource.to_dict(),
            "mechanism": self.mechanism.value,
            "coverage": self.coverage.value,
            "source_action_id": self.source_action_id,
            "exists": self.exists,
            "sha256": self.sha256,
            "revision": self.revision,
            "recorded_at": self.recorded_at,
        }

    @classmethod
    def from_dict(cls, data: object) -> Self:
        """Validate and rebuild an observation from :meth:`to_dict` output."""
        f = _Fields(data, cls)
        return _build(
            cls,
            observation_id=f.raw("observation_id"),
            seq=f.raw("seq"),
            resource=ResourceRef.from_dict(f.raw("resource")),
            mechanism=f.enum("mechanism", ObservationMechanism),
            coverage=f.enum("coverage", Coverage),
            source_action_id=f.raw("source_action_id"),
            exists=f.raw("exists"),
            sha256=f.raw("sha256"),
            revision=f.raw("revision"),
            recorded_at=f.raw("recorded_at"),
        )


@dataclasses.dataclass(frozen=True, slots=True)
class Resolution:
    """A person's word, after checking the world, that an effect did or did not land.

    It leaves the verdict alone (that is the ledger's own evidence) and settles the
    effect's impact: :func:`decide` follows it.

    ``by`` is whom the writer names; the process that wrote the record is recorded
    beside it: ``origin`` (``person`` for the ``ledger resolve`` command, ``worker`` for
    a program's ``EffectLog.resolve``, ``reconciler`` for one that said
    ``allow_self=True``), and that process's OS user, host, program and pid. A
    resolution written before the store recorded them has none: all five are None.
    """

    effect_id: str
    seq: int
    applied: bool
    by: str
    recorded_at: str
    note: str = ""
    origin: ResolutionOrigin | None = None
    os_user: str | None = None
    host: str | None = None
    program: str | None = None
    pid: int | None = None

    record_type: ClassVar[str] = "resolution"

    def __post_init__(self) -> None:
        check_identifier(self.effect_id, "effect_id")
        _check_seq(self.seq)
        if not isinstance(self.applied, bool):
            raise InvalidTypeError(f"applied must be a bool, not {type(self.applied).__name__}")
        check_identifier(self.by, "by")
        _check_timestamp(self.recorded_at)
        _check_str(self.note, "note", empty=True)
        if self.origin is None:
            given = [f for f in _WRITTEN_BY if getattr(self, f) is not None]
            if given:
                raise ValueError(
                    f"a resolution without an origin records no writing process, yet {given[0]} "
                    "is set"
                )
            return
        _check_enum(self.origin, ResolutionOrigin, "origin")
        for name in ("os_user", "host", "program"):
            check_identifier(getattr(self, name), name)
        if type(self.pid) is not int:
            raise InvalidTypeError(f"pid must be an int, not {type(self.pid).__name__}")
        if not 0 < self.pid < 2**31:  # a 32-bit column on PostgreSQL
            raise ValueError(f"pid must be a positive integer, not {self.pid}")

    @property
    def word(self) -> str:
        """``"applied"`` or ``"not_applied"``, as :attr:`Assessment.resolution` says it."""
        return "applied" if self.applied else "not_applied"

    @property
    def by_person(self) -> bool:
        """Whether a person's command wrote it, or it predates the record of who wrote it.

        A worker's or reconciler's own resolution is not a person's word, whatever
        ``by`` names: the MCP guard does not take it.
        """
        return self.origin is None or self.origin is ResolutionOrigin.PERSON

    def to_dict(self) -> dict[str, Any]:
        """Return the resolution as JSON types."""
        return {
            "effect_id": self.effect_id,
            "seq": self.seq,
            "applied": self.applied,
            "by": self.by,
            "recorded_at": self.recorded_at,
            "note": self.note,
            "origin": None if self.origin is None else self.origin.value,
            "os_user": self.os_user,
            "host": self.host,
            "program": self.program,
            "pid": self.pid,
        }

    @classmethod
    def from_dict(cls, data: object) -> Self:
        """Validate and rebuild a resolution from :meth:`to_dict` output.

        A dict written before resolutions recorded their writer (without the five keys)
        stands for one that records none.
        """
        f = _Fields(data, cls, later=dict.fromkeys(_WRITTEN_BY))
        return _build(
            cls,
            effect_id=f.raw("effect_id"),
            seq=f.raw("seq"),
            applied=f.raw("applied"),
            by=f.raw("by"),
            recorded_at=f.raw("recorded_at"),
            note=f.raw("note"),
            origin=f.optional_enum("origin", ResolutionOrigin),
            os_user=f.raw("os_user"),
            host=f.raw("host"),
            program=f.raw("program"),
            pid=f.raw("pid"),
        )


# A resolution's writing process: all set, or (written before they were recorded) none.
_WRITTEN_BY = ("origin", "os_user", "host", "program", "pid")


Record = EffectClaim | EffectOutcome | Observation | Resolution


def _check_sorted(records: tuple[Record, ...], field: str) -> None:
    for before, after in itertools.pairwise(records):
        if before.seq >= after.seq:
            raise ValueError(f"{field} must be in strictly increasing seq order")


@dataclasses.dataclass(frozen=True, slots=True)
class History:
    """One run's records, each kind in ``seq`` order."""

    claims: tuple[EffectClaim, ...] = ()
    outcomes: tuple[EffectOutcome, ...] = ()
    observations: tuple[Observation, ...] = ()
    resolutions: tuple[Resolution, ...] = ()

    def __post_init__(self) -> None:
        _frozen(self, "claims", _tuple_of(self.claims, EffectClaim, "claims"))
        _frozen(self, "outcomes", _tuple_of(self.outcomes, EffectOutcome, "outcomes"))
        _frozen(self, "observations", _tuple_of(self.observations, Observation, "observations"))
        _frozen(self, "resolutions", _tuple_of(self.resolutions, Resolution, "resolutions"))
        _check_sorted(self.claims, "claims")
        _check_sorted(self.outcomes, "outcomes")
        _check_sorted(self.observations, "observations")
        _check_sorted(self.resolutions, "resolutions")

    def records(self) -> tuple[Record, ...]:
        """Every record of the run, in ``seq`` order."""
        merged: list[Record] = [
            *self.claims,
            *self.outcomes,
            *self.observations,
            *self.resolutions,
        ]
        return tuple(sorted(merged, key=lambda r: r.seq))

    def resolution(self, effect_id: str) -> Resolution | None:
        """The resolution of ``effect_id``, if a person has recorded one."""
        for resolution in self.resolutions:
            if resolution.effect_id == effect_id:
                return resolution
        return None

    def claim(self, effect_id: str) -> EffectClaim | None:
        """The claim of ``effect_id``, if the run has one."""
        for claim in self.claims:
            if claim.effect_id == effect_id:
                return claim
        return None

    def to_dict(self) -> dict[str, Any]:
        """Return the history as JSON types."""
        return {
            "claims": [c.to_dict() for c in self.claims],
            "outcomes": [o.to_dict() for o in self.outcomes],
            "observations": [o.to_dict() for o in self.observations],
            "resolutions": [r.to_dict() for r in self.resolutions],
        }

    @classmethod
    def from_dict(cls, data: object) -> Self:
        """Validate and rebuild a history from :meth:`to_dict` output."""
        f = _Fields(data, cls, later={"resolutions": []})
        return _build(
            cls,
            claims=f.items("claims", EffectClaim),
            outcomes=f.items("outcomes", EffectOutcome),
            observations=f.items("observations", Observation),
            resolutions=f.items("resolutions", Resolution),
        )


def check_history(history: History) -> None:
    """Raise ``ValueError`` unless ``history`` is one a durable run can hold.

    The records' ``seq`` run 1, 2, 3, … without gap or repeat across kinds;
    effect and observation ids are unique; every outcome follows its claim; no
    outcome follows a terminal one; a retry follows the claim it repeats and carries
    its key; a resolution follows its claim, at most one per effect. Every
    ``recorded_at`` is in :func:`utc_now`'s very form, and no outcome is recorded
    before its claim (see :func:`check_times`).

    ``EffectLog.load``, ``ledger verify`` and ``ledger import`` all hold a run to
    these rules, here and nowhere else, so that what one refuses no other accepts.
    """
    records = history.records()
    for expected, record in enumerate(records, start=1):
        if record.seq != expected:
            raise ValueError(
                f"seq {record.seq} of {record.record_type} where {expected} was due: the run's "
                "records must be numbered 1, 2, 3, … without gap or repeat"
            )
    claims: dict[str, EffectClaim] = {}
    for claim in history.claims:
        if claim.effect_id in claims:
            raise ValueError(f"effect {claim.effect_id!r} is claimed again at seq {claim.seq}")
        claims[claim.effect_id] = claim
    seen_obs: set[str] = set()
    for obs in history.observations:
        if obs.observation_id in seen_obs:
            raise ValueError(
                f"observation {obs.observation_id!r} is recorded again at seq {obs.seq}"
            )
        seen_obs.add(obs.observation_id)
    settled: dict[str, EffectOutcome] = {}
    for outcome in history.outcomes:
        claimed = claims.get(outcome.effect_id)
        if claimed is None:
            raise ValueError(
                f"outcome at seq {outcome.seq} names unclaimed effect {outcome.effect_id!r}"
            )
        if outcome.seq < claimed.seq:
            raise ValueError(
                f"outcome at seq {outcome.seq} precedes the claim of {outcome.effect_id!r}"
            )
        if outcome.effect_id in settled:
            raise ValueError(
                f"outcome at seq {outcome.seq} comes after {outcome.effect_id!r} settled"
            )
        if outcome.terminal:
            settled[outcome.effect_id] = outcome
    for claim in history.claims:
        if claim.retry_of is None:
            continue
        retried = claims.get(claim.retry_of)
        if retried is None or retried.seq > claim.seq:
            raise ValueError(
                f"effect {claim.effect_id!r} retries {claim.retry_of!r}, which is not "
                "claimed before it"
            )
        if claim.idempotency_key != retried.idempotency_key:
            raise ValueError(
                f"effect {claim.effect_id!r} retries {claim.retry_of!r} with another "
                "idempotency key"
            )
    resolved: set[str] = set()
    for resolution in history.resolutions:
        claimed = claims.get(resolution.effect_id)
        if claimed is None or claimed.seq > resolution.seq:
            raise ValueError(
                f"resolution at seq {resolution.seq} names {resolution.effect_id!r}, "
                "which is not claimed before it"
            )
        if resolution.effect_id in resolved:
            raise ValueError(f"effect {resolution.effect_id!r} is resolved twice")
        resolved.add(resolution.effect_id)
    check_times(history)


def written_by_utc_now(value: str) -> bool:
    """Whether ``value`` is exactly a time :func:`utc_now` could have written.

    Records accept any ISO-8601 time in UTC, but the library only ever writes
    utc_now()'s form: another form ('Z', no microseconds, a space, '-00:00') was not
    written by a ledger, and times kept as text only order correctly when they share
    one form. Rendering the parsed value as utc_now() does must give back the very
    same text.
    """
    try:
        parsed = datetime.fromisoformat(value)
    except ValueError:
        return False
    return parsed.utcoffset() == UTC.utcoffset(None) and (
        parsed.astimezone(UTC).isoformat(timespec="microseconds") == value
    )


def check_times(history: History) -> None:
    """Raise ``ValueError`` unless every time of ``history`` is one the library writes.

    Each ``recorded_at`` is in :func:`utc_now`'s form, and no outcome is recorded
    before its claim: no worker settles what it has not claimed, and the library
    records an outcome no earlier than its claim even when the clock steps back. A
    record with no ``recorded_at`` (one not yet written) is not judged.
    """
    for record in history.records():
        if record.recorded_at is not None and not written_by_utc_now(record.recorded_at):
            raise ValueError(
                f"{record.record_type} at seq {record.seq}: recorded_at "
                f"{record.recorded_at!r:.80} is not in the form the library writes "
                "(YYYY-MM-DDTHH:MM:SS.ffffff+00:00)"
            )
    claims = {claim.effect_id: claim for claim in history.claims}
    for outcome in history.outcomes:
        claim = claims.get(outcome.effect_id)
        if claim is None or outcome.recorded_at is None:
            continue  # an unclaimed outcome is check_history's to refuse
        # Both are in utc_now()'s form (checked above): as text they order as times.
        if outcome.recorded_at < claim.recorded_at:
            raise ValueError(
                f"outcome at seq {outcome.seq}: recorded_at {outcome.recorded_at} is before "
                f"the recorded_at {claim.recorded_at} of its claim (seq {claim.seq})"
            )


# --------------------------------------------------------------------------- assess


@dataclasses.dataclass(frozen=True, slots=True)
class Assessment:
    """The verdict on one claim, with the observations it rests on."""

    effect_id: str
    verdict: EffectVerdict
    execution: ExecutionOutcome | None
    impact: Impact | None
    unresolved_impact: bool
    evidence: tuple[str, ...]
    stale: tuple[str, ...]
    resolution: str | None = None  # "applied" or "not_applied": a person settled it

    def __post_init__(self) -> None:
        check_identifier(self.effect_id, "effect_id")
        _check_enum(self.verdict, EffectVerdict, "verdict")
        if self.resolution not in (None, "applied", "not_applied"):
            raise ValueError(
                f"resolution must be 'applied', 'not_applied' or None, got {self.resolution!r:.40}"
            )
        if self.execution is not None:
            _check_enum(self.execution, ExecutionOutcome, "execution")
        if self.impact is not None:
            _check_enum(self.impact, Impact, "impact")
        if not isinstance(self.unresolved_impact, bool):
            raise InvalidTypeError("unresolved_impact must be a bool")
        _frozen(self, "evidence", _tuple_of(self.evidence, str, "evidence"))
        _frozen(self, "stale", _tuple_of(self.stale, str, "stale"))

    def to_dict(self) -> dict[str, Any]:
        """Return the assessment as JSON types."""
        return {
            "effect_id": self.effect_id,
            "verdict": self.verdict.value,
            "execution": None if self.execution is None else self.execution.value,
            "impact": None if self.impact is None else self.impact.value,
            "unresolved_impact": self.unresolved_impact,
            "evidence": list(self.evidence),
            "stale": list(self.stale),
            "resolution": self.resolution,
        }

    @classmethod
    def from_dict(cls, data: object) -> Self:
        """Validate and rebuild an assessment from :meth:`to_dict` output."""
        f = _Fields(data, cls, later={"resolution": None})
        return _build(
            cls,
            effect_id=f.raw("effect_id"),
            verdict=f.enum("verdict", EffectVerdict),
            execution=f.optional_enum("execution", ExecutionOutcome),
            impact=f.optional_enum("impact", Impact),
            unresolved_impact=f.raw("unresolved_impact"),
            evidence=f.strings("evidence"),
            stale=f.strings("stale"),
            resolution=f.raw("resolution"),
        )


def _current(effect_id: str, outcomes: tuple[EffectOutcome, ...]) -> EffectOutcome | None:
    """The terminal outcome if any, else the last RUNNING one, else None."""
    last_running = None
    for outcome in outcomes:
        if outcome.effect_id != effect_id:
            continue
        if outcome.terminal:
            return outcome
        last_running = outcome
    return last_running


def _settled_clean(current: EffectOutcome | None) -> bool:
    return (
        current is not None
        and current.execution is ExecutionOutcome.FAILED
        and current.impact is Impact.NONE
    )


def _decide(condition: Postcondition, obs: Observation) -> bool | None:
    """True if ``obs`` satisfies the postcondition, False if it violates it, None if undecided."""
    predicate = condition.predicate
    if predicate is Predicate.EXISTS:
        return obs.exists
    if predicate is Predicate.ABSENT:
        return None if obs.exists is None else not obs.exists
    observed = obs.sha256 if predicate is Predicate.SHA256 else obs.revision
    if obs.exists is False:
        return False
    if observed is None:
        return None
    return observed == condition.expected


def _terminals(outcomes: tuple[EffectOutcome, ...]) -> dict[str, EffectOutcome]:
    """Each effect's terminal outcome (its first, were there more), found in one pass."""
    found: dict[str, EffectOutcome] = {}
    for outcome in outcomes:
        if outcome.terminal:
            found.setdefault(outcome.effect_id, outcome)
    return found


def _in_flight_until(other: EffectClaim, terminals: Mapping[str, EffectOutcome]) -> float:
    """The seq before which ``other``'s effect may still land (``inf``: not settled yet).

    An observation made before it, or before ``other`` is claimed, may miss the effect.
    """
    terminal = terminals.get(other.effect_id)
    return math.inf if terminal is None else max(other.seq, terminal.seq)


def _stale_until(
    claim: EffectClaim,
    target: ResourceRef,
    history: History,
    terminals: Mapping[str, EffectOutcome],
) -> float:
    """The seq before which an observation of ``target`` is stale for ``claim``.

    An observation is stale when another claim whose scope overlaps the target was in
    flight as it was made (claimed after it, or not terminally settled before it) and is
    not settled clean: when its seq is below the latest end of such a claim's flight.
    """
    until = -math.inf
    for other in history.claims:
        if other.effect_id == claim.effect_id:
            continue
        if not any(overlaps(ref, target) for ref in other.impact_scope):
            continue
        if not _settled_clean(terminals.get(other.effect_id)):
            until = max(until, _in_flight_until(other, terminals))
    return until


def _is_stale(obs: Observation, stale_until: float) -> bool:
    return obs.seq < stale_until


def _evidence(
    claim: EffectClaim,
    condition: Postcondition,
    current: EffectOutcome,
    history: History,
    stale: dict[int, str],
) -> tuple[Observation, bool] | None:
    """The fresh evidence for one obligation and whether it satisfies it; notes stale ones."""
    best: tuple[Observation, bool] | None = None
    stale_until = _stale_until(claim, condition.target, history, _terminals(history.outcomes))
    for obs in history.observations:
        if (
            obs.seq <= current.seq
            or obs.coverage is not Coverage.COMPLETE
            or not obs.resource.same_target(condition.target)
        ):
            continue
        if _is_stale(obs, stale_until):
            stale[obs.seq] = obs.observation_id
            continue
        decision = _decide(condition, obs)
        if decision is not None:
            best = (obs, decision)  # observations are in seq order: the last one wins
    return best


def _check_args(claim: object, history: object) -> None:
    if not isinstance(claim, EffectClaim):
        raise InvalidTypeError(f"claim must be an EffectClaim, not {type(claim).__name__}")
    if not isinstance(history, History):
        raise InvalidTypeError(f"history must be a History, not {type(history).__name__}")


def assess(claim: EffectClaim, history: History) -> Assessment:
    """Assess ``claim`` against one run's ``history`` and return its verdict.

    Pure: the same arguments always give the same result. The rules, first
    that applies: no outcome or a RUNNING one is PENDING; FAILED with impact
    NONE is FAILED; an obligation whose fresh evidence violates it makes the
    claim CONTRADICTED; every obligation satisfied by fresh evidence makes it
    VERIFIED; anything else is UNVERIFIED. A person's resolution of the effect
    leaves the verdict and settles its impact.
    """
    _check_args(claim, history)
    current = _current(claim.effect_id, history.outcomes)
    execution = None if current is None else current.execution
    impact = None if current is None else current.impact
    resolution = history.resolution(claim.effect_id)

    def result(
        verdict: EffectVerdict, evidence: tuple[str, ...] = (), stale: tuple[str, ...] = ()
    ) -> Assessment:
        unresolved = (
            resolution is None and verdict in _UNRESOLVED_VERDICTS and impact is not Impact.NONE
        )
        word = None if resolution is None else resolution.word
        return Assessment(
            claim.effect_id, verdict, execution, impact, unresolved, evidence, stale, word
        )

    if current is None or not current.terminal:
        return result(EffectVerdict.PENDING)
    if _settled_clean(current):
        return result(EffectVerdict.FAILED)

    evidence: list[str] = []
    stale: dict[int, str] = {}
    satisfied = 0
    violated = False
    for condition in claim.obligations:
        best = _evidence(claim, condition, current, history, stale)
        if best is not None:
            evidence.append(best[0].observation_id)
            satisfied += best[1]
            violated = violated or not best[1]

    stale_ids = tuple(stale[seq] for seq in sorted(stale))
    if violated:
        verdict = EffectVerdict.CONTRADICTED
    elif claim.obligations and satisfied == len(claim.obligations):
        verdict = EffectVerdict.VERIFIED
    else:
        verdict = EffectVerdict.UNVERIFIED
    return result(verdict, tuple(evidence), stale_ids)


_UNRESOLVED_VERDICTS = frozenset(
    {EffectVerdict.PENDING, EffectVerdict.UNVERIFIED, EffectVerdict.CONTRADICTED}
)


# --------------------------------------------------------------------------- decide


@dataclasses.dataclass(frozen=True, slots=True)
class Decision:
    """What a worker should do about an effect, and why, in one sentence."""

    effect_id: str
    step: NextStep
    reason: str
    idempotency_key: str

    def __post_init__(self) -> None:
        check_identifier(self.effect_id, "effect_id")
        _check_enum(self.step, NextStep, "step")
        _check_str(self.reason, "reason")
        _check_key(self.idempotency_key)

    def to_dict(self) -> dict[str, Any]:
        """Return the decision as JSON types."""
        return {
            "effect_id": self.effect_id,
            "step": self.step.value,
            "reason": self.reason,
            "idempotency_key": self.idempotency_key,
        }

    @classmethod
    def from_dict(cls, data: object) -> Self:
        """Validate and rebuild a decision from :meth:`to_dict` output."""
        f = _Fields(data, cls)
        return _build(
            cls,
            effect_id=f.raw("effect_id"),
            step=f.enum("step", NextStep),
            reason=f.raw("reason"),
            idempotency_key=f.raw("idempotency_key"),
        )


def newest_attempt(claim: EffectClaim, history: History) -> EffectClaim:
    """The attempt that speaks for ``claim``: its newest retry's newest retry…, or itself."""
    _check_args(claim, history)
    attempt = claim
    while True:
        retries = [
            c for c in history.claims if c.retry_of == attempt.effect_id and c.seq > attempt.seq
        ]
        if not retries:
            return attempt
        attempt = retries[-1]  # claims are in seq order


def _same_state(now: Observation, before: Observation) -> bool:
    """Whether two observations show a resource exactly alike: both absent, or one digest."""
    if now.exists is False or before.exists is False:
        return now.exists is False and before.exists is False
    if now.sha256 is not None or before.sha256 is not None:
        return now.sha256 == before.sha256
    return now.revision is not None and now.revision == before.revision


def _before(claim: EffectClaim, target: ResourceRef, history: History) -> Observation | None:
    """The last complete observation of ``target`` that says anything, made before ``claim``."""
    found = None
    for obs in history.observations:
        if obs.seq >= claim.seq:
            break
        if (
            obs.coverage is Coverage.COMPLETE
            and obs.exists is not None
            and obs.resource.same_target(target)
        ):
            found = obs
    return found


def _unchanged(claim: EffectClaim, history: History) -> bool:
    """Whether every violated obligation is violated by the target as it was before the claim."""
    current = _current(claim.effect_id, history.outcomes)
    if current is None:
        return False
    violated = 0
    for condition in claim.obligations:
        best = _evidence(claim, condition, current, history, {})
        if best is None or best[1]:
            continue
        violated += 1
        before = _before(claim, condition.target, history)
        if before is None or not _same_state(best[0], before):
            return False
    return violated > 0


def _step(claim: EffectClaim, history: History) -> tuple[NextStep, str]:
    """The first of the decision rules that applies to one attempt, and why."""
    resolution = history.resolution(claim.effect_id)
    if resolution is not None:
        # Who wrote it is said: a worker's word on its own effect is not a person's check.
        landed = "it landed" if resolution.applied else "it did not land"
        step = NextStep.DONE if resolution.applied else NextStep.RETRY
        if resolution.by_person:
            return step, f"a person ({resolution.by}) checked that {landed}"
        return step, f"its own worker, not a person, resolved that {landed} ({resolution.by})"
    assessment = assess(claim, history)
    verdict = assessment.verdict
    if verdict is EffectVerdict.VERIFIED:
        return NextStep.DONE, "its postconditions are observed to hold"
    if verdict is EffectVerdict.PENDING:
        return NextStep.WAIT, "it has no outcome yet: its call may still be running"
    if verdict is EffectVerdict.FAILED:
        return NextStep.RETRY, "it failed without effect"
    if (
        assessment.execution is ExecutionOutcome.REPORTED_SUCCESS
        and verdict is EffectVerdict.UNVERIFIED
    ):
        return NextStep.DONE, "its call reported success and no evidence says otherwise"
    if claim.kind is EffectKind.READ:
        return NextStep.RETRY, "it only reads, so running it again changes nothing"
    if claim.kind is EffectKind.IDEMPOTENT:
        return NextStep.RETRY, "the system it calls ignores a repeat with the same key"
    if (
        claim.kind is EffectKind.WRITE
        and verdict is EffectVerdict.CONTRADICTED
        and _unchanged(claim, history)
    ):
        return NextStep.RETRY, "its targets are observed exactly as they were before it"
    if claim.kind is EffectKind.IRREVERSIBLE:
        return NextStep.ESCALATE, "it cannot be undone or observed: a person must check"
    if verdict is EffectVerdict.CONTRADICTED:
        return NextStep.ESCALATE, "the evidence contradicts it: a person must check"
    return NextStep.ESCALATE, "it may have landed: a person must check"


def decide(claim: EffectClaim, history: History) -> Decision:
    """What to do next about ``claim``: done, wait, retry with its key, or escalate.

    Pure, like :func:`assess`. Once an effect has a retry, the newest retry speaks for
    it. The rules, first that applies: a person's resolution (applied: DONE, not
    applied: RETRY); VERIFIED: DONE; PENDING: WAIT; FAILED: RETRY; a reported success
    no evidence contradicts: DONE; a READ or IDEMPOTENT effect: RETRY; a WRITE whose
    violated postconditions all show the target as it was before: RETRY; else ESCALATE.
    """
    attempt = newest_attempt(claim, history)
    step, why = _step(attempt, history)
    if attempt is not claim:
        why = f"its newest retry {attempt.effect_id!r}: {why}"
    return Decision(claim.effect_id, step, why[0].upper() + why[1:] + ".", claim.idempotency_key)
