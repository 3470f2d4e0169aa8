"""What a failed checkpoint write reports: the real cause, the path, bytes needed and free.

A full volume rarely says so at the top. DCP wraps every rank's error in a `CheckpointException`
(a `BaseException`, so a training loop's `except Exception` does not see it), and a short write
inside `torch.save` surfaces as `RuntimeError: ... unexpected pos 704 vs 598` whose
`__context__` is the `OSError: [Errno 28] No space left on device` that caused it. `root_cause`
digs through both (the per-rank failures dict, then each exception's cause and context chain) to
the first `OSError`; `storage_error` turns it into a `CheckpointStorageError` with the free
space of the volume (os.statvfs), so the message says how much to free.
"""

import os
import pickle
import sys
from collections.abc import Iterator
from typing import Any

from runwright.ckpt.errors import CheckpointStorageError
from runwright.ckpt.records import StorageFailure

DCP_API_MODULE = "torch.distributed.checkpoint.api"


def _checkpoint_exception() -> type[BaseException] | None:
    """DCP's `CheckpointException` once DCP is loaded, else None: no such exception can exist
    before, and the fence and storage paths that use this module must not import torch (the CLI
    reads fences to answer `runwright status`)."""
    module = sys.modules.get(DCP_API_MODULE)
    return getattr(module, "CheckpointException", None) if module is not None else None


def _chain(exc: BaseException) -> Iterator[BaseException]:
    """`exc`, the errors DCP collected from every rank, and their cause/context chains."""
    dcp_exception = _checkpoint_exception()
    seen: set[int] = set()
    pending = [exc]
    while pending:
        current = pending.pop(0)
        if id(current) in seen:
            continue
        seen.add(id(current))
        yield current
        if dcp_exception is not None and isinstance(current, dcp_exception):
            pending += [wrapped[0] for _, wrapped in sorted(current.failures.items())]
        pending += [e for e in (current.__cause__, current.__context__) if e is not None]


def root_cause(exc: BaseException) -> BaseException:
    """The OSError behind `exc` (one with an errno first), else the first rank's error, else
    `exc` itself."""
    chain = list(_chain(exc))
    oserrors = [e for e in chain if isinstance(e, OSError)]
    with_errno = [e for e in oserrors if e.errno is not None]
    if with_errno or oserrors:
        return (with_errno or oserrors)[0]
    dcp_exception = _checkpoint_exception()
    inner = [e for e in chain if dcp_exception is None or not isinstance(e, dcp_exception)]
    return inner[0] if inner else exc


def describe(exc: BaseException) -> str:
    """`Type: message` of the root cause, on one line (DCP's own text is a multi-rank dump)."""
    cause = root_cause(exc)
    text = " ".join(str(cause).split())
    return f"{type(cause).__name__}: {text}" if text else type(cause).__name__


def free_bytes(path: str) -> int | None:
    """Bytes an unprivileged writer may still use on the volume holding `path` (or its nearest
    existing parent); None where it cannot be measured (object stores)."""
    if "://" in path and not path.startswith("file://"):
        return None
    current = os.path.abspath(path.removeprefix("file://"))
    while not os.path.exists(current) and os.path.dirname(current) != current:
        current = os.path.dirname(current)
    try:
        stats = os.statvfs(current)
    except OSError:
        return None
    return stats.f_bavail * stats.f_frsize


def payload_bytes(state_dict: Any) -> int:
    """Bytes of the tensors (a DTensor's local shard) and byte blobs in a state dict."""
    import torch
    from torch.distributed.tensor import DTensor

    if isinstance(state_dict, DTensor):
        local = state_dict.to_local()
        return local.numel() * local.element_size()
    if isinstance(state_dict, torch.Tensor):
        return state_dict.numel() * state_dict.element_size()
    if isinstance(state_dict, bytes | bytearray):
        return len(state_dict)
    if isinstance(state_dict, dict):
        return sum(payload_bytes(v) for v in state_dict.values())
    if isinstance(state_dict, list | tuple):
        return sum(payload_bytes(v) for v in state_dict)
    try:
        return len(pickle.dumps(state_dict, protocol=pickle.HIGHEST_PROTOCOL))
    except Exception:
        return 0


def storage_error(
    action: str,
    path: str,
    exc: BaseException,
    *,
    bytes_needed: int | None = None,
    remedy: str | None = None,
) -> CheckpointStorageError:
    """A `CheckpointStorageError` for `exc`, with the free space measured now."""
    cause = root_cause(exc)
    return CheckpointStorageError(
        StorageFailure(
            action=action,
            path=path,
            cause=describe(exc),
            errno=cause.errno if isinstance(cause, OSError) else None,
            bytes_needed=bytes_needed,
            bytes_free=free_bytes(path),
            remedy=remedy,
        )
    )
