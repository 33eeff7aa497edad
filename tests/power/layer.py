"""A FUSE file system for the tests that forgets, at a simulated power cut, what was never synced.

The server (``python -m tests.power.layer BACKING MOUNTPOINT MODE SEED``) loads the
directory ``BACKING`` (the "disk") into memory and serves it at ``MOUNTPOINT``. Every file
has two states: the live one, which reads see at once, as a page cache would serve them,
and the durable one, which only ``fsync`` updates. At a cut (the line ``cut`` on the
server's stdin) it writes the durable state, and nothing else, back into ``BACKING``, and
ends without answering the kernel again: the parent lazily unmounts and mounts a new
server, which finds only what was synced. The modes say what a cut keeps:

- ``drop``: no unsynced data at all (writes and size changes since the last ``fsync``);
- ``torn``: a random part of the unsynced 4 KiB pages of each file, written in full —
  either a prefix of them in the order they were first dirtied, or a random subset — and
  a pending truncation half of the time;
- ``dirent``: as ``drop``, and moreover every directory entry made, removed or renamed
  since its directory was last synced (``fsync`` of the directory, or of a file, which
  makes that file's own names and its ancestors' durable, as ext4's journal does).

In ``drop`` and ``torn`` mode a directory entry is durable as soon as it is made.

The line ``chmod MODE PATH`` changes a mode in the server, behind the kernel's back, as
another host sharing a network file system would: no inotify event reports it.

Limits, all on purpose, for a layer that only has to show what a store survives:

- ``fdatasync`` is treated as ``fsync`` (it syncs the size and names too);
- metadata (mode, owner, times) is durable at once; only data, sizes and, in ``dirent``
  mode, directory entries can be lost;
- no hard links, symbolic links, special files, extended attributes nor ``fallocate``
  (ENOSYS / EPERM): a store uses none of them;
- ``rename`` ignores its flags (``RENAME_NOREPLACE``, ``RENAME_EXCHANGE``);
- file locks (``fcntl``, OFD, ``flock``) are left to the kernel, which keeps them for
  this mount alone (no ``lock`` operation): right for processes of one machine;
- the whole file system lives in memory: for stores of a few megabytes;
- one request at a time (``-s``); a cut writes the durable state with ordinary writes
  (a real crash of the machine running the tests is out of scope).

The kernel's own caches are not simulated: the server asks for no write-back cache, so
every write reaches it at once, and a remount starts with cold caches.
"""

from __future__ import annotations

import errno
import os
import random
import select
import shutil
import stat
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

PAGE = 4096
MODES = ("drop", "torn", "dirent")
TIMEOUT = 30  # seconds a server may take to mount or to cut
REPO = Path(__file__).resolve().parents[2]
FSNAME = "ledger-power"  # mounts are named ledger-power-<server pid>; see stale_mounts


class Node:
    """A file or directory, with its live and its durable state."""

    counter = 1

    def __init__(self, mode: int, uid: int, gid: int, data: bytes = b"") -> None:
        Node.counter += 1
        self.ino = Node.counter
        self.mode = mode
        self.uid, self.gid = uid, gid
        self.live = bytearray(data)
        self.durable = bytearray(data)
        self.dirty: dict[int, None] = {}  # pages written since the last fsync, in order
        self.children: dict[str, Node] = {}  # a directory's live entries
        self.durable_children: dict[str, Node] = {}
        self.names: set[tuple[Node, str]] = set()  # live (directory, name) pairs
        now = time.time_ns()
        self.atime = self.mtime = self.ctime = now

    @property
    def is_dir(self) -> bool:
        return stat.S_ISDIR(self.mode)

    def sync(self) -> None:
        """Make the live data durable."""
        live, durable = self.live, self.durable
        if len(durable) < len(live):
            durable.extend(bytes(len(live) - len(durable)))
        del durable[len(live) :]
        for page in self.dirty:
            start, end = page * PAGE, min((page + 1) * PAGE, len(live))
            if start < end:
                durable[start:end] = live[start:end]
        self.dirty.clear()

    def tear(self, rng: random.Random) -> None:
        """Let a random part of the unsynced pages, and perhaps a truncation, land."""
        pages = list(self.dirty)
        if rng.random() < 0.5:
            kept = pages[: rng.randint(0, len(pages))]
        else:
            kept = [page for page in pages if rng.random() < 0.5]
        live, durable = self.live, self.durable
        if len(live) < len(durable) and rng.random() < 0.5:
            del durable[len(live) :]
        for page in kept:
            start, end = page * PAGE, min((page + 1) * PAGE, len(live))
            if start >= end:
                continue
            if len(durable) < end:
                durable.extend(bytes(end - len(durable)))
            durable[start:end] = live[start:end]


def _error(code: int) -> OSError:
    return OSError(code, os.strerror(code))


class Layer:
    """The file system's operations (mfusepy's ``Operations`` protocol), path based."""

    use_ns = True

    def __init__(self, backing: Path, mode: str) -> None:
        if mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}, not {mode!r}")
        self.mode = mode
        self.lock = threading.Lock()
        self.handles: dict[int, Node] = {}
        self.next_handle = 1
        self.cut_done = False
        self.root = self._load(backing)

    # ------------------------------------------------------------------ the disk

    def _load(self, path: Path) -> Node:
        st = path.lstat()
        if stat.S_ISDIR(st.st_mode):
            node = Node(st.st_mode, st.st_uid, st.st_gid)
            for child in sorted(path.iterdir()):
                entry = self._load(child)
                node.children[child.name] = node.durable_children[child.name] = entry
                entry.names.add((node, child.name))
        elif stat.S_ISREG(st.st_mode):
            node = Node(st.st_mode, st.st_uid, st.st_gid, path.read_bytes())
        else:
            raise ValueError(f"{path}: only files and directories can be served")
        node.atime, node.mtime, node.ctime = st.st_atime_ns, st.st_mtime_ns, st.st_ctime_ns
        return node

    def cut(self, backing: Path, rng: random.Random) -> None:
        """The power cut: write exactly the durable state to ``backing``; serve nothing more."""
        with self.lock:
            self.cut_done = True
            if self.mode == "torn":
                for node in self._all(self.root):
                    node.tear(rng)
            for child in list(backing.iterdir()):
                if child.is_dir() and not child.is_symlink():
                    shutil.rmtree(child)
                else:
                    child.unlink()
            self._store(self.root, backing)

    def _all(self, node: Node) -> Iterator[Node]:
        yield node
        for child in {*node.children.values(), *node.durable_children.values()}:
            yield from self._all(child)

    def _store(self, node: Node, path: Path) -> None:
        for name, child in node.durable_children.items():
            target = path / name
            if child.is_dir:
                target.mkdir()
                self._store(child, target)
            else:
                target.write_bytes(bytes(child.durable))
            os.chmod(target, stat.S_IMODE(child.mode))
            os.chown(target, child.uid, child.gid)
            os.utime(target, ns=(child.atime, child.mtime))

    # ------------------------------------------------------------------ names

    def _node(self, path: str | None, fh: int | None = None) -> Node:
        if self.cut_done:
            raise _error(errno.EIO)
        if fh:
            found = self.handles.get(fh)
            if found is not None:
                return found
        if path is None:
            raise _error(errno.EBADF)
        node = self.root
        for part in path.strip("/").split("/"):
            if not part:
                continue
            if not node.is_dir:
                raise _error(errno.ENOTDIR)
            child = node.children.get(part)
            if child is None:
                raise _error(errno.ENOENT)
            node = child
        return node

    def _parent(self, path: str) -> tuple[Node, str]:
        head, _, name = path.rstrip("/").rpartition("/")
        parent = self._node(head or "/")
        if not parent.is_dir:
            raise _error(errno.ENOTDIR)
        return parent, name

    def _link(self, parent: Node, name: str, node: Node) -> None:
        old = parent.children.get(name)
        if old is not None:
            old.names.discard((parent, name))
        parent.children[name] = node
        node.names.add((parent, name))
        if self.mode != "dirent":
            parent.durable_children[name] = node
        parent.mtime = parent.ctime = time.time_ns()

    def _unlink(self, parent: Node, name: str) -> Node:
        node = parent.children.pop(name)
        node.names.discard((parent, name))
        if self.mode != "dirent":
            del parent.durable_children[name]
        parent.mtime = parent.ctime = time.time_ns()
        return node

    def _names_durable(self, node: Node) -> None:
        """``fsync`` of ``node`` in dirent mode: its names, and its ancestors', become durable."""
        for parent, name in list(node.names):
            for other, child in list(parent.durable_children.items()):
                if child is node and parent.children.get(other) is not node:
                    del parent.durable_children[other]
            parent.durable_children[name] = node
            self._names_durable(parent)

    def _handle(self, node: Node) -> int:
        handle = self.next_handle
        self.next_handle += 1
        self.handles[handle] = node
        return handle

    @staticmethod
    def _context() -> tuple[int, int]:
        import mfusepy

        uid, gid, _ = mfusepy.fuse_get_context()
        return uid, gid

    # ------------------------------------------------------------------ operations

    def init_with_config(self, conn: Any, config: Any) -> None:
        # No write-back cache: every write reaches this server before write(2) returns.
        if conn is not None and hasattr(conn, "want"):
            conn.want &= ~(1 << 16)  # FUSE_CAP_WRITEBACK_CACHE
        if config is not None:
            config.use_ino = 1
        print("mounted", flush=True)

    def getattr(self, path: str, fh: int | None = None) -> dict[str, Any]:
        with self.lock:
            node = self._node(path, fh)
            size = 4096 if node.is_dir else len(node.live)
            return {
                "st_mode": node.mode,
                "st_ino": node.ino,
                "st_nlink": 2 if node.is_dir else max(len(node.names), 1),
                "st_uid": node.uid,
                "st_gid": node.gid,
                "st_size": size,
                "st_blksize": PAGE,
                "st_blocks": (size + 511) // 512,
                "st_atime": node.atime,
                "st_mtime": node.mtime,
                "st_ctime": node.ctime,
            }

    def access(self, path: str, amode: int) -> int:
        with self.lock:
            self._node(path)
            return 0

    def readdir(self, path: str, fh: int) -> list[tuple[str, dict[str, int], int]]:
        with self.lock:
            node = self._node(path)
            entries = [(".", node), ("..", node), *node.children.items()]
            # A zero inode number would hide the entry (use_ino).
            return [(name, {"st_mode": n.mode, "st_ino": n.ino}, 0) for name, n in entries]

    def statfs(self, path: str) -> dict[str, int]:
        return {"f_bsize": PAGE, "f_frsize": PAGE, "f_blocks": 1 << 20, "f_bfree": 1 << 19,
                "f_bavail": 1 << 19, "f_files": 1 << 16, "f_ffree": 1 << 15,
                "f_favail": 1 << 15, "f_namemax": 255}  # fmt: skip

    def mkdir(self, path: str, mode: int) -> int:
        with self.lock:
            parent, name = self._parent(path)
            if name in parent.children:
                raise _error(errno.EEXIST)
            uid, gid = self._context()
            self._link(parent, name, Node(stat.S_IFDIR | (mode & 0o7777), uid, gid))
            return 0

    def rmdir(self, path: str) -> int:
        with self.lock:
            parent, name = self._parent(path)
            node = self._node(path)
            if not node.is_dir:
                raise _error(errno.ENOTDIR)
            if node.children:
                raise _error(errno.ENOTEMPTY)
            self._unlink(parent, name)
            return 0

    def create(self, path: str, mode: int, flags: int = 0) -> int:
        with self.lock:
            parent, name = self._parent(path)
            node = parent.children.get(name)
            if node is None:
                uid, gid = self._context()
                node = Node(stat.S_IFREG | (mode & 0o7777), uid, gid)
                self._link(parent, name, node)
            elif flags & os.O_EXCL:
                raise _error(errno.EEXIST)
            elif flags & os.O_TRUNC:
                self._truncate(node, 0)
            return self._handle(node)

    def open(self, path: str, flags: int) -> int:
        with self.lock:
            node = self._node(path)
            if flags & os.O_TRUNC:
                self._truncate(node, 0)
            return self._handle(node)

    def release(self, path: str | None, fh: int) -> int:
        with self.lock:
            self.handles.pop(fh, None)
            return 0

    def flush(self, path: str | None, fh: int) -> int:
        return 0  # close(2) syncs nothing

    def read(self, path: str | None, size: int, offset: int, fh: int) -> bytes:
        with self.lock:
            node = self._node(path, fh)
            return bytes(node.live[offset : offset + size])

    def write(self, path: str | None, data: bytes, offset: int, fh: int) -> int:
        with self.lock:
            node = self._node(path, fh)
            live = node.live
            end = offset + len(data)
            if len(live) < offset:
                for page in range(len(live) // PAGE, offset // PAGE + 1):
                    node.dirty[page] = None
            if len(live) < end:
                live.extend(bytes(end - len(live)))
            live[offset:end] = data
            for page in range(offset // PAGE, (end - 1) // PAGE + 1):
                node.dirty[page] = None
            node.mtime = node.ctime = time.time_ns()
            return len(data)

    def _truncate(self, node: Node, length: int) -> None:
        live = node.live
        if length < len(live):
            del live[length:]
            for page in [p for p in node.dirty if p * PAGE >= length]:
                del node.dirty[page]
            if length % PAGE:
                node.dirty[length // PAGE] = None
        else:
            for page in range(len(live) // PAGE, (length - 1) // PAGE + 1 if length else 0):
                node.dirty[page] = None
            live.extend(bytes(length - len(live)))
        node.mtime = node.ctime = time.time_ns()

    def truncate(self, path: str | None, length: int, fh: int | None = None) -> int:
        with self.lock:
            self._truncate(self._node(path, fh), length)
            return 0

    def fsync(self, path: str | None, datasync: int, fh: int) -> int:
        with self.lock:
            node = self._node(path, fh)
            node.sync()
            if self.mode == "dirent":
                self._names_durable(node)
            return 0

    def fsyncdir(self, path: str | None, datasync: int, fh: int) -> int:
        with self.lock:
            node = self._node(path)
            node.durable_children = dict(node.children)
            self._names_durable(node)
            return 0

    def unlink(self, path: str) -> int:
        with self.lock:
            parent, name = self._parent(path)
            node = self._node(path)
            if node.is_dir:
                raise _error(errno.EISDIR)
            self._unlink(parent, name)
            return 0

    def rename(self, old: str, new: str) -> int:
        with self.lock:
            source, old_name = self._parent(old)
            node = self._node(old)
            target, new_name = self._parent(new)
            replaced = target.children.get(new_name)
            if replaced is node:
                return 0
            if replaced is not None and replaced.is_dir:
                if not node.is_dir:
                    raise _error(errno.EISDIR)
                if replaced.children:
                    raise _error(errno.ENOTEMPTY)
            self._unlink(source, old_name)
            self._link(target, new_name, node)
            node.ctime = time.time_ns()
            return 0

    def chmod_behind(self, path: str, mode: int) -> None:
        """Change a mode without the kernel's knowledge: no inotify event, as from elsewhere."""
        with self.lock:
            node = self._node(path)
            node.mode = stat.S_IFMT(node.mode) | mode

    def chmod(self, path: str | None, mode: int) -> int:
        with self.lock:
            node = self._node(path)
            node.mode = stat.S_IFMT(node.mode) | (mode & 0o7777)
            node.ctime = time.time_ns()
            return 0

    def chown(self, path: str | None, uid: int, gid: int) -> int:
        with self.lock:
            node = self._node(path)
            if uid not in (-1, 0xFFFFFFFF):  # -1, also as unsigned: unchanged
                node.uid = uid
            if gid not in (-1, 0xFFFFFFFF):  # -1, also as unsigned: unchanged
                node.gid = gid
            node.ctime = time.time_ns()
            return 0

    def utimens(self, path: str | None, times: tuple[int, int] | None = None) -> int:
        with self.lock:
            node = self._node(path)
            now = time.time_ns()
            node.atime, node.mtime = times if times is not None else (now, now)
            node.ctime = now
            return 0


class Mount:
    """A server of this layer, from the parent's side: mount, cut, unmount."""

    def __init__(self, backing: Path, mountpoint: Path, mode: str, seed: str) -> None:
        self.backing, self.mountpoint, self.mode, self.seed = backing, mountpoint, mode, seed
        self.server: subprocess.Popen[str] | None = None
        self.mounts = 0
        backing.mkdir(parents=True, exist_ok=True)
        mountpoint.mkdir(parents=True, exist_ok=True)

    def start(self) -> None:
        """Mount a new server on what is durable in ``backing``."""
        assert self.server is None
        env = dict(os.environ)
        env["PYTHONPATH"] = str(REPO) + os.pathsep + env.get("PYTHONPATH", "")
        self.server = subprocess.Popen(
            [sys.executable, "-m", "tests.power.layer", str(self.backing),
             str(self.mountpoint), self.mode, f"{self.seed}:{self.mounts}"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env, cwd=REPO,
        )  # fmt: skip
        self.mounts += 1
        line = self._line()
        if line != "mounted":
            self.stop()
            raise AssertionError(f"the FUSE layer did not mount {self.mountpoint}: {line!r}")

    def _line(self) -> str:
        assert self.server is not None
        assert self.server.stdout is not None
        ready, _, _ = select.select([self.server.stdout], [], [], TIMEOUT)
        if not ready:
            return "(no answer)"
        return self.server.stdout.readline().strip()

    def cut(self) -> None:
        """Cut the power: only what was synced stays in ``backing``; the mount is gone."""
        assert self.server is not None
        assert self.server.stdin is not None
        self.server.stdin.write("cut\n")
        self.server.stdin.flush()
        line = self._line()
        self.stop()
        assert line == "cut", f"the FUSE layer did not cut: {line!r}"

    def chmod_behind(self, path: str, mode: int) -> None:
        """Change the mode of ``path`` (inside the mount) in the server, not through the kernel."""
        assert self.server is not None
        assert self.server.stdin is not None
        self.server.stdin.write(f"chmod {mode:o} {path}\n")
        self.server.stdin.flush()
        line = self._line()
        assert line == "changed", f"the FUSE layer did not change {path}: {line!r}"

    def stop(self) -> None:
        """End the server (if it runs) and lazily unmount."""
        server, self.server = self.server, None
        if server is not None:
            if server.poll() is None:
                server.kill()
            server.wait()
            for stream in (server.stdin, server.stdout):
                if stream is not None:
                    stream.close()
        unmount(self.mountpoint)


def unmount(mountpoint: Path) -> None:
    """Lazily unmount ``mountpoint`` if anything is mounted there."""
    if str(mountpoint) in {m[1] for m in mounts()}:
        subprocess.run(["fusermount3", "-u", "-z", str(mountpoint)], check=False,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip


def mounts() -> list[tuple[str, str, str]]:
    """(source, mount point, type) of every mount of this layer."""
    found = []
    for line in Path("/proc/self/mounts").read_text().splitlines():
        source, point, kind = line.split()[:3]
        if kind == f"fuse.{FSNAME}":
            found.append((source, point.replace("\\040", " "), kind))
    return found


def _gone(source: str) -> bool:
    """Whether the server named in a mount's source (ledger-power-<pid>) has ended."""
    try:
        os.kill(int(source.rpartition("-")[2]), 0)
    except (ValueError, ProcessLookupError):
        return True
    return False


def stale_mounts() -> list[str]:
    """Mount points of this layer whose server is gone (a test run killed midway)."""
    return [point for source, point, _ in mounts() if _gone(source)]


def clean_stale() -> list[str]:
    """Lazily unmount every stale mount of this layer; return their mount points."""
    cleaned = []
    for point in stale_mounts():
        # Looked at again just before: a test may have mounted a new server there since.
        on_top = [source for source, where, _ in mounts() if where == point]
        if on_top and _gone(on_top[-1]):
            unmount(Path(point))
            cleaned.append(point)
    return cleaned


def serve(backing: Path, mountpoint: Path, mode: str, seed: str) -> None:
    """Serve ``backing`` at ``mountpoint`` until the line ``cut`` arrives on stdin."""
    import mfusepy

    layer = Layer(backing, mode)
    rng = random.Random(seed)

    class Operations(mfusepy.Operations):  # type: ignore[misc]
        pass

    names = [
        "init_with_config", "getattr", "access", "readdir", "statfs", "mkdir", "rmdir",
        "create", "open", "release", "flush", "read", "write", "truncate", "fsync",
        "fsyncdir", "unlink", "rename", "chmod", "chown", "utimens",
    ]  # fmt: skip
    operations = Operations()
    for name in names:
        setattr(operations, name, getattr(layer, name))
    operations.use_ns = True

    def control() -> None:
        for line in sys.stdin:
            command, _, argument = line.strip().partition(" ")
            if command == "chmod":  # as another host sharing the file system would
                mode, _, path = argument.partition(" ")
                layer.chmod_behind(path, int(mode, 8))
                print("changed", flush=True)
            if command == "cut":
                layer.cut(backing, rng)
                print("cut", flush=True)
                # Gone like a machine losing power: no answer to the kernel, no unmount.
                os._exit(0)
        # The parent went away (a test run killed midway): leave no mount behind.
        subprocess.run(["fusermount3", "-u", "-z", str(mountpoint)], check=False,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
        os._exit(0)

    threading.Thread(target=control, daemon=True).start()
    mfusepy.FUSE(
        operations,
        str(mountpoint),
        foreground=True,
        nothreads=True,
        fsname=f"{FSNAME}-{os.getpid()}",
        subtype=FSNAME,
        use_ino=True,
        attr_timeout=0,
        entry_timeout=0,
        negative_timeout=0,
    )


if __name__ == "__main__":
    serve(Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3], sys.argv[4])
