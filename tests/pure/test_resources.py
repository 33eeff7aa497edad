"""Behaviour of ``ledger.resources``: sealed roots, filesystem resources, owned records."""

from __future__ import annotations

import os
import re
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ledger import effects as fx
from ledger.effect_log import EffectLog, effects_dir
from ledger.resources import FilesystemResource, FilesystemRoot, OwnedResource
from tests.builders import PYTHON, file_ref, op, subprocess_env


def resolve(root: FilesystemRoot, path: str | Path, **kwargs: bool) -> Path:
    """The real path ``path`` resolves to inside ``root``."""
    return FilesystemResource.resolve(root, path, **kwargs).path


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    """A directory next to the sandbox, holding a file."""
    path = tmp_path / "outside"
    path.mkdir()
    (path / "secret.txt").write_text("secret")
    return path


@pytest.fixture
def files(sandbox: FilesystemRoot) -> FilesystemRoot:
    """The sandbox with a.txt and sub/b.txt in it."""
    (sandbox.path / "a.txt").write_text("a")
    (sandbox.path / "sub").mkdir()
    (sandbox.path / "sub" / "b.txt").write_text("b")
    return sandbox


# --------------------------------------------------------------------------- FilesystemRoot


def test_seal_gives_the_real_path_of_an_existing_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Sealing an existing directory, as str, Path or relative path, gives its real absolute path."""
    (tmp_path / "box" / "inner").mkdir(parents=True)
    real = Path(os.path.realpath(tmp_path / "box"))
    assert FilesystemRoot.seal(tmp_path / "box").path == real
    assert FilesystemRoot.seal(str(tmp_path / "box")).path == real
    assert FilesystemRoot.seal(tmp_path / "box" / "inner" / "..").path == real
    monkeypatch.chdir(tmp_path)
    sealed = FilesystemRoot.seal("box")
    assert sealed.path == real
    assert sealed.path.is_absolute()


@pytest.mark.parametrize("name", ["file.txt", "missing", "missing/deeper", "link-to-file"])
def test_seal_refuses_anything_but_an_existing_directory(tmp_path: Path, name: str) -> None:
    """Sealing a file, a missing path or a symlink to a file is a ValueError."""
    (tmp_path / "file.txt").write_text("x")
    (tmp_path / "link-to-file").symlink_to(tmp_path / "file.txt")
    with pytest.raises(ValueError, match="directory"):
        FilesystemRoot.seal(tmp_path / name)


def test_seal_of_a_symlinked_directory_gives_its_target(tmp_path: Path) -> None:
    """A symlink to a directory seals to the directory it points at."""
    (tmp_path / "real").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "real", target_is_directory=True)
    (tmp_path / "link2").symlink_to("link")  # a chain of relative links
    real = Path(os.path.realpath(tmp_path / "real"))
    assert FilesystemRoot.seal(tmp_path / "link").path == real
    assert FilesystemRoot.seal(tmp_path / "link2").path == real


# --------------------------------------------------------------------------- FilesystemResource


def test_resolve_relative_and_absolute_paths(files: FilesystemRoot) -> None:
    """A path relative to the root and the same path given absolute resolve to one real path."""
    root = files.path
    for given_path in (
        "a.txt",
        Path("a.txt"),
        str(root / "a.txt"),
        root / "a.txt",
        "./sub/../a.txt",
    ):
        resource = FilesystemResource.resolve(files, given_path)
        assert resource.path == root / "a.txt"
        assert resource.root == files
    assert resolve(files, "sub/b.txt") == root / "sub" / "b.txt"
    assert resolve(files, str(root / "sub" / "b.txt")) == root / "sub" / "b.txt"
    assert resolve(files, "sub") == root / "sub"
    assert resolve(files, ".") == root


def test_resolved_path_is_real_and_absolute(tmp_path: Path, files: FilesystemRoot) -> None:
    """A resource's path is absolute, normalised and free of symlinks, even through a linked root."""
    (files.path / "alias.txt").symlink_to("sub/b.txt")
    (files.path / "subway").symlink_to(files.path / "sub", target_is_directory=True)
    assert resolve(files, "alias.txt") == files.path / "sub" / "b.txt"
    assert resolve(files, "subway/b.txt") == files.path / "sub" / "b.txt"
    (tmp_path / "root-link").symlink_to(files.path, target_is_directory=True)
    linked = FilesystemRoot.seal(tmp_path / "root-link")
    resource = FilesystemResource.resolve(linked, tmp_path / "root-link" / "sub" / "b.txt")
    assert resource.path == files.path / "sub" / "b.txt"
    assert resource.path.is_absolute()
    assert str(resource.path) == os.path.realpath(resource.path)


@pytest.mark.parametrize(
    "path",
    ["..", "../outside/secret.txt", "sub/../../outside", "../sandbox-twin/x", "/", "/etc/passwd"],
)
@pytest.mark.parametrize("allow_missing", [False, True])
def test_resolve_refuses_an_escape(
    path: str, allow_missing: bool, files: FilesystemRoot, outside: Path, tmp_path: Path
) -> None:
    """A path that leads out of the root, by `..` or as an absolute path, is a ValueError."""
    (tmp_path / "sandbox-twin").mkdir()  # shares the root's name as a string prefix
    (tmp_path / "sandbox-twin" / "x").write_text("x")
    with pytest.raises(ValueError, match="escapes"):
        FilesystemResource.resolve(files, path, allow_missing=allow_missing)
    with pytest.raises(ValueError, match="escapes"):
        FilesystemResource.resolve(files, tmp_path / "sandbox-twin" / "x")


@pytest.mark.parametrize("allow_missing", [False, True])
def test_resolve_refuses_a_symlink_pointing_out(
    allow_missing: bool, files: FilesystemRoot, outside: Path
) -> None:
    """A symlink inside the root that points out of it, to a file, a directory or nowhere, is a ValueError."""
    (files.path / "dir-out").symlink_to(outside, target_is_directory=True)
    (files.path / "file-out").symlink_to(outside / "secret.txt")
    (files.path / "relative-out").symlink_to("../outside/secret.txt")
    (files.path / "dangling-out").symlink_to(outside / "not-yet.txt")
    (files.path / "sub" / "hop").symlink_to("../dir-out")  # a link to a link that leaves
    for path in (
        "dir-out",
        "dir-out/secret.txt",
        "file-out",
        "relative-out",
        "dangling-out",
        "sub/hop/secret.txt",
    ):
        with pytest.raises(ValueError, match="escapes"):
            FilesystemResource.resolve(files, path, allow_missing=allow_missing)


def test_resolve_of_a_missing_path(files: FilesystemRoot) -> None:
    """A missing path is a ValueError unless allow_missing, which gives its would-be real path."""
    for path in ("new.txt", "sub/new.txt", "nodir/new.txt"):
        with pytest.raises(ValueError, match="does not exist"):
            FilesystemResource.resolve(files, path)
        assert resolve(files, path, allow_missing=True) == files.path / path
    assert not (files.path / "nodir").exists()  # resolving creates nothing


@pytest.mark.parametrize(
    ("path", "error"),
    [
        ("", ValueError),
        ("a\x00b", ValueError),
        (5, TypeError),
        (None, TypeError),
        (b"a.txt", TypeError),
    ],
    ids=repr,
)
def test_resolve_refuses_a_malformed_path(
    path: object, error: type[Exception], files: FilesystemRoot
) -> None:
    """An empty path or one with NUL is a ValueError; a path that is not str or PathLike a TypeError."""
    with pytest.raises(error):
        FilesystemResource.resolve(files, path, allow_missing=True)  # type: ignore[arg-type]


def test_resolve_needs_a_sealed_root(files: FilesystemRoot) -> None:
    """The root must be a FilesystemRoot, not a plain path."""
    with pytest.raises(TypeError):
        FilesystemResource.resolve(files.path, "a.txt")  # type: ignore[arg-type]


def test_filesystem_resource_ref(files: FilesystemRoot) -> None:
    """A filesystem resource's ResourceRef has kind fs, its real path as locator, the role and no revision."""
    resource = FilesystemResource.resolve(files, "sub/../a.txt")
    ref = fx.resource_ref(resource, "target")
    assert ref == fx.ResourceRef("fs", str(files.path / "a.txt"), "target", None)
    assert ref.locator == str(resource.path)
    assert fx.resource_ref(resource, "source").role == "source"
    with pytest.raises(ValueError, match="role"):
        fx.resource_ref(resource, "")
    assert file_ref(files, "sub/../a.txt") == ref


# --------------------------------------------------------------------------- sensitive


def test_a_store_an_effect_log_opened_is_sensitive(sandbox: FilesystemRoot, run_id: str) -> None:
    """A store directory an EffectLog has opened, and everything in it, resolves to a 'sensitive' ValueError."""
    store = sandbox.path / "store"
    log = EffectLog(run_id, store)
    # Refused even before the store exists: the log will create it.
    for path in ("store", "store/ledger.sqlite3", str(store / "ledger.sqlite3")):
        with pytest.raises(ValueError, match="sensitive"):
            FilesystemResource.resolve(sandbox, path, allow_missing=True)
    log.claim(effect_id="e1", action_id="a1", operation=op(), impact_scope=())
    for path in (
        "store",
        "store/ledger.sqlite3",
        "store/ledger.sqlite3-wal",
        "store/./x/../ledger.sqlite3",
    ):
        with pytest.raises(ValueError, match="sensitive"):
            FilesystemResource.resolve(sandbox, path, allow_missing=True)
    log.close()
    with pytest.raises(ValueError, match="sensitive"):  # still sensitive once the log is closed
        FilesystemResource.resolve(sandbox, "store/ledger.sqlite3")
    (sandbox.path / "store-file").write_text("not a store")  # a name prefix is not inside
    assert resolve(sandbox, "store-file") == sandbox.path / "store-file"


def test_a_loaded_store_is_sensitive(sandbox: FilesystemRoot, run_id: str) -> None:
    """A store opened with EffectLog.load is sensitive too."""
    with EffectLog.load(run_id, sandbox.path / "loaded"):
        pass
    with pytest.raises(ValueError, match="sensitive"):
        FilesystemResource.resolve(sandbox, "loaded/ledger.sqlite3", allow_missing=True)


def test_a_store_reached_by_a_symlink_is_sensitive(sandbox: FilesystemRoot, run_id: str) -> None:
    """A store is sensitive by its real path: through a symlink inside the root, or opened through one."""
    (sandbox.path / "real").mkdir()
    (sandbox.path / "via").symlink_to(sandbox.path / "real", target_is_directory=True)
    with EffectLog(run_id, sandbox.path / "via" / "store") as log:
        log.claim(effect_id="e1", action_id="a1", operation=op(), impact_scope=())
    (sandbox.path / "shortcut").symlink_to(sandbox.path / "real" / "store" / "ledger.sqlite3")
    for path in ("real/store/ledger.sqlite3", "via/store", "shortcut"):
        with pytest.raises(ValueError, match="sensitive"):
            FilesystemResource.resolve(sandbox, path)


def test_the_default_store_is_sensitive(
    sandbox: FilesystemRoot, monkeypatch: pytest.MonkeyPatch
) -> None:
    """effects_dir(), everything in it and every directory above it is sensitive, even if no log ever opened it."""
    monkeypatch.setenv("LEDGER_DIR", str(sandbox.path / "state" / "ledger"))
    assert effects_dir() == sandbox.path / "state" / "ledger"
    for path in ("state/ledger", "state/ledger/ledger.sqlite3", "state/ledger/anything"):
        with pytest.raises(ValueError, match="sensitive"):
            FilesystemResource.resolve(sandbox, path, allow_missing=True)
    (sandbox.path / "state" / "ledger").mkdir(parents=True)
    (sandbox.path / "state" / "other").mkdir()
    for path in ("state", "."):
        with pytest.raises(
            ValueError, match=re.escape(f"contains the ledger store {effects_dir()}")
        ):
            FilesystemResource.resolve(sandbox, path)
    # A sibling of the store neither holds nor is inside it.
    assert resolve(sandbox, "state/other") == sandbox.path / "state" / "other"


def test_a_root_inside_a_store_reaches_nothing(tmp_path: Path, run_id: str) -> None:
    """A root at or inside a store is refused when sealed, or every path in it is refused as sensitive."""
    store = tmp_path / "store"
    with EffectLog(run_id, store) as log:
        log.claim(effect_id="e1", action_id="a1", operation=op(), impact_scope=())
    (store / "inner").mkdir(mode=0o700)
    for candidate in (store, store / "inner"):
        try:
            root = FilesystemRoot.seal(candidate)
        except ValueError as e:
            message = str(e)
        else:
            with pytest.raises(ValueError) as refused:
                FilesystemResource.resolve(root, "ledger.sqlite3", allow_missing=True)
            message = str(refused.value)
        assert "sensitive" in message


def test_a_store_outside_the_root_is_named_sensitive(
    sandbox: FilesystemRoot, tmp_path: Path, run_id: str
) -> None:
    """A path that is a store outside the root, given absolute or through a symlink, says 'sensitive'."""
    store = tmp_path / "elsewhere" / "store"
    with EffectLog(run_id, store) as log:
        log.claim(effect_id="e1", action_id="a1", operation=op(), impact_scope=())
    (sandbox.path / "ledger-link").symlink_to(store / "ledger.sqlite3")
    for path in (str(store), str(store / "ledger.sqlite3"), "ledger-link", str(effects_dir())):
        with pytest.raises(ValueError, match="sensitive"):
            FilesystemResource.resolve(sandbox, path, allow_missing=True)


# --------------------------------------------------------------------------- stores on disk

# Writes one claim into each store directory given, in a process of its own: the test
# process never opens these stores, so only what is on disk can make them sensitive.
FOREIGN_WRITER = """
import sys
from ledger import effects as fx
from ledger.effect_log import EffectLog, new_run_id

for directory in sys.argv[1:]:
    with EffectLog(new_run_id(), directory) as log:
        log.claim(effect_id="e1", action_id="a1",
                  operation=fx.OperationRef("write_file", "test/1", "0" * 64), impact_scope=())
"""


def write_foreign_stores(*directories: Path) -> None:
    """Create a store with one claim in each of ``directories``, from another process."""
    result = subprocess.run(
        [PYTHON, "-c", FOREIGN_WRITER, *map(str, directories)],
        env=subprocess_env(),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    for directory in directories:
        assert (directory / "ledger.sqlite3").is_file()


def refusal(call: Callable[[], object]) -> str:
    """The message of the ValueError ``call`` raises."""
    with pytest.raises(ValueError) as refused:
        call()
    return str(refused.value)


def test_a_store_another_process_made_is_sensitive(sandbox: FilesystemRoot) -> None:
    """A store this process never opened is refused by what is on disk: itself, inside it, and above it."""
    store = sandbox.path / "work" / "foreign"
    (sandbox.path / "work" / "notes").mkdir(parents=True)
    write_foreign_stores(store)
    for path in ("work/foreign", str(store)):
        assert refusal(lambda p=path: resolve(sandbox, p)) == (
            f"{store} is sensitive: it is the ledger store {store}, "
            "which agent tools must never touch"
        )
    for path in (
        "work/foreign/ledger.sqlite3",
        "work/foreign/ledger.sqlite3-wal",
        "work/foreign/x",
    ):
        message = refusal(lambda p=path: resolve(sandbox, p, allow_missing=True))
        assert f"sensitive: it lies inside the ledger store {store}," in message
    for path, real in (("work", store.parent), (".", sandbox.path)):
        message = refusal(lambda p=path: resolve(sandbox, p))
        assert message.startswith(f"{real} is sensitive: it contains the ledger store {store},")
    # Beside the store, the sandbox is as usable as before.
    assert resolve(sandbox, "work/notes") == sandbox.path / "work" / "notes"
    assert resolve(sandbox, "work/new.txt", allow_missing=True) == sandbox.path / "work" / "new.txt"


def test_seal_refuses_a_root_that_is_inside_or_holds_a_store(tmp_path: Path) -> None:
    """Sealing a store, a directory in one, or any directory above one (however deep) is refused."""
    store = tmp_path / "home" / "projects" / "app" / "state" / "store"
    (tmp_path / "home" / "other").mkdir(parents=True)
    write_foreign_stores(store)
    (store / "inner").mkdir()
    cases = {
        store: "is",
        store / "inner": "lies inside",
        store.parent: "contains",
        tmp_path / "home": "contains",
        tmp_path: "contains",
    }
    for candidate, relation in cases.items():
        message = refusal(lambda c=candidate: FilesystemRoot.seal(c))
        assert f"sensitive: it {relation} the ledger store {store}," in message
        assert message.startswith(str(candidate))
    assert FilesystemRoot.seal(tmp_path / "home" / "other").path == tmp_path / "home" / "other"


def test_the_search_below_a_root_does_not_follow_symlinks(tmp_path: Path, run_id: str) -> None:
    """A link inside the root to a store elsewhere does not stop sealing, but every path through it is refused."""
    store = tmp_path / "elsewhere" / "store"
    write_foreign_stores(store)
    box = tmp_path / "box"
    box.mkdir()
    (box / "to-store").symlink_to(store, target_is_directory=True)
    (box / "to-parent").symlink_to(store.parent, target_is_directory=True)
    root = FilesystemRoot.seal(box)
    for path in ("to-store", "to-store/ledger.sqlite3", "to-parent/store"):
        assert "sensitive" in refusal(lambda p=path: resolve(root, p))
    # Through the link to its parent, the store's directory is outside the root anyway.
    assert "escapes" in refusal(lambda: resolve(root, "to-parent"))


def test_a_store_made_after_sealing_is_found_when_resolving(sandbox: FilesystemRoot) -> None:
    """A root sealed before a store appeared in it still refuses the store and every directory holding it."""
    (sandbox.path / "deep" / "er").mkdir(parents=True)
    assert resolve(sandbox, "deep") == sandbox.path / "deep"
    write_foreign_stores(sandbox.path / "deep" / "er" / "later")
    for path in ("deep", "deep/er", "deep/er/later", "deep/er/later/ledger.sqlite3"):
        assert "sensitive" in refusal(lambda p=path: resolve(sandbox, p))


def test_a_tree_too_large_to_search_is_refused_unchecked(tmp_path: Path) -> None:
    """Past scan_limit entries, sealing or resolving a directory is refused; a larger limit lets it through."""
    box = tmp_path / "box"
    (box / "big").mkdir(parents=True)
    for i in range(20):
        (box / "big" / f"f{i}").write_text("x")
    message = refusal(lambda: FilesystemRoot.seal(box, scan_limit=10))
    assert message == (
        f"{box} cannot be checked for ledger stores: it holds more than 10 entries "
        "(pass a larger scan_limit to FilesystemRoot.seal, or seal a smaller directory)"
    )
    root = FilesystemRoot.seal(box, scan_limit=100)
    assert root.scan_limit == 100
    assert resolve(root, "big") == box / "big"
    (box / "big" / "more").mkdir()
    for i in range(100):
        (box / "big" / "more" / f"g{i}").write_text("x")
    assert "more than 100 entries" in refusal(lambda: resolve(root, "big"))
    assert resolve(root, "big/f1") == box / "big" / "f1"  # a file needs no search
    assert FilesystemRoot.seal(box, scan_limit=1000) == root  # the limit is not the root's identity


@pytest.mark.parametrize(
    ("limit", "error"), [(0, ValueError), (-1, ValueError), (1.5, TypeError), (True, TypeError)]
)
def test_seal_refuses_a_malformed_scan_limit(
    tmp_path: Path, limit: object, error: type[Exception]
) -> None:
    """scan_limit is a positive int."""
    with pytest.raises(error, match="scan_limit"):
        FilesystemRoot.seal(tmp_path, scan_limit=limit)  # type: ignore[arg-type]


# --------------------------------------------------------------------------- OwnedResource


def test_owned_resource_ref() -> None:
    """An owned record's ResourceRef has kind owned, its locator, the role and its revision."""
    note = OwnedResource("notes", "alice", "acme", "inbox", "n1", revision="r7")
    ref = fx.resource_ref(note, "target")
    assert ref == fx.ResourceRef("owned", note.locator, "target", "r7")
    assert (
        fx.resource_ref(OwnedResource("notes", "alice", "acme", "inbox", "n1"), "t").revision
        is None
    )
    # The revision is carried beside the locator, not inside it: it names the same record.
    assert OwnedResource("notes", "alice", "acme", "inbox", "n1").locator == note.locator


def test_owned_locator_fields_cannot_forge_a_boundary() -> None:
    """Fields containing '/' or '%' cannot make two different records share a locator."""
    records = [
        ("a/b", "c", "d", "e", "f"),
        ("a", "b/c", "d", "e", "f"),
        ("a%2Fb", "c", "d", "e", "f"),
        ("a%252Fb", "c", "d", "e", "f"),
        ("a", "b", "c", "d", "e/f"),
        ("a", "b", "c", "d/e", "f"),
        ("a%", "2Fb", "c", "d", "e"),
        ("a", "%", "c", "d", "e"),
    ]
    locators = {OwnedResource(*fields).locator for fields in records}
    assert len(locators) == len(records)


FIELD = st.one_of(
    st.text(alphabet="a/%2F5", min_size=1, max_size=6),  # dense in separators and escapes
    st.text(
        st.characters(exclude_categories=("C", "Z"), include_characters=" /%"),
        min_size=1,
        max_size=12,
    ),
)


@given(st.lists(st.tuples(FIELD, FIELD, FIELD, FIELD, FIELD), min_size=2, max_size=8, unique=True))
def test_distinct_owned_records_have_distinct_locators(records: list[tuple[str, ...]]) -> None:
    """Any distinct five-field identities, '/' and '%' included, give distinct locators."""
    locators = [OwnedResource(*fields).locator for fields in records]
    assert len(set(locators)) == len(records)


@pytest.mark.parametrize(
    ("fields", "error"),
    [
        (("", "o", "t", "c", "r"), ValueError),
        (("s", "o", "t", "c", "r\x00"), ValueError),
        (("s", "o", "t", "c\n", "r"), ValueError),
        (("s", "o", "t", "c", "r" * 201), ValueError),
        (("s", None, "t", "c", "r"), TypeError),
        (("s", "o", 3, "c", "r"), TypeError),
    ],
    ids=repr,
)
def test_owned_resource_refuses_bad_fields(
    fields: tuple[object, ...], error: type[Exception]
) -> None:
    """An owned record's identity fields are identifiers: empty, control characters or non-str are refused."""
    with pytest.raises(error):
        OwnedResource(*fields)  # type: ignore[arg-type]


def test_owned_revision_round_trips_through_the_store(store_dir: Path, run_id: str) -> None:
    """A claim on an owned record with a revision reads back equal after load, revision included."""
    before = OwnedResource("notes", "alice", "acme", "in/box", "n%1", revision="r7")
    after = OwnedResource("notes", "alice", "acme", "in/box", "n%1", revision="r8")
    with EffectLog(run_id, store_dir) as log:
        claim = log.claim(
            effect_id="e1",
            action_id="edit",
            operation=op("edit_note"),
            impact_scope=(fx.resource_ref(before, "target"),),
            obligations=(
                fx.Postcondition(fx.resource_ref(after, "target"), fx.Predicate.REVISION, "r8"),
            ),
        )
        log.outcome(
            effect_id="e1", execution=fx.ExecutionOutcome.REPORTED_SUCCESS, impact=fx.Impact.CERTAIN
        )
        log.observe(
            observation_id="o1",
            resource=fx.resource_ref(after, "target"),
            mechanism=fx.ObservationMechanism.RECORD_READ,
            coverage=fx.Coverage.COMPLETE,
            source_action_id="read",
            exists=True,
            revision="r8",
        )
        history = log.history()
    with EffectLog.load(run_id, store_dir) as again:
        assert again.history() == history
        (loaded,) = again.history().claims
        assert loaded == claim
        assert loaded.impact_scope[0].revision == "r7"
        assert loaded.obligations[0].target.revision == "r8"
        assert again.history().observations[0].resource.revision == "r8"
        assert again.assess("e1").verdict is fx.EffectVerdict.VERIFIED


# --------------------------------------------------------------------------- resource_ref


@pytest.mark.parametrize(
    "thing",
    [
        "a.txt",
        Path("/tmp/a.txt"),
        None,
        42,
        {"kind": "fs"},
        fx.ResourceRef("fs", "/a.txt", "target"),
    ],
    ids=repr,
)
def test_resource_ref_of_a_non_resource_is_a_type_error(thing: object) -> None:
    """resource_ref refuses anything that is not a FilesystemResource or an OwnedResource."""
    with pytest.raises(TypeError):
        fx.resource_ref(thing, "target")


def test_resource_ref_of_a_root_is_a_type_error(sandbox: FilesystemRoot) -> None:
    """A sealed root is not a resource: resolve a path inside it first."""
    with pytest.raises(TypeError):
        fx.resource_ref(sandbox, "target")
