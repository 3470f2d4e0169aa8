"""data.on_corrupt_shard on one process: a shard damaged while the loader reads it is quarantined
(skip) or fails the read (fail); the quarantine lives in the cursor, so a resume repeats it.

Every document here is one token id repeated (its marker), so every token of a row says which
document, and so which shard, it came from."""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from runwright.data import DataCursor, DataLoader, ShardCorruptError, open_dataset
from runwright.data.errors import DataError
from runwright.data.format.pretokenized import write_pretokenized
from runwright.data.read.cursor import QuarantinedShard, reconcile
from runwright.spec import DataSpec

VOCAB = 1000
BATCH = 8


def spec(policy: str = "skip", unit: str = "documents") -> DataSpec:
    return DataSpec.model_validate(
        {
            "sequence_length": 32,
            "seed": 3,
            "on_corrupt_shard": policy,
            "mixture": {
                "unit": unit,
                "sources": [{"name": "code", "weight": 2}, {"name": "prose", "weight": 1}],
            },
        }
    )


@pytest.fixture(scope="module")
def pristine(tmp_path_factory) -> Path:
    """`code` 40 and `prose` 30 documents of 20-80 tokens, in shards of at most 600 tokens."""
    folder = tmp_path_factory.mktemp("quarantine") / "ds"
    rng = np.random.default_rng(0)
    marker, docs = 1, {}
    for name, count in (("code", 40), ("prose", 30)):
        docs[name] = []
        for _ in range(count):
            docs[name].append(np.full(int(rng.integers(20, 80)), marker, dtype=np.int64))
            marker += 1
    write_pretokenized(folder, docs, vocab_size=VOCAB, eod_token_id=0, max_tokens_per_shard=600)
    return folder


@pytest.fixture
def dataset(pristine: Path, tmp_path: Path) -> Path:
    """A copy of the dataset this test may damage."""
    return Path(shutil.copytree(pristine, tmp_path / "ds"))


def markers(folder: Path, shard: str) -> set[int]:
    return set(np.unique(open_dataset(folder, verification="size").shards[shard].tokens).tolist())


def loader(folder: Path, policy: str = "skip", unit: str = "documents") -> DataLoader:
    return DataLoader(folder, spec(policy, unit), global_batch_samples=BATCH)


def take(source: DataLoader, steps: int) -> list[np.ndarray]:
    return [b.tokens.numpy().copy() for _, b in zip(range(steps), source, strict=False)]


def overwrite(folder: Path, shard: str) -> None:
    """Rewrite the shard's first bytes in place (the loader's memory map sees them at once)."""
    with open(folder / f"{shard}.bin", "r+b") as fh:
        fh.write(b"\xff" * 16)
        fh.flush()
        os.fsync(fh.fileno())


def remove(folder: Path, shard: str) -> None:
    for suffix in (".bin", ".idx"):
        (folder / f"{shard}{suffix}").unlink()


def restore(pristine: Path, folder: Path, shard: str) -> None:
    for suffix in (".bin", ".idx"):
        shutil.copyfile(pristine / f"{shard}{suffix}", folder / f"{shard}{suffix}")


@pytest.fixture(scope="module")
def reference(pristine: Path) -> list[np.ndarray]:
    """12 steps read with nothing damaged."""
    with loader(pristine, "fail") as source:
        return take(source, 12)


def read_at(rows: np.ndarray, folder: Path) -> set[str]:
    """The shards a step's rows read."""
    found = set(np.unique(rows).tolist()) - {0}
    return {
        name
        for name, shard in open_dataset(folder, verification="size").shards.items()
        if found & set(np.unique(shard.tokens).tolist())
    }


def prose_shard_read_at(step: int, reference, folder: Path) -> str:
    return sorted(s for s in read_at(reference[step], folder) if s.startswith("prose-"))[0]


def lost_in_draws(folder: Path, shard: str, before: DataCursor, after: DataCursor):
    """(documents, tokens) of `shard` among the draws between two cursors, replayed on a loader
    that skips nothing (with the `documents` unit the draw sequence does not depend on what was
    skipped), plus the rest of the document `before` cut, if it was the shard's."""
    with loader(folder, "fail") as plain:
        stream = plain._stream(plain.cursor)
        first, last = sum(before.source_draws.values()), sum(after.source_draws.values())
        sources, docs = [], []
        while sum(len(d) for d in docs) < last:
            block = stream.next_block()
            sources.append(block.source)
            docs.append(block.doc)
        source, doc = np.concatenate(sources), np.concatenate(docs)
        index = [s.name for s in plain.manifest.shards if s.split == "train"].index(shard)
        tables = plain.sources
        hits = [
            (i, d)
            for i, d in zip(source[first:last].tolist(), doc[first:last].tolist(), strict=True)
            if tables[i].shard[d] == index
        ]
        tokens = sum(int(tables[i].lengths[d]) for i, d in hits)
        # The document cut by `before`'s boundary is the last one drawn before it.
        cut_source, cut_doc = int(source[first - 1]), int(doc[first - 1])
        if before.residual is not None and tables[cut_source].shard[cut_doc] == index:
            tokens += int(tables[cut_source].lengths[cut_doc]) - before.residual.token_offset
    return len(hits), tokens


def test_a_shard_rewritten_while_read_is_quarantined_and_left_out_from_that_step(
    dataset, pristine, reference
):
    bad = prose_shard_read_at(4, reference, pristine)
    gone = markers(pristine, bad)
    source = loader(dataset)
    assert all(np.array_equal(a, b) for a, b in zip(take(source, 4), reference, strict=False))
    before = source.cursor
    overwrite(dataset, bad)
    rows = take(source, 8)
    cursor = source.cursor
    source.close()
    (record,) = cursor.quarantined
    assert (record.shard, record.source, record.reason, record.from_step) == (
        bad,
        "prose",
        "corrupt",
        4,
    )
    for step in rows:
        assert not gone & set(np.unique(step).tolist())  # nothing of it, garbage included
        assert step.max() < VOCAB
    assert not np.array_equal(rows[0], reference[4])  # step 5 was planned again without it
    # Every skipped draw of it, counted at its length (plus the rest of a document cut by the
    # step boundary, if one of its documents was cut there).
    assert (record.documents_lost, record.tokens_lost) == lost_in_draws(
        pristine, bad, before, cursor
    )
    assert record.documents_lost > 0 and record.tokens_estimated is False


def test_a_resume_after_the_skip_repeats_it_even_once_the_shard_is_restored(
    dataset, pristine, reference
):
    bad = prose_shard_read_at(4, reference, pristine)
    first = loader(dataset)
    take(first, 4)
    overwrite(dataset, bad)
    take(first, 3)
    saved = first.state_dict()
    continued = take(first, 4)
    final = first.cursor
    first.close()
    restore(pristine, dataset, bad)
    with loader(dataset) as resumed:
        resumed.load_state_dict(saved)
        assert all(np.array_equal(a, b) for a, b in zip(take(resumed, 4), continued, strict=True))
        assert resumed.cursor == final


def test_a_resume_with_the_shard_removed_draws_the_same_under_token_units(dataset, pristine):
    """The mixture's token units look at lengths ahead: a quarantined shard's come from the
    manifest, so a resume that cannot read its index any more draws the same documents."""
    with loader(pristine, "fail", "tokens") as plain:
        rows = take(plain, 6)
    bad = prose_shard_read_at(3, rows, pristine)
    first = loader(dataset, unit="tokens")
    take(first, 3)
    overwrite(dataset, bad)
    take(first, 2)
    saved = first.state_dict()
    continued = take(first, 4)
    first.close()
    remove(dataset, bad)
    with loader(dataset, unit="tokens") as resumed:
        resumed.load_state_dict(saved)
        assert all(np.array_equal(a, b) for a, b in zip(take(resumed, 4), continued, strict=True))
        (record,) = resumed.cursor.quarantined
        assert record.tokens_estimated  # its index is gone: its mean length from here on


def test_a_resume_from_before_the_skip_quarantines_from_its_own_first_step(
    dataset, pristine, reference
):
    """The bytes the steps before the skip read are gone: the resume finds the shard at open
    and leaves it out from the step it restores; restored meanwhile, the shard is read."""
    bad = prose_shard_read_at(4, reference, pristine)
    with loader(pristine, "fail") as plain:
        take(plain, 2)
        early = plain.state_dict()
    overwrite(dataset, bad)
    with loader(dataset) as resumed:
        resumed.load_state_dict(early)
        rows = take(resumed, 4)
        (record,) = resumed.cursor.quarantined
    assert (record.shard, record.from_step) == (bad, 2)
    assert all(not markers(pristine, bad) & set(np.unique(r).tolist()) for r in rows)
    restore(pristine, dataset, bad)
    with loader(dataset) as resumed:
        resumed.load_state_dict(early)
        assert all(
            np.array_equal(a, b) for a, b in zip(take(resumed, 4), reference[2:6], strict=True)
        )
        assert resumed.cursor.quarantined == ()


def test_a_removed_shard_is_quarantined_as_missing(dataset, pristine, reference):
    bad = prose_shard_read_at(4, reference, pristine)
    with loader(dataset) as source:
        take(source, 4)
        remove(dataset, bad)  # the memory map still holds the old bytes: not read either
        rows = take(source, 3)
        (record,) = source.cursor.quarantined
    assert (record.shard, record.reason, record.from_step) == (bad, "missing", 4)
    assert all(not markers(pristine, bad) & set(np.unique(r).tolist()) for r in rows)


def test_a_touched_shard_is_re_verified_and_kept(dataset, pristine, reference):
    bad = prose_shard_read_at(4, reference, pristine)
    with loader(dataset) as source:
        take(source, 4)
        os.utime(dataset / f"{bad}.bin")
        rows = take(source, 4)
        assert source.cursor.quarantined == ()
    assert all(np.array_equal(a, b) for a, b in zip(rows, reference[4:8], strict=True))


def test_under_fail_the_read_fails_naming_the_shard(dataset, pristine, reference):
    bad = prose_shard_read_at(4, reference, pristine)
    with loader(dataset, "fail") as source:
        take(source, 4)
        overwrite(dataset, bad)
        with pytest.raises(ShardCorruptError, match=f"shard {bad} .* changed while the run"):
            take(source, 1)
    with pytest.raises(ShardCorruptError, match=f"shard {bad} .* is corrupt"):
        loader(dataset, "fail")


def test_a_shard_broken_at_open_is_skipped_from_the_first_step(dataset, pristine):
    bad = sorted(p.stem for p in dataset.glob("prose-train-*.bin"))[0]
    remove(dataset, bad)
    with loader(dataset) as source:
        rows = take(source, 4)
        (record,) = source.cursor.quarantined
    assert (record.shard, record.reason, record.from_step) == (bad, "missing", 0)
    assert record.tokens_estimated and record.documents_lost > 0
    assert all(not markers(pristine, bad) & set(np.unique(r).tolist()) for r in rows)


def test_when_every_shard_left_is_quarantined_the_read_says_so(dataset):
    for shard in dataset.glob("*-train-*.bin"):
        overwrite(dataset, shard.stem)
    with loader(dataset) as source, pytest.raises(DataError, match="nothing readable is left"):
        take(source, 1)


def test_the_cursor_records_the_quarantine_and_older_cursors_still_load(pristine):
    with loader(pristine, "fail") as source:
        take(source, 2)
        cursor = source.cursor
    assert cursor.quarantined == ()
    older = cursor.model_dump(mode="json")
    del older["quarantined"]
    assert DataCursor.model_validate(older) == cursor
    record = QuarantinedShard(
        shard="prose-train-00000", source="prose", reason="missing", from_step=2, tokens_lost=5
    )
    marked = cursor.model_copy(update={"quarantined": (record,)})
    assert DataCursor.model_validate(marked.model_dump(mode="json")) == marked
    other = cursor.model_copy(update={"seed": 4})
    assert reconcile(marked, other, coverage_only=True).quarantined == (record,)
    with pytest.raises(ValueError, match="reason"):
        QuarantinedShard(shard="x", source="prose", reason="gone", from_step=0)


@pytest.mark.integration
def test_ranks_that_see_a_shard_differently_agree_to_skip_it_at_the_same_step(
    pristine, reference, tmp_path
):
    """Two torchrun ranks, each on its own copy of the dataset: rank 1's copy of a shard is
    rewritten before step 5, rank 0's stays whole. Both leave the shard out from step 5 and
    commit the same cursor, and together they read what one loader that found the damage
    there reads."""
    at = 4
    half = reference[at][BATCH // 2 :]  # rank 1's rows of step 5
    bad = sorted(s for s in read_at(half, pristine) if s.startswith("prose-"))[0]
    for rank in (0, 1):
        shutil.copytree(pristine, tmp_path / f"rank{rank}")
    out = tmp_path / "out.json"
    worker = Path(__file__).with_name("quarantine_reader.py")
    done = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2", "--standalone",
         str(worker), str(tmp_path), bad, str(at), "8", str(out)],
        capture_output=True, text=True, timeout=240,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(out.read_text())
    first, second = (DataCursor.model_validate(c) for c in result["cursors"])
    assert first == second
    (record,) = first.quarantined
    assert (record.shard, record.from_step, record.reason) == (bad, at, "corrupt")

    single = Path(shutil.copytree(pristine, tmp_path / "single"))
    with loader(single) as one:
        rows = take(one, at)
        overwrite(single, bad)
        rows += take(one, 8 - at)
        assert one.cursor == first
    assert [r.tolist() for r in rows] == result["rows"]


def test_an_operators_skip_is_quarantined_from_the_step_the_loader_starts_at(pristine, reference):
    """A shard an operator named (protocol.ENV_SKIP_SHARDS, control/operator.py) is left out from
    the restored step on, under `fail` too, reason `operator`, nothing read of it after; a resume
    from a later cursor keeps it out without being told again, and counts its lost tokens."""
    shard = prose_shard_read_at(5, reference, pristine)
    with loader(pristine, "fail") as first:
        take(first, 4)
        at_4 = first.cursor
    skip = {shard: "garbled text"}
    source = DataLoader(pristine, spec("fail"), global_batch_samples=BATCH, skip_shards=skip)
    with source:
        source.load_state_dict(at_4.model_dump(mode="json"))
        rows = take(source, 6)
        after = source.cursor
    assert not any(markers(pristine, shard) & set(np.unique(r).tolist()) for r in rows)
    (q,) = after.quarantined
    assert (q.shard, q.reason, q.from_step) == (shard, "operator", 4)
    assert q.tokens_lost > 0 and q.documents_lost > 0

    # A later generation restores the cursor: the skip holds without the list, and goes on
    # counting.
    with loader(pristine, "fail") as later:
        later.load_state_dict(after.model_dump(mode="json"))
        more = take(later, 4)
        again = later.cursor
    assert not any(markers(pristine, shard) & set(np.unique(r).tolist()) for r in more)
    assert again.quarantined[0].tokens_lost >= q.tokens_lost


def test_the_skip_list_from_the_environment_is_read_and_checked(monkeypatch):
    from runwright.data.read.loader import operator_skips
    from runwright.protocol import ENV_SKIP_SHARDS

    monkeypatch.delenv(ENV_SKIP_SHARDS, raising=False)
    assert operator_skips() == {}
    monkeypatch.setenv(ENV_SKIP_SHARDS, json.dumps({"prose-00001": "bad"}))
    assert operator_skips() == {"prose-00001": "bad"}
    monkeypatch.setenv(ENV_SKIP_SHARDS, "[1, 2]")
    with pytest.raises(DataError, match="must map shard names to reasons"):
        operator_skips()
