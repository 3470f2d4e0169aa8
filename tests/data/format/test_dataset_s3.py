"""A dataset at an `s3://` URL, against a real S3-compatible server (moto, tests/s3_server.py):
it is copied into the verified local cache and reads as the local folder does; ranks of one node
may fill the cache at once; a corrupt remote copy is the data's fault (ShardCorruptError), an
unreachable store is storage's (DataStorageError, within the bounded retries)."""

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from runwright.data import build_dataset
from runwright.data.errors import DataStorageError, ShardCorruptError
from runwright.data.format.dataset import localise, open_dataset
from runwright.data.format.manifest import MANIFEST_FILE
from runwright.remote import open_filesystem

pytestmark = pytest.mark.integration

EXAMPLES = Path(__file__).parents[3] / "examples"


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    return build_dataset(EXAMPLES / "data" / "tiny.yaml", tmp_path_factory.mktemp("built"))


def upload(folder: Path, url: str) -> str:
    fs, path = open_filesystem(url)
    for item in sorted(folder.iterdir()):
        if item.is_file():
            fs.put_file(str(item), f"{path}/{item.name}")
    return url


def test_a_dataset_url_reads_as_its_local_folder(built, s3_bucket, tmp_path):
    url = upload(built.folder, f"{s3_bucket}/datasets/{built.manifest.dataset_id}")
    remote = open_dataset(url, cache_dir=tmp_path / "cache")
    local = open_dataset(built.folder)
    assert remote.folder == tmp_path / "cache" / built.manifest.dataset_id
    assert remote.manifest == local.manifest
    for name, shard in local.shards.items():
        assert np.array_equal(remote.shards[name].lengths, shard.lengths)
    assert not [p.name for p in remote.folder.iterdir() if ".partial" in p.name]


def test_ranks_fill_one_cache_at_once(built, s3_bucket, tmp_path):
    """Two processes (the ranks of one node) localise the same URL into the same cache
    together: both get the whole, verified dataset."""
    url = upload(built.folder, f"{s3_bucket}/datasets/{built.manifest.dataset_id}")
    cache = tmp_path / "cache"
    code = (
        "import sys; from runwright.data.format.dataset import open_dataset; "
        "print(open_dataset(sys.argv[1], cache_dir=sys.argv[2]).manifest.dataset_id)"
    )
    ranks = [
        subprocess.Popen(
            [sys.executable, "-c", code, url, str(cache)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=os.environ.copy(),
        )
        for _ in range(2)
    ]
    for rank in ranks:
        out, err = rank.communicate(timeout=300)
        assert rank.returncode == 0, err[-3000:]
        assert out.strip() == built.manifest.dataset_id
    folder = cache / built.manifest.dataset_id
    assert (
        json.loads((folder / MANIFEST_FILE).read_text())["dataset_id"] == built.manifest.dataset_id
    )
    assert not [p.name for p in folder.iterdir() if ".partial" in p.name]


def test_a_corrupt_remote_copy_is_the_datas_fault(built, s3_bucket, tmp_path):
    url = upload(built.folder, f"{s3_bucket}/datasets/corrupt")
    fs, path = open_filesystem(url)
    shard = built.manifest.shards[0].name
    fs.pipe_file(f"{path}/{shard}.bin", b"not the tokens")
    with pytest.raises(ShardCorruptError, match="does not match its manifest digest"):
        localise(url, tmp_path / "cache")
    assert not list((tmp_path / "cache").rglob("*.partial*"))


def test_a_missing_data_object_is_kept_out_for_a_loader_that_quarantines(
    built, s3_bucket, tmp_path
):
    """`broken="keep"` (data.on_corrupt_shard: skip): a shard object gone from the remote copy,
    and one whose bytes differ, stay out of the cache and are reported, not raised; the
    tokenizer and the manifest still raise."""
    url = upload(built.folder, f"{s3_bucket}/datasets/missing")
    fs, path = open_filesystem(url)
    gone, bent = (s.name for s in built.manifest.shards if s.split == "train")
    fs.rm_file(f"{path}/{gone}.bin")
    fs.pipe_file(f"{path}/{bent}.idx", b"not an index")
    opened = open_dataset(url, cache_dir=tmp_path / "cache", split="train", broken="keep")
    assert opened.broken == {
        gone: [f"{gone}.bin: missing"],
        bent: [f"{bent}.idx: missing"],
    }
    assert not opened.shards
    with pytest.raises(ShardCorruptError, match=f"{gone}.bin is missing from the remote copy"):
        open_dataset(url, cache_dir=tmp_path / "cache")
    fs.rm_file(f"{path}/{built.manifest.tokenizer.file}")
    with pytest.raises(ShardCorruptError, match="missing from the remote copy"):
        open_dataset(url, cache_dir=tmp_path / "other", broken="keep")


def test_an_unreachable_store_is_a_storage_error(built, own_s3_server, monkeypatch, tmp_path):
    from runwright_tests_s3_server import forget_clients, new_bucket

    url = upload(built.folder, f"s3://{new_bucket()}/datasets/gone")
    own_s3_server.stop()
    monkeypatch.setenv("RUNWRIGHT_S3_MAX_ATTEMPTS", "2")
    forget_clients()
    with pytest.raises(DataStorageError) as raised:
        localise(url, tmp_path / "cache")
    message = str(raised.value)
    assert f"{url}/{MANIFEST_FILE}" in message and "The dataset is not at fault" in message
