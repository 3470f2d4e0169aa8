"""Checkpoint save and restore on local disk vs an S3-compatible object store (moto's server).

    .venv/bin/python benchmarks/object_store.py [--megabytes 64] [--rounds 5] [--dir PATH]

For a model state of about `--megabytes` MB (float32 Linear layers, with AdamW moments: the
state written is about 3x that) it measures, for a checkpoint root in a temporary folder under
--dir and for `s3://<bucket>/bench` on a moto server this script starts on 127.0.0.1 (moto[server],
the dev extra; stopped at the end):
  - sync save: `Checkpointer.save` from the call to the publish (shards, sidecars, manifest,
    COMMITTED, the fence: a flock and renames locally, conditional PUTs on S3);
  - restore: `Checkpointer.restore` of the same state (full checksum verification + DCP load);
  - one fence publish on its own (`LocalFence` vs `ObjectFence`), the fixed cost of a commit.

Both sides of each figure are measured back to back inside one round, the order alternating, and
the figures are medians over `--rounds` rounds after one discarded warm-up round. Every
checkpoint is deleted outside the timed region. moto keeps objects in its own process's memory
on this machine, so the S3 figures are the protocol's request overhead through botocore/s3fs over
loopback HTTP, not a network's bandwidth: a real store adds its latency per request and its
bandwidth per byte. Results: benchmarks/results/object_store.json.
"""

import argparse
import importlib.util
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

from runwright.ckpt import Checkpointer, LocalFence, MemorySink, SaveStatus, TrainState, scan
from runwright.ckpt.manifest import CommitRecord
from runwright.ckpt.object_fence import ObjectFence
from runwright.ckpt.retention import delete_checkpoint
from runwright.ckpt.storage import CheckpointStorage
from runwright.spec.policies import CheckpointSpec

RESULTS = Path(__file__).parent / "results" / "object_store.json"
SERVER = Path(__file__).parents[1] / "tests" / "s3_server.py"


def s3_server_module():
    spec = importlib.util.spec_from_file_location("runwright_bench_s3_server", SERVER)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def build_state(megabytes: int, seed: int = 0) -> TrainState:
    torch.manual_seed(seed)
    width = 1024
    layers = max(1, megabytes * 2**20 // (width * width * 4))
    model = torch.nn.Sequential(*[torch.nn.Linear(width, width) for _ in range(layers)])
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    model(torch.randn(2, width)).sum().backward()
    optimizer.step()
    return TrainState(model=model, optimizer=optimizer, counters={"tokens_seen": 1})


def policy() -> CheckpointSpec:
    # retention never runs inside a timed save: every checkpoint is deleted explicitly after it
    return CheckpointSpec(keep_last=100)


def save_and_restore(root: str, state: TrainState, step: int) -> tuple[float, float, int]:
    saver = Checkpointer(root, policy=policy(), events=MemorySink())
    started = time.perf_counter()
    result = saver.save(step, state)
    save_seconds = time.perf_counter() - started
    assert result.status == SaveStatus.COMMITTED, result
    fresh = _fresh_like(state)
    reader = Checkpointer(root, policy=policy(), events=MemorySink())
    started = time.perf_counter()
    restored = reader.restore(fresh)
    restore_seconds = time.perf_counter() - started
    assert restored is not None and restored.step == step
    for key, value in state.model.state_dict().items():
        assert torch.equal(fresh.model.state_dict()[key], value), key
    return save_seconds, restore_seconds, result.total_bytes


def _fresh_like(state: TrainState) -> TrainState:
    model = torch.nn.Sequential(
        *[torch.nn.Linear(m.in_features, m.out_features) for m in state.model]
    )
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    model(torch.randn(2, model[0].in_features)).sum().backward()
    optimizer.step()
    return TrainState(model=model, optimizer=optimizer, counters={"tokens_seen": 0})


def clean(root: str) -> None:
    storage = CheckpointStorage(root)
    for checkpoint in scan(storage)[0]:
        delete_checkpoint(storage, checkpoint.folder)


def publish_seconds(fence, generation: int, step: int) -> float:
    checkpoint_id = f"g{generation:06d}-{step:012x}"
    record = CommitRecord(
        checkpoint_id=checkpoint_id,
        step=step,
        generation=generation,
        folder=f"{step:010d}-{checkpoint_id}",
        manifest_sha256="0" * 64,
        committed_unix_seconds=time.time(),
    )
    started = time.perf_counter()
    fence.publish(record, generation)
    return time.perf_counter() - started


def run(work: Path, megabytes: int, rounds: int) -> dict:
    module = s3_server_module()
    with module.moto_server() as server:
        os.environ.update(server.env)
        bucket = module.new_bucket("bench")
        roots = {"local": str(work / "ckpt"), "s3": f"s3://{bucket}/bench"}
        fences = {"local": LocalFence(roots["local"]), "s3": ObjectFence(roots["s3"])}
        generations = {name: fence.advance_generation() for name, fence in fences.items()}
        state = build_state(megabytes)
        samples: dict[str, dict[str, list[float]]] = {
            name: {"save_seconds": [], "restore_seconds": [], "publish_seconds": []}
            for name in roots
        }
        total_bytes = 0
        for round_ in range(rounds + 1):
            order = list(roots) if round_ % 2 == 0 else list(reversed(roots))
            for name in order:
                save, restore, total_bytes = save_and_restore(roots[name], state, round_ + 1)
                clean(roots[name])
                publish = publish_seconds(fences[name], generations[name], 10_000 + round_)
                if round_ == 0:
                    continue  # warm-up: imports, connection pools, page cache
                samples[name]["save_seconds"].append(save)
                samples[name]["restore_seconds"].append(restore)
                samples[name]["publish_seconds"].append(publish)
    medians = {
        name: {key: round(statistics.median(values), 4) for key, values in figures.items()}
        for name, figures in samples.items()
    }
    return {
        "command": " ".join([Path(sys.executable).name, *sys.argv]),
        "megabytes_requested": megabytes,
        "checkpoint_bytes": total_bytes,
        "rounds": rounds,
        "median": medians,
        "s3_over_local": {
            key: round(medians["s3"][key] / medians["local"][key], 2) for key in medians["s3"]
        },
        "samples": samples,
        "machine": {"cpus": os.cpu_count(), "torch": torch.__version__},
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--megabytes", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--dir", type=Path, default=Path(tempfile.gettempdir()))
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(dir=args.dir) as work:
        figures = run(Path(work), args.megabytes, args.rounds)
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(figures, indent=2, sort_keys=True) + "\n")
    print(json.dumps({k: figures[k] for k in ("checkpoint_bytes", "median", "s3_over_local")}))
    print(f"wrote {RESULTS}")


if __name__ == "__main__":
    main()
