"""The reference trainer at test size, one place for every test that runs it end to end: the
demo's spec (src/runwright/demo/tiny_gpt.yaml) shrunk to a one-layer GPT over the tiny
dataset (examples/data/tiny.yaml), 32-token rows, 4 samples a step in micro-batches of 2.
Loaded by tests/conftest.py as `runwright_tests_tiny` (the tests are not a package)."""

from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[1]
TINY_GPT = REPO / "src" / "runwright" / "demo" / "tiny_gpt.yaml"
TINY_DATA = REPO / "examples" / "data" / "tiny.yaml"


def tiny_gpt(
    dataset: Any,
    *,
    steps: int,
    name: str | None = None,
    devices: int | None = None,
    every_steps: int | None = None,
    **training: Any,
) -> dict[str, Any]:
    """The spec as a mapping (callers add to it), for `dataset` (a `build_dataset` result):
    `devices` ranks (default the demo's 2), a checkpoint every `every_steps` steps (default the
    demo's), `training` added to the training section."""
    data = yaml.safe_load(TINY_GPT.read_text())
    if name is not None:
        data["name"] = name
    data["model"].update(
        n_layers=1, d_model=32, n_heads=2, vocab_size=dataset.manifest.tokenizer.vocab_size
    )
    data["data"].update(
        dataset=str(dataset.folder),
        sequence_length=32,
        mixture={"sources": [{"name": "notes", "weight": 1}, {"name": "records", "weight": 1}]},
    )
    data["training"].update(global_batch_samples=4, micro_batch_size=2, steps=steps, **training)
    if devices is not None:
        data["resources"]["devices_per_node"] = devices
    if every_steps is not None:
        data["checkpoint"]["interval"] = {"policy": "steps", "every_steps": every_steps}
    return data
