"""Data faults of the drill: a train shard of the run's dataset overwritten or removed from
outside while the run trains (docs/data.md, "Corrupt or missing shards").

Every fault's run and the reference read the same dataset, so a fault never damages it: its
run reads a copy in the fault's folder (`data.dataset`), and the damage lands on the copy. The
shard damaged is the largest train shard (by documents) of the mixture's heaviest source, the
one the stream reads most often, so the damage is found within a step or two.
"""

import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Literal

from runwright.data.format.manifest import read_manifest
from runwright.drill.injectors import Injection, Injector, Target
from runwright.spec import JobSpec, spec_from_mapping
from runwright.store import EventRecord
from runwright.train.faults import ShardDamage

COPY = "dataset"
"""The dataset's copy, in the fault's folder."""


def on_copied_dataset(spec: JobSpec, _step: int, folder: Path) -> JobSpec:
    """The spec reading a fresh copy of its dataset in the fault's folder."""
    if spec.data.dataset is None:
        raise ValueError("the spec names no data.dataset")  # refused before (needs_dataset)
    copy = folder.resolve() / COPY
    if copy.exists():
        shutil.rmtree(copy)
    copy.parent.mkdir(parents=True, exist_ok=True)
    shutil.copytree(spec.data.dataset.removeprefix("file://"), copy)
    data = spec.model_dump(mode="json")
    data["data"]["dataset"] = str(copy)
    return spec_from_mapping(data, f"{spec.name} on a copy of its dataset")


def needs_dataset(name: str) -> Callable[[JobSpec], str | None]:
    def refusal(spec: JobSpec) -> str | None:
        dataset = spec.data.dataset
        if dataset is None:
            return f"{name} damages a shard of data.dataset, and the spec names none: set it"
        if "://" in dataset and not dataset.startswith("file://"):
            return (
                f"{name} damages a copy of the dataset on this machine, and data.dataset is "
                f"{dataset!r}: drill a spec with a local dataset, or leave {name} out of --faults"
            )
        return None

    return refusal


def target_shard(spec: JobSpec, dataset: Path) -> str:
    """The largest train shard of the heaviest mixture source (any source when none weighs)."""
    shards = [s for s in read_manifest(dataset).shards if s.split == "train"]
    weights = {s.name: s.weight for s in spec.data.mixture.sources}
    heaviest = max(weights.values(), default=None)
    chosen = [s for s in shards if weights.get(s.source) == heaviest] or shards
    return max(chosen, key=lambda s: s.documents).name


def damage_at_step(how: Literal["overwrite", "remove"]) -> Callable[[Target], Injector]:
    """At the fault's step: damage the target shard in the run's copy of its dataset."""

    def act(target: Target, event: EventRecord) -> Injection:
        if target.spec is None or target.spec.data.dataset is None:
            raise RuntimeError("the fault's run names no dataset to damage")
        dataset = Path(target.spec.data.dataset)
        shard = target_shard(target.spec, dataset)
        ShardDamage(shard, how, event.step or 0).apply(dataset)
        words = (
            "first 16 bytes of its .bin overwritten (fsync)"
            if how == "overwrite"
            else (".bin and .idx deleted")
        )
        return Injection(step=event.step, detail=f"train shard {shard}: {words}, in {dataset}")

    return lambda target: Injector(target, act)
