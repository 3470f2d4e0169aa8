"""Where a run's checkpoints live: a local folder or any fsspec URL.

Layout (ARCHITECTURE.md, "Storage layout"):
`<ckpt_root>/staging/<ckpt_id>/` while shards are written, `<ckpt_root>/<step>-<ckpt_id>/` once
moved, with shards + manifest.json + COMMITTED.

Local disks get the POSIX durability rules: every file is fsynced before it is renamed, every
rename is followed by an fsync of the folders involved, and a file is replaced with `os.replace`
(never delete-then-rename). Object stores have no atomic rename: shards are written straight into
the final folder and the commit record, written last, is what makes the checkpoint visible (a PUT
makes an object appear whole or not at all). Remote calls go through `runwright.remote`: timeouts
and bounded retries on every request, and a failure after them is a `RemoteStorageError` (an
OSError), so every `except OSError` below handles a failing store as it handles a failing disk.

A `faulty+file://` or `faulty+s3://` root is a storage drill (faultfs.py): an fsspec root like
`s3://`, with faults injected from a control file. Its protocols are registered with fsspec when
this module is imported, because every process that opens a checkpoint root imports it first
(torchrun's ranks included), before DCP's fsspec writer and reader open the same URL themselves.
"""

import contextlib
import io
import os
import re
import shutil
import stat
import time
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Literal

import fsspec

from runwright.ckpt import faultfs
from runwright.ckpt.errors import CheckpointError
from runwright.ckpt.failures import storage_error
from runwright.remote import open_filesystem, storage_options, translated

STAGING = "staging"
EntryKind = Literal["file", "folder", "symlink", "other"]
"""What a name in a folder is, without following links (`other`: FIFO, socket, device)."""
faultfs.register()
_FOLDER = re.compile(r"^(?P<step>\d+)-(?P<id>g\d{6,}-[0-9a-f]{12})$")


def parse_folder(name: str) -> tuple[int, str] | None:
    """`<step>-<ckpt_id>` -> (step, ckpt_id); None for anything else."""
    match = _FOLDER.match(name)
    return (int(match["step"]), match["id"]) if match else None


def folder_name(step: int, checkpoint_id: str) -> str:
    return f"{step:010d}-{checkpoint_id}"


def fsync_dir(path: str | Path) -> None:
    """fsync a folder so a rename or create inside it survives power loss (POSIX rename(2) makes
    the name change atomic, not durable)."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def replace_file(path: str | Path, data: bytes, *, action: str) -> None:
    """Create or replace a local file so that a reader sees the old bytes or the new bytes,
    never a prefix: `<path>.tmp-<pid>`, fsync, os.replace, fsync the folder. A failed write
    (ENOSPC, EIO, permissions) removes its tmp file and raises `CheckpointStorageError` naming
    the path, the cause and the free space."""
    target = os.fspath(path)
    tmp = f"{target}.tmp-{os.getpid()}"
    try:
        with open(tmp, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, target)
        fsync_dir(os.path.dirname(target))
    except OSError as exc:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise storage_error(action, target, exc, bytes_needed=len(data)) from exc


def read_local_record(path: str | Path, limit_bytes: int) -> bytes:
    """The bytes of a small local record file, read without blocking and within a bound.

    Opened with O_NONBLOCK so a FIFO in a record's place cannot hang the reader, then refused
    unless it is a regular file (links are followed: a record's own name is checked) of at most
    `limit_bytes`; at most `limit_bytes + 1` bytes are ever read, so a file that grows or lies
    about its size costs no more. Raises `RecordReadError` (an OSError) saying why."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise RecordReadError(f"{path} is a {local_kind(info.st_mode)}, not a regular file")
        if info.st_size > limit_bytes:
            raise RecordReadError(
                f"{path} is {info.st_size} bytes, more than the {limit_bytes} a record may be"
            )
        chunks, total = [], 0
        while chunk := os.read(fd, min(1 << 20, limit_bytes + 1 - total)):
            chunks.append(chunk)
            total += len(chunk)
            if total > limit_bytes:
                raise RecordReadError(f"{path} grew past the {limit_bytes} bytes a record may be")
        return b"".join(chunks)
    finally:
        os.close(fd)


class RecordReadError(OSError):
    """A record file is not a regular file, or is bigger than a record may be."""


def local_kind(mode: int) -> EntryKind:
    if stat.S_ISLNK(mode):
        return "symlink"
    if stat.S_ISDIR(mode):
        return "folder"
    return "file" if stat.S_ISREG(mode) else "other"


def _stamp_seconds(info: dict[str, object]) -> float | None:
    """The modification time in an fsspec `info` record, unix seconds; None if it has none."""
    stamp = info.get("mtime") or info.get("LastModified") or info.get("created")
    if stamp is None:
        return None
    timestamp = getattr(stamp, "timestamp", None)
    return float(timestamp()) if callable(timestamp) else float(stamp)  # type: ignore[arg-type]


class _Translating:
    """An fsspec file system whose calls raise `RemoteStorageError` (an OSError) instead of the
    driver's own errors once its bounded retries are spent (`runwright.remote.translated`)."""

    def __init__(self, fs: object, root: str) -> None:
        self._fs, self._root = fs, root

    def __getattr__(self, name: str) -> object:
        attribute = getattr(self._fs, name)
        if not callable(attribute):
            return attribute

        def call(*args: object, **kwargs: object) -> object:
            with translated(str(args[0]) if args else self._root):
                return attribute(*args, **kwargs)

        return call


class CheckpointStorage:
    """File operations on one run's checkpoint root, local or fsspec."""

    def __init__(self, root: str | os.PathLike[str]) -> None:
        text = os.fspath(root)
        self.is_local = "://" not in text or text.startswith("file://")
        if self.is_local:
            local = Path(text.removeprefix("file://")).absolute()
            self.root = str(local)
            self.fs = fsspec.filesystem("file")
        else:
            fs, _ = open_filesystem(text)
            self.fs = _Translating(fs, text)
            self.root = text.rstrip("/")
        self.options = {} if self.is_local else storage_options(text)
        """fsspec options DCP's own readers and writers open this root with."""

    # paths -----------------------------------------------------------------------------------
    def path(self, *parts: str) -> str:
        return "/".join([self.root, *parts])

    def staging_path(self, checkpoint_id: str) -> str:
        return self.path(STAGING, checkpoint_id)

    def write_path(self, step: int, checkpoint_id: str) -> str:
        """Where shards are written: staging on a local disk, the final folder on object stores."""
        if self.is_local:
            return self.staging_path(checkpoint_id)
        return self.path(folder_name(step, checkpoint_id))

    def contains(self, path: str) -> bool:
        """True if `path` lies strictly inside this root (GC never touches anything else)."""
        if self.is_local:
            root = os.path.realpath(self.root)
            real = os.path.realpath(path)
            return real != root and os.path.commonpath([root, real]) == root
        return path.startswith(self.root + "/") and ".." not in path.split("/")

    # reads -----------------------------------------------------------------------------------
    def exists(self, path: str) -> bool:
        return self.fs.exists(path)

    def read_bytes(self, path: str) -> bytes:
        with translated(path), self.fs.open(path, "rb") as handle:
            return handle.read()

    def read_record(self, path: str, limit_bytes: int) -> bytes:
        """A record file (manifest, commit record, DCP metadata) of at most `limit_bytes`, never
        read past the bound (`read_local_record`); raises OSError otherwise."""
        if self.is_local:
            return read_local_record(path, limit_bytes)
        size = self.size_bytes(path)
        if size > limit_bytes:
            raise RecordReadError(
                f"{path} is {size} bytes, more than the {limit_bytes} a record may be"
            )
        with translated(path), self.fs.open(path, "rb") as handle:
            data = handle.read(limit_bytes + 1)
        if len(data) > limit_bytes:
            raise RecordReadError(f"{path} grew past the {limit_bytes} bytes a record may be")
        return data

    def kind(self, path: str) -> EntryKind | None:
        """What `path` is, links not followed; None when nothing is there."""
        if not self.is_local:
            if not self.fs.exists(path):
                return None
            return "folder" if self.fs.isdir(path) else "file"
        try:
            return local_kind(os.lstat(path).st_mode)
        except FileNotFoundError:
            return None

    @contextlib.contextmanager
    def open_read(self, path: str) -> Iterator[IO[bytes]]:
        with translated(path):
            if "memory" in _protocols(self.fs):
                # fsspec's memory file system gives every reader the one stored file object,
                # position included: a verification reading beside DCP's load (restore.py)
                # would interleave with it and hash a shuffled file. A copy reads alone.
                yield io.BytesIO(self.fs.cat_file(path))
                return
            with self.fs.open(path, "rb") as handle:
                yield handle

    def size_bytes(self, path: str) -> int:
        return int(self.fs.size(path))

    def list_names(self, path: str) -> list[str]:
        if not self.fs.exists(path):
            return []
        return sorted(p.rstrip("/").rsplit("/", 1)[-1] for p in self.fs.ls(path, detail=False))

    def entries(self, path: str) -> list[tuple[str, EntryKind]]:
        """Names directly in the folder `path` with what each is, links not followed; empty if
        `path` does not exist. Raises OSError when the folder cannot be listed."""
        if not self.is_local:
            if not self.fs.exists(path):
                return []
            found = []
            for info in self.fs.ls(path, detail=True):
                name = info["name"].rstrip("/").rsplit("/", 1)[-1]
                found.append((name, "folder" if info.get("type") == "directory" else "file"))
            return sorted(found)
        if not os.path.lexists(path):
            return []
        found = []
        with os.scandir(path) as listing:
            for entry in listing:
                try:
                    mode = entry.stat(follow_symlinks=False).st_mode
                except FileNotFoundError:
                    continue
                found.append((entry.name, local_kind(mode)))
        return sorted(found)

    def age_seconds(self, path: str) -> float:
        """Seconds since the newest modification of `path`: a file's (or link's) own mtime, a
        folder's newest among itself and what is directly in it."""
        if self.is_local:
            own = os.lstat(path)
            stamps = [own.st_mtime]
            if stat.S_ISDIR(own.st_mode):
                with contextlib.suppress(OSError), os.scandir(path) as listing:
                    for entry in listing:
                        with contextlib.suppress(OSError):
                            stamps.append(entry.stat(follow_symlinks=False).st_mtime)
            return time.time() - max(stamps)
        try:
            info = self.fs.info(path)
            stamps = [info]
            if info.get("type") == "directory":
                # an object store's folder is a key prefix with no time of its own: its age is
                # that of the newest object directly in it, as a local folder's is
                stamps = self.fs.ls(path, detail=True)
        except FileNotFoundError:
            return 0.0
        seconds = [s for s in (_stamp_seconds(i) for i in stamps) if s is not None]
        return time.time() - max(seconds) if seconds else float("inf")

    # writes ----------------------------------------------------------------------------------
    def makedirs(self, path: str) -> None:
        self.fs.makedirs(path, exist_ok=True)
        if self.is_local:
            fsync_dir(os.path.dirname(path))

    def write_durable(self, path: str, data: bytes) -> None:
        """Create or replace `path` with `data` so that a reader sees the old bytes or the new
        bytes, never a prefix: tmp file, fsync, os.replace, fsync folder (local); one put
        (object stores, where an object appears whole or not at all). A failed write leaves no
        tmp file and raises `CheckpointStorageError`."""
        if not self.is_local:
            try:
                self.fs.pipe_file(path, data)
            except OSError as exc:
                raise storage_error("write", path, exc, bytes_needed=len(data)) from exc
            return
        replace_file(path, data, action=f"write of {os.path.basename(path)}")

    def move_to_final(self, step: int, checkpoint_id: str) -> str:
        """Move a staged checkpoint to `<step>-<ckpt_id>/` (local: one atomic rename plus fsyncs;
        object stores: nothing to move). Returns the final path."""
        final = self.path(folder_name(step, checkpoint_id))
        if not self.is_local:
            return final
        staged = self.staging_path(checkpoint_id)
        if os.path.exists(final):
            raise CheckpointError(
                f"{final} already exists; checkpoint ids are unique, so this folder was left by "
                "another writer with the same id. Remove it or run `runwright ckpt gc`."
            )
        os.rename(staged, final)
        fsync_dir(self.root)
        fsync_dir(self.path(STAGING))
        return final

    def remove_file(self, path: str) -> None:
        if not self.contains(path):
            raise CheckpointError(f"refusing to remove {path}: it is outside {self.root}")
        if self.fs.exists(path):
            self.fs.rm_file(path)
            if self.is_local:
                fsync_dir(os.path.dirname(path))

    def tree_bytes(self, path: str) -> int:
        """Bytes of the files under the folder `path` (a link counts nothing: removing it frees
        nothing); 0 if it does not exist."""
        if not self.fs.exists(path):
            return 0
        if not self.is_local:
            return sum(int(i.get("size") or 0) for i in self.fs.find(path, detail=True).values())
        if os.path.islink(path):
            return 0
        total = 0
        for dirpath, _dirs, files in os.walk(path):
            for name in files:
                with contextlib.suppress(FileNotFoundError):
                    total += os.lstat(os.path.join(dirpath, name)).st_size
        return total

    def remove_tree(self, path: str) -> int:
        """Delete a folder inside the root; returns bytes freed. Idempotent."""
        if not self.contains(path):
            raise CheckpointError(f"refusing to remove {path}: it is outside {self.root}")
        if not self.fs.exists(path):
            return 0
        freed = self.tree_bytes(path)
        if self.is_local:
            if os.path.islink(path):
                os.unlink(path)
                return 0
            shutil.rmtree(path, ignore_errors=True)
            fsync_dir(os.path.dirname(path))
            return freed
        self.fs.rm(path, recursive=True)
        return freed


def _protocols(fs: fsspec.AbstractFileSystem) -> tuple[str, ...]:
    protocol = fs.protocol
    return (protocol,) if isinstance(protocol, str) else tuple(protocol)
