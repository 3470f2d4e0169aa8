"""Reads that disclose training data or weights, audited like changes: sample text of a dataset,
a dataset's files, a committed checkpoint's files and an export's files.

Seed 000 asks for an audit record of every access to data or checkpoints, not only of changes.
Listing and inspecting (names, ids, sizes, statistics) stays a plain read; these four hand out
the content itself, so each is role-checked and appended to the audit log with what was read
(file name and bytes, or how many samples of which split), whether it was allowed or refused:

- `dataset.samples` and `dataset.download` need `read_sample_text` (the text is training data);
- `checkpoint.download` and `export.download` need `manage_checkpoints` (the weights).

A file is named by its plain name inside the dataset, checkpoint or export folder (no `/`, no
`..`), and only a file the folder's manifest lists (or the manifest itself) can be read, so a
request can never reach beyond what it names. Parameters hold names and numbers, never the text.
"""

import re
from pathlib import Path
from typing import Any

from runwright.access.base import AccessBase
from runwright.access.roles import Permission
from runwright.errors import NotFoundError, RunwrightError
from runwright.layout import validate_run_id

EXPORTS = "exports"
"""Through the server, exports live in `<root>/exports/<project>/<run>/<name>/` (storage.py)."""
SAMPLES_MAX = 100
"""Most documents one samples request decodes."""
DOWNLOAD_MAX_BYTES = 1 << 30
"""Largest file served in one response: 1 GiB (1,073,741,824 bytes); a bigger one is copied
from the store by an operator instead."""
_FILE = re.compile(r"[A-Za-z0-9._-]{1,200}")


def _file_name(name: str) -> str:
    if not _FILE.fullmatch(name) or name in (".", ".."):
        raise RunwrightError(
            f"{name[:80]!r} is not a file name: give a plain name inside the folder (letters, "
            "digits, `.`, `_`, `-`), as the manifest lists it"
        )
    return name


class DownloadActions(AccessBase):
    def _read(self, action: str, target: str, permission: Permission, doing: str) -> None:
        self.require(permission, doing, action, target=target)

    # -- datasets -----------------------------------------------------------------------------

    def dataset_samples(self, dataset_id: str, split: str = "train", count: int = 5) -> dict:
        """The first `count` documents of `split`, decoded with the dataset's tokenizer."""
        action, target = "dataset.samples", f"dataset:{dataset_id[:64]}"
        self._read(action, target, Permission.READ_SAMPLE_TEXT, "reading a dataset's samples")
        if split not in ("train", "eval"):
            raise RunwrightError(f"split {split!r} is not a split; use train or eval")
        if not 1 <= count <= SAMPLES_MAX:
            raise RunwrightError(f"count {count} is out of range; give 1 to {SAMPLES_MAX}")
        from runwright.data.format.dataset import open_dataset

        opened = open_dataset(self.dataset_folder(dataset_id), verification="size", split=split)
        tokenizer = _tokenizer(opened.folder / opened.manifest.tokenizer.file)
        samples: list[dict[str, Any]] = []
        for record in opened.manifest.shards:
            shard = opened.shards.get(record.name)
            for i in range(shard.documents if shard is not None else 0):
                if len(samples) == count:
                    break
                ids = shard.document(i).tolist()
                samples.append({"shard": record.name, "document": i, "tokens": len(ids),
                                "text": tokenizer.decode(ids) if tokenizer else None})  # fmt: skip
        self.record(action, target=target,
                    parameters={"split": split, "count": len(samples)})  # fmt: skip
        return {"dataset_id": opened.manifest.dataset_id, "split": split, "samples": samples}

    def dataset_file(self, dataset_id: str, name: str) -> tuple[bytes, str]:
        """(the bytes, the name) of one file of a dataset: manifest.json, the tokenizer or a
        shard's .bin/.idx."""
        action, target = "dataset.download", f"dataset:{dataset_id[:64]}"
        self._read(action, target, Permission.READ_SAMPLE_TEXT, "downloading a dataset")
        from runwright.data.format.manifest import read_manifest

        folder = self.dataset_folder(dataset_id)
        manifest = read_manifest(Path(folder))
        listed = {"manifest.json", manifest.tokenizer.file}
        listed |= {f"{s.name}.{ext}" for s in manifest.shards for ext in ("bin", "idx")}
        return self._serve(action, target, folder, _file_name(name), listed)

    # -- checkpoints and exports --------------------------------------------------------------

    def checkpoint_file(self, run_id: str, checkpoint: str, name: str) -> tuple[bytes, str]:
        """(the bytes, the name) of one file of a committed checkpoint of the run."""
        from runwright.ckpt import inventory as inv

        action = "checkpoint.download"
        run = self.run(run_id, action)
        target = f"{run.run_id}/{checkpoint[:80]}"
        self._read(action, target, Permission.MANAGE_CHECKPOINTS, "downloading a checkpoint")
        _, found = inv.find(inv.checkpoint_root(run.run_id, run.root), _file_name(checkpoint))
        listed = {"manifest.json", *(f.name for f in found.manifest.files)}
        return self._serve(action, target, found.path, _file_name(name), listed)

    def export_file(self, run_id: str, export: str, name: str) -> tuple[bytes, str]:
        """(the bytes, the name) of one file of an export made through the server."""
        action = "export.download"
        run = self.run(run_id, action)
        target = f"{run.run_id}/{export[:80]}"
        self._read(action, target, Permission.MANAGE_CHECKPOINTS, "downloading an export")
        folder = Path(self.root) / EXPORTS / run.project / run.run_id / validate_name(export)
        listed = {p.name for p in folder.iterdir() if p.is_file()} if folder.is_dir() else set()
        return self._serve(action, target, str(folder), _file_name(name), listed)

    def _serve(
        self, action: str, target: str, folder: str, name: str, listed: set[str]
    ) -> tuple[bytes, str]:
        if name not in listed:
            raise NotFoundError(f"no file {name} in {target}; its manifest lists the files")
        from runwright.remote import open_filesystem

        fs, path = open_filesystem(f"{folder.rstrip('/')}/{name}")
        size = int(fs.size(path))
        if size > DOWNLOAD_MAX_BYTES:
            error = RunwrightError(
                f"{name} is {size} bytes, above the {DOWNLOAD_MAX_BYTES}-byte limit of one "
                "download; copy it from the store instead"
            )
            raise self.refuse(error, action, target=target, parameters={"file": name})
        data = fs.cat_file(path)
        self.record(action, target=target, parameters={"file": name, "bytes": len(data)})
        return data, name


def validate_name(name: str) -> str:
    try:
        return validate_run_id(name)
    except ValueError:
        raise RunwrightError(f"{name[:80]!r} is not an export name (a plain name)") from None


def _tokenizer(path: Path) -> Any:
    """The dataset's tokenizer, or None when it has none to decode with (a placeholder)."""
    try:
        from tokenizers import Tokenizer

        return Tokenizer.from_file(str(path))
    except Exception:
        return None
