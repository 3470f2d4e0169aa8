"""The build profile (issue 26): tokenizer anomalies on crafted inputs, tokens per character per
length bucket, the profile outside the dataset id (old manifests keep theirs), `data verify`
checking it against the hashed statistics, and the build as the drift baseline."""

import json
from pathlib import Path

import yaml
from tokenizers import Tokenizer, models, pre_tokenizers
from typer.testing import CliRunner

from runwright.cli.main import app
from runwright.data import build_dataset, verify_dataset
from runwright.data.format.manifest import read_manifest
from runwright.data.read.baseline import build_baseline
from runwright.data.read.drift import DriftWindow

CRAFTED = {
    "plain.txt": "hello world hello world",
    # 3 control characters in 38: under the 10% that makes a document binary.
    "control.txt": "hello\x07 world\x1b hello\x7f world hello world",
    "binary.txt": "\x00\x01\x02\x03 hello",  # NUL: binary
    "blank.txt": " \n\t \n",  # empty after normalisation
    "unknown.txt": "hello mystery words here",  # 3 of 4 words unknown to the vocabulary
}


def word_tokenizer(path: Path) -> Path:
    vocab = {"<|endoftext|>": 0, "[UNK]": 1, "hello": 2, "world": 3}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.add_special_tokens(["<|endoftext|>"])
    tok.save(str(path))
    return path


def crafted_recipe(folder: Path) -> Path:
    (folder / "notes").mkdir(parents=True)
    for name, text in CRAFTED.items():
        (folder / "notes" / name).write_text(text, encoding="utf-8")
    recipe = {
        "name": "crafted",
        "sources": [{"name": "notes", "kind": "text-v1", "paths": ["notes/*.txt"]}],
        "dedup": {"exact": False, "near": None},
        "eval": {"fraction": 0.0},
        "tokenizer": {"path": str(word_tokenizer(folder / "tokenizer.json"))},
        "build": {"workers": 1},
    }
    path = folder / "recipe.yaml"
    path.write_text(yaml.safe_dump(recipe))
    return path


def test_anomaly_counts_on_crafted_inputs(tmp_path: Path) -> None:
    result = build_dataset(crafted_recipe(tmp_path / "in"), tmp_path / "root")
    profile = result.manifest.statistics.profile
    assert profile is not None and profile.unknown_token_id == 1
    notes = profile.sources["notes"]
    a = notes.anomalies
    assert (a.control_chars, a.documents_with_control, a.binary_documents) == (7, 2, 1)
    assert a.empty_documents == 1 and a.zero_token_documents == 1  # the blank file, kept
    # Tokens: plain 4 + control 6 + binary 1 + blank 0 + unknown 4 = 15, of which 3 are [UNK].
    assert (notes.tokens, a.unknown_tokens) == (15, 3)
    assert a.unknown_token_rate == round(3 / 15, 6)
    und = notes.languages["und"]
    assert sum(b.documents for b in und.by_length.values()) == und.documents == 5
    assert sum(b.tokens for b in und.by_length.values()) == und.tokens == 15
    assert und.by_length["0"].documents == und.by_length["1"].documents == 1
    # Bucket [4, 8): plain, control (35 characters once normalised) and unknown.
    assert und.by_length["4"].tokens_per_char == round(14 / (23 + 35 + 24), 6)
    assert a.tokens_per_char == round(15 / und.chars, 6)
    out = CliRunner().invoke(app, ["data", "inspect", str(result.folder)])
    assert out.exit_code == 0, out.output
    assert "7/2d" in out.output and "20.0%" in out.output and "1/1" in out.output
    info = json.loads(
        CliRunner().invoke(app, ["data", "inspect", str(result.folder), "--json"]).output
    )
    assert info["profile"]["sources"]["notes"]["anomalies"]["binary_documents"] == 1


def test_the_profile_is_outside_the_id_and_verify_checks_it(tmp_path: Path) -> None:
    result = build_dataset(crafted_recipe(tmp_path / "in"), tmp_path / "root")
    path = result.folder / "manifest.json"
    raw = json.loads(path.read_text())
    # A manifest written before the profile existed reads, with the same id, and verifies.
    old = dict(raw, statistics={k: v for k, v in raw["statistics"].items() if k != "profile"})
    path.write_text(json.dumps(old))
    assert read_manifest(result.folder).dataset_id == result.dataset_id
    assert read_manifest(result.folder).statistics.profile is None
    assert verify_dataset(result.folder).ok
    # A profile that disagrees with the hashed statistics is a problem verify names.
    raw["statistics"]["profile"]["sources"]["notes"]["languages"]["und"]["documents"] += 1
    path.write_text(json.dumps(raw))
    report = verify_dataset(result.folder)
    assert not report.ok
    assert any("statistics.profile.sources.notes" in p for p in report.problems)


def test_the_build_is_the_drift_baseline(tmp_path: Path) -> None:
    result = build_dataset(crafted_recipe(tmp_path / "in"), tmp_path / "root")
    assert build_baseline(result.manifest, "documents") == {"notes": 1.0}
    window = DriftWindow(1, {}, "documents", {"a": 0.75, "b": 0.25})
    report = _one_window(window, {"a": 2, "b": 2})
    assert report["baseline"] == {"a": 0.75, "b": 0.25}
    assert report["baseline_deviation"] == 0.25
    assert report["max_deviation"] is None  # no weights: the alert's figure stays off


def _one_window(window: DriftWindow, draws: dict[str, int]) -> dict:
    import torch

    from runwright.data.read.drift import Counts

    class _Batch:
        step = 0
        device_tokens = 8
        loss_tokens = 8
        segment_ids = torch.zeros((1, 8), dtype=torch.long)

    report = window.add(_Batch(), lambda: Counts(0, draws, draws), lambda _e: None)
    assert report is not None
    return report
