"""`runwright ckpt export`: a run of the reference GPT exported as Hugging Face's GPT-2 loads in
`transformers` (offline) and gives the training model's logits; a model that does not map is
refused (or, under `--format auto`, exported under runwright's names with the reasons).

The checkpoint is written in-process through the APIs the reference trainer uses (the GPT of
`runwright.train.model`, AdamW, `Checkpointer`, a dataset built by `build_dataset`), a few
optimizer steps from its initialisation, under `<root>/runs/<run>/` with the spec.json the
controller writes: cheaper than torchrun, and the same files.
"""

import json
import os
from pathlib import Path

import pytest
import torch
import yaml
from ckpt_helpers import make_state
from safetensors import safe_open
from typer.testing import CliRunner

from runwright.ckpt import Checkpointer, MemorySink, TrainState
from runwright.ckpt.hf_gpt2 import expected_shapes
from runwright.cli.main import app
from runwright.data import build_dataset
from runwright.layout import run_paths
from runwright.spec import spec_from_mapping
from runwright.spec.policies import CheckpointSpec
from runwright.train.model import GPT

REPO = Path(__file__).parents[2]
TINY_GPT = REPO / "src" / "runwright" / "demo" / "tiny_gpt.yaml"
TINY_DATA = REPO / "examples" / "data" / "tiny.yaml"
SEQUENCE = 32
runner = CliRunner()


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    return build_dataset(TINY_DATA, tmp_path_factory.mktemp("data"))


def _spec(dataset, **model):
    data = yaml.safe_load(TINY_GPT.read_text())
    data["model"].update(vocab_size=dataset.manifest.tokenizer.vocab_size + 5, **model)
    data["data"].update(dataset=str(dataset.folder), sequence_length=SEQUENCE)
    data["data"]["mixture"] = {"sources": []}
    return spec_from_mapping(data)


def _trained_run(root: Path, run_id: str, spec, dataset) -> GPT:
    """The reference GPT trained 3 steps on random tokens and saved as the run's checkpoint."""
    paths = run_paths(root, run_id)
    paths.folder.mkdir(parents=True)
    paths.spec_file.write_text(spec.canonical_json())
    torch.manual_seed(0)
    model = GPT(spec.model, max_positions=SEQUENCE)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    for _ in range(3):
        tokens = torch.randint(0, spec.model.vocab_size, (2, SEQUENCE))
        positions = torch.arange(SEQUENCE).expand(2, -1)
        logits = model(tokens, positions, torch.ones_like(tokens))
        torch.nn.functional.cross_entropy(
            logits[:, :-1].flatten(0, 1), tokens[:, 1:].flatten()
        ).backward()
        optimizer.step()
        optimizer.zero_grad()
    saver = Checkpointer(
        str(paths.checkpoints),
        policy=CheckpointSpec(),
        events=MemorySink(),
        spec_hash=spec.spec_hash,
        data_manifest_id=dataset.manifest.dataset_id,
        tokenizer_hash=dataset.manifest.tokenizer.sha256,
    )
    saver.save(3, TrainState(model=model, optimizer=optimizer))
    saver.close()
    return model.eval()


def _export(*args: str) -> tuple[int, dict | str]:
    done = runner.invoke(app, ["ckpt", "export", *args, "--json"])
    if done.exit_code == 1 and done.exception is not None:
        raise done.exception
    try:
        return done.exit_code, json.loads(done.stdout)
    except ValueError:
        return done.exit_code, done.output


@pytest.fixture(autouse=True)
def offline(monkeypatch):
    """Nothing may come from a hub: the export must be complete on its own."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("TRANSFORMERS_OFFLINE", "1")


def test_a_run_exports_as_gpt2_with_the_training_models_logits(tmp_path, dataset):
    from transformers import AutoTokenizer, GPT2Config, GPT2LMHeadModel, PreTrainedTokenizerFast

    spec = _spec(dataset, d_ff=96, dropout=0.1)
    model = _trained_run(tmp_path, "r1", spec, dataset)
    out = tmp_path / "export"
    code, release = _export("r1", "--root", str(tmp_path), "--out", str(out))
    assert code == 0, release
    assert release["format"] == "hf-gpt2" and release["not_mapped"] == []
    assert release["run_id"] == "r1" and release["spec_hash"] == spec.spec_hash
    assert release["data_manifest_id"] == dataset.manifest.dataset_id
    assert release["tokenizer_sha256"] == dataset.manifest.tokenizer.sha256
    assert release["parameters"] == sum(p.numel() for p in model.parameters())
    names = {f["name"] for f in release["files"]}
    assert names == {
        "config.json",
        "generation_config.json",
        "model.safetensors",
        "special_tokens_map.json",
        "tokenizer.json",
        "tokenizer_config.json",
    }

    config = GPT2Config.from_pretrained(out)
    eod = dataset.manifest.tokenizer.eod_token_id
    assert (config.n_layer, config.n_embd, config.n_head, config.n_inner) == (2, 64, 4, 96)
    assert (config.n_positions, config.vocab_size) == (SEQUENCE, spec.model.vocab_size)
    assert config.activation_function == "gelu" and config.layer_norm_epsilon == 1e-5
    assert config.bos_token_id == config.eos_token_id == eod
    hf = GPT2LMHeadModel.from_pretrained(out).eval()
    assert hf.lm_head.weight.data_ptr() == hf.transformer.wte.weight.data_ptr()  # tied

    tokenizer = PreTrainedTokenizerFast.from_pretrained(out)
    assert AutoTokenizer.from_pretrained(out).get_vocab() == tokenizer.get_vocab()
    assert tokenizer.eos_token == dataset.manifest.tokenizer.eod_token
    assert tokenizer.eos_token_id == eod
    texts = ["def main(argv):\n    return 0", "The quick brown fox jumps over it."]
    from tokenizers import Tokenizer

    own = Tokenizer.from_file(str(dataset.folder / "tokenizer.json"))
    ids = [tokenizer(t)["input_ids"][:SEQUENCE] for t in texts]
    assert ids == [own.encode(t).ids[:SEQUENCE] for t in texts]
    width = min(len(i) for i in ids)
    batch = torch.tensor([i[:width] for i in ids])
    with torch.no_grad():
        theirs = hf(batch).logits
        ours = model(batch, torch.arange(width).expand(2, -1), torch.ones_like(batch))
    assert theirs.shape == ours.shape
    assert (theirs - ours).abs().max().item() < 1e-5

    with safe_open(out / "model.safetensors", "pt") as weights:
        assert weights.get_tensor("transformer.h.0.attn.c_attn.weight").shape == (64, 192)
    listed = {f["name"]: f for f in release["files"]}
    assert listed["model.safetensors"]["size_bytes"] == (out / "model.safetensors").stat().st_size
    assert json.loads((out / "release.json").read_text())["source_step"] == 3


def test_what_does_not_map_is_refused_or_exported_under_runwrights_names(tmp_path, dataset):
    spec = _spec(dataset)
    _trained_run(tmp_path, "r2", spec, dataset)
    # The spec claims three layers; the checkpoint holds two: no silent export of a wrong model.
    claimed = spec.model_copy(update={"model": spec.model.model_copy(update={"n_layers": 3})})
    spec_file = tmp_path / "claims.json"
    spec_file.write_text(claimed.canonical_json())
    ckpts = str(run_paths(tmp_path, "r2").checkpoints)
    os.rename(run_paths(tmp_path, "r2").spec_file, tmp_path / "hidden.json")
    code, error = _export(
        ckpts, "--spec", str(spec_file), "--format", "hf-gpt2", "--out", str(tmp_path / "a")
    )
    assert code == 2 and "does not map onto GPT-2" in str(error), error
    assert "no blocks.2.ln_1.weight, blocks.2.ln_1.bias" in str(
        error
    ) and "--format runwright" in str(error)
    assert not (tmp_path / "a").exists()

    # A script's own model (not the reference GPT) under --format auto: runwright's names.
    root = run_paths(tmp_path, "own").checkpoints
    state = make_state(seed=1)
    Checkpointer(str(root), policy=CheckpointSpec(), events=MemorySink()).save(1, state)
    spec_file.write_text(spec.canonical_json())
    code, release = _export(str(root), "--spec", str(spec_file), "--out", str(tmp_path / "b"))
    assert code == 0 and release["format"] == "runwright", release
    assert release["not_mapped"][0].startswith("no wte.weight, wpe.weight")
    assert release["not_mapped"][1] == "0.bias, 0.weight, 1.bias, 1.weight have no place in GPT-2"
    config = json.loads((tmp_path / "b" / "config.json").read_text())
    assert config["model"]["n_layers"] == 2 and config["max_positions"] == SEQUENCE
    assert (tmp_path / "b" / "tokenizer" / "tokenizer.json").is_file()
    code, error = _export(
        str(root), "--spec", str(spec_file), "--format", "hf-gpt2", "--out", str(tmp_path / "c")
    )
    assert code == 2 and "0.weight" in str(error), error

    # A tokenizer that is not the one the checkpoint trained with.
    other = tmp_path / "other.json"
    other.write_text((dataset.folder / "tokenizer.json").read_text().replace("}", " }", 1))
    code, error = _export(
        ckpts, "--spec", str(spec_file), "--tokenizer", str(other), "--out", str(tmp_path / "d")
    )
    assert code == 2 and "not the tokenizer the model trained with" in str(error), error

    # The dataset is not where the spec says (another machine's folder): say so, or take the
    # tokenizer given, checked against the checkpoint's record.
    moved = json.loads(spec.canonical_json())
    moved["data"]["dataset"] = str(tmp_path / "elsewhere")
    spec_file.write_text(json.dumps(moved))
    code, error = _export(ckpts, "--spec", str(spec_file), "--out", str(tmp_path / "e"))
    assert code == 2 and "or pass --tokenizer" in str(error), error
    given = dataset.folder / "tokenizer.json"
    code, release = _export(
        ckpts, "--spec", str(spec_file), "--tokenizer", str(given), "--out", str(tmp_path / "e")
    )
    assert code == 0 and release["format"] == "hf-gpt2", release
    assert release["tokenizer_sha256"] == dataset.manifest.tokenizer.sha256
    assert any("no EOD token known" in note for note in release["notes"])


def test_the_mapping_covers_exactly_the_reference_gpt(dataset):
    spec = _spec(dataset, n_layers=3, d_ff=80)
    model = GPT(spec.model, max_positions=SEQUENCE)
    shapes = {k: tuple(v.shape) for k, v in model.state_dict().items()}
    assert shapes == expected_shapes(spec.model, SEQUENCE)
