"""Behaviour of ``ledger.resources``: sealed roots, filesystem resources, owned records.

That a store on disk, and every path in or above it, is refused as sensitive is the
SQLite backend's (its files): ``tests/sqlite/test_resources.py``.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ledger import effects as fx
from ledger.resources import FilesystemResource, FilesystemRoot, OwnedResource
from tests.builders import file_ref, refusal, resolve


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


# --------------------------------------------------------------------------- the search for stores


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
