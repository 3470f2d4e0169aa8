"""Residue of any kind never stops a start, a restore or a GC; `ckpt verify` names it and fails
only on a root restore cannot open (issue 28)."""

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from ckpt_helpers import make_state, params, same_params
from typer.testing import CliRunner

from runwright.ckpt import (
    Checkpointer,
    CheckpointRootError,
    LocalFence,
    MemorySink,
    start_generation,
)
from runwright.ckpt.inventory import verify
from runwright.ckpt.storage import CheckpointStorage
from runwright.cli.main import app
from runwright.spec.policies import CheckpointSpec

runner = CliRunner()


def _dead_pid() -> int:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


def _saved(root: Path) -> None:
    """One committed checkpoint of step 1 (seed 1) under generation 1."""
    fence = LocalFence(str(root))
    start_generation(fence, CheckpointStorage(str(root)))
    saver = Checkpointer(str(root), policy=CheckpointSpec(), fence=fence, events=MemorySink())
    saver.save(1, make_state(seed=1))
    saver.close()


def _restart_restores_step_1(root: Path) -> Checkpointer:
    fence = LocalFence(str(root))
    start_generation(fence, CheckpointStorage(str(root)))
    restorer = Checkpointer(str(root), policy=CheckpointSpec(), fence=fence, events=MemorySink())
    fresh = make_state(seed=9)
    result = restorer.restore(fresh)
    assert result is not None and result.step == 1
    assert same_params(fresh, params(make_state(seed=1)))
    return restorer


def _verify_cli(root: Path, *extra: str) -> tuple[int, str]:
    done = runner.invoke(app, ["ckpt", "verify", str(root), *extra])
    return done.exit_code, done.output


def _squeezed(text: str) -> str:
    """Without whitespace: the console wraps long paths at its width."""
    return "".join(text.split())


def test_latest_tmp_left_by_a_kill_does_not_stop_a_restart(tmp_path):
    """The reproduction of issue 28: a SIGKILL inside LocalFence._replace left the pointer's tmp
    file, and every later Checkpointer start died in GC with NotADirectoryError."""
    _saved(tmp_path)
    shutil.copy(tmp_path / "LATEST.json", tmp_path / "LATEST.json.tmp-12345")
    code, output = _verify_cli(tmp_path)
    assert code == 0 and _squeezed("residue: LATEST.json.tmp-12345 (file,") in _squeezed(output)
    code, output = _verify_cli(tmp_path, "--json")
    report = json.loads(output)
    assert code == 0 and report["ok"]
    assert [r["path"] for r in report["residue"]] == ["LATEST.json.tmp-12345"]
    restorer = Checkpointer(str(tmp_path), policy=CheckpointSpec(), events=MemorySink())
    fresh = make_state(seed=9)
    assert restorer.restore(fresh).step == 1
    assert same_params(fresh, params(make_state(seed=1)))


def _file(relative: str, data: bytes = b"x" * 100) -> Callable[[Path], None]:
    def make(root: Path) -> None:
        (root / relative).parent.mkdir(parents=True, exist_ok=True)
        (root / relative).write_bytes(data)

    return make


def _folder(relative: str) -> Callable[[Path], None]:
    def make(root: Path) -> None:
        (root / relative).mkdir(parents=True)
        (root / relative / "part").write_bytes(b"y" * 100)

    return make


def _staging_is_a_file(root: Path) -> None:
    (root / "staging").rmdir()
    (root / "staging").write_text("not a folder")


def _unreadable_commit_record(root: Path) -> None:
    (root / "0000000005-g000001-0123456789ab" / "COMMITTED").mkdir(parents=True)


def _mode_000_folder(root: Path) -> None:
    _folder("locked")(root)
    os.chmod(root / "locked", 0)


DEAD = _dead_pid()
# name -> (what to create, the entry's path, what GC with min age 0 does with it)
RESIDUE: dict[str, tuple[Callable[[Path], None], str, str]] = {
    "latest-tmp-of-dead-pid": (
        _file(f"LATEST.json.tmp-{DEAD}"),
        f"LATEST.json.tmp-{DEAD}",
        "removed",
    ),
    "generation-tmp-of-dead-pid": (
        _file(f"GENERATION.tmp-{DEAD}", b"7\n"),
        f"GENERATION.tmp-{DEAD}",
        "removed",
    ),
    "tmp-folder": (_folder(f"GENERATION.tmp-{DEAD}"), f"GENERATION.tmp-{DEAD}", "removed"),
    "plain-tmp": (_file("notes.tmp"), "notes.tmp", "removed"),
    "dcp-metadata-tmp": (_file(".metadata.tmp"), ".metadata.tmp", "removed"),
    "tmp-without-pid": (_file("LATEST.json.tmp-abc"), "LATEST.json.tmp-abc", "removed"),
    "file-named-like-a-checkpoint": (
        _file("0000000009-g000001-0123456789ab"),
        "0000000009-g000001-0123456789ab",
        "removed",
    ),
    "staging-file": (
        _file("staging/g000001-0123456789ab"),
        "staging/g000001-0123456789ab",
        "removed",
    ),
    "unreadable-commit-record": (
        _unreadable_commit_record,
        "0000000005-g000001-0123456789ab",
        "removed",
    ),
    "stray-folder": (_folder("scratch"), "scratch", "kept"),
    "stray-file": (_file("README.txt"), "README.txt", "kept"),
    "staging-junk-folder": (_folder("staging/junk"), "staging/junk", "kept"),
    "staging-is-a-file": (_staging_is_a_file, "staging", "kept"),
    "symlink-outside": (lambda root: (root / "etc").symlink_to("/etc"), "etc", "kept"),
    "dangling-symlink": (lambda root: (root / "gone").symlink_to(root / "nothing"), "gone", "kept"),
    "symlink-loop": (lambda root: (root / "loop").symlink_to(root / "loop"), "loop", "kept"),
    "tmp-named-symlink": (
        lambda root: (root / f"x.tmp-{DEAD}").symlink_to("/etc/hostname"),
        f"x.tmp-{DEAD}",
        "kept",
    ),
    "fifo": (lambda root: os.mkfifo(root / "pipe"), "pipe", "kept"),
    "mode-000-folder": (_mode_000_folder, "locked", "kept"),
}


# A COMMITTED record that is not a readable file is damage, not what a crash leaves (records are
# written whole): verify fails on it (issue 21), while restore and GC still get past it.
DAMAGE = frozenset({"unreadable-commit-record"})


@pytest.mark.parametrize("kind", list(RESIDUE))
def test_residue_never_stops_a_start_a_restore_or_gc(tmp_path, kind):
    make, relative, verdict = RESIDUE[kind]
    _saved(tmp_path)
    make(tmp_path)
    report = verify(str(tmp_path), None, "full")
    assert report.ok == (kind not in DAMAGE), report
    assert relative in {r.path for r in report.residue} | report.uninspectable.keys(), report
    # a start (GC before the generation write, then the constructor's GC) and a restore
    restorer = _restart_restores_step_1(tmp_path)
    gc = restorer.collect_garbage(min_age_seconds=0)
    assert not gc.failed, gc
    assert gc.removed.keys() <= {relative}
    if verdict == "removed":
        assert not os.path.lexists(tmp_path / relative), gc
    else:
        assert relative in gc.kept and os.path.lexists(tmp_path / relative), gc
    _restart_restores_step_1(tmp_path)


def test_a_live_writers_tmp_is_kept_until_it_is_old(tmp_path):
    _saved(tmp_path)
    own = f"LATEST.json.tmp-{os.getpid()}"
    (tmp_path / own).write_text("{}")
    saver = Checkpointer(str(tmp_path), policy=CheckpointSpec(), events=MemorySink())
    kept = saver.collect_garbage()
    assert "is running" in kept.kept[own] and (tmp_path / own).exists()
    removed = saver.collect_garbage(min_age_seconds=0)
    assert own in removed.removed and not (tmp_path / own).exists()


def test_start_collects_dead_tmp_files_and_fenced_staging_before_advancing(tmp_path):
    _saved(tmp_path)
    (tmp_path / f"GENERATION.tmp-{DEAD}").write_text("5\n")
    staged = tmp_path / "staging" / "g000001-00000000beef"
    staged.mkdir()
    (staged / "__0_0.distcp").write_bytes(b"z" * 4096)
    generation, report = start_generation(
        LocalFence(str(tmp_path)), CheckpointStorage(str(tmp_path))
    )
    assert generation == 2
    assert f"GENERATION.tmp-{DEAD}" in report.removed
    assert "staging/g000001-00000000beef" in report.removed and report.bytes_freed >= 4096
    assert (tmp_path / "GENERATION").read_text() == "2\n"


def _corrupt_latest(root: Path) -> None:
    (root / "LATEST.json").write_text('{"checkpoint_id": ')


def _latest_is_a_folder(root: Path) -> None:
    (root / "LATEST.json").unlink()
    (root / "LATEST.json").mkdir()


def _corrupt_generation(root: Path) -> None:
    (root / "GENERATION").write_text("seven\n")


@pytest.mark.parametrize(
    ("damage", "named"),
    [
        (_corrupt_latest, "LATEST.json"),
        (_latest_is_a_folder, "LATEST.json"),
        (_corrupt_generation, "GENERATION"),
    ],
)
def test_verify_fails_on_a_root_restore_cannot_open(tmp_path, damage, named):
    _saved(tmp_path)
    damage(tmp_path)
    code, output = _verify_cli(tmp_path)
    assert code == 1 and "problem:" in _squeezed(output)
    assert _squeezed(str(tmp_path / named)) in _squeezed(output)
    assert "moveitaside" in _squeezed(output), output
    code, output = _verify_cli(tmp_path, "--json")
    report = json.loads(output)
    assert code == 1 and not report["ok"] and named in report["problems"][0]
    with pytest.raises(CheckpointRootError, match=named):
        restorer = Checkpointer(str(tmp_path), policy=CheckpointSpec(), events=MemorySink())
        restorer.restore(make_state(seed=9))


def test_verify_of_a_missing_root_fails(tmp_path):
    code, output = _verify_cli(tmp_path / "nothing")
    assert code == 2 and "no checkpoint folder" in output
