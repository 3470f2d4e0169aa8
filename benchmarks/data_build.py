"""Dataset build throughput: `runwright data build` over ~50 MB of generated text.

The issue's figure: a 2-core machine should build ~50 MB of text in about a minute. The corpus
is generated (nothing is downloaded): JSONL documents of Zipf-distributed words from a fixed
synthetic vocabulary, log-normal lengths (median ~300 words), with 2% exact copies and 2% near
copies (one word in 200 changed) so both dedup stages have work. The recipe runs every stage:
NFC normalisation, length and character-ratio filters, exact and MinHash near dedup, a 1% eval
split, BPE training (8,192 ids from the first 8 M characters), tokenization and sharding, with
two build workers. A second, unchanged build shows what the completion markers and the
assembly marker save.
Writes benchmarks/results/data_build.json.

    .venv/bin/python benchmarks/data_build.py [--megabytes 50]
"""

import argparse
import json
import os
import platform
import tempfile
import time
from pathlib import Path

import numpy as np

from runwright.data import build_dataset, load_recipe

RESULTS = Path(__file__).resolve().parent / "results" / "data_build.json"
RECIPE = """
name: synthetic-build-benchmark
sources:
  - name: web
    kind: jsonl-v1
    paths: ["in/*.jsonl"]
    text_field: text
    files_per_partition: 2
filters:
  - {kind: length-v1, min_chars: 64, max_chars: 400000}
  - {kind: char-ratio-v1, min_alnum_ratio: 0.25}
dedup:
  exact: true
  near: {threshold: 0.85, num_perm: 64, shingle_words: 5}
eval: {fraction: 0.01, seed: 0}
tokenizer:
  train: {vocab_size: 8192, min_frequency: 2, max_training_chars: 8000000}
max_tokens_per_shard: 4000000
build: {workers: 2}
"""


def generate(folder: Path, megabytes: float, files: int = 16, seed: int = 0) -> dict:
    rng = np.random.default_rng(seed)
    letters = np.array(list("etaoinshrdlcumwfgypbvkjxqz"))
    vocab = ["".join(rng.choice(letters, size=int(rng.integers(2, 10)))) for _ in range(30_000)]
    out = [open(folder / f"part-{k:02d}.jsonl", "w") for k in range(files)]  # noqa: SIM115
    written, docs, copies = 0, 0, 0
    previous: list[str] = []
    try:
        while written < megabytes * 1e6:
            roll = rng.random()
            if previous and roll < 0.02:
                text = previous[int(rng.integers(len(previous)))]  # exact copy
                copies += 1
            elif previous and roll < 0.04:
                words = previous[int(rng.integers(len(previous)))].split(" ")
                for i in rng.integers(0, len(words), size=max(1, len(words) // 200)):
                    words[i] = vocab[int(rng.integers(len(vocab)))]
                text = " ".join(words)  # near copy
                copies += 1
            else:
                ids = rng.zipf(1.2, size=int(rng.lognormal(np.log(300), 0.8))) % len(vocab)
                text = " ".join(vocab[w] for w in ids)
                previous = [*previous, text][-64:]
            line = json.dumps({"text": text}) + "\n"
            out[docs % files].write(line)
            written += len(line.encode())
            docs += 1
    finally:
        for fh in out:
            fh.close()
    return {"documents": docs, "bytes": written, "planted_copies": copies}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--megabytes", type=float, default=50.0)
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        (work / "in").mkdir()
        corpus = generate(work / "in", args.megabytes)
        (work / "recipe.yaml").write_text(RECIPE)
        recipe = load_recipe(work / "recipe.yaml")
        began = time.perf_counter()
        first = build_dataset(recipe, work / "root", show_progress=True)
        first_seconds = time.perf_counter() - began
        began = time.perf_counter()
        again = build_dataset(recipe, work / "root")
        again_seconds = time.perf_counter() - began
        stats = first.manifest.statistics
        train = stats.splits.get("train", {})
    result = {
        "benchmark": "data_build",
        "cores": os.cpu_count(),
        "machine": platform.machine(),
        "python": platform.python_version(),
        "corpus": corpus,
        "seconds": round(first_seconds, 2),
        "megabytes_per_minute": round(corpus["bytes"] / 1e6 / first_seconds * 60, 1),
        "rebuild_seconds": round(again_seconds, 2),
        "rebuild_partitions_run": again.partitions_run,
        "same_dataset_id": again.dataset_id == first.dataset_id,
        "train_documents": sum(s.documents for s in train.values()),
        "train_tokens": sum(s.tokens for s in train.values()),
        "exact_duplicates": sum(stats.exact_duplicates.values()),
        "near_duplicates": sum(stats.near_duplicates.values()),
        "target": "~50 MB in about a minute on 2 cores",
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(
        f"{corpus['bytes'] / 1e6:.1f} MB in {first_seconds:.1f} s "
        f"({result['megabytes_per_minute']} MB/min); rebuild {again_seconds:.1f} s with "
        f"{again.partitions_run} partitions rerun; {result['exact_duplicates']} exact and "
        f"{result['near_duplicates']} near duplicates removed"
    )
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
