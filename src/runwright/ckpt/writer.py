"""A DCP storage writer that measures every file while writing it.

DCP (`torch.distributed.checkpoint.FileSystemWriter` / `FsspecWriter`) does the sharded layout; this
module only wraps the output streams so each file's size and checksum (ckpt/checksum.py) are known
the moment it is closed. Each buffer DCP writes is hashed during the `write` call that receives it
(a large one on a helper thread while the same buffer is written: the file write releases the
GIL, so the two overlap), so what is hashed is exactly what was handed to the file, while the
buffer is still alive: DCP may pass a temporary tensor's memory, so hashing after `write` returns
would not be safe. An earlier version read each local file back from the page cache behind
the writer, to hide a sha256 inside the fsync wait; with XXH3-128 (about 10 GB/s here) that
read-back cost more than the hash: 0.82 s of CPU per 537 MB save against 0.62 s hashing the
written buffers and 0.63 s for plain DCP (process CPU seconds, medians of 5 paired rounds,
2026-12-02; docs/ckpt.md "Cost"), and on a shared 2-core machine CPU seconds turn into wall
seconds.

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
from runwright.ckpt.manifest import DCP_METADATA, sidecar_name
from runwright.remote import bound

_PARALLEL_HASH_MIN_BYTES = 1 << 20  # smaller buffers are hashed inline: a handoff costs more
_PROBE_CHUNK_BYTES = 1 << 16

ByteProbe = Callable[[int], None]
"""Called with the rank's running byte count before each chunk is written (crash tests)."""


class _HashingStream(io.RawIOBase):
    """Forwards writes to `raw` and hashes them; reports (name, size, digest) on close."""

    def __init__(
        self,
        raw: Any,
        path: str,
        on_close: Callable[[str, int, str], None],
        pool: ThreadPoolExecutor,
        probe: Callable[[int], None] | None,
    ) -> None:
        super().__init__()
        self._raw, self._path, self._on_close = raw, path, on_close
        self._pool, self._probe = pool, probe
        self._hash = new_hasher(DEFAULT_CHECKSUM)
        self._size_bytes = 0

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
        """The write failed: close the file, record nothing."""
        with contextlib.suppress(OSError):  # closing flushes, which fails again on a full disk
            super().close()

    def close(self) -> None:
        if not self.closed:
            self._raw.flush()
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
            )
            try:
                yield stream
            except BaseException:
                # a failed write (ENOSPC) is closed at once: an open descriptor keeps a deleted
                # file's blocks allocated
                stream.abandon()
                raise
            stream.close()


class _MeasuringMixin:
    """State and overrides shared by the local and fsspec writers."""

    fs: Any
    path: Any
    sync_files: bool

    def _setup(self, rank: int, probe: ByteProbe | None, thread_count: int) -> None:
        self.rank = rank
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
        self._setup(rank, probe, thread_count)


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
        self._setup(rank, probe, thread_count)


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
