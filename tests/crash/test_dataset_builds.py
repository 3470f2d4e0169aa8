"""A dataset build killed at random times and rerun gives the same dataset id, verified, every time,
and leaves no process of the killed build behind (its pool workers die with it)."""

import os
import random
import string
from pathlib import Path

import pytest
import yaml
from harness import ForkServer, sweep
from workloads import read_lines

from runwright.data import build_dataset

pytestmark = pytest.mark.integration

DEFAULT_KILLS = 12
SLOW_KILLS = int(os.environ.get("RUNWRIGHT_CRASH_KILLS", "1000"))


def corpus_recipe(folder: Path, files: int, workers: int) -> Path:
    """A recipe over `files` generated text files, one partition each, read by a pool of
    `workers` processes: the pool is alive for most of a build, so kills land while it is."""
    rng = random.Random(0)
    words = ["".join(rng.choices(string.ascii_lowercase, k=rng.randint(2, 9))) for _ in range(800)]
    corpus = folder / "corpus"
    corpus.mkdir()
    for index in range(files):
        paragraphs = [" ".join(rng.choices(words, k=rng.randint(20, 120))) for _ in range(150)]
        (corpus / f"part-{index:02d}.txt").write_text("\n\n".join(paragraphs))
    recipe = {
        "name": "crash-corpus",
        "sources": [
            {
                "name": "notes",
                "kind": "text-v1",
                "paths": ["corpus/*.txt"],
                "files_per_partition": 1,
            }
        ],
        "filters": [{"kind": "length-v1", "min_chars": 8}],
        "dedup": {"near": {"threshold": 0.8, "num_perm": 32, "shingle_words": 3}},
        "tokenizer": {"train": {"vocab_size": 300, "min_frequency": 1}},
        "build": {"workers": workers},
    }
    path = folder / "recipe.yaml"
    path.write_text(yaml.safe_dump(recipe))
    return path


def build_sweep(tmp_path: Path, kills: int, seed: int):
    recipe = corpus_recipe(tmp_path, files=8, workers=2)
    reference = build_dataset(recipe, tmp_path / "reference").dataset_id
    lives = tmp_path / "killed"
    lives.mkdir()

    def args_for(life: int) -> dict:
        # A killed build is rerun on what it left; once a build finished, the next life starts
        # a new one, so every kill lands inside real work (reading, tokenizing, the pool, the
        # assembly) rather than in a rebuild that finds the dataset already published.
        finished = len(read_lines(lives / "verdicts.jsonl"))
        root = lives / f"build-{finished:04d}"
        return {"recipe": str(recipe), "root": str(root), "life": life}

    server = ForkServer(tmp_path / "lives.log", "build_life", args_for)
    try:
        report = sweep("dataset-build", server, kills, seed=seed)
    finally:
        server.close()
    log = (tmp_path / "lives.log").read_text()
    assert not report.wedged, f"builds failed on their own: {report.wedged}\n{log[-4000:]}"
    assert not report.survivors, f"processes of killed builds still alive: {report.survivors}"
    verdicts = read_lines(lives / "verdicts.jsonl")
    assert verdicts and {v["dataset_id"] for v in verdicts} == {reference}, verdicts
    assert all(v["verified"] for v in verdicts)
    return report


def test_dataset_build_survives_random_kills(tmp_path):
    report = build_sweep(tmp_path, DEFAULT_KILLS, seed=3)
    print(report.summary())
    assert report.kills == DEFAULT_KILLS, report.summary()


@pytest.mark.slow
@pytest.mark.timeout(7200)
def test_dataset_build_survives_a_thousand_random_kills(tmp_path):
    print(build_sweep(tmp_path, SLOW_KILLS, seed=1003).summary())
