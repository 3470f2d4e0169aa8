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
from runwright.ckpt.storage import CheckpointStorage
from runwright.store import Store


def unreadable_checkpoint(out: Path) -> None:
    # An OSError inside runwright's checkpoint code, through fsspec's frames.
    CheckpointStorage(out / "ckpt").read_bytes(str(out / "ckpt" / "step-4" / "manifest.json"))


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
