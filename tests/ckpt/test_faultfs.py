"""The fault-injecting file system of storage drills (runwright/ckpt/faultfs.py), on real files:
selected only by its `faulty+` URL, a pass-through while nothing is armed, each fault kind on
the operations its table names with the real errno, faults armed and disarmed from outside while
a file is open, `path` globs, `times` counted across processes, and a broken control file
refused in words."""

import errno
import subprocess
import sys
import textwrap
import time

import fsspec
import pytest

from runwright.ckpt import faultfs
from runwright.ckpt.faultfs import Fault, FaultFileSystem, FaultPlanError
from runwright.ckpt.storage import CheckpointStorage
from runwright.errors import SpecError
from runwright.spec import spec_from_mapping

faultfs.register()


@pytest.fixture
def control(tmp_path, monkeypatch):
    path = tmp_path / "faults.json"
    monkeypatch.setenv(faultfs.CONTROL_ENV, str(path))
    return path


def opened(tmp_path):
    fs, root = fsspec.core.url_to_fs(f"faulty+file://{tmp_path}/root")
    return fs, root


def test_only_the_faulty_prefix_selects_it_and_unarmed_it_passes_through(tmp_path, control):
    fs, root = opened(tmp_path)
    assert isinstance(fs, FaultFileSystem) and fs.target_protocol == "file"
    assert root == f"{tmp_path}/root"
    assert not isinstance(fsspec.core.url_to_fs(f"file://{tmp_path}")[0], FaultFileSystem)
    assert faultfs.inner_url("faulty+s3://bucket/x") == "s3://bucket/x"
    assert faultfs.inner_url(f"file://{tmp_path}") == f"file://{tmp_path}"
    fs.makedirs(f"faulty+file://{root}/a", exist_ok=True)
    with fs.open(f"faulty+file://{root}/a/shard", "wb") as handle:
        handle.write(b"x" * 1000)
    fs.pipe_file(f"{root}/a/COMMITTED", b"{}")
    assert (tmp_path / "root" / "a" / "shard").read_bytes() == b"x" * 1000
    assert sorted(fs.ls(f"faulty+file://{root}/a", detail=False)) == [
        f"{root}/a/COMMITTED",
        f"{root}/a/shard",
    ]
    fs.mv(f"{root}/a/shard", f"{root}/a/moved")
    assert fs.cat_file(f"{root}/a/moved") == b"x" * 1000
    fs.rm(f"{root}/a", recursive=True)
    assert not (tmp_path / "root" / "a").exists()
    with pytest.raises(ValueError, match="faulty\\+file:// or faulty\\+s3://"):
        FaultFileSystem(target_protocol="memory")


@pytest.mark.parametrize(
    ("kind", "fails", "passes", "code"),
    [
        ("full", ["write", "put", "makedirs"], ["open", "close", "rm", "mv"], errno.ENOSPC),
        ("read_only", ["open", "write", "put", "makedirs", "rm", "mv"], ["close"], errno.EROFS),
        ("timeout", ["write", "put"], ["open", "makedirs", "rm", "mv"], errno.ETIMEDOUT),
    ],
)
def test_each_fault_refuses_the_operations_its_table_names(tmp_path, control, kind, fails,
                                                          passes, code):  # fmt: skip
    fs, root = opened(tmp_path)
    fs.makedirs(root, exist_ok=True)
    (tmp_path / "root" / "old").write_bytes(b"kept")
    with fs.open(f"{root}/open-before", "wb") as before:
        faultfs.arm(control, Fault(kind=kind, seconds=0.2))  # armed mid-file, from outside
        operations = {
            "open": lambda: fs.open(f"{root}/new", "wb").close(),
            "write": lambda: before.write(b"y"),
            "close": before.close,
            "put": lambda: fs.pipe_file(f"{root}/put", b"z"),
            "makedirs": lambda: fs.makedirs(f"{root}/sub"),
            "rm": lambda: fs.rm(f"{root}/old"),
            "mv": lambda: fs.mv(f"{root}/open-before", f"{root}/moved"),
        }
        for name in fails:
            started = time.monotonic()
            with pytest.raises(OSError) as raised:
                operations[name]()
            assert raised.value.errno == code, name
            assert f"injected: {kind} fault from {control}" in str(raised.value)
            if kind == "timeout":
                assert time.monotonic() - started >= 0.2  # it blocked before it failed
        for name in passes:  # still armed: what the row leaves out goes through
            operations[name]()
    assert fs.exists(f"faulty+file://{tmp_path}/root/{'old' if 'rm' in fails else 'moved'}")


def test_slow_lengthens_each_matching_file_and_disarming_ends_it(tmp_path, control):
    fs, root = opened(tmp_path)
    fs.makedirs(root, exist_ok=True)
    faultfs.arm(control, Fault(kind="slow", seconds=0.3, path="*/0000000004-*"))
    started = time.monotonic()
    fs.pipe_file(f"{root}/0000000002-g000001-aaaaaaaaaaaa", b"a")  # not matched
    with fs.open(f"{root}/0000000004-g000001-aaaaaaaaaaaa", "wb") as handle:
        handle.write(b"b")
    fs.pipe_file(f"{root}/0000000004-g000001-bbbbbbbbbbbb", b"c")
    assert 0.6 <= time.monotonic() - started < 5.0
    faultfs.disarm(control)
    started = time.monotonic()
    fs.pipe_file(f"{root}/0000000004-g000001-cccccccccccc", b"d")
    assert time.monotonic() - started < 0.3
    assert faultfs.armed(control).faults == []


def test_times_counts_operations_across_processes(tmp_path, control):
    """Two processes make 4 writes each against one `full` fault armed for 3 operations:
    exactly 3 of the 8 fail, and the spent fault leaves the control file."""
    faultfs.arm(control, Fault(kind="full", path="*/shard-*", times=3),
                Fault(kind="read_only", path="*/elsewhere"))  # fmt: skip
    child = textwrap.dedent(f"""
        import errno, sys, fsspec
        from runwright.ckpt import faultfs
        faultfs.register()
        fs, root = fsspec.core.url_to_fs("faulty+file://{tmp_path}/root")
        fs.makedirs(root, exist_ok=True)
        refused = 0
        for i in range(4):
            try:
                fs.pipe_file(f"{{root}}/shard-{{sys.argv[1]}}-{{i}}", b"data")
            except OSError as exc:
                assert exc.errno == errno.ENOSPC
                refused += 1
        print(refused)
    """)
    children = [
        subprocess.Popen([sys.executable, "-c", child, str(n)], stdout=subprocess.PIPE, text=True)
        for n in range(2)
    ]
    refused = [int(c.communicate(timeout=120)[0]) for c in children]
    assert sum(refused) == 3 and all(c.returncode == 0 for c in children)
    assert faultfs.armed(control).faults == [Fault(kind="read_only", path="*/elsewhere")]
    assert len(list((tmp_path / "root").iterdir())) == 5


def test_a_broken_control_file_is_refused_in_words_not_as_a_storage_fault(tmp_path, control):
    fs, root = opened(tmp_path)
    fs.makedirs(root, exist_ok=True)
    control.write_text('{"faults": [{"kind": "on_fire"}]}')
    with pytest.raises(FaultPlanError, match=r"faults\.0\.kind") as raised:
        fs.pipe_file(f"{root}/x", b"x")
    assert not isinstance(raised.value, OSError) and str(control) in str(raised.value)
    control.write_text("{not json")
    with pytest.raises(FaultPlanError, match="remove the file to inject nothing"):
        fs.pipe_file(f"{root}/x", b"x")
    with pytest.raises(ValueError, match="a slow fault needs seconds > 0"):
        Fault(kind="slow")
    control.unlink()
    fs.pipe_file(f"{root}/x", b"x")  # no file: nothing injected


def test_the_spec_takes_a_drill_location_and_the_storage_writes_it_like_an_object_store(
    tmp_path,
):
    def spec(location):
        return spec_from_mapping(
            {
                "name": "drill",
                "code": {"entrypoint": "train.py"},
                "training": {"global_batch_samples": 8, "steps": 10},
                "checkpoint": {"location": location},
            }
        )

    assert spec(f"faulty+file://{tmp_path}/").checkpoint.location == f"faulty+file://{tmp_path}"
    assert spec("faulty+s3://my-bucket/ckpt").checkpoint.location == "faulty+s3://my-bucket/ckpt"
    for bad, says in [
        (f"faulty+{tmp_path}", "a drill location wraps one URL"),
        (f"faulty+faulty+file://{tmp_path}", "a drill location wraps one URL"),
        ("faulty+s3://No_Bucket/x", "is not an S3 bucket name"),
    ]:
        with pytest.raises(SpecError, match=says):
            spec(bad)
    storage = CheckpointStorage(f"faulty+file://{tmp_path}/ckpt")
    assert not storage.is_local  # shards straight into <step>-<id>/, COMMITTED last
    assert storage.write_path(4, "g000001-aaaaaaaaaaaa") == (
        f"faulty+file://{tmp_path}/ckpt/0000000004-g000001-aaaaaaaaaaaa"
    )
