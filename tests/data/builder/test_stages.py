"""Build stages: counters by reason, their own lineage records, and an unchanged dataset id."""

from pathlib import Path

import numpy as np

from runwright.data import build_dataset
from runwright.data.builder.dedup import signature, text_hash
from runwright.data.builder.recipe import (
    EvalSpec,
    FilterSpec,
    NearDedupSpec,
    NormaliseSpec,
    SourceSpec,
)
from runwright.data.builder.stages import (
    Counters,
    Document,
    EvalSplit,
    ExactDedup,
    Filter,
    NearDedup,
    Normalise,
    Read,
    Shard,
)

EXAMPLES = Path(__file__).resolve().parents[3] / "examples" / "data"

# `build_dataset("examples/data/tiny.yaml", root).dataset_id` computed with the code before the
# build stages became objects (commit 8b3acfc, `runwright.data.build._assemble` writing the
# lineage by hand), with tokenizers 0.23.3 and datasketch 2.0.0 installed. The stages must reproduce
# the manifest byte for byte, or every existing dataset id and every cursor naming one breaks.
# (A tokenizers upgrade that trains another BPE vocabulary legitimately changes it.)
TINY_DATASET_ID = "f3976f7093ede6628eb8fff2392f8b0af14d0e107bed3fee7be62f0e849c8855"


def test_tiny_recipe_keeps_the_dataset_id_of_the_hand_written_lineage(tmp_path: Path) -> None:
    result = build_dataset(EXAMPLES / "tiny.yaml", tmp_path)
    assert result.dataset_id == TINY_DATASET_ID
    names = [s.name for s in result.manifest.lineage.stages]
    assert names == [
        "read",
        "normalise",
        "filter",
        "exact-dedup",
        "near-dedup",
        "eval-split",
        "tokenize",
        "shard",
    ]


def _docs(*texts: tuple[str, str]) -> list[Document]:
    return [Document(source, text, digest=text_hash(text)) for source, text in texts]


def test_read_quarantines_by_reason_and_counts_records_read() -> None:
    source = SourceSpec(name="j", kind="jsonl-v1", paths=["x"], max_record_chars=20)
    read = Read([source])
    lines = b'{"text": "fine"}\n{"text": "' + b"y" * 30 + b'"}\nnot json\n'
    docs = list(read.run(source, [("a.jsonl", lines)]))
    assert [d.text for d in docs] == ["fine"]
    assert read.counters.seen["j"] == 3 and read.counters.kept["j"] == 1
    assert dict(read.counters.dropped["j"]) == {"oversized-record": 1, "invalid-json": 1}
    assert [q["reason"] for q in read.quarantine] == ["oversized-record", "invalid-json"]
    assert read.inputs[0].path == "a.jsonl" and read.inputs[0].bytes == len(lines)
    assert read.lineage().parameters["sources"][0]["name"] == "j"
    assert "paths" not in read.lineage().parameters["sources"][0]


def test_filter_counts_drops_under_kind_and_reason() -> None:
    stage = Filter([FilterSpec(kind="length-v1", min_chars=5, max_chars=10)])
    docs = _docs(("a", "tiny"), ("a", "just right"), ("b", "far too long here"))
    kept = list(stage.run(Normalise(NormaliseSpec()).run(docs)))
    assert [d.text for d in kept] == ["just right"]
    assert stage.counters.reasons_per_source(["a", "b", "c"]) == {
        "a": {"length-v1:too-short": 1},
        "b": {"length-v1:too-long": 1},
        "c": {},
    }
    assert stage.lineage().parameters == {
        "filters": [FilterSpec(kind="length-v1", min_chars=5, max_chars=10).model_dump()]
    }


def test_partition_counters_add_up() -> None:
    total, part = Counters(), Counters()
    part.keep("a")
    part.drop("a", "too-short")
    part.drop("b", "reader-error", seen=0)
    total.add(part)
    total.add(part)
    assert total.seen_per_source(["a", "b"]) == {"a": 4, "b": 0}
    assert total.dropped_per_source(["a", "b"]) == {"a": 2, "b": 2}
    assert total.dropped_for("reader-error") == 2


def test_dedup_stages_drop_exact_and_near_duplicates_of_eval() -> None:
    spec = NearDedupSpec(threshold=0.5, num_perm=64, shingle_words=1)
    words = " ".join(f"w{k}" for k in range(40))
    docs = _docs(("a", words), ("a", words), ("b", words + " extra"), ("b", "unrelated text"))
    for d in docs:
        d.signature = signature(d.text, spec)
    exact = ExactDedup(enabled=True)
    # Fraction 0 sends nothing to eval; the first document is moved to eval by hand so that its
    # near-duplicate in train is the boundary's drop.
    evals = EvalSplit(EvalSpec(fraction=0.0))
    near = NearDedup(spec)
    split = list(evals.run(exact.run(docs)))
    split[0].split = "eval"
    kept = list(near.run(split))
    assert [d.text for d in kept] == [words, "unrelated text"]
    assert exact.counters.dropped_per_source(["a", "b"]) == {"a": 1, "b": 0}
    assert near.counters.dropped_for("near-duplicate-of-eval") == 1
    assert near.lineage().parameters["scheme"] == "affine32"
    assert NearDedup(None).lineage().parameters == {"enabled": False}


def test_shard_records_its_dtype_and_per_split_statistics(tmp_path: Path) -> None:
    stage = Shard(max_tokens_per_shard=4, dtype=np.dtype(np.uint16))
    docs = _docs(("a", "abc"), ("a", "de"), ("a", "f"))
    for d, split in zip(docs, ["train", "train", "eval"], strict=True):
        d.split = split
    records = stage.run(zip(docs, [[1, 2, 3], [4, 5], [6]], strict=True), tmp_path)
    assert [r.name for r in records] == ["a-eval-00000", "a-train-00000", "a-train-00001"]
    stats = stage.statistics()
    assert stats["train"]["a"].documents == 2 and stats["train"]["a"].tokens == 5
    assert stats["eval"]["a"].chars == 1
    assert stage.lineage().parameters == {
        "format": "megatron-mmidx-v1",
        "dtype": "uint16",
        "max_tokens_per_shard": 4,
    }
