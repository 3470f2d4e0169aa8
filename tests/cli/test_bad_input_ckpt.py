"""`runwright ckpt ...` against bad input tried as an attacker would (issue 21): every case ends
in one clear message and exit status 2 (bad input) or 1 (verification failed), never a
traceback, a hang or a silent pass, and a read-only command changes nothing under the root.

Every case starts from a copy of one real checkpoint root (a real `Checkpointer` over a tiny
model, two committed checkpoints, the pointer at step 2) and damages it the way the case says.
"""

import hashlib
import json
import os
import pickle
import shutil
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from runwright.ckpt import Checkpointer, LocalFence, MemorySink, TrainState, start_generation
from runwright.ckpt.manifest import CommitRecord, LatestPointer
from runwright.ckpt.storage import CheckpointStorage
from runwright.cli.main import app
from runwright.spec.policies import CheckpointSpec

runner = CliRunner()


def _state() -> TrainState:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 16), torch.nn.Linear(16, 4))
    return TrainState(model=model, optimizer=torch.optim.AdamW(model.parameters()))


@pytest.fixture(scope="module")
def pristine(tmp_path_factory) -> Path:
    """A checkpoint root with steps 1 and 2 committed under generation 1, the pointer at 2."""
    root = tmp_path_factory.mktemp("pristine") / "checkpoints"
    fence = LocalFence(str(root))
    start_generation(fence, CheckpointStorage(str(root)))
    saver = Checkpointer(str(root), policy=CheckpointSpec(), fence=fence, events=MemorySink())
    state = _state()
    saver.save(1, state)
    saver.save(2, state)
    saver.close()
    return root


def tree_hash(root: Path) -> str:
    """Names, kinds and file contents under `root`, links and FIFOs never followed or opened."""
    digest = hashlib.sha256()
    if not os.path.lexists(root):
        return "absent"
    for folder, dirs, files in sorted(os.walk(root)):
        dirs.sort()
        for name in sorted(dirs + files):
            path = os.path.join(folder, name)
            mode = os.lstat(path).st_mode
            digest.update(f"{os.path.relpath(path, root)}:{oct(mode)}\n".encode())
            if os.path.islink(path):
                digest.update(os.readlink(path).encode())
            elif os.path.isfile(path):
                digest.update(Path(path).read_bytes())
    return digest.hexdigest()


# -- damage ------------------------------------------------------------------------------------


def folder(root: Path, step: int) -> Path:
    return next(root.glob(f"{step:010d}-*"))


def edit_json(path: Path, change: Callable[[dict], object]) -> None:
    data = json.loads(path.read_bytes())
    change(data)
    path.write_text(json.dumps(data))


def recommit(root: Path, step: int) -> None:
    """Make COMMITTED (and the pointer, if it names this folder) match manifest.json again, as
    an attacker who edits a manifest would."""
    where = folder(root, step)
    sha = hashlib.sha256((where / "manifest.json").read_bytes()).hexdigest()
    edit_json(where / "COMMITTED", lambda d: d.update(manifest_sha256=sha))
    latest = root / "LATEST.json"
    if json.loads(latest.read_bytes())["folder"] == where.name:
        edit_json(latest, lambda d: d.update(manifest_sha256=sha))


def manifest_edit(change: Callable[[dict], object], step: int = 2) -> Callable[[Path], None]:
    def damage(root: Path) -> None:
        edit_json(folder(root, step) / "manifest.json", change)
        recommit(root, step)

    return damage


def entry(data: dict, name: str) -> dict:
    return next(f for f in data["files"] if f["name"] == name)


def drop_entry(name: str) -> Callable[[dict], object]:
    return lambda d: d.update(files=[f for f in d["files"] if f["name"] != name])


def first_key(data: dict) -> str:
    return sorted(data["logical_keys"])[0]


def write(relative: str, data: bytes, step: int | None = None) -> Callable[[Path], None]:
    def damage(root: Path) -> None:
        base = folder(root, step) if step is not None else root
        path = base / relative
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        elif os.path.lexists(path):
            path.unlink()
        path.write_bytes(data)

    return damage


def replace_with(relative: str, kind: str, step: int | None = None) -> Callable[[Path], None]:
    """Put a folder, a FIFO, a 65 MiB sparse file or a link to /etc/passwd in a file's place."""

    def damage(root: Path) -> None:
        path = (folder(root, step) if step is not None else root) / relative
        path.unlink()
        if kind == "folder":
            path.mkdir()
        elif kind == "fifo":
            os.mkfifo(path)
        elif kind == "huge":
            with open(path, "wb") as handle:
                handle.truncate(65 << 20)
        else:
            path.symlink_to("/etc/passwd")

    return damage


def edit(relative: str, change: Callable[[dict], object], step: int | None = None):
    def damage(root: Path) -> None:
        edit_json((folder(root, step) if step is not None else root) / relative, change)

    return damage


def remove(relative: str, step: int | None = None) -> Callable[[Path], None]:
    def damage(root: Path) -> None:
        ((folder(root, step) if step is not None else root) / relative).unlink()

    return damage


def rename_folder(step: int, new_name: Callable[[str], str]) -> Callable[[Path], None]:
    def damage(root: Path) -> None:
        old = folder(root, step)
        old.rename(root / new_name(old.name))

    return damage


def point_at_step_1_uncommitted(root: Path) -> None:
    step_1 = folder(root, 1)
    record = json.loads((step_1 / "COMMITTED").read_bytes())
    (step_1 / "COMMITTED").unlink()
    record.pop("committed_unix_seconds")
    (root / "LATEST.json").write_text(json.dumps(record))


def truncate_shard(root: Path) -> None:
    shard = folder(root, 2) / "__0_0.distcp"
    shard.write_bytes(shard.read_bytes()[:-10])


class _Boom:
    def __reduce__(self):
        return (os.system, ("touch /tmp/runwright-issue21-pwned",))


def malicious_metadata(root: Path) -> None:
    """A `.metadata` that runs a command when unpickled, with the manifest re-committed to
    its size and checksum so only the unpickler stands between it and execution."""
    where = folder(root, 2)
    raw = pickle.dumps(_Boom())
    (where / ".metadata").write_bytes(raw)
    sha = hashlib.sha256(raw).hexdigest()

    def change(data: dict) -> None:
        data["checksum_algorithm"] = "sha256"
        for item in data["files"]:
            path = where / item["name"]
            item["size_bytes"] = path.stat().st_size
            item["checksum"] = hashlib.sha256(path.read_bytes()).hexdigest()
        assert entry(data, ".metadata")["checksum"] == sha

    manifest_edit(change)(root)


def empty_root(root: Path) -> None:
    shutil.rmtree(root)
    root.mkdir()


def only_generation(root: Path) -> None:
    empty_root(root)
    (root / "GENERATION").write_text("1\n")


def root_is_file(root: Path) -> None:
    shutil.rmtree(root)
    root.write_text("not a folder")


def root_missing(root: Path) -> None:
    shutil.rmtree(root)


def not_a_root(root: Path) -> None:
    """A folder GC must not touch: a home-like folder with an old `.tmp` and a `staging/`-less
    layout."""
    other = root.parent / "home"
    other.mkdir()
    (other / "notes.tmp").write_text("mine")
    os.utime(other / "notes.tmp", (0, 0))
    (other / "documents").mkdir()


def nothing(root: Path) -> None:
    return None


def bad_config(text: str) -> Callable[[Path], None]:
    def damage(root: Path) -> None:
        (root.parent / "config.json").write_text(text)

    return damage


def out_is_file(root: Path) -> None:
    (root.parent / "out").write_text("a file")


# -- the table ---------------------------------------------------------------------------------

VERIFY = ("ckpt", "verify", "{root}")
VERIFY_JSON = ("ckpt", "verify", "{root}", "--json")
EXPORT = ("ckpt", "export", "{root}", "--out", "{tmp}/out")


@dataclass(frozen=True)
class Case:
    id: str
    damage: Callable[[Path], None]
    code: int
    needle: str
    """What the message must name (whitespace ignored: the console wraps long lines)."""
    args: tuple[str, ...] = VERIFY
    read_only: bool = True
    watch: tuple[str, ...] = field(default=())
    """Paths under the case's folder that must not exist afterwards."""


CASES = [
    # a manifest edited and re-committed: the checks against the data and DCP's metadata
    Case(
        "manifest-size-edited",
        manifest_edit(lambda d: entry(d, "__0_0.distcp").update(size_bytes=5)),
        1,
        "__0_0.distcp",
    ),
    Case(
        "manifest-checksum-edited",
        manifest_edit(lambda d: entry(d, "__0_0.distcp").update(checksum="0" * 32)),
        1,
        "checksummismatch",
    ),
    Case("manifest-drops-shard", manifest_edit(drop_entry("__0_0.distcp")), 1, "__0_0.distcp"),
    Case(
        "manifest-drops-sidecar", manifest_edit(drop_entry("__0_files.json")), 1, "__0_files.json"
    ),
    Case("manifest-drops-dcp-metadata", manifest_edit(drop_entry(".metadata")), 1, ".metadata"),
    Case(
        "manifest-drops-logical-key",
        manifest_edit(lambda d: d["logical_keys"].pop(first_key(d))),
        1,
        "notinthemanifest",
    ),
    Case(
        "manifest-adds-logical-key",
        manifest_edit(lambda d: d["logical_keys"].update({"model.extra": {"kind": "object"}})),
        1,
        "model.extra",
    ),
    Case(
        "manifest-key-shape-edited",
        manifest_edit(lambda d: d["logical_keys"][first_key(d)].update(shape=[999])),
        1,
        "differinshape",
    ),
    Case(
        "manifest-negative-size",
        manifest_edit(lambda d: entry(d, "__0_0.distcp").update(size_bytes=-1)),
        1,
        "size_bytes",
    ),
    Case(
        "manifest-name-traversal",
        manifest_edit(lambda d: entry(d, "__0_0.distcp").update(name="../../x")),
        1,
        "pathseparator",
    ),
    Case(
        "manifest-name-absolute",
        manifest_edit(lambda d: entry(d, "__0_0.distcp").update(name="/etc/passwd")),
        1,
        "pathseparator",
    ),
    Case(
        "manifest-name-dotdot",
        manifest_edit(lambda d: entry(d, "__0_0.distcp").update(name="..")),
        1,
        "notafile",
    ),
    Case(
        "manifest-step-edited", manifest_edit(lambda d: d.update(step=7)), 1, "step:foldernamesays2"
    ),
    Case(
        "manifest-id-edited",
        manifest_edit(lambda d: d.update(checkpoint_id="g000001-0123456789ab")),
        1,
        "checkpoint_id",
    ),
    Case(
        "manifest-generation-edited",
        manifest_edit(lambda d: d.update(generation=0)),
        1,
        "generation",
    ),
    Case(
        "manifest-unknown-checksum",
        manifest_edit(lambda d: d.update(checksum_algorithm="crc0")),
        1,
        "checksum_algorithm",
    ),
    Case(
        "manifest-file-listed-twice",
        manifest_edit(lambda d: d["files"].append(d["files"][0])),
        1,
        "twice",
    ),
    Case(
        "manifest-world-size-edited",
        manifest_edit(lambda d: d.update(world_size=2)),
        1,
        "__1_files.json",
    ),
    Case(
        "manifest-world-size-huge",
        manifest_edit(lambda d: d.update(world_size=10**12)),
        1,
        "world_size",
    ),
    Case("manifest-garbage", write("manifest.json", b"\x00garbage", step=2), 1, "manifest.json"),
    Case("manifest-missing", remove("manifest.json", step=2), 1, "manifest.json"),
    Case("manifest-huge", replace_with("manifest.json", "huge", step=2), 1, "morethanthe67108864"),
    Case("manifest-fifo", replace_with("manifest.json", "fifo", step=2), 1, "notaregularfile"),
    Case("manifest-symlink-out", replace_with("manifest.json", "link", step=2), 1, "manifest.json"),
    # the commit record
    Case("commit-garbage", write("COMMITTED", b"{garbage", step=1), 1, "COMMITTEDisunreadable"),
    Case("commit-missing-on-latest", remove("COMMITTED", step=2), 1, "notcommitted(nocommitrecord"),
    Case(
        "commit-wrong-sha",
        edit("COMMITTED", lambda d: d.update(manifest_sha256="0" * 64), step=1),
        1,
        "doesnotmatchthesha256",
    ),
    Case(
        "commit-names-other-folder",
        edit("COMMITTED", lambda d: d.update(folder="0000000009-g000001-0123456789ab"), step=1),
        1,
        "namesfolder",
    ),
    Case(
        "commit-folder-traversal",
        edit("COMMITTED", lambda d: d.update(folder="../../etc"), step=1),
        1,
        "pathseparator",
    ),
    Case(
        "commit-step-edited",
        edit("COMMITTED", lambda d: d.update(step=5), step=1),
        1,
        "step:foldernamesays1,COMMITTED5",
    ),
    Case("commit-negative-step", edit("COMMITTED", lambda d: d.update(step=-1), step=1), 1, "step"),
    Case("commit-is-folder", replace_with("COMMITTED", "folder", step=1), 1, "notaregularfile"),
    Case("commit-fifo", replace_with("COMMITTED", "fifo", step=1), 1, "notaregularfile"),
    Case("commit-huge", replace_with("COMMITTED", "huge", step=1), 1, "morethanthe67108864"),
    # the latest pointer
    Case(
        "latest-garbage",
        write("LATEST.json", b'{"checkpoint_id": '),
        1,
        "LATEST.jsonisnotalatestpointer",
    ),
    Case("latest-not-utf8", write("LATEST.json", b"\xff\xfe{"), 1, "LATEST.json"),
    Case("latest-not-object", write("LATEST.json", b"[1, 2]"), 1, "LATEST.json"),
    Case(
        "latest-dangling",
        edit("LATEST.json", lambda d: d.update(folder="0000000009-g000001-0123456789ab")),
        1,
        "whichdoesnotexist",
    ),
    Case(
        "latest-folder-traversal",
        edit("LATEST.json", lambda d: d.update(folder="../../etc")),
        1,
        "pathseparator",
    ),
    Case(
        "latest-folder-absolute",
        edit("LATEST.json", lambda d: d.update(folder="/etc")),
        1,
        "pathseparator",
    ),
    Case(
        "latest-wrong-sha",
        edit("LATEST.json", lambda d: d.update(manifest_sha256="0" * 64)),
        1,
        "manifest_sha256",
    ),
    Case("latest-wrong-step", edit("LATEST.json", lambda d: d.update(step=1)), 1, "step1"),
    Case(
        "latest-wrong-id",
        edit("LATEST.json", lambda d: d.update(checkpoint_id="g000001-0123456789ab")),
        1,
        "checkpoint_idg000001-0123456789ab",
    ),
    Case("latest-names-uncommitted", point_at_step_1_uncommitted, 1, "whichisnotcommitted"),
    Case(
        "latest-generation-ahead",
        edit("LATEST.json", lambda d: d.update(generation=5)),
        1,
        "generation",
    ),
    Case("latest-is-folder", replace_with("LATEST.json", "folder"), 1, "LATEST.json"),
    Case("latest-fifo", replace_with("LATEST.json", "fifo"), 1, "LATEST.json"),
    Case("latest-huge", replace_with("LATEST.json", "huge"), 1, "morethanthe67108864"),
    # the generation file
    Case("generation-garbage", write("GENERATION", b"seven\n"), 1, "GENERATIONholds"),
    Case("generation-negative", write("GENERATION", b"-3\n"), 1, "GENERATIONholds"),
    Case(
        "generation-non-ascii-digits",
        write("GENERATION", "\u0663\n".encode()),
        1,
        "GENERATIONholds",
    ),
    Case("generation-empty", write("GENERATION", b""), 1, "GENERATIONholds"),
    Case("generation-40-digits", write("GENERATION", b"9" * 40), 1, "GENERATIONholds"),
    Case("generation-not-utf8", write("GENERATION", b"\xff"), 1, "GENERATION"),
    Case("generation-rolled-back", write("GENERATION", b"0\n"), 1, "thegenerationwentback"),
    Case("generation-is-folder", replace_with("GENERATION", "folder"), 1, "GENERATION"),
    Case("generation-fifo", replace_with("GENERATION", "fifo"), 1, "GENERATION"),
    # checkpoint folders and their files
    Case(
        "folder-renamed-other-step",
        rename_folder(1, lambda n: "0000000007" + n[10:]),
        1,
        "namesfolder",
    ),
    Case("folder-renamed-plain", rename_folder(1, lambda n: "backup"), 1, "renamed"),
    Case(
        "folder-latest-renamed",
        rename_folder(2, lambda n: "0000000003" + n[10:]),
        1,
        "whichdoesnotexist",
    ),
    Case("shard-truncated", truncate_shard, 1, "__0_0.distcp:size"),
    Case(
        "shard-extra-file",
        write("__0_9.distcp", b"smuggled", step=2),
        1,
        "__0_9.distcp:filenotlisted",
    ),
    Case("shard-symlink-out", replace_with("__0_0.distcp", "link", step=2), 1, "asymlink"),
    Case("shard-fifo", replace_with("__0_0.distcp", "fifo", step=2), 1, "aother,notaregularfile"),
    Case("dcp-metadata-malicious", malicious_metadata, 1, "namesposix.system"),
    Case("dcp-metadata-garbage", write(".metadata", b"\x80\x04garbage", step=2), 1, ".metadata"),
    # roots
    Case("root-empty", empty_root, 1, "nothingwaschecked"),
    Case("root-only-generation", only_generation, 1, "nothingwaschecked"),
    Case("root-is-file", root_is_file, 2, "isafile,notacheckpointfolder"),
    Case("root-missing", root_missing, 2, "nocheckpointfolder"),
    Case("verify-unknown-ref", nothing, 2, "nocommittedcheckpoint'99'", (*VERIFY, "99")),
    Case("verify-json-garbage-latest", write("LATEST.json", b"{"), 1, "LATEST.json", VERIFY_JSON),
    # options refused by their type
    Case("verify-mode-bogus", nothing, 2, "--mode", (*VERIFY, "--mode", "bogus")),
    Case(
        "gc-max-entries-negative",
        nothing,
        2,
        "--max-entries",
        ("ckpt", "gc", "{root}", "--max-entries", "-1"),
    ),
    Case(
        "gc-max-entries-zero",
        nothing,
        2,
        "--max-entries",
        ("ckpt", "gc", "{root}", "--max-entries", "0"),
    ),
    Case(
        "gc-min-age-negative",
        nothing,
        2,
        "--min-age-seconds",
        ("ckpt", "gc", "{root}", "--min-age-seconds", "-5"),
    ),
    Case(
        "gc-min-age-nan",
        nothing,
        2,
        "--min-age-seconds",
        ("ckpt", "gc", "{root}", "--min-age-seconds", "nan"),
    ),
    Case(
        "gc-min-age-inf",
        nothing,
        2,
        "--min-age-seconds",
        ("ckpt", "gc", "{root}", "--min-age-seconds", "inf"),
    ),
    Case(
        "gc-not-a-root",
        not_a_root,
        2,
        "notacheckpointroot",
        ("ckpt", "gc", "{tmp}/home", "--min-age-seconds", "0"),
        watch=("home/FENCE.lock",),
    ),
    Case("gc-root-is-file", root_is_file, 2, "notacheckpointfolder", ("ckpt", "gc", "{root}")),
    Case(
        "gc-garbage-generation",
        write("GENERATION", b"x"),
        2,
        "GENERATION",
        ("ckpt", "gc", "{root}"),
    ),
    Case(
        "gc-garbage-latest", write("LATEST.json", b"x"), 2, "LATEST.json", ("ckpt", "gc", "{root}")
    ),
    # run ids
    Case(
        "list-run-id-traversal",
        nothing,
        2,
        "runid'../../etc'",
        ("ckpt", "list", "../../etc", "--root", "{tmp}"),
    ),
    Case("list-run-id-dotdot", nothing, 2, "runid'..'", ("ckpt", "list", "..", "--root", "{tmp}")),
    Case("list-run-id-empty", nothing, 2, "runid''", ("ckpt", "list", "", "--root", "{tmp}")),
    Case("list-run-id-nul", nothing, 2, "NUL", ("ckpt", "list", "r\x001", "--root", "{tmp}")),
    Case(
        "list-run-id-too-long",
        nothing,
        2,
        "atmost200characters",
        ("ckpt", "list", "r" * 300, "--root", "{tmp}"),
    ),
    Case(
        "inspect-run-id-absolute",
        nothing,
        2,
        "isnotarunid",
        ("ckpt", "inspect", "/etc", "--root", "{tmp}"),
    ),
    Case(
        "list-unknown-run",
        nothing,
        2,
        "nocheckpointfolder",
        ("ckpt", "list", "nosuchrun", "--root", "{tmp}"),
    ),
    # list and inspect over broken records
    Case(
        "list-garbage-latest",
        write("LATEST.json", b"{"),
        2,
        "LATEST.json",
        ("ckpt", "list", "{root}"),
    ),
    Case(
        "list-json-garbage-latest",
        write("LATEST.json", b"\xff"),
        2,
        "LATEST.json",
        ("ckpt", "list", "{root}", "--json"),
    ),
    Case(
        "list-garbage-generation",
        write("GENERATION", b"x"),
        2,
        "GENERATION",
        ("ckpt", "list", "{root}"),
    ),
    Case(
        "list-latest-fifo",
        replace_with("LATEST.json", "fifo"),
        2,
        "notaregularfile",
        ("ckpt", "list", "{root}"),
    ),
    Case(
        "inspect-garbage-latest",
        write("LATEST.json", b"[]"),
        2,
        "LATEST.json",
        ("ckpt", "inspect", "{root}"),
    ),
    Case(
        "inspect-unknown-checkpoint",
        nothing,
        2,
        "nocommittedcheckpoint'99'",
        ("ckpt", "inspect", "{root}", "99"),
    ),
    Case(
        "inspect-root-is-file",
        root_is_file,
        2,
        "notacheckpointfolder",
        ("ckpt", "inspect", "{root}"),
    ),
    # export
    Case(
        "export-config-malformed",
        bad_config("{bad"),
        2,
        "config.jsonisnotvalidJSON",
        (*EXPORT, "--model-config", "{tmp}/config.json"),
    ),
    Case(
        "export-config-not-object",
        bad_config("[1]"),
        2,
        "JSONlist,notanobject",
        (*EXPORT, "--model-config", "{tmp}/config.json"),
    ),
    Case(
        "export-config-nan",
        bad_config('{"x": NaN}'),
        2,
        "NaNisnotJSON",
        (*EXPORT, "--model-config", "{tmp}/config.json"),
    ),
    Case(
        "export-config-deep",
        bad_config("[" * 100_000),
        2,
        "config.json",
        (*EXPORT, "--model-config", "{tmp}/config.json"),
    ),
    Case(
        "export-config-missing",
        nothing,
        2,
        "nosuchfile",
        (*EXPORT, "--model-config", "{tmp}/none.json"),
    ),
    Case(
        "export-config-is-folder",
        nothing,
        2,
        "notaregularfile",
        (*EXPORT, "--model-config", "{tmp}"),
    ),
    Case("export-out-is-file", out_is_file, 2, "existsandisnotafolder", EXPORT),
    Case(
        "export-out-inside-root",
        nothing,
        2,
        "insidethecheckpointfolder",
        ("ckpt", "export", "{root}", "--out", "{root}/x"),
    ),
    Case(
        "export-tokenizer-missing", nothing, 2, "tokenizer", (*EXPORT, "--tokenizer", "{tmp}/none")
    ),
    Case("export-damaged-checkpoint", truncate_shard, 2, "notexporting", EXPORT),
]


def _squeezed(text: str) -> str:
    return "".join(text.split())


def _args(case: Case, root: Path) -> list[str]:
    return [a.replace("{root}", str(root)).replace("{tmp}", str(root.parent)) for a in case.args]


@pytest.mark.timeout(60)
@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_bad_input_is_refused_clearly(pristine, tmp_path, case):
    assert len({c.id for c in CASES}) == len(CASES)
    root = tmp_path / "checkpoints"
    shutil.copytree(pristine, root, symlinks=True)
    case.damage(root)
    before = tree_hash(root), tree_hash(tmp_path)
    done = runner.invoke(app, _args(case, root))
    output = done.output
    assert done.exception is None or isinstance(done.exception, SystemExit), output
    assert "Traceback" not in output, output
    assert done.exit_code == case.code, output
    assert _squeezed(case.needle) in _squeezed(output), output
    if case.read_only:
        assert (tree_hash(root), tree_hash(tmp_path)) == before, "a read-only command wrote"
    for relative in case.watch:
        assert not os.path.lexists(tmp_path / relative)
    assert not (tmp_path / "out").is_dir() and not list(tmp_path.glob("out.partial-*"))
    assert not os.path.exists("/tmp/runwright-issue21-pwned")


def test_a_folder_interrupted_before_its_commit_record_stays_residue(pristine, tmp_path):
    """Issue 28's rule holds: a crash between MOVE and WRITE_COMMIT leaves a folder without
    COMMITTED that restore ignores and GC removes. `verify` names it as residue and does not
    fail on it (the pointer names another, committed folder)."""
    root = tmp_path / "checkpoints"
    shutil.copytree(pristine, root)
    remove("COMMITTED", step=1)(root)
    done = runner.invoke(app, ["ckpt", "verify", str(root)])
    assert done.exit_code == 0, done.output
    assert "nocommitrecord(interruptedbeforecommit)" in _squeezed(done.output)


def test_the_pristine_root_verifies(pristine):
    done = runner.invoke(app, ["ckpt", "verify", str(pristine), "--json"])
    report = json.loads(done.stdout)
    assert done.exit_code == 0 and report["ok"] and len(report["checkpoints"]) == 2, done.output


# -- fuzzing the records -----------------------------------------------------------------------

RECORDS = ("manifest.json", "COMMITTED", "LATEST.json", "GENERATION")
_JSON = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**70), 2**70)
    | st.floats(allow_nan=False)
    | st.text(max_size=12),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=12,
)


def _record_path(root: Path, record: str) -> Path:
    return root / record if record in ("LATEST.json", "GENERATION") else folder(root, 2) / record


def _still_valid(record: str, original: bytes, mutated: bytes) -> bool:
    """Whether the mutated bytes are a record restore and verify must accept: the same bytes,
    the same commit record or pointer (a commit time may differ), a generation not behind
    the pointer's."""
    if mutated == original:
        return True
    if record == "manifest.json":
        return False  # its sha256 is in the commit record
    if record == "GENERATION":
        text = mutated.decode("ascii", "replace").strip(" \t\n\r\f\v")
        return text.isascii() and text.isdigit() and len(text) <= 18 and int(text) >= 1
    model = CommitRecord if record == "COMMITTED" else LatestPointer
    try:
        parsed = model.model_validate_json(mutated)
    except ValueError:
        return False
    expected = model.model_validate_json(original)
    ignore = {"committed_unix_seconds"}
    return parsed.model_dump(exclude=ignore) == expected.model_dump(exclude=ignore)


@st.composite
def mutations(draw, originals: dict[str, bytes]) -> tuple[str, bytes]:
    record = draw(st.sampled_from(RECORDS))
    original = originals[record]
    how = draw(st.sampled_from(["bytes", "json", "field", "drop", "flip", "cut", "number"]))
    if how == "bytes":
        return record, draw(st.binary(max_size=200))
    if how == "json":
        return record, json.dumps(draw(_JSON)).encode()
    if how == "number":
        return record, str(draw(st.integers(-(2**64), 2**64))).encode() + b"\n"
    if how == "cut":
        return record, original[: draw(st.integers(0, max(0, len(original) - 1)))]
    if how == "flip":
        at = draw(st.integers(0, len(original) - 1))
        value = draw(st.integers(0, 255))
        return record, original[:at] + bytes([value]) + original[at + 1 :]
    data = json.loads(original) if record != "GENERATION" else None
    if not isinstance(data, dict):
        return record, original + draw(st.binary(min_size=1, max_size=8))
    key = draw(st.sampled_from(sorted(data)))
    if how == "drop":
        data.pop(key)
    else:
        data[key] = draw(_JSON)
    return record, json.dumps(data).encode()


def test_fuzzed_records_never_pass_silently(pristine):
    originals = {r: _record_path(pristine, r).read_bytes() for r in RECORDS}

    @settings(
        max_examples=60,
        deadline=None,
        database=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )
    @given(mutations(originals))
    def check(mutation: tuple[str, bytes]) -> None:
        record, mutated = mutation
        with tempfile.TemporaryDirectory() as scratch:
            root = Path(scratch) / "checkpoints"
            shutil.copytree(pristine, root)
            _record_path(root, record).write_bytes(mutated)
            before = tree_hash(root)
            verified = runner.invoke(app, ["ckpt", "verify", str(root), "--json"])
            listed = runner.invoke(app, ["ckpt", "list", str(root)])
            assert tree_hash(root) == before
        for done in (verified, listed):
            assert done.exception is None or isinstance(done.exception, SystemExit), done.output
            assert "Traceback" not in done.output
        valid = _still_valid(record, originals[record], mutated)
        assert verified.exit_code == (0 if valid else 1) or (
            not valid and verified.exit_code == 2
        ), (record, mutated, verified.output)
        assert listed.exit_code in {0, 2}, listed.output

    check()
