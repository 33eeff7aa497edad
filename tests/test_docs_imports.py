"""Every import a README or docs example makes works, and so does the package top.

The imports are read from the Python blocks of README.md and docs/*.md, with the names
the examples reach through ``ledger.`` and ``fx.`` (``from ledger import effects as fx``),
and made in a fresh child Python: what an example shows, a user can type. The top
(``import ledger``) resolves every name of its ``__all__`` and loads no storage.
"""

from __future__ import annotations

import ast
import json
import re
import typing
from pathlib import Path

import pytest

from tests.builders import REPO, python_stdout

pytestmark = pytest.mark.program

DOCS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
# A name written ``alias.Name`` in an example, where the alias stands for a ledger module.
ALIASES = {"ledger": "ledger", "fx": "ledger.effects"}
# Never loaded by ``import ledger`` or the pure core: the storage layer and what it needs.
STORAGE = (
    "sqlalchemy",
    "alembic",
    "psycopg",
    "sqlite3",
    "ledger.storage",
    "ledger.sqlite",
    "ledger.postgresql",
    "ledger.effect_log",
)

# Runs each statement in a fresh interpreter and prints those that fail, with the error.
CHILD = """
import json, sys
failed = []
for where, statement in json.loads(sys.argv[1]):
    try:
        exec(statement, {})
    except Exception as e:
        failed.append(f"{where}: {statement}: {type(e).__name__}: {e}")
print(json.dumps(failed))
"""


def _blocks(path: Path) -> list[str]:
    return re.findall(r"```python\n(.*?)```", path.read_text(), re.DOTALL)


def _imports(block: str) -> list[ast.Import | ast.ImportFrom]:
    """The block's import statements; a block that is a sketch (``...``) is read line by line."""
    try:
        tree = ast.parse(block)
    except SyntaxError:
        found: list[ast.Import | ast.ImportFrom] = []
        for line in block.splitlines():
            if re.match(r"\s*(from\s+\S+\s+)?import\s", line):
                try:
                    body = ast.parse(line.strip()).body
                except SyntaxError:
                    continue  # a parenthesised import over several lines: none so far
                found.extend(n for n in body if isinstance(n, ast.Import | ast.ImportFrom))
        return found
    return [n for n in ast.walk(tree) if isinstance(n, ast.Import | ast.ImportFrom)]


def statements(path: Path) -> list[str]:
    """What the examples of ``path`` import, and every ``ledger.X`` / ``fx.X`` they name."""
    found: list[str] = []
    for block in _blocks(path):
        for node in _imports(block):
            if isinstance(node, ast.ImportFrom):
                modules = [node.module or ""]
            else:
                modules = [a.name for a in node.names]
            if any(m.split(".")[0] == "ledger" for m in modules):
                found.append(ast.unparse(node))
        for alias, attribute in re.findall(r"(?<![\w.])(ledger|fx)\.([A-Za-z_]\w*)", block):
            module = ALIASES[alias]
            found.append(
                f"import importlib, {module}\n"
                f"m = {module}\n"
                f"assert hasattr(m, {attribute!r}) or importlib.import_module("
                f"'{module}.{attribute}'), 'no {module}.{attribute}'"
            )
    return list(dict.fromkeys(found))


def _failures(where: str, found: list[str]) -> list[str]:
    out = python_stdout(CHILD, json.dumps([[where, s] for s in found]))
    return typing.cast("list[str]", json.loads(out))


def test_the_docs_have_examples_that_import_the_ledger() -> None:
    """The reading below sees the imports it should: README and api.md import from ledger."""
    assert {d.name for d in DOCS if statements(d)} >= {"README.md", "api.md"}
    assert (
        "from ledger import ExternalResource, FilesystemResource, FilesystemRoot, current_call"
        in statements(REPO / "README.md")
    )
    assert "import ledger" in statements(REPO / "docs" / "api.md")
    names = "\n".join(statements(REPO / "README.md"))
    assert "'ledger.EffectLog'" in names or "'EffectLog'" in names


@pytest.mark.parametrize("doc", [d for d in DOCS if statements(d)], ids=lambda p: p.name)
def test_every_import_an_example_uses_works(doc: Path) -> None:
    """Each import of a Python example of the page, and each ledger name it uses, resolves."""
    assert _failures(doc.name, statements(doc)) == []


def test_a_name_the_examples_cannot_reach_is_caught() -> None:
    """The check fails for an import path that does not exist (so it can fail at all)."""
    broken = ["from ledger.effects import NoSuchThing", "import ledger.no_such_module"]
    assert len(_failures("made up", broken)) == 2


def test_the_top_resolves_every_public_name_and_loads_no_storage() -> None:
    """``import ledger``: no storage loaded; then every name of ``__all__`` resolves.

    Each is the very object of the public module it comes from, and ``dir(ledger)`` lists it.
    """
    script = (
        "import json, sys\n"
        "import ledger\n"
        f"early = sorted(m for m in sys.modules if m.startswith({STORAGE!r}))\n"
        "ledger.EffectLog, ledger.tool\n"
        "missing = [n for n in ledger.__all__ if not hasattr(ledger, n)]\n"
        "unlisted = sorted(set(ledger.__all__) - set(dir(ledger)))\n"
        "import ledger.effect_log, ledger.effects, ledger.errors, ledger.resources\n"
        "homes = (ledger.effect_log, ledger.effects, ledger.errors, ledger.resources)\n"
        "other = [n for n in ledger.__all__ if not any(\n"
        "    getattr(h, n, None) is getattr(ledger, n) for h in homes)]\n"
        "print(json.dumps([early, missing, unlisted, other]))\n"
    )
    early, missing, unlisted, other = json.loads(python_stdout(script))
    assert early == []
    assert missing == []
    assert unlisted == []
    # The one name no public module holds: the decorator, found at the package top.
    assert sorted(other) == ["tool"]


def test_what_log_effect_returns_is_public() -> None:
    """``EffectLog.effect`` returns an ``EffectScope``: a type reachable as ``ledger.EffectScope``."""
    import ledger
    from ledger.effect_log import EffectLog

    assert typing.get_type_hints(EffectLog.effect)["return"] is ledger.EffectScope
    assert typing.get_type_hints(ledger.EffectScope.__enter__)["return"] is ledger.EffectCall
    entered = typing.get_type_hints(ledger.EffectScope.__aenter__)["return"]
    assert entered is ledger.AsyncEffectCall


def test_the_pure_core_loads_no_storage() -> None:
    """``ledger.effects`` and every module under ``ledger._core`` import nothing of storage."""
    core = sorted((REPO / "ledger" / "_core").glob("*.py"))
    assert len(core) > 1
    for path in [REPO / "ledger" / "effects.py", *core]:
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                assert not node.module.startswith(STORAGE), (path.name, node.module)
                if node.module.startswith("ledger"):
                    assert node.module.startswith("ledger._core"), (path.name, node.module)
            elif isinstance(node, ast.Import):
                assert all(a.name.split(".")[0] != "ledger" for a in node.names), path.name
    script = (
        "import json, sys\nimport ledger.effects\n"
        f"print(json.dumps(sorted(m for m in sys.modules if m.startswith({STORAGE!r}))))\n"
    )
    assert json.loads(python_stdout(script)) == []


def test_ledger_effects_keeps_every_name_it_exports() -> None:
    """Each name of ``ledger.effects.__all__`` imports from it, with the values other modules use.

    The names are written in ``ledger._core``; ``ledger.effects`` is where users import them.
    """
    import ledger.effects

    exported = ledger.effects.__all__
    assert [n for n in exported if not hasattr(ledger.effects, n)] == []
    assert {"EffectClaim", "Record", "assess", "decide", "check_history", "RESOURCE_KINDS"} <= set(
        exported
    )
    namespace: dict[str, object] = {}
    exec("from ledger.effects import *", namespace)  # noqa: S102 - the star import users may write
    assert set(exported) <= namespace.keys()
