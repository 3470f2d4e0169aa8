"""The language stage (issue 26): py3langid's packaged model on a corpus of known languages, its
counts per source and language in the profile, and the language filter by list and by share."""

import json
from pathlib import Path

import pytest
import yaml

from runwright.data import build_dataset, verify_dataset
from runwright.data.builder.language import identify, model_identity
from runwright.data.builder.recipe import LanguageSpec
from runwright.data.errors import RecipeError

SENTENCES = {
    "en": [
        "The committee will meet again next week to discuss the budget for the new library.",
        "She walked along the river every morning before going to work at the hospital.",
        "Our neighbours planted tomatoes and beans in the garden behind their house.",
        "The train was late because of heavy snow on the tracks near the mountains.",
        "Children learn to read faster when their parents read stories with them at night.",
        "He repaired the old bicycle himself and rode it to the market on Saturday.",
    ],
    "de": [
        "Der Ausschuss wird sich nächste Woche wieder treffen, um den Haushalt zu besprechen.",
        "Sie ging jeden Morgen am Fluss entlang, bevor sie ins Krankenhaus zur Arbeit ging.",
        "Unsere Nachbarn haben Tomaten und Bohnen im Garten hinter ihrem Haus gepflanzt.",
        "Der Zug hatte Verspätung, weil in den Bergen starker Schnee auf den Gleisen lag.",
        "Kinder lernen schneller lesen, wenn ihre Eltern abends mit ihnen Geschichten lesen.",
        "Er hat das alte Fahrrad selbst repariert und ist am Samstag damit zum Markt gefahren.",
    ],
    "fr": [
        "Le comité se réunira de nouveau la semaine prochaine pour discuter du budget.",
        "Elle marchait le long de la rivière chaque matin avant d'aller travailler à l'hôpital.",
        "Nos voisins ont planté des tomates et des haricots dans le jardin derrière la maison.",
        "Le train était en retard à cause de la neige abondante sur les voies de montagne.",
    ],
    "es": [
        "El comité se reunirá de nuevo la próxima semana para hablar del presupuesto anual.",
        "Ella caminaba junto al río cada mañana antes de ir a trabajar en el hospital.",
    ],
}


def write_corpus(folder: Path, language: dict | None, name: str = "langs") -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / "web.jsonl", "w", encoding="utf-8") as fh:
        for lang, texts in SENTENCES.items():
            for text in texts:
                fh.write(json.dumps({"text": text, "expected": lang}) + "\n")
    recipe = {
        "name": name,
        "sources": [{"name": "web", "kind": "jsonl-v1", "paths": ["web.jsonl"]}],
        "dedup": {"near": None},
        "eval": {"fraction": 0.0},
        "tokenizer": {"train": {"vocab_size": 300, "min_frequency": 1}},
        "build": {"workers": 1},
    }
    if language is not None:
        recipe["language"] = language
    path = folder / "recipe.yaml"
    path.write_text(yaml.safe_dump(recipe))
    return path


def test_identify_names_known_languages_and_und_below_the_confidence() -> None:
    spec = LanguageSpec()
    for lang, texts in SENTENCES.items():
        assert [identify(t, spec)[0] for t in texts] == [lang] * len(texts)
    assert identify("   ", spec) == ("und", 0.0)
    strict = LanguageSpec(min_confidence=1.0)
    assert identify("ok", strict)[0] == "und"
    # The model ships in the package: its identity is a file digest, nothing downloaded.
    identity = model_identity()
    assert identity["identifier"] == "py3langid" and len(identity["model_sha256"]) == 64


def test_the_language_stage_counts_each_language_per_source(tmp_path: Path) -> None:
    result = build_dataset(write_corpus(tmp_path / "in", {}), tmp_path / "root")
    profile = result.manifest.statistics.profile
    assert profile is not None and profile.language_identified
    web = profile.sources["web"]
    assert {k: v.identified for k, v in web.languages.items()} == {
        "de": 6,
        "en": 6,
        "es": 2,
        "fr": 4,
    }
    assert {k: v.share for k, v in web.languages.items()} == {
        "de": round(6 / 18, 6),
        "en": round(6 / 18, 6),
        "es": round(2 / 18, 6),
        "fr": round(4 / 18, 6),
    }
    assert profile.languages == {k: v.share for k, v in web.languages.items()}
    assert sum(v.tokens for v in web.languages.values()) == web.tokens > 0
    assert all(v.tokens_per_char > 0 for v in web.languages.values())
    stage = next(s for s in result.manifest.lineage.stages if s.name == "language-id")
    assert stage.parameters["model_sha256"] == model_identity()["model_sha256"]
    # Identification alone drops nothing and adds no filter reason.
    assert result.manifest.statistics.filtered == {"web": {}}
    assert verify_dataset(result.folder).ok


def test_the_language_filter_keeps_a_list_or_a_share(tmp_path: Path) -> None:
    listed = build_dataset(write_corpus(tmp_path / "a", {"keep": ["en", "de"]}), tmp_path / "r")
    stats = listed.manifest.statistics
    assert stats.filtered == {"web": {"language:not-listed": 6}}
    assert stats.splits["train"]["web"].documents == 12
    assert {k: v.language_dropped for k, v in stats.profile.sources["web"].languages.items()} == {
        "de": 0,
        "en": 0,
        "es": 2,
        "fr": 4,
    }
    assert [s.name for s in listed.manifest.lineage.stages][:6] == [
        "read",
        "normalise",
        "language-id",
        "filter",
        "language-filter",
        "exact-dedup",
    ]
    shared = build_dataset(write_corpus(tmp_path / "b", {"min_share": 0.2}), tmp_path / "r")
    assert shared.manifest.statistics.filtered == {"web": {"language:below-share": 2}}
    assert shared.manifest.statistics.splits["train"]["web"].documents == 16
    assert shared.dataset_id != listed.dataset_id


def test_a_bad_language_section_names_the_field(tmp_path: Path) -> None:
    with pytest.raises(RecipeError, match=r"language\.keep lists language codes"):
        build_dataset(write_corpus(tmp_path / "in", {"keep": ["English"]}), tmp_path / "root")
    with pytest.raises(RecipeError, match="min_share"):
        build_dataset(write_corpus(tmp_path / "in2", {"min_share": 2}), tmp_path / "root")
