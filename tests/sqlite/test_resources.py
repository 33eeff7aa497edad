"""Stores on disk are sensitive: no agent file tool reaches the SQLite backend's files.

A store a log opened or loaded, one another process made, the default store, and
every directory inside or above one: ``FilesystemResource.resolve`` and
``FilesystemRoot.seal`` refuse them, by what is on disk (``ledger.sqlite3``) and by
their real paths.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from ledger.effect_log import EffectLog, effects_dir
from ledger.resources import FilesystemResource, FilesystemRoot
from tests.builders import op, python_stdout, refusal, resolve


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
    python_stdout(FOREIGN_WRITER, *directories)
    for directory in directories:
        assert (directory / "ledger.sqlite3").is_file()


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
