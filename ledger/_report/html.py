"""The page rendered: one HTML document, by Jinja2 with autoescaping on, written privately.

Every value from the store (ids, locators, notes) is text an agent or its tools wrote,
possibly hostile: it reaches the page only escaped, with its non-printable characters
spelled out as the command line does. The page loads nothing: its style and script are
inline, allowed by hash in its Content-Security-Policy, so that even a value that
escaped escaping could not run.
"""

from __future__ import annotations

import base64
import hashlib
import os
import shlex
from importlib import resources
from pathlib import Path, PurePath

from ledger import _inspect, _text
from ledger._report.model import (
    ATTENTION_LIMIT,
    INCIDENT_LIMIT,
    LABEL_W,
    LANE_H,
    LANE_LIMIT,
    LEFT,
    RIGHT,
    RUN_LIMIT,
    TABLE_LIMIT,
    TARGET_LIMIT,
    WIDTH,
    Report,
)

__all__ = ["printable", "render", "shell_word", "when", "write"]


def printable(value: object) -> object:
    """Every text shown with its non-printable characters spelled out, as ``ledger`` prints them.

    A bidi override or a control character in a locator would otherwise change what the
    reader sees (``txt.exe`` shown as ``exe.txt``). Markup (the page's own) passes as is.
    """
    from markupsafe import Markup  # noqa: PLC0415 - loaded by render, see there

    if isinstance(value, PurePath):
        # A store directory: its bytes that are not UTF-8 are surrogates in its str,
        # which the page (UTF-8) cannot hold; spelled out, as `ledger` prints the path.
        value = str(value)
    if isinstance(value, Markup) or not isinstance(value, str) or value.isprintable():
        return value
    return _text.printable(value)


def shell_word(text: str) -> str:
    """``text`` as one word of a POSIX shell command line, printable, to copy from the page.

    A path with bytes that are not UTF-8 (a surrogate each in its str) or with other
    characters that do not print is written as bash's ``$'...'``, its bytes escaped,
    so that the command names that very path.
    """
    if text.isprintable():
        return shlex.quote(text)
    data = os.fsencode(text)
    return (
        "$'"
        + "".join(chr(b) if 0x20 <= b < 0x7F and b not in b"'\\" else f"\\x{b:02x}" for b in data)
        + "'"
    )


def when(stamp: str | None) -> str:
    """A time as the page shows it: the page says times are UTC, as ledger writes them."""
    if stamp is None:
        return "-"
    return stamp.replace("T", " ", 1).removesuffix("+00:00")


SHORT_ID = 10  # characters of an id shown at least; more where another id shares them


def _short_ids(report: Report) -> dict[str, str]:
    """Each long id on the page, cut to a prefix no other id on the page shares (as git does).

    An id of at most :data:`SHORT_ID` + 2 characters is shown whole; so is one no shorter
    prefix tells apart.
    """
    ids: set[str] = set()
    for needs in report.attention:
        ids |= {needs.attention.row.run_id, needs.attention.row.effect_id}
    for incident in report.incidents:
        ids |= {incident.row.run_id, incident.row.effect_id}
    for approval in report.approvals:
        ids |= {approval.run_id, approval.approval_id, approval.effect_id}
        if approval.used_by is not None:
            ids.add(approval.used_by)
    for run in report.runs:
        ids.add(run.summary.run_id)
        if run.timeline is not None:
            ids |= {lane.effect_id for lane in run.timeline.lanes}
        for row in (*run.rows, *run.resolutions):
            ids.add(row.ident)
            ids |= {link.effect_id for link in row.links}
    ordered = sorted(ids)
    short = {}
    for i, full in enumerate(ordered):
        if len(full) <= SHORT_ID + 2:
            continue
        shared = max(
            (_common(full, other) for other in ordered[max(i - 1, 0) : i + 2] if other != full),
            default=0,
        )
        length = max(SHORT_ID, shared + 1)
        if length < len(full) - 1:
            short[full] = full[:length]
    return short


def _common(a: str, b: str) -> int:
    """How many leading characters ``a`` and ``b`` share."""
    for i, (x, y) in enumerate(zip(a, b, strict=False)):
        if x != y:
            return i
    return min(len(a), len(b))


def _asset(name: str) -> str:
    return (resources.files("ledger") / "templates" / name).read_text(encoding="utf-8")


def _hash(text: str) -> str:
    return "'sha256-" + base64.b64encode(hashlib.sha256(text.encode()).digest()).decode() + "'"


def render(report: Report) -> str:
    """The page: one HTML document that loads nothing and runs only its own script."""
    # Imported here: `ledger status --attention` and `--since` import this package, and
    # the template engine would add a tenth of a second to their start.
    import jinja2  # noqa: PLC0415
    from markupsafe import Markup  # noqa: PLC0415

    env = jinja2.Environment(
        loader=jinja2.PackageLoader("ledger", "templates"),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
        finalize=printable,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters["when"] = when
    short = _short_ids(report)
    env.filters["short"] = short.get
    env.filters["shell"] = lambda location: shell_word(str(location))
    env.filters["recorded"] = lambda value: _text.shortened(_text.compact_json(value), TARGET_LIMIT)
    style, script = _asset("report.css"), _asset("report.js")
    csp = (
        f"default-src 'none'; style-src {_hash(style)}; script-src {_hash(script)}; "
        "base-uri 'none'; form-action 'none'"
    )
    return env.get_template("report.html.j2").render(
        report=report,
        csp=csp,
        style=Markup(style),  # noqa: S704 - the package's own file, not data
        script=Markup(script),  # noqa: S704 - the package's own file, not data
        verdicts=_inspect.VERDICTS,
        width=WIDTH,
        left=LEFT,
        right=RIGHT,
        label_w=LABEL_W,
        lane_h=LANE_H,
        limits={
            "lanes": LANE_LIMIT,
            "table": TABLE_LIMIT,
            "runs": RUN_LIMIT,
            "attention": ATTENTION_LIMIT,
            "incidents": INCIDENT_LIMIT,
        },
    )


def write(path: Path, text: str) -> Path:
    """Write the page to ``path``, private (0600) like the store it comes from, and return it.

    A new file renamed into place: never written through a link, never half-written.
    """
    path = path.absolute()
    data = text.encode("utf-8")  # a text the page cannot hold fails before any file exists
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        temporary.replace(path)
    except BaseException:
        # Whatever stopped it (a full disk, an interrupt), no half page is left behind.
        temporary.unlink(missing_ok=True)
        raise
    return path
