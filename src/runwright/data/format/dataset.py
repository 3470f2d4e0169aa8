"""Opening a built dataset: manifest, shards, integrity checks, and a local cache for URLs.

A dataset folder may be local or any fsspec URL. A URL is copied into a content-addressed local
cache (`<cache>/<dataset_id>/`, `$RUNWRIGHT_DATA_CACHE` or `~/.cache/runwright/datasets`) file by
file, each file checked against the manifest digest before it is published under its final name
(seed 003: "cache fill is verified before publish"), then memory-mapped like a local folder.
Several processes of one node (the ranks) may fill the same cache at once: each downloads into a
temporary name of its own and publishes with an atomic rename, so a reader sees a whole, verified
file or none, and the last rename wins with identical bytes.

Remote reads go through `runwright.remote` (timeouts, bounded retries, credentials and endpoint
from the AWS environment for `s3://`); a read that still fails raises `DataStorageError`, which
the control plane classifies as `storage` (a retry may succeed), while a file missing from the
remote copy or not matching its digest stays `ShardCorruptError` (the data's fault).
"""

import contextlib
import hashlib
import os
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import numpy as np

from runwright.data.errors import DataStorageError, ManifestError, ShardCorruptError
from runwright.data.format.indexed_shard import IndexedShard, open_shard
from runwright.data.format.manifest import (
    MANIFEST_FILE,
    DatasetManifest,
    ShardRecord,
    parse_manifest,
    read_manifest,
)
from runwright.data.format.untrusted import MAX_MANIFEST_BYTES, member
from runwright.remote import is_url, open_filesystem, translated

Verification = Literal["digest", "size"]
FileIdentity = tuple[int, int, int, int]
"""(device, inode, bytes, mtime in ns) of a file: a change means it was rewritten, replaced or
truncated since it was last verified."""


def file_identity(path: str | Path) -> FileIdentity | None:
    """The file's identity now, or None when it cannot be found."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)


def shard_identity(folder: Path, name: str) -> tuple[FileIdentity | None, FileIdentity | None]:
    """The identities of a shard's `.bin` and `.idx` files."""
    return file_identity(folder / f"{name}.bin"), file_identity(folder / f"{name}.idx")


def file_sha256(path: str | Path, chunk_bytes: int = 1 << 22) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        while block := fh.read(chunk_bytes):
            h.update(block)
    return h.hexdigest()


def check_shard(
    folder: Path, shard: ShardRecord, verification: Verification
) -> tuple[list[str], IndexedShard | None]:
    """What is wrong with one shard's files compared with the manifest (empty when fine), and
    the opened shard when nothing is. A file that cannot be read is a problem, never skipped."""
    problems: list[str] = []
    for suffix, size, digest in (
        (".bin", shard.bin_bytes, shard.bin_sha256),
        (".idx", shard.idx_bytes, shard.idx_sha256),
    ):
        name = f"{shard.name}{suffix}"
        try:
            path = member(folder, name)
            if not path.exists():
                problems.append(f"{name}: missing")
                continue
            if not path.is_file():
                problems.append(f"{name}: not a regular file")
                continue
            actual = path.stat().st_size
            if actual != size:
                problems.append(f"{name}: {actual} bytes, manifest says {size}")
            elif verification == "digest" and file_sha256(path) != digest:
                problems.append(f"{name}: sha256 differs from the manifest")
        except (OSError, ValueError) as exc:
            problems.append(f"{name}: not verified, cannot be read ({exc})")
    if problems:
        return problems, None
    try:
        opened = open_shard(folder / shard.name)
    except ShardCorruptError as exc:
        return [str(exc)], None
    except OSError as exc:
        return [f"{shard.name}.idx: not verified, cannot be read ({exc})"], None
    tokens = int(opened.lengths.sum())
    if opened.documents != shard.documents or tokens != shard.tokens:
        problems.append(
            f"{shard.name}.idx: {opened.documents} documents / {tokens} tokens, manifest says "
            f"{shard.documents} / {shard.tokens}"
        )
    if opened.dtype.name != shard.dtype:
        problems.append(f"{shard.name}.idx: dtype {opened.dtype.name}, manifest says {shard.dtype}")
    return problems, (None if problems else opened)


def default_cache_dir() -> Path:
    base = os.environ.get("RUNWRIGHT_DATA_CACHE") or os.path.join(
        os.path.expanduser("~"), ".cache", "runwright", "datasets"
    )
    return Path(base)


def cache_copy(dataset_id: str, cache_dir: str | Path | None = None) -> Path:
    """Where `localise` keeps this host's copy of a remote dataset (`cache_dir`, else
    $RUNWRIGHT_DATA_CACHE, else ~/.cache/runwright/datasets): what `runwright data delete`
    removes besides the dataset's own folder."""
    return (Path(cache_dir) if cache_dir else default_cache_dir()) / dataset_id


@contextlib.contextmanager
def _remote_read(url: str, what: str) -> Iterator[None]:
    """A remote read whose failure after the bounded retries is a `DataStorageError`; a missing
    file passes through as FileNotFoundError (the caller says whose fault it is)."""
    try:
        with translated(url):
            yield
    except (FileNotFoundError, IsADirectoryError):
        raise
    except OSError as exc:
        raise DataStorageError(
            f"cannot read {what} {url}: {type(exc).__name__}: {exc}. The dataset is not at fault: "
            "check that the store is reachable (AWS_ENDPOINT_URL, credentials), then retry"
        ) from exc


PARTIAL_FILE = re.compile(r"^\.(?P<name>.+)\.partial-(?P<pid>\d+)$")
"""A cache file being filled, by the process `pid` (`_partial`); the cache sweep removes one whose
process is gone (control/data_cache.py)."""


def _partial(final: Path) -> Path:
    """This process's temporary name for a cache file (PARTIAL_FILE): the ranks of one node fill
    the same cache at once, and each renames its own whole, verified copy into place."""
    return final.with_name(f".{final.name}.partial-{os.getpid()}")


def localise(
    dataset_path: str | Path,
    cache_dir: str | Path | None = None,
    broken: Literal["raise", "keep"] = "raise",
) -> Path:
    """A local folder holding the dataset: the path itself, or a verified cache of a URL.

    A shard file missing from the remote copy or not matching its digest raises
    ShardCorruptError, or with `broken="keep"` stays out of the cache (opening then finds the
    shard missing); the manifest and the tokenizer always raise."""
    text = str(dataset_path)
    if not is_url(text):
        return Path(text.removeprefix("file://"))
    fs, root = open_filesystem(text)
    base = root.rstrip("/")
    where = f"{text.rstrip('/')}/{MANIFEST_FILE}"
    try:
        with _remote_read(where, "the manifest"):
            size = fs.size(f"{base}/{MANIFEST_FILE}")
            if size is not None and size > MAX_MANIFEST_BYTES:
                raise ManifestError(
                    f"{where} is {size:,} bytes, over the {MAX_MANIFEST_BYTES:,}-byte manifest "
                    "limit"
                )
            raw = fs.cat_file(f"{base}/{MANIFEST_FILE}")
    except FileNotFoundError:
        raise ManifestError(f"no {MANIFEST_FILE} under {text}") from None
    except IsADirectoryError:
        raise ManifestError(f"{where} is a directory, not a manifest") from None
    # Names are checked by the manifest's validators (plain names, no `..`) and the id against
    # the content, before anything is written into the cache.
    manifest = parse_manifest(raw, where)
    cache = Path(cache_dir) if cache_dir else default_cache_dir()
    local = cache / manifest.dataset_id
    local.mkdir(parents=True, exist_ok=True)
    wanted = [(f"{s.name}.bin", s.bin_sha256, True) for s in manifest.shards]
    wanted += [(f"{s.name}.idx", s.idx_sha256, True) for s in manifest.shards]
    wanted.append((manifest.tokenizer.file, manifest.tokenizer.sha256, False))
    for name, digest, shard_file in wanted:
        final = member(local, name)
        if final.exists():
            continue
        tmp = _partial(final)
        try:
            with _remote_read(f"{text}/{name}", "dataset file"):
                fs.get_file(f"{base}/{name}", str(tmp))
        except FileNotFoundError:
            tmp.unlink(missing_ok=True)
            if shard_file and broken == "keep":
                continue
            raise ShardCorruptError(f"{text}/{name} is missing from the remote copy") from None
        except DataStorageError:
            tmp.unlink(missing_ok=True)
            raise
        if file_sha256(tmp) != digest:
            tmp.unlink()
            if shard_file and broken == "keep":
                continue
            raise ShardCorruptError(
                f"{text}/{name} does not match its manifest digest; the remote copy is corrupt"
            )
        tmp.replace(final)
    # last: a cache folder with a manifest is complete (every file above is published)
    tmp = _partial(local / MANIFEST_FILE)
    tmp.write_bytes(raw)
    tmp.replace(local / MANIFEST_FILE)
    return local


@dataclass(frozen=True)
class OpenDataset:
    """A dataset ready to read: its folder, manifest and opened shards (by shard name)."""

    folder: Path
    manifest: DatasetManifest
    shards: dict[str, IndexedShard]
    identities: dict[str, tuple[FileIdentity | None, FileIdentity | None]] = field(
        default_factory=dict
    )
    """Each opened shard's (.bin, .idx) identities, taken before it was verified."""
    broken: dict[str, list[str]] = field(default_factory=dict)
    """Shards that failed verification and what is wrong with each (only with broken="keep")."""

    def source_documents(self, source: str, split: str = "train") -> tuple[list[str], np.ndarray]:
        names = [s.name for s in self.manifest.shards if s.source == source and s.split == split]
        lengths = [self.shards[n].lengths for n in names]
        return names, (np.concatenate(lengths) if lengths else np.zeros(0, dtype=np.int64))


def open_dataset(
    dataset_path: str | Path,
    *,
    verification: Verification = "digest",
    cache_dir: str | Path | None = None,
    split: str | None = None,
    broken: Literal["raise", "keep"] = "raise",
) -> OpenDataset:
    """Open a dataset, checking each shard against the manifest.

    `digest` re-hashes every shard (reads each byte once, which also warms the page cache);
    `size` checks sizes and index structure only. A mismatch raises ShardCorruptError naming the
    shard, or with `broken="keep"` is listed in `OpenDataset.broken` and the shard left unopened
    (a loader that quarantines bad shards).
    """
    folder = localise(dataset_path, cache_dir, broken)
    manifest = read_manifest(folder)
    shards: dict[str, IndexedShard] = {}
    identities = {}
    bad: dict[str, list[str]] = {}
    for record in manifest.shards:
        if split is not None and record.split != split:
            continue
        # Before the check: a file changed while it is hashed then differs from its identity.
        identity = shard_identity(folder, record.name)
        problems, opened = check_shard(folder, record, verification)
        if opened is None and broken == "keep":
            bad[record.name] = problems
            continue
        if opened is None:
            raise ShardCorruptError(
                f"shard {record.name} of dataset {manifest.dataset_id[:12]} is corrupt: "
                + "; ".join(problems)
                + ". Run `runwright data verify` on the dataset and rebuild or restore it."
            )
        shards[record.name] = opened
        identities[record.name] = identity
    return OpenDataset(
        folder=folder, manifest=manifest, shards=shards, identities=identities, broken=bad
    )
