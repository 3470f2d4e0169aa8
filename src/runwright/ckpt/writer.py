"""A DCP storage writer that measures every file while writing it.

DCP (`torch.distributed.checkpoint.FileSystemWriter` / `FsspecWriter`) does the sharded layout; this
module only wraps the output streams so each file's size and checksum (ckpt/checksum.py) are known
the moment it is closed. Where the hashing happens decides what the checksum costs:

- Local files: a follower thread hashes the bytes back out of the page cache, behind the writer,
  and never blocks a write. Plain DCP spends most of a save waiting for the disk (the fsync of
  every data file); the follower's hashing runs inside that wait, so on a loaded 2-core machine a
  537 MB save hashes in parallel with I/O instead of on top of the copy.
  It reads only bytes the writer already handed to the kernel (flushed), and the file is
  append-only, so what it hashes is what the fsync makes durable. Hashing the caller's buffers
  after `write` returns would not be safe: DCP may pass a temporary tensor's memory.
- Object stores (fsspec): nothing to read back cheaply, so each large buffer is hashed in a
  helper thread while the same buffer is uploaded (hashlib and writes release the GIL).

After its data files, each rank writes `__<rank>_files.json` (its files with size and checksum, and
the logical keys it asked DCP to save). The coordinator reads all of them to check step 4 of the
commit protocol: every expected shard and key is present.
"""

import contextlib
import io
import json
import os
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import Future as ThreadFuture
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from torch.distributed.checkpoint import FileSystemWriter
from torch.distributed.checkpoint._fsspec_filesystem import FsspecWriter
from torch.distributed.checkpoint.metadata import Metadata
from torch.distributed.checkpoint.planner import SavePlan, SavePlanner
from torch.distributed.checkpoint.storage import WriteResult
from torch.futures import Future

from runwright.ckpt.checksum import DEFAULT_CHECKSUM, new_hasher
from runwright.remote import bound

SIDECAR_SUFFIX = "_files.json"
DCP_METADATA = ".metadata"
_PARALLEL_HASH_MIN_BYTES = 1 << 20
_FOLLOW_MIN_BYTES = 1 << 20  # smaller files are hashed inline: a thread costs more than the hash
_FOLLOW_CHUNK_BYTES = 8 << 20
_PROBE_CHUNK_BYTES = 1 << 16

ByteProbe = Callable[[int], None]
"""Called with the rank's running byte count before each chunk is written (crash tests)."""


def sidecar_name(rank: int) -> str:
    return f"__{rank}{SIDECAR_SUFFIX}"


class _Follower:
    """Hashes a local file that is being appended to, reading it back behind the writer."""

    def __init__(self, path: str, digest: Any, offset: int) -> None:
        self._fd = os.open(path, os.O_RDONLY)
        self._digest, self._position = digest, offset
        self._available, self._final = offset, False
        self._error: BaseException | None = None
        self._cond = threading.Condition()
        self._thread = threading.Thread(target=self._run, name="runwright-hash", daemon=True)
        self._thread.start()

    def advance(self, available: int) -> None:
        """The first `available` bytes of the file are in the kernel (written and flushed)."""
        with self._cond:
            self._available = available
            self._cond.notify()

    def finish(self, size_bytes: int) -> None:
        """Wait until all `size_bytes` are hashed; raise what went wrong in the thread."""
        with self._cond:
            self._available, self._final = size_bytes, True
            self._cond.notify()
        self._thread.join()
        os.close(self._fd)
        if self._error is not None:
            raise self._error
        if self._position != size_bytes:
            raise OSError(f"hashed {self._position} of {size_bytes} bytes: the file shrank")

    def abandon(self) -> None:
        """The write failed: stop hashing and close the file, so deleting it frees its space."""
        with self._cond:
            self._final = True
            self._cond.notify()
        self._thread.join()
        os.close(self._fd)

    def _run(self) -> None:
        buffer = bytearray(_FOLLOW_CHUNK_BYTES)
        view = memoryview(buffer)
        try:
            while True:
                with self._cond:
                    while self._position >= self._available and not self._final:
                        self._cond.wait()
                    end, final = self._available, self._final
                while self._position < end:
                    count = os.preadv(
                        self._fd, [view[: min(len(buffer), end - self._position)]], self._position
                    )
                    if count == 0:
                        return
                    self._digest.update(view[:count])
                    self._position += count
                if final:
                    return
        except BaseException as exc:
            self._error = exc


class _HashingStream(io.RawIOBase):
    """Forwards writes to `raw` and hashes them; reports (name, size, digest) on close."""

    def __init__(
        self,
        raw: Any,
        path: str,
        on_close: Callable[[str, int, str], None],
        pool: ThreadPoolExecutor,
        probe: Callable[[int], None] | None,
        follow: bool,
    ) -> None:
        """`follow`: hash by reading `path` back behind the writer (local files only)."""
        super().__init__()
        self._raw, self._path, self._on_close = raw, path, on_close
        self._pool, self._probe, self._follow = pool, probe, follow
        self._hash = new_hasher(DEFAULT_CHECKSUM)
        self._size_bytes = 0
        self._follower: _Follower | None = None

    def writable(self) -> bool:
        return True

    def write(self, data: Any) -> int:
        view = memoryview(data).cast("B")
        if self._probe is not None:
            for start in range(0, view.nbytes, _PROBE_CHUNK_BYTES):
                self._probe(_PROBE_CHUNK_BYTES)
                self._write(view[start : start + _PROBE_CHUNK_BYTES])
            return view.nbytes
        return self._write(view)

    def _write(self, view: memoryview) -> int:
        starts_following = self._follow and self._size_bytes + view.nbytes >= _FOLLOW_MIN_BYTES
        if self._follower is None and starts_following:
            # the first _size_bytes are hashed already; the follower takes it from there
            self._follower = _Follower(self._path, self._hash, self._size_bytes)
        if self._follower is not None:
            self._raw.write(view)
            self._raw.flush()
            self._size_bytes += view.nbytes
            self._follower.advance(self._size_bytes)
            return view.nbytes
        if view.nbytes >= _PARALLEL_HASH_MIN_BYTES:
            hashed: ThreadFuture[None] = self._pool.submit(self._hash.update, view)
            self._raw.write(view)
            hashed.result()
        else:
            self._hash.update(view)
            self._raw.write(view)
        self._size_bytes += view.nbytes
        return view.nbytes

    def tell(self) -> int:
        return self._raw.tell()

    def fileno(self) -> int:
        # DCP fsyncs `stream.fileno()` without flushing the Python buffer first; flushing here
        # makes that fsync cover the file's last bytes too.
        self._raw.flush()
        return self._raw.fileno()

    def flush(self) -> None:
        self._raw.flush()

    def abandon(self) -> None:
        """The write failed: release the follower and its descriptor, record nothing."""
        if self._follower is not None:
            self._follower.abandon()
            self._follower = None
        with contextlib.suppress(OSError):  # closing flushes, which fails again on a full disk
            super().close()

    def close(self) -> None:
        if not self.closed:
            self._raw.flush()
            if self._follower is not None:
                self._follower.finish(self._size_bytes)
            name = os.path.basename(self._path)
            self._on_close(name, self._size_bytes, self._hash.hexdigest())
        super().close()


class _HashingFileSystem:
    """Delegates to DCP's file system object, wrapping write streams in `_HashingStream`."""

    def __init__(self, inner: Any, owner: "_MeasuringMixin") -> None:
        self._inner, self._owner = inner, owner

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    @contextlib.contextmanager
    def create_stream(self, path: str | os.PathLike[str], mode: str) -> Iterator[Any]:
        with self._inner.create_stream(path, mode) as raw:
            if "w" not in mode:
                yield raw
                return
            stream = _HashingStream(
                raw,
                os.fspath(path),
                self._owner._record_file,
                self._owner._pool,
                self._owner._probe,
                follow=self._owner._follow,
            )
            try:
                yield stream
            except BaseException:
                # a failed write (ENOSPC) must not leave the follower holding the file open: an
                # open descriptor keeps a deleted file's blocks allocated
                stream.abandon()
                raise
            stream.close()


class _MeasuringMixin:
    """State and overrides shared by the local and fsspec writers."""

    fs: Any
    path: Any
    sync_files: bool

    def _setup(
        self, rank: int, probe: ByteProbe | None, thread_count: int, *, follow: bool
    ) -> None:
        self.rank = rank
        self._follow = follow
        self._lock = threading.Lock()
        self._pool = ThreadPoolExecutor(max_workers=max(1, thread_count), thread_name_prefix="hash")
        self._probe = probe
        self.files: dict[str, tuple[int, str]] = {}
        self.local_keys: list[str] = []
        self.planned_bytes: int | None = None
        """Bytes of every rank's planned writes (coordinator, once planned): the save's size."""
        self.metadata: Metadata | None = None
        self.fs = _HashingFileSystem(self.fs, self)

    def _record_file(self, name: str, size_bytes: int, digest: str) -> None:
        if name == f"{DCP_METADATA}.tmp":
            name = DCP_METADATA
        with self._lock:
            self.files[name] = (size_bytes, digest)

    def prepare_local_plan(self, plan: SavePlan) -> SavePlan:
        self.local_keys = sorted({item.index.fqn for item in plan.items})
        return super().prepare_local_plan(plan)  # type: ignore[misc]

    def prepare_global_plan(self, plans: list[SavePlan]) -> list[SavePlan]:
        # DCP has deduplicated replicated items by now, so this is what the ranks will write
        self.planned_bytes = sum(
            item.tensor_storage_size()
            or (item.bytes_io_data.nbytes if item.bytes_io_data is not None else 0)
            for plan in plans
            for item in plan.items
        )
        return super().prepare_global_plan(plans)  # type: ignore[misc]

    def write_data(self, plan: SavePlan, planner: SavePlanner) -> Future[list[WriteResult]]:
        done: Future[list[WriteResult]] = super().write_data(plan, planner)  # type: ignore[misc]
        results = done.wait()
        with self._lock:
            files = {n: v for n, v in self.files.items() if n != DCP_METADATA}
        sidecar = {
            "rank": self.rank,
            "keys": self.local_keys,
            "files": [{"name": n, "size_bytes": s, "checksum": c} for n, (s, c) in files.items()],
        }
        target = self.fs._inner.concat_path(self.path, sidecar_name(self.rank))
        with self.fs._inner.create_stream(target, "wb") as handle:
            handle.write(json.dumps(sidecar, sort_keys=True).encode())
            if self.sync_files:
                handle.flush()
                os.fsync(handle.fileno())
        finished: Future[list[WriteResult]] = Future()
        finished.set_result(results)
        return finished

    def finish(self, metadata: Metadata, results: list[list[WriteResult]]) -> None:
        super().finish(metadata, results)  # type: ignore[misc]
        self.metadata = metadata

    def shutdown(self) -> None:
        self._pool.shutdown(wait=True)


class MeasuringFileSystemWriter(_MeasuringMixin, FileSystemWriter):
    """Local-disk writer: DCP's FileSystemWriter with fsync on, measuring every file."""

    def __init__(
        self, path: str, rank: int, probe: ByteProbe | None = None, thread_count: int = 1
    ) -> None:
        FileSystemWriter.__init__(
            self, path, sync_files=True, thread_count=thread_count, overwrite=False
        )
        self._setup(rank, probe, thread_count, follow=True)


class MeasuringFsspecWriter(_MeasuringMixin, FsspecWriter):
    """Object-store writer: DCP's FsspecWriter (an object appears whole when its upload closes,
    so there is no fsync), measuring every file."""

    def __init__(
        self,
        path: str,
        rank: int,
        probe: ByteProbe | None = None,
        thread_count: int = 1,
        options: dict[str, Any] | None = None,
    ) -> None:
        """`options`: the fsspec options of the root (timeouts, retries: runwright.remote)."""
        FsspecWriter.__init__(
            self,
            path,
            sync_files=False,
            thread_count=thread_count,
            overwrite=False,
            **(options or {}),
        )
        bound(self.fs.fs)
        self._setup(rank, probe, thread_count, follow=False)


def make_writer(
    path: str,
    *,
    is_local: bool,
    rank: int,
    probe: ByteProbe | None,
    thread_count: int,
    options: dict[str, Any] | None = None,
) -> MeasuringFileSystemWriter | MeasuringFsspecWriter:
    if is_local:
        return MeasuringFileSystemWriter(path, rank=rank, probe=probe, thread_count=thread_count)
    return MeasuringFsspecWriter(
        path, rank=rank, probe=probe, thread_count=thread_count, options=options
    )
