"""Injector: a committed checkpoint that passes every checksum yet no longer behaves as the state
that was saved, the damage only the restore probe finds (ckpt/probe.py; docs/recovery.md).

From outside any process, it scales the probe reading recorded in the checkpoint's manifest and
re-binds everything that names the manifest's bytes: the commit record's sha256, and the fence's
latest pointer when it names this checkpoint. The shards are untouched and every checksum still
matches, exactly as if the stored weights had been changed consistently before their checksums
were taken; on restore, the reading after the load differs from the recorded one, and restore
falls back to the next older checkpoint. Local checkpoint roots only.
"""

import hashlib
import json
from pathlib import Path

from runwright.ckpt.fence import LATEST_FILE
from runwright.ckpt.manifest import COMMIT_FILE, MANIFEST_FILE, CheckpointManifest
from runwright.ckpt.storage import replace_file


def falsify_probe_record(root: Path, folder: str, loss_factor: float = 3.0) -> str:
    """Scale the saved probe loss of checkpoint `<root>/<folder>` by `loss_factor` and re-bind
    its commit record (and the latest pointer) to the new manifest; returns what it did, in
    words. Raises ValueError for a checkpoint that recorded no probe reading."""
    path = root / folder
    manifest = CheckpointManifest.model_validate_json((path / MANIFEST_FILE).read_bytes())
    if manifest.probe is None:
        raise ValueError(f"{folder} recorded no probe reading: nothing to falsify")
    saved = manifest.probe.loss
    damaged = manifest.model_copy(
        update={"probe": manifest.probe.model_copy(update={"loss": saved * loss_factor})}
    )
    raw = damaged.model_dump_json(indent=1).encode()
    replace_file(path / MANIFEST_FILE, raw, action="injector's manifest write")
    digest = hashlib.sha256(raw).hexdigest()
    for record_file in (path / COMMIT_FILE, root / LATEST_FILE):
        if not record_file.is_file():
            continue
        record = json.loads(record_file.read_bytes())
        if record.get("checkpoint_id") == manifest.checkpoint_id:
            record["manifest_sha256"] = digest
            replace_file(record_file, json.dumps(record).encode(), action="injector's re-bind")
    return (
        f"probe loss recorded in {folder} changed from {saved:.6g} to {saved * loss_factor:.6g}; "
        "commit record re-bound, shards and checksums untouched"
    )
