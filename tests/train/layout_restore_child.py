"""torchrun child for the cross-layout restore matrix (tests/train/test_layout_restores.py).

    layout_restore_child.py OUT --save ddp,fsdp2 --restore fsdp2:ddp --restore ddp:fsdp2

--save L      builds the GPT from seed 0 in layout L (train/layouts.py `apply_layout`, the
              trainer's own call), trains one AdamW step, saves it as step 1 with the real
              Checkpointer under OUT/sources/L/checkpoints, and has rank 0 write the full
              (gathered) model and optimizer state to OUT/sources/L/expected.pt
--restore T:S restores each source S into layout T: a model built from another seed, the
              trainer's path (`Checkpointer.restore` with `resume_from` the source's root), then
              every gathered parameter and optimizer value compared bit for bit with expected.pt

Rank 0 writes OUT/results-w<world>.json: one entry per restore with the mode, the RESTORED
event's mode and every key whose value differs (or the error the restore raised). Nothing is
asserted here: a failed check must still reach the test with every other pair's outcome.
"""

import argparse
import json
import os
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
import torch.nn.functional as F
import yaml
from torch.distributed.checkpoint.state_dict import get_state_dict
from torch.distributed.tensor import DTensor

from runwright.ckpt import Checkpointer, LocalFence, MemorySink, TrainState
from runwright.events import EventType
from runwright.spec import spec_from_mapping
from runwright.spec.parallel import parallel_layout
from runwright.spec.policies import CheckpointSpec
from runwright.train.layouts import apply_layout
from runwright.train.model import GPT

REPO = Path(__file__).resolve().parents[2]
SEQUENCE = 16
VOCAB = 64


def parallelism(name: str, world: int) -> dict[str, Any]:
    """The spec's `parallelism` for layout `name` at `world` ranks (tp takes every rank)."""
    return {
        "ddp": {"dp_mode": "ddp"},
        "fsdp2": {"dp_mode": "fsdp2"},
        "tp": {"tp": world},
        "fsdp2+tp": {"dp_mode": "fsdp2", "tp": 2},
    }[name]


def spec_for(name: str, world: int):
    data = yaml.safe_load((REPO / "examples" / "tiny_gpt.yaml").read_text())
    # 4 heads of 8: tp 2 and tp 4 both give each rank whole heads.
    data["model"].update(n_layers=2, d_model=32, n_heads=4, vocab_size=VOCAB)
    data["data"]["sequence_length"] = SEQUENCE
    data["resources"]["devices_per_node"] = world
    data["parallelism"] = parallelism(name, world)
    return spec_from_mapping(data)


def build(name: str, world: int, seed: int) -> tuple[TrainState, Any, dict[str, int]]:
    """The trainer's model, layout and optimizer (train/loop.py) for layout `name`."""
    spec = spec_for(name, world)
    torch.manual_seed(seed)
    model = GPT(spec.model, max_positions=SEQUENCE)
    layout = apply_layout(model, spec, torch.device("cpu"))
    assert layout.name == name, f"asked for {name}, apply_layout built {layout.name}"
    opt = spec.training.optimizer
    optimizer = torch.optim.AdamW(
        model.parameters(), lr=opt.lr, betas=opt.betas, weight_decay=opt.weight_decay
    )
    state = TrainState(model=model, optimizer=optimizer, counters={"tokens_seen": 0})
    return state, layout, parallel_layout(spec)


def train_one_step(state: TrainState, layout: Any) -> float:
    """One AdamW step on the same rows on every rank, so the optimizer holds real moments."""
    rows = torch.Generator().manual_seed(7)
    tokens = torch.randint(0, VOCAB, (2, SEQUENCE + 1), generator=rows)
    positions = torch.arange(SEQUENCE).expand(2, SEQUENCE)
    logits = layout.model(tokens[:, :-1], positions, torch.zeros_like(positions))
    loss = F.cross_entropy(logits.flatten(0, 1).float(), tokens[:, 1:].flatten())
    loss.backward()
    state.optimizer.step()
    state.optimizer.zero_grad(set_to_none=True)
    state.counters["tokens_seen"] = 2 * SEQUENCE
    return float(loss.detach())


def gathered(value: Any) -> Any:
    """The state dict with every DTensor gathered to its full value (collective: every rank)."""
    if isinstance(value, DTensor):
        return value.full_tensor()
    if isinstance(value, torch.Tensor):
        return value.detach().clone()  # a plain tensor in the state dict is the live parameter
    if isinstance(value, dict):
        return {k: gathered(v) for k, v in value.items()}
    if isinstance(value, list):
        return [gathered(v) for v in value]
    return value


def full_state(state: TrainState) -> dict[str, Any]:
    model_sd, optim_sd = get_state_dict(state.model, state.optimizer)
    return {"model": gathered(model_sd), "optim": gathered(optim_sd)}


def differences(expected: Any, got: Any, key: str = "") -> list[str]:
    """Every key whose value is not bit for bit the same (dtype and shape included)."""
    if isinstance(expected, dict):
        if set(expected) != set(got):
            return [f"{key}: keys {sorted(set(expected) ^ set(got))} differ"]
        return [d for k in expected for d in differences(expected[k], got[k], f"{key}.{k}")]
    if isinstance(expected, list):
        if len(expected) != len(got):
            return [f"{key}: {len(expected)} items saved, {len(got)} restored"]
        pairs = zip(expected, got, strict=True)
        return [d for e, g in pairs for d in differences(e, g, key)]
    if isinstance(expected, torch.Tensor):
        same = (
            isinstance(got, torch.Tensor)
            and expected.dtype == got.dtype
            and expected.shape == got.shape
            and torch.equal(expected.view(-1).view(torch.uint8), got.view(-1).view(torch.uint8))
        )
        return [] if same else [key]
    return [] if expected == got else [f"{key}: {expected!r} saved, {got!r} restored"]


def save(out: Path, name: str, world: int) -> None:
    state, layout, layout_record = build(name, world, seed=0)
    loss = train_one_step(state, layout)
    folder = out / "sources" / name
    root = str(folder / "checkpoints")
    saver = Checkpointer(root, policy=CheckpointSpec(), fence=LocalFence(root),
                         events=MemorySink(), parallel_layout=layout_record)  # fmt: skip
    saver.save(1, state, loss=loss)
    saver.close()
    expected = full_state(state)
    if dist.get_rank() == 0:
        torch.save(expected, folder / "expected.pt")
    dist.barrier()


def restore(out: Path, target: str, source: str, world: int) -> dict[str, Any]:
    state, _, layout_record = build(target, world, seed=1)
    before = full_state(state)  # the check must be able to fail: seed 1 is not the source's
    root = str(out / "targets" / f"w{world}-{target}-from-{source}")
    sink = MemorySink()
    restorer = Checkpointer(root, policy=CheckpointSpec(), fence=LocalFence(root), events=sink,
                            parallel_layout=layout_record,
                            resume_from=str(out / "sources" / source / "checkpoints"))  # fmt: skip
    outcome: dict[str, Any] = {"target": target, "source": source, "world_size": world}
    try:
        result = restorer.restore(state)
    except Exception as exc:  # the test reports which pair failed and how
        outcome["error"] = f"{type(exc).__name__}: {exc}"
        return outcome
    finally:
        restorer.close()
    events = sink.of_type(EventType.RESTORED)  # emitted by rank 0 only
    outcome.update(
        step=result.step if result else None,
        mode=result.mode.value if result else None,
        event_mode=events[0].attributes.get("mode") if events else None,
        counters=dict(state.counters),
    )
    got = full_state(state)
    if dist.get_rank() == 0:
        expected = torch.load(out / "sources" / source / "expected.pt", weights_only=False)
        outcome["differs_before"] = len(differences(expected, before))
        outcome["differs"] = differences(expected, got)
        moments = sum(len(slots) for slots in got["optim"]["state"].values())
        outcome["compared"] = len(got["model"]) + moments
    return outcome


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("out", type=Path)
    parser.add_argument("--save", default="", help="comma-separated layouts to save")
    parser.add_argument("--restore", action="append", default=[], help="TARGET:SOURCE,SOURCE")
    args = parser.parse_args()
    dist.init_process_group("gloo")
    world = dist.get_world_size()
    for name in filter(None, args.save.split(",")):
        save(args.out, name, world)
    outcomes = []
    for pair in args.restore:
        target, sources = pair.split(":")
        for source in sources.split(","):
            outcomes.append(restore(args.out, target, source, world))
    if dist.get_rank() == 0:
        (args.out / f"results-w{world}.json").write_text(json.dumps(outcomes, indent=1))
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
    # As tests/ckpt/dist_child.py: leave without the interpreter's teardown once everything is
    # written and the group destroyed (a rare gloo abort at exit under load).
    os._exit(0)
