"""docs/cli.md: generated from the click commands, complete, and true to what `ledger` prints.

The reference is produced by ``tools.clidoc`` (``make docs``). These tests check that
the file is current, that every command and option has its place in it, and that the
JSON shapes it documents (tables of keys and types, and an example per command) are
exactly what the installed console script prints for a small real store.
"""

from __future__ import annotations

import difflib
import itertools
import json
import re
import subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import click
import pytest

from ledger import effects as fx
from ledger.cli import main
from ledger.effect_log import EffectLog, new_run_id
from ledger.errors import ApprovalPending
from ledger.resources import FilesystemRoot
from tests.builders import PYTHON, REPO, file_ref, ledger, op, sha, subprocess_env
from tools import clidoc

DOC_PATH = REPO / "docs" / "cli.md"
STALE = "docs/cli.md is stale: run `make docs` (python -m tools.clidoc > docs/cli.md)"
PRIMITIVES: dict[str, type] = {
    "string": str,
    "integer": int,
    "boolean": bool,
    "null": type(None),
}


# --------------------------------------------------------------------------- reading the doc


@pytest.fixture(scope="module")
def doc() -> str:
    """The committed docs/cli.md."""
    if not DOC_PATH.exists():
        pytest.fail(f"docs/cli.md is missing: {STALE}")
    return DOC_PATH.read_text(encoding="utf-8")


def _sections(doc: str) -> dict[str, str]:
    """Each `## title` section of the document, by title."""
    parts = re.split(r"^## (.+)\n", doc, flags=re.MULTILINE)
    return {parts[i]: parts[i + 1] for i in range(1, len(parts), 2)}


def _commands() -> dict[str, click.Command]:
    return {name: c for name, c in main.commands.items() if not c.hidden}


def _json_commands() -> set[str]:
    # bench prints measurements of this machine, not what a store holds: its JSON is
    # checked by tests/test_bench.py against a real run.
    return {
        name
        for name, command in _commands().items()
        if name != "bench"
        and any(isinstance(p, click.Option) and "--json" in p.opts for p in command.params)
    }


def _shapes(doc: str) -> dict[str, dict[str, str]]:
    """Every documented JSON shape: its keys, in order, with their types (links resolved)."""
    shapes: dict[str, dict[str, str]] = {}
    table = re.compile(
        r"^### (?P<name>.+)\n\n(?:(?:[^\n|#].*\n)+\n)?"
        r"\| key \| type \| meaning \|\n\| --- \| --- \| --- \|\n(?P<rows>(?:\|.*\|\n)+)",
        re.MULTILINE,
    )
    for match in table.finditer(doc):
        name = match["name"]
        assert name not in shapes, f"two tables for the shape {name!r}"
        keys: dict[str, str] = {}
        for row in match["rows"].splitlines():
            cells = re.fullmatch(r"\| `(?P<key>[^`]+)` \| (?P<type>[^|]+) \| .* \|", row)
            assert cells is not None, f"{name}: a row that is not | `key` | type | meaning |"
            keys[cells["key"]] = cells["type"]
        shapes[name] = keys
    for name, keys in shapes.items():
        for key, cell in keys.items():
            for linked, anchor in re.findall(r"\[([^\]]+)\]\(#([^)]+)\)", cell):
                assert linked in shapes, f"{name}.{key}: {linked!r} is not a documented shape"
                assert anchor == linked.replace(" ", "-"), f"{name}.{key}: bad link #{anchor}"
            keys[key] = re.sub(r"\[([^\]]+)\]\(#[^)]+\)", r"\1", cell)
    return shapes


def _declared(section: str) -> tuple[str, str] | None:
    """What a command section says it prints: ("array" | "one" | "lines", shape name)."""
    found = re.search(
        r"prints (?P<how>an array of|one) \[(?P<shape>[^\]]+)\]\(#[^)]+\) objects?"
        r"(?P<lines> per line)?",
        section,
    )
    if found is None:
        return None
    how = "lines" if found["lines"] else ("array" if found["how"] == "an array of" else "one")
    return how, found["shape"]


def _example(section: str) -> Any:
    """The example output at the end of a command section, parsed."""
    blocks = re.findall(r"^```(json|jsonl)\n(.*?)^```$", section, re.MULTILINE | re.DOTALL)
    assert blocks, "no ```json or ```jsonl example"
    kind, text = blocks[-1]
    if kind == "jsonl":
        return [json.loads(line) for line in text.splitlines()]
    return json.loads(text)


# --------------------------------------------------------------------------- checking shapes


def _check(
    value: Any, type_text: str, where: str, shapes: dict[str, dict[str, str]], met: set[str]
) -> tuple[str, str] | None:
    """None when ``value`` has the documented type (adding the shapes met), else (where, why)."""
    failures = []
    for alternative in type_text.split(" or "):
        trial: set[str] = set()
        failure = _check_one(value, alternative, where, shapes, trial)
        if failure is None:
            met |= trial
            return None
        # Report the alternative that came closest: most keys in common, then deepest.
        common = (
            len(set(value) & set(shapes.get(alternative, {}))) if isinstance(value, dict) else 0
        )
        failures.append((common, len(failure[0]), failure))
    return max(failures, key=lambda f: f[:2])[2]


def _check_one(
    value: Any, type_text: str, where: str, shapes: dict[str, dict[str, str]], met: set[str]
) -> tuple[str, str] | None:
    if type_text.startswith("array of "):
        if not isinstance(value, list):
            return where, f"{json.dumps(value)[:120]} is not an array"
        for i, item in enumerate(value):
            failure = _check(
                item, type_text.removeprefix("array of "), f"{where}[{i}]", shapes, met
            )
            if failure is not None:
                return failure
        return None
    if type_text == "JSON value":  # a recorded value: anything JSON holds
        return None
    if type_text in PRIMITIVES:
        if isinstance(value, PRIMITIVES[type_text]) and not (
            type_text == "integer" and isinstance(value, bool)
        ):
            return None
        return where, f"{json.dumps(value)[:120]} is not {type_text}"
    assert type_text in shapes, f"{where}: the type {type_text!r} is not documented"
    keys = shapes[type_text]
    if not isinstance(value, dict) or list(value) != list(keys):
        got = list(value) if isinstance(value, dict) else json.dumps(value)[:120]
        return where, f"{got} are not the keys of {type_text}, {list(keys)}, in that order"
    for key, key_type in keys.items():
        failure = _check(value[key], key_type, f"{where}.{key}", shapes, met)
        if failure is not None:
            return failure
    met.add(type_text)
    return None


def _check_output(
    value: Any, declared: tuple[str, str], shapes: dict[str, dict[str, str]], met: set[str]
) -> tuple[str, str] | None:
    how, shape = declared
    if how == "one":
        return _check(value, shape, "$", shapes, met)
    if not value:
        return "$", "an empty array shows nothing of its items"
    return _check(value, f"array of {shape}", "$", shapes, met)


def _key_paths(value: Any, prefix: str = "") -> set[str]:
    """Every key path in ``value``; list items are `[]`, or `[<type>]` when they carry a type."""
    if isinstance(value, dict):
        paths = set()
        for key, item in value.items():
            path = f"{prefix}.{key}" if prefix else key
            paths |= {path} | _key_paths(item, path)
        return paths
    if isinstance(value, list):
        paths = set()
        for item in value:
            tag = item.get("type") if isinstance(item, dict) else None
            paths |= _key_paths(item, f"{prefix}[{tag if isinstance(tag, str) else ''}]")
        return paths
    return set()


# --------------------------------------------------------------------------- real output


@pytest.fixture(scope="module")
def real(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """What each --json command (and export) prints for a small store built with the library.

    One run has a verified effect (a claim with a step and recorded arguments, an outcome
    with a recorded result, and an observation); the other a claim whose worker died,
    which `recover` then marks interrupted. The recorded values have the keys of the
    examples': the examples' key paths go down into them.
    """
    tmp = tmp_path_factory.mktemp("cli-docs")
    store, other_store = tmp / "store", tmp / "imported"
    (tmp / "sandbox").mkdir()
    root = FilesystemRoot.seal(tmp / "sandbox")
    hello, notes = file_ref(root, "hello.txt"), file_ref(root, "notes.md")
    done, crashed = new_run_id(), new_run_id()
    with EffectLog(done, store) as log:
        log.claim(
            effect_id="write-hello",
            action_id="step-1",
            operation=op(),
            impact_scope=[hello],
            obligations=[fx.Postcondition(hello, fx.Predicate.SHA256, sha(b"hello\n"))],
            step="call_1",
            args={"content": "hello\n", "path": "hello.txt"},
        )
        log.outcome(
            effect_id="write-hello",
            execution=fx.ExecutionOutcome.REPORTED_SUCCESS,
            impact=fx.Impact.CERTAIN,
            result={"bytes_written": 6},
        )
        log.observe(
            observation_id="check-1",
            resource=hello,
            mechanism=fx.ObservationMechanism.FILESYSTEM_READ,
            coverage=fx.Coverage.COMPLETE,
            source_action_id="step-2",
            exists=True,
            sha256=sha(b"hello\n"),
        )
    with EffectLog(crashed, store) as log:
        log.claim(
            effect_id="append-notes",
            action_id="step-3",
            operation=op("append_file"),
            impact_scope=[notes],
            obligations=[fx.Postcondition(notes, fx.Predicate.EXISTS)],
        )
    env = subprocess_env() | {"LEDGER_DIR": str(tmp / "default-store")}
    at = ("--store", str(store))
    asked, approved = _approvals(store, env)
    reads = {
        "runs": ("runs", "--json", *at),
        "show": ("show", done[:8], "--json", *at),
        "status": ("status", "--json", *at),
        "verify": ("verify", "--json", *at),
        "path": ("path", "--json", *at),
        "head": ("head", done[:8], "--json", *at),
        "export": ("export", done, *at),
        "approvals": ("approvals", "--all", "--json", *at),
    }
    with ThreadPoolExecutor(len(reads)) as pool:
        results = dict(
            zip(reads, pool.map(lambda a: ledger(*a, env=env), reads.values()), strict=True)
        )
    exported = tmp / f"{done}.jsonl"
    exported.write_text(results["export"].stdout)
    results["recover"] = ledger("recover", crashed, "--force", "--json", *at, env=env)
    results["resolve"] = ledger(
        "resolve",
        crashed[:8],
        "append-notes",
        "--not-applied",
        "--by",
        "alice",
        "--json",
        *at,
        env=env,
    )
    results["approve"] = ledger(
        "approve", asked[0][0], asked[0][1], "--by", "alice", "--json", *at, env=env
    )
    results["deny"] = ledger(
        "deny", asked[1][0], asked[1][1], "--by", "bob", "--note", "no", "--json", *at, env=env
    )
    results["approvals-setup"] = approved
    results["import"] = ledger(
        "import", str(exported), "--json", "--store", str(other_store), env=env
    )
    results["migrate"] = ledger("migrate", "--json", "--store", str(tmp / "migrated"), env=env)
    outputs: dict[str, Any] = {}
    for name, result in results.items():
        assert result.returncode == 0, f"ledger {name}: {result.stderr}"
        if name == "approvals-setup":
            continue
        if name == "export":
            outputs[name] = [json.loads(line) for line in result.stdout.splitlines()]
        else:
            outputs[name] = json.loads(result.stdout)
    return outputs


def _approvals(
    store: Path, env: dict[str, str]
) -> tuple[list[tuple[str, str]], subprocess.CompletedProcess[str]]:
    """A run with a refund a person approved and the worker made, and two still waiting.

    Returns the (run, approval) of the two waiting, and the `ledger approve` that granted
    the first.
    """
    policy = fx.ApprovalPolicy(reason="refunds over 100")
    waiting = []
    with EffectLog(new_run_id(), store) as log:

        def refund(amount: int, order: str) -> ApprovalPending | None:
            try:
                with log.effect(
                    "refund",
                    args={"amount": amount, "order": order},
                    kind=fx.EffectKind.IRREVERSIBLE,
                    approval=policy,
                ):
                    return None
            except ApprovalPending as e:
                return e

        first = refund(150, "A-1017")
        assert first is not None
        approved = ledger(
            "approve",
            log.run_id,
            first.approval_id,
            "--by",
            "alice",
            "--store",
            str(store),
            env=env,
        )
        assert refund(150, "A-1017") is None  # made under the grant
        for amount, order in ((420, "A-1018"), (99, "A-1019")):
            pending = refund(amount, order)
            assert pending is not None
            waiting.append((log.run_id, pending.approval_id))
    return waiting, approved


# --------------------------------------------------------------------------- (a) current


def test_reference_is_what_the_generator_produces(doc: str) -> None:
    """docs/cli.md is exactly what `python -m tools.clidoc` renders from the commands now."""
    expected = clidoc.document()
    if doc != expected:
        diff = difflib.unified_diff(
            doc.splitlines(keepends=True), expected.splitlines(keepends=True), "docs/cli.md", "now"
        )
        pytest.fail(f"{STALE}\n{''.join(itertools.islice(diff, 60))}")


def test_generator_prints_the_file_and_checks_it(
    doc: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`python -m tools.clidoc` prints the file; `--check` passes on it and fails on a stale copy."""
    printed = subprocess.run(
        [PYTHON, "-m", "tools.clidoc"],
        capture_output=True,
        env=subprocess_env(),
        timeout=120,
        check=False,
    )
    assert printed.returncode == 0, printed.stderr
    assert printed.stdout.decode() == doc, STALE
    assert clidoc.run(["--check", str(DOC_PATH)]) == 0
    stale = tmp_path / "cli.md"
    stale.write_text(doc.replace("## ledger runs\n", "## ledger runs (old)\n"), encoding="utf-8")
    capsys.readouterr()
    assert clidoc.run(["--check", str(stale)]) == 1
    err = capsys.readouterr().err
    assert "-## ledger runs (old)" in err
    assert "make docs" in err


# --------------------------------------------------------------------------- (b) complete


def test_every_command_has_a_section_with_notes(doc: str) -> None:
    """Each command of `ledger` has a `## ledger <cmd>` section with hand-written notes."""
    sections = _sections(doc)
    documented = {title for title in sections if title.startswith("ledger ")}
    assert documented == {f"ledger {name}" for name in _commands()}
    for title in ["ledger", *sorted(documented)]:
        section = sections[title]
        after_help = section.split("```\n", 1)[1] if section.startswith("\n```text\n") else ""
        prose = re.sub(r"^```.*?^```$", "", after_help, flags=re.MULTILINE | re.DOTALL)
        assert len(prose.split()) >= 10, f"## {title} has no notes after its --help"


def test_every_option_of_every_command_is_documented(doc: str) -> None:
    """Every long option of the group and of each command appears in that command's section."""
    sections = _sections(doc)
    root = click.Context(main, info_name="ledger", **main.context_settings)
    commands = [("ledger", main, root)] + [
        (f"ledger {name}", c, click.Context(c, info_name=name, parent=root))
        for name, c in _commands().items()
    ]
    for title, command, ctx in commands:
        for param in command.get_params(ctx):
            if isinstance(param, click.Option):
                for option in [*param.opts, *param.secondary_opts]:
                    if option.startswith("--"):
                        assert option in sections[title], f"{option} is not in ## {title}"


def test_links_within_the_page_lead_to_headings(doc: str) -> None:
    """Every `(#anchor)` link in docs/cli.md names a heading of it, as GitHub makes anchors."""
    outside_code = re.sub(r"^```.*?^```$", "", doc, flags=re.MULTILINE | re.DOTALL)
    headings = re.findall(r"^#+ (.+)$", outside_code, re.MULTILINE)
    anchors = {re.sub(r"[^\w\- ]", "", h.lower()).replace(" ", "-") for h in headings}
    for anchor in re.findall(r"\]\(#([^)]+)\)", outside_code):
        assert anchor in anchors, f"#{anchor} is not a heading"


def test_every_json_command_declares_its_shape_and_shows_an_example(doc: str, real) -> None:
    """Each command with --json says which documented shape it prints and shows an example."""
    sections = _sections(doc)
    shapes = _shapes(doc)
    assert _json_commands() | {"export"} == set(real), "run the new command in the `real` fixture"
    for name in real:
        declared = _declared(sections[f"ledger {name}"])
        assert declared is not None, f"## ledger {name} does not say which shape it prints"
        assert declared[1] in shapes, f"ledger {name}: {declared[1]!r} has no table"
        _example(sections[f"ledger {name}"])


# --------------------------------------------------------------------------- (c) true


def test_examples_have_the_keys_of_real_output(doc: str, real) -> None:
    """Each JSON example has exactly the keys, at every depth, that the real command prints."""
    sections = _sections(doc)
    for name, output in real.items():
        example = _example(sections[f"ledger {name}"])
        documented, produced = _key_paths(example), _key_paths(output)
        assert documented == produced, (
            f"ledger {name}: documented only {sorted(documented - produced)}, "
            f"printed only {sorted(produced - documented)}"
        )


def test_real_output_has_the_documented_keys_and_types(doc: str, real) -> None:
    """Real output matches the key tables exactly, and meets every documented shape."""
    sections = _sections(doc)
    shapes = _shapes(doc)
    met: set[str] = set()
    for name, output in real.items():
        declared = _declared(sections[f"ledger {name}"])
        assert declared is not None
        failure = _check_output(output, declared, shapes, met)
        assert failure is None, f"ledger {name}: at {failure[0]}: {failure[1]}"
    assert met == set(shapes), f"shapes no real output has: {sorted(set(shapes) - met)}"


def test_examples_have_the_documented_keys_and_types(doc: str) -> None:
    """Each example matches the key tables of the shape its command declares."""
    sections = _sections(doc)
    shapes = _shapes(doc)
    for name in sorted(_json_commands() | {"export"}):
        section = sections[f"ledger {name}"]
        declared = _declared(section)
        assert declared is not None
        failure = _check_output(_example(section), declared, shapes, set())
        assert failure is None, f"example of ledger {name}: at {failure[0]}: {failure[1]}"


def test_example_records_are_valid_records(doc: str) -> None:
    """The records in the examples are accepted by the library's own from_dict."""
    kinds = {"claim": fx.EffectClaim, "outcome": fx.EffectOutcome, "observation": fx.Observation}
    sections = _sections(doc)
    show = _example(sections["ledger show"])
    for entry in [*show["records"], *_example(sections["ledger export"])]:
        record = kinds[entry["type"]].from_dict(entry["record"])
        assert record.to_dict() == entry["record"]
    for effect in show["effects"]:
        assert fx.Assessment.from_dict(effect).to_dict() == effect
    for recovery in _example(sections["ledger recover"]):
        for outcome in recovery["outcomes"]:
            assert fx.EffectOutcome.from_dict(outcome).to_dict() == outcome


def test_help_blocks_are_what_ledger_prints(
    doc: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each section's help block is what `ledger <cmd> --help` prints on an 80-column terminal."""
    sections = _sections(doc)
    monkeypatch.setenv("COLUMNS", "80")  # click reads the terminal width from it
    argvs = {"ledger": ["--help"]} | {f"ledger {n}": [n, "--help"] for n in _commands()}
    for title, argv in argvs.items():
        # The console script's own path (CliRunner would force a width of its own).
        assert main.main(argv, prog_name="ledger", standalone_mode=False) == 0
        printed = capsys.readouterr().out
        block = re.match(r"\n```text\n(.*?)\n```\n", sections[title], re.DOTALL)
        assert block is not None, f"## {title} does not start with its help"
        assert block[1] + "\n" == printed, f"## {title}: the help differs"
