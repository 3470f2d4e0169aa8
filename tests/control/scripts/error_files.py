"""Writes real torchrun error files (and rank stderr tracebacks) for the classification tests.

`python error_files.py OUT`: each case raises one exception through torch's `@record`, which
writes `OUT/<case>/rdzv/attempt_0/0/error.json` exactly as a torchrun rank does; the formatted
traceback also goes to `OUT/<case>-stderr/rdzv/attempt_0/0/stderr.log`, as a rank without
`@record` leaves it.
"""

import os
import sqlite3
import sys
import traceback
from collections.abc import Callable
from pathlib import Path

from torch.distributed.elastic.multiprocessing.errors import record

from runwright.ckpt import NoUsableCheckpointError
from runwright.ckpt.object_fence import ObjectFence
from runwright.ckpt.storage import CheckpointStorage
from runwright.data.format.dataset import localise
from runwright.store import Store


def unreadable_checkpoint(out: Path) -> None:
    # An OSError inside runwright's checkpoint code, through fsspec's frames.
    CheckpointStorage(out / "ckpt").read_bytes(str(out / "ckpt" / "step-4" / "manifest.json"))


def _dead_store() -> None:
    """Point the AWS environment at a port where nothing listens, with one try a request."""
    os.environ.update(
        AWS_ENDPOINT_URL="http://127.0.0.1:9",
        AWS_ACCESS_KEY_ID="x",
        AWS_SECRET_ACCESS_KEY="x",
        AWS_DEFAULT_REGION="us-east-1",
        RUNWRIGHT_S3_MAX_ATTEMPTS="1",
    )


def unreachable_dataset(out: Path) -> None:
    # A dataset URL whose store does not answer: DataStorageError after the bounded retries.
    _dead_store()
    localise("s3://no-such-store/datasets/d1", out / "cache")


def unreachable_checkpoint_root(out: Path) -> None:
    # Listing a checkpoint root on a store that does not answer: RemoteStorageError (an OSError).
    _dead_store()
    CheckpointStorage("s3://no-such-store/ckpt/run-1").entries("s3://no-such-store/ckpt/run-1")


def unreachable_fence(out: Path) -> None:
    _dead_store()
    ObjectFence("s3://no-such-store/ckpt/run-1").current_generation()


def checkpoint_error(out: Path) -> None:
    raise NoUsableCheckpointError("checkpoint step-4: checksum mismatch in shard 0")


def store_error(out: Path) -> None:
    (out / "not-a-folder").write_text("")
    Store.open(out / "not-a-folder" / "root")


def user_oserror(out: Path) -> None:
    with open(out / "my-data" / "train.jsonl") as fh:
        fh.read()


def user_sqlite(out: Path) -> None:
    sqlite3.connect(":memory:").execute("select * from my_table")


def user_wraps_platform_error(out: Path) -> None:
    try:
        unreadable_checkpoint(out)
    except OSError as exc:
        raise RuntimeError(f"my loader gave up: {exc}") from exc


CASES: dict[str, Callable[[Path], None]] = {
    f.__name__: f
    for f in (
        unreadable_checkpoint,
        checkpoint_error,
        store_error,
        user_oserror,
        user_sqlite,
        user_wraps_platform_error,
        unreachable_dataset,
        unreachable_checkpoint_root,
        unreachable_fence,
    )
}


def main(out: Path) -> int:
    for name, case in CASES.items():
        error_file = out / name / "rdzv" / "attempt_0" / "0" / "error.json"
        error_file.parent.mkdir(parents=True)
        os.environ["TORCHELASTIC_ERROR_FILE"] = str(error_file)
        try:
            record(case)(out)
        except Exception:
            stderr = out / f"{name}-stderr" / "rdzv" / "attempt_0" / "0" / "stderr.log"
            stderr.parent.mkdir(parents=True)
            stderr.write_text(f"[rank0]: starting\n{traceback.format_exc()}")
        else:
            raise AssertionError(f"case {name} did not raise")
    return 0


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1])))
