"""The PII stage (issue 26): a corpus seeded with known e-mail addresses, IP addresses, phone
numbers and credentials, redacted or dropped as the recipe says, counted by kind; the matched
text appears nowhere the build writes or prints."""

import json
import logging
from pathlib import Path

import numpy as np
import pytest
import yaml
from tokenizers import Tokenizer
from typer.testing import CliRunner

from runwright.cli.main import app
from runwright.data import build_dataset, open_shard, verify_dataset
from runwright.data.builder.pii import scrub
from runwright.data.builder.recipe import PII_KINDS
from runwright.data.errors import RecipeError

SEEDED = {
    "email": ["ada.lovelace+ml@analytical-engine.org", "grace_h@navy.example.mil"],
    "ip": ["203.0.113.77", "2001:db8:85a3::8a2e:370:7334"],
    "phone": ["+44 20 7946 0958", "(555) 867-5309"],
    "credential": ["AKIAQWERTYUIOPASDFGH", "ghp_Zx9Yw8Vu7Ts6Rq5Po4Nm3Lk2Ji1Hg0FeDcBa99"],
}
SECRET_VALUE = "tr0ub4dor-and-3"
CLEAN = [
    "Version 1.2.3 shipped on 2024-01-31 with 10 20 30 fixes and std::vector support.",
    "The committee met at 12:30:45 and approved a ratio of 3:2 for the two teams.",
    "Plain prose with no personal data at all, just words about rivers and hills.",
]


def seeded_documents() -> list[str]:
    docs = [
        f"Please write to {SEEDED['email'][0]} about the engine notes.",
        f"Escalations go to {SEEDED['email'][1]} or call {SEEDED['phone'][0]} after nine.",
        f"The host {SEEDED['ip'][0]} and its twin {SEEDED['ip'][1]} answered the probe.",
        f"Leaked key {SEEDED['credential'][0]} and token {SEEDED['credential'][1]} in config.",
        f"Support line {SEEDED['phone'][1]}; db password={SECRET_VALUE} in the old wiki.",
    ]
    return docs + CLEAN


def planted() -> list[str]:
    return [v for values in SEEDED.values() for v in values] + [SECRET_VALUE]


def write_corpus(folder: Path, action: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / "web.jsonl", "w", encoding="utf-8") as fh:
        for text in seeded_documents():
            fh.write(json.dumps({"text": text}) + "\n")
    recipe = {
        "name": f"pii-{action}",
        "sources": [{"name": "web", "kind": "jsonl-v1", "paths": ["web.jsonl"]}],
        "dedup": {"near": None},
        "eval": {"fraction": 0.0},
        "tokenizer": {"train": {"vocab_size": 300, "min_frequency": 1}},
        "pii": {"action": action},
        "build": {"workers": 1},
    }
    path = folder / "recipe.yaml"
    path.write_text(yaml.safe_dump(recipe))
    return path


def test_scrub_finds_each_kind_and_leaves_look_alikes() -> None:
    text, found = scrub(" | ".join(seeded_documents()), PII_KINDS)
    assert dict(found) == {"email": 2, "ip": 2, "phone": 2, "credential": 3}
    assert not [p for p in planted() if p in text]
    for clean in CLEAN:
        assert scrub(clean, PII_KINDS) == (clean, {})
    only_email, found = scrub(seeded_documents()[1], ["email"])
    assert dict(found) == {"email": 1} and SEEDED["phone"][0] in only_email


def written_bytes(root: Path, skip: Path) -> bytes:
    return b"".join(
        p.read_bytes()
        for p in sorted(root.rglob("*"))
        if p.is_file() and skip not in p.parents and p.suffix != ".bin"
    )


def shard_text(folder: Path, manifest) -> str:
    tok = Tokenizer.from_file(str(folder / "tokenizer.json"))
    texts = []
    for s in manifest.shards:
        shard = open_shard(folder / s.name)
        for k in range(shard.documents):
            texts.append(tok.decode(np.asarray(shard.document(k)).tolist()))
    return "\n".join(texts)


def test_redacted_pii_is_counted_by_kind_and_appears_nowhere(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    inputs = tmp_path / "in"
    recipe = write_corpus(inputs, "redact")
    caplog.set_level(logging.DEBUG)
    out = CliRunner().invoke(app, ["data", "build", str(recipe), "--root", str(tmp_path / "r")])
    assert out.exit_code == 0, out.output
    inspected = CliRunner().invoke(app, ["data", "inspect", _folder(tmp_path)])
    assert inspected.exit_code == 0, inspected.output
    assert "credential=3" in inspected.output and "email=2" in inspected.output
    folder = Path(_folder(tmp_path))
    assert verify_dataset(folder).ok
    result = build_dataset(recipe, tmp_path / "r")  # the same dataset, found again
    profile = result.manifest.statistics.profile.sources["web"]
    assert profile.pii == {"credential": 3, "email": 2, "ip": 2, "phone": 2}
    assert profile.pii_documents == 5
    assert result.manifest.statistics.splits["train"]["web"].documents == len(seeded_documents())
    text = shard_text(folder, result.manifest)
    assert "<EMAIL>" in text and "<CREDENTIAL>" in text and "<PHONE>" in text and "<IP>" in text
    # Nothing the build wrote (manifest, tokenizer, work files, shards as text), printed or
    # logged holds a planted value.
    everything = written_bytes(tmp_path / "r", inputs).decode("utf-8", "replace") + text
    everything += out.output + inspected.output + caplog.text
    assert [p for p in planted() if p in everything] == []


def _folder(tmp_path: Path) -> str:
    [folder] = [p for p in (tmp_path / "r" / "datasets").iterdir() if not p.name.startswith(".")]
    return str(folder)


def test_drop_removes_each_document_with_pii_and_counts_it(tmp_path: Path) -> None:
    result = build_dataset(write_corpus(tmp_path / "in", "drop"), tmp_path / "r")
    stats = result.manifest.statistics
    assert stats.filtered == {"web": {"pii:dropped": 5}}
    assert stats.splits["train"]["web"].documents == len(CLEAN)
    web = stats.profile.sources["web"]
    assert web.pii_documents == 5 and web.languages["und"].pii_dropped == 5
    assert web.filter_rate == round(5 / len(seeded_documents()), 6)
    assert [s.parameters for s in result.manifest.lineage.stages if s.name == "pii"] == [
        {"algorithm": "pii-regex-v1", "action": "drop", "kinds": sorted(PII_KINDS)}
    ]
    text = shard_text(result.folder, result.manifest)
    assert [p for p in planted() if p in text] == []
    assert written_bytes(tmp_path / "r", tmp_path / "in").find(SECRET_VALUE.encode()) == -1


def test_a_bad_pii_section_names_the_field(tmp_path: Path) -> None:
    recipe = write_corpus(tmp_path / "in", "redact")
    raw = yaml.safe_load(recipe.read_text())
    raw["pii"] = {"action": "mask", "kinds": ["ssn"]}
    recipe.write_text(yaml.safe_dump(raw))
    with pytest.raises(RecipeError) as caught:
        build_dataset(recipe, tmp_path / "r")
    assert "pii.action" in str(caught.value) and "pii.kinds" in str(caught.value)
    assert not (tmp_path / "r").exists()
