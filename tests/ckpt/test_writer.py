"""The measuring writer: every file's recorded size and checksum match the bytes on disk,
whichever way it was hashed (inline for small files, by the follower thread for large local
files)."""

import pytest
import torch
import torch.distributed.checkpoint as dcp

from runwright.ckpt.checksum import CHECKSUMS, DEFAULT_CHECKSUM, checksum_bytes
from runwright.ckpt.writer import DCP_METADATA, make_writer


@pytest.mark.parametrize("probed", [False, True])
@pytest.mark.parametrize("width", [16, 1024])  # 1 KiB and 4 MiB of float32: below/above 1 MiB
def test_recorded_checksums_match_the_files(tmp_path, width, probed):
    state = {"w": torch.randn(width, width), "b": torch.randn(width), "note": b"x" * 3000}
    seen: list[int] = []
    writer = make_writer(
        str(tmp_path / "ckpt"),
        is_local=True,
        rank=0,
        probe=seen.append if probed else None,
        thread_count=1,
    )
    dcp.save(state, storage_writer=writer, no_dist=True)
    writer.shutdown()
    assert DCP_METADATA in writer.files and "__0_0.distcp" in writer.files
    for name, (size_bytes, checksum) in writer.files.items():
        data = (tmp_path / "ckpt" / name).read_bytes()
        assert (size_bytes, checksum) == (len(data), checksum_bytes(DEFAULT_CHECKSUM, data)), name
    assert bool(seen) == probed


def test_checksum_registry_is_versioned_and_refuses_unknown_names():
    assert set(CHECKSUMS) == {"sha256", "xxh3-128"}
    assert checksum_bytes("sha256", b"abc").startswith("ba7816bf")
    assert len(checksum_bytes("xxh3-128", b"abc")) == 32
    with pytest.raises(Exception, match="knows"):
        checksum_bytes("md5", b"abc")
