"""The build pipeline: sources, quarantine, determinism, resumable partitions, eval isolation."""

import json
import os
import random
import shutil
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from tokenizers import Tokenizer
from typer.testing import CliRunner

import runwright.data.builder.partitions as partitions_module
from runwright.cli.main import app
from runwright.data import BuildError, DataLoader, build_dataset, open_shard, verify_dataset
from runwright.data.builder.partitions import with_retries
from runwright.data.builder.sources import python_prose
from runwright.spec import DataSpec

EXAMPLES = Path(__file__).resolve().parents[3] / "examples" / "data"


def test_bad_records_are_quarantined_and_the_build_finishes(tmp_path: Path) -> None:
    result = build_dataset(EXAMPLES / "tiny.yaml", tmp_path)
    assert result.quarantined == 3
    lines = (result.folder / "quarantine" / "records.jsonl").read_text().splitlines()
    reasons = sorted(json.loads(line)["reason"] for line in lines)
    assert reasons == ["invalid-json", "schema-mismatch", "undecodable-bytes"]
    stats = result.manifest.statistics
    assert stats.quarantined == {"notes": 1, "records": 2}
    assert stats.exact_duplicates["records"] == 1
    assert verify_dataset(result.folder).ok


def test_same_recipe_and_inputs_give_the_same_id(tmp_path: Path) -> None:
    first = build_dataset(EXAMPLES / "tiny.yaml", tmp_path / "a")
    second = build_dataset(EXAMPLES / "tiny.yaml", tmp_path / "b")
    assert first.dataset_id == second.dataset_id
    assert first.folder != second.folder
    again = build_dataset(EXAMPLES / "tiny.yaml", tmp_path / "a")
    assert again.partitions_run == 0 and again.partitions_reused == 2
    assert again.dataset_id == first.dataset_id
    # Nothing changed, so nothing was assembled again: the published folder is returned as is.
    assert again.manifest == first.manifest and again.quarantined == first.quarantined
    text = (first.folder / "manifest.json").read_text()
    hashed = json.loads(text)
    hashed.pop("build")
    assert str(tmp_path) not in json.dumps(hashed)


def test_verify_and_cli_name_a_corrupted_shard(tmp_path: Path) -> None:
    result = build_dataset(EXAMPLES / "tiny.yaml", tmp_path)
    victim = result.manifest.shards[-1].name
    path = result.folder / f"{victim}.bin"
    data = bytearray(path.read_bytes())
    data[0] ^= 0x01
    path.write_bytes(bytes(data))
    report = verify_dataset(result.folder)
    assert not report.ok and report.corrupt == [victim]
    out = CliRunner().invoke(app, ["data", "verify", str(result.folder), "--json"])
    assert out.exit_code == 1
    verdicts = {s["name"]: s["ok"] for s in json.loads(out.stdout)["shards"]}
    assert verdicts[victim] is False and sum(not ok for ok in verdicts.values()) == 1


def test_cli_build_and_inspect_json(tmp_path: Path) -> None:
    runner = CliRunner()
    built = runner.invoke(
        app, ["data", "build", str(EXAMPLES / "tiny.yaml"), "--root", str(tmp_path), "--json"]
    )
    assert built.exit_code == 0, built.output
    dataset_id = json.loads(built.stdout)["dataset_id"]
    shown = runner.invoke(
        app, ["data", "inspect", str(tmp_path / "datasets" / dataset_id), "--json"]
    )
    info = json.loads(shown.stdout)
    assert info["dataset_id"] == dataset_id
    assert {r["source"] for r in info["sources"]} == {"notes", "records"}
    missing = runner.invoke(app, ["data", "inspect", str(tmp_path / "nope")])
    assert missing.exit_code == 2 and "manifest.json" in missing.output


def test_retries_back_off_and_give_up() -> None:
    calls, sleeps = [], []

    def flaky() -> str:
        calls.append(1)
        if len(calls) < 3:
            raise TimeoutError("slow store")
        return "ok"

    assert with_retries(flaky, 3, 0.5, sleep=sleeps.append) == "ok"
    assert sleeps == [0.5, 1.0]
    with pytest.raises(TimeoutError):
        with_retries(lambda: (_ for _ in ()).throw(TimeoutError()), 2, 0.1, sleep=sleeps.append)


def _write_recipe(folder: Path, body: str) -> Path:
    path = folder / "recipe.yaml"
    path.write_text(body)
    return path


def test_a_failed_partition_is_the_only_one_redone(tmp_path: Path, monkeypatch) -> None:
    inputs = tmp_path / "in"
    inputs.mkdir()
    for k in range(4):
        (inputs / f"{k}.txt").write_text(f"document number {k} " * 20)
    recipe = _write_recipe(
        tmp_path,
        "name: parts\nsources:\n  - {name: text, paths: ['in/*.txt'], files_per_partition: 1}\n"
        "tokenizer: {train: {vocab_size: 300, min_frequency: 1}}\n"
        "eval: {fraction: 0}\nbuild: {workers: 1, max_attempts: 2, backoff_seconds: 0}\n",
    )
    real = partitions_module.read_bytes

    def failing(url: str) -> bytes:
        if url.endswith("2.txt"):
            raise TimeoutError("object store timed out")
        return real(url)

    monkeypatch.setattr(partitions_module, "read_bytes", failing)
    with pytest.raises(BuildError, match="text-00002"):
        build_dataset(recipe, tmp_path / "root")
    monkeypatch.setattr(partitions_module, "read_bytes", real)
    result = build_dataset(recipe, tmp_path / "root")
    assert (result.partitions_run, result.partitions_reused) == (1, 3)
    assert result.manifest.statistics.splits["train"]["text"].documents == 4


def test_python_prose_extracts_docstrings_and_comments() -> None:
    source = '"""Module doc."""\n# a comment\ndef f():\n    """Function doc."""\n    return 1\n'
    assert python_prose(source) == "Module doc.\n\na comment\n\nFunction doc."
    assert python_prose("print 'py2'  # old\n") == "old"


def test_sources_parquet_python_docs_and_eval_isolation(tmp_path: Path) -> None:
    code = tmp_path / "code"
    code.mkdir()
    words = [
        "alpha",
        "beta",
        "gamma",
        "delta",
        "epsilon",
        "zeta",
        "eta",
        "theta",
        "iota",
        "kappa",
        "lambda",
        "mu",
    ]
    for k in range(30):
        topic = " ".join(f"{w}{k}" for w in words * 3)
        # A near-duplicate pair per topic: the second copy has one extra word at the end.
        (code / f"m{k:02d}a.py").write_text(f'"""topic{k} {topic}"""\nx = {k}\n')
        (code / f"m{k:02d}b.py").write_text(f'"""topic{k} {topic} extra"""\nx = {k}\n')
    table = pa.table({"content": [f"parquet row {i} " * 10 for i in range(20)]})
    pq.write_table(table, tmp_path / "rows.parquet")
    pq.write_table(pa.table({"other": ["x"]}), tmp_path / "wrong.parquet")
    recipe = _write_recipe(
        tmp_path,
        """
name: mixed
sources:
  - {name: prose, kind: python-docs-v1, paths: ["code/*.py"]}
  - {name: rows, kind: parquet-v1, paths: ["*.parquet"], text_field: content}
dedup: {near: {threshold: 0.7, num_perm: 128, shingle_words: 2}}
eval: {fraction: 0.4, seed: 1}
tokenizer: {train: {vocab_size: 400, min_frequency: 1}}
build: {workers: 2}
""",
    )
    result = build_dataset(recipe, tmp_path / "root")
    manifest = result.manifest
    assert manifest.statistics.quarantined["rows"] == 1  # wrong.parquet: schema mismatch
    assert manifest.statistics.splits["train"]["rows"].documents > 0
    boundary = manifest.split
    assert boundary.train_removed_as_eval_duplicates > 0
    tok = Tokenizer.from_file(str(result.folder / "tokenizer.json"))

    def topics(split: str) -> set[str]:
        found = set()
        for shard in manifest.shards:
            if shard.source == "prose" and shard.split == split:
                opened = open_shard(result.folder / shard.name)
                for i in range(opened.documents):
                    text = tok.decode(opened.document(i).tolist())
                    found.add(text.split()[0])
        return found

    train, evals = topics("train"), topics("eval")
    assert train and evals and not train & evals
    # The built dataset feeds the loader directly.
    data = DataSpec(sequence_length=32, mixture={"sources": [{"name": "prose", "weight": 1}]})
    with DataLoader(result.folder, data, global_batch_samples=2) as loader:
        batch = next(loader)
        assert int(batch.tokens.max()) < loader.vocab_size
        assert np.isin(batch.tokens.numpy(), np.arange(loader.vocab_size)).all()
    shutil.rmtree(tmp_path / "root" / "datasets" / ".work")


def test_a_rebuild_reassembles_when_the_dataset_or_tokenizer_changed(tmp_path: Path) -> None:
    first = build_dataset(EXAMPLES / "tiny.yaml", tmp_path)
    shutil.rmtree(first.folder)  # the published dataset is gone: assemble it again
    again = build_dataset(EXAMPLES / "tiny.yaml", tmp_path)
    assert again.dataset_id == first.dataset_id and (again.folder / "manifest.json").exists()
    assert again.manifest.build.created_at >= first.manifest.build.created_at
    # A loaded tokenizer whose file changes gives another dataset, partitions reused or not.
    tok_file = tmp_path / "tok.json"
    shutil.copyfile(first.folder / "tokenizer.json", tok_file)
    recipe = (
        (EXAMPLES / "tiny.yaml")
        .read_text()
        .replace(
            "tokenizer:\n  train: {vocab_size: 300, min_frequency: 1}",
            f"tokenizer:\n  path: {tok_file}",
        )
    )
    assert f"path: {tok_file}" in recipe
    shutil.copytree(EXAMPLES / "tiny", tmp_path / "tiny")
    (tmp_path / "loaded.yaml").write_text(recipe)
    loaded = build_dataset(tmp_path / "loaded.yaml", tmp_path / "root")
    tok = Tokenizer.from_file(str(tok_file))
    tok.add_tokens(["<extra-token>"])
    tok.save(str(tok_file))
    changed = build_dataset(tmp_path / "loaded.yaml", tmp_path / "root")
    assert changed.partitions_run == 0
    assert changed.dataset_id != loaded.dataset_id


def _build_processes(pgid: int, tag: str) -> list[int]:
    """Live processes of one build: its process group (the build runs in a session of its own)
    or its tag (a worker could leave the group; it cannot shed its launch environment)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        pid = int(entry.name)
        try:
            stat = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            environ = (entry / "environ").read_bytes()
        except OSError:
            continue
        if stat[0] == "Z":
            continue
        if int(stat[2]) == pgid or f"RUNWRIGHT_TEST_BUILD={tag}".encode() in environ.split(b"\0"):
            found.append(pid)
    return found


def test_a_sigkilled_build_leaves_no_worker_and_reruns_to_the_same_id(tmp_path: Path) -> None:
    """`runwright data build` SIGKILLed from outside after a random number of partitions: its
    pool workers die with it (parent-death signal), and the rerun gives the dataset an
    uninterrupted build gives."""
    seed = random.randrange(1 << 30)
    rng = random.Random(seed)
    partitions = 24
    inputs = tmp_path / "in"
    inputs.mkdir()
    words = [f"w{i}" for i in range(5000)]
    for k in range(partitions):
        docs = (" ".join(rng.choice(words) for _ in range(100)) for _ in range(40))
        (inputs / f"{k:03d}.txt").write_text("\n\n".join(docs))
    recipe = _write_recipe(
        tmp_path,
        "name: killed\nsources:\n  - {name: text, paths: ['in/*.txt'], files_per_partition: 1}\n"
        "dedup: {near: {threshold: 0.8, num_perm: 64, shingle_words: 3}}\n"
        "tokenizer: {train: {vocab_size: 300, min_frequency: 1}}\n"
        "eval: {fraction: 0}\nbuild: {workers: 2}\n",
    )
    root = tmp_path / "root"
    tag = uuid.uuid4().hex
    started = time.monotonic()
    build = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "runwright.cli.main",
            "data",
            "build",
            str(recipe),
            "--root",
            str(root),
        ],
        env={**os.environ, "RUNWRIGHT_TEST_BUILD": tag},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        while len(_build_processes(build.pid, tag)) < 3 and build.poll() is None:
            time.sleep(0.01)  # the build and its two workers
        workers_seconds = time.monotonic() - started
        workers = [p for p in _build_processes(build.pid, tag) if p != build.pid]
        assert len(workers) == 2, f"seed {seed}: the build ended before its workers were seen"
        # A random moment after the workers exist: once a random number of partitions is done.
        kill_after = rng.randrange(partitions // 2)
        markers = root / "datasets" / ".work"
        while len(list(markers.glob("*/partitions/*.done"))) < kill_after and build.poll() is None:
            time.sleep(0.01)
        os.kill(build.pid, signal.SIGKILL)
        assert build.wait(timeout=60) == -signal.SIGKILL, f"seed {seed}: the build finished first"
        # Dying is one kernel signal; starting took the interpreter, imports and a fork: the
        # workers get at most the time they took to appear.
        deadline = time.monotonic() + max(workers_seconds, 1.0)
        while _build_processes(build.pid, tag) and time.monotonic() < deadline:
            time.sleep(0.01)
        assert _build_processes(build.pid, tag) == [], f"seed {seed}: workers outlived the build"
    finally:
        for pid in _build_processes(build.pid, tag):
            os.kill(pid, signal.SIGKILL)
    assert not list((root / "datasets").glob("*/manifest.json")), "killed after publishing"
    rerun = build_dataset(recipe, root)
    assert rerun.partitions_run + rerun.partitions_reused == partitions
    assert rerun.dataset_id == build_dataset(recipe, tmp_path / "fresh").dataset_id
