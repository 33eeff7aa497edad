"""Without the ``otel`` extra, the ledger works and never loads a module of OpenTelemetry.

The development environment has the API and the SDK installed, so hiding them from a
child Python would prove little. Instead the child runs in an environment that truly lacks
them, built in a second: ``python -S`` (no site-packages at all) with a directory of links
to the modules of the package's core dependencies only (``[project] dependencies`` and
what they require, as installed here). ``opentelemetry`` is not there to be found, and
the child also checks that no module of that name was loaded.
"""

from __future__ import annotations

import importlib.metadata
import json
import subprocess
import textwrap
import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement

from tests.builders import CHILD_TIMEOUT, PYTHON, REPO, python_stdout

pytestmark = pytest.mark.program

CHILD = textwrap.dedent(
    """
    import importlib.util, json, sys
    assert not any("site-packages" in p for p in sys.path), sys.path
    assert importlib.util.find_spec("opentelemetry") is None, "the extra is installed here"

    import ledger
    from ledger.effect_log import EffectLog, new_run_id
    from ledger import _telemetry

    store = sys.argv[1]
    run_id = new_run_id()
    with EffectLog(run_id, store) as log:
        with log.effect("send_email", args={"to": "x"}) as call:
            pass
        log.claim(effect_id="left", action_id="a", operation=call.claim.operation,
                  impact_scope=[])
    with EffectLog.resume(run_id, store) as log:
        recovered = [o.effect_id for o in log.recovered]
        traceparents = [c.traceparent for c in log.history().claims]
    loaded = sorted(m for m in sys.modules if m.split(".")[0] == "opentelemetry")
    print(json.dumps({"installed": _telemetry.installed(), "recovered": recovered,
                      "traceparents": traceparents, "loaded": loaded}))
    """
)


def _core_distributions() -> set[str]:
    """The distributions the package needs without any extra, as this environment has them."""
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    todo = [Requirement(r) for r in project["dependencies"]]
    found: set[str] = set()
    while todo:
        requirement = todo.pop()
        if requirement.marker is not None and not requirement.marker.evaluate({"extra": ""}):
            continue
        name = importlib.metadata.distribution(requirement.name).metadata["Name"]
        if name in found:
            continue
        found.add(name)
        todo += [Requirement(r) for r in importlib.metadata.requires(name) or ()]
    return found


def _link_core_modules(into: Path) -> list[str]:
    """Link each top-level module of the core distributions into ``into``; their names."""
    into.mkdir()
    names: set[str] = set()
    for name in _core_distributions():
        distribution = importlib.metadata.distribution(name)
        for file in distribution.files or ():
            top = file.parts[0]
            if len(file.parts) == 1 and not top.endswith((".py", ".so")):
                continue  # a loose file of the distribution, not a module
            if top.endswith((".dist-info", ".data")) or top == "..":
                continue
            source = Path(str(distribution.locate_file(top)))
            if top not in names and source.exists():
                names.add(top)
                (into / top).symlink_to(source)
    return sorted(names)


def test_an_effect_and_recovery_work_and_no_opentelemetry_module_is_loaded(
    tmp_path: Path,
) -> None:
    core = tmp_path / "core"
    linked = _link_core_modules(core)
    assert "sqlalchemy" in linked
    assert not any(name.startswith("opentelemetry") for name in linked)
    # -S: no site-packages; -E: no PYTHONPATH. Only the stdlib, the core and this ledger.
    script = f"import sys\nsys.path[:0] = [{str(core)!r}, {str(REPO)!r}]\n" + CHILD
    result = subprocess.run(
        [PYTHON, "-S", "-E", "-c", script, str(tmp_path / "store")],
        capture_output=True,
        text=True,
        timeout=CHILD_TIMEOUT,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    said = json.loads(result.stdout)
    assert said == {
        "installed": False,
        "recovered": ["left"],
        "traceparents": [None, None],
        "loaded": [],
    }


def test_importing_the_ledger_loads_no_opentelemetry_module_even_where_it_is_installed() -> None:
    """The API is imported by a log made with it installed, never by ``import ledger``."""
    script = (
        "import sys, json, ledger, ledger.effect_log, ledger.effects, ledger.cli\n"
        "from ledger import _telemetry\n"
        "print(json.dumps(sorted(m for m in sys.modules if m.startswith('opentelemetry'))))\n"
    )
    assert json.loads(python_stdout(script)) == []
