"""What one life of each durable writer does: restore (or rebuild), check, then write more.

Every life starts on the state the previous, killed life left, exactly as a restarted training
process would. It appends what it observed to `verdicts.jsonl` and what it acknowledged to
`acks.jsonl` (one fsynced line each), and the harness judges the whole sweep from those files:
a restore must reach at least the newest acknowledged step and equal the state saved there.
"""

import json
import os
from pathlib import Path
from typing import Any

import torch

from runwright.ckpt import Checkpointer, LocalFence, TrainState
from runwright.ckpt.events import CheckpointEvent
from runwright.events import EventType
from runwright.spec.policies import CheckpointSpec

WIDTH = 192  # 192x192 + 192x4 float32 parameters, x3 with AdamW moments: about 450 kB a save


class Cursor:
    """A data loader stand-in: the cursor is the number of samples consumed."""

    def __init__(self, position: int = 0) -> None:
        self.position = position

    def state_dict(self) -> dict[str, int]:
        return {"position": self.position}

    def load_state_dict(self, state: dict[str, int]) -> None:
        self.position = int(state["position"])


def state_at(step: int, width: int = WIDTH) -> TrainState:
    """The training state saved at `step`: a pure function of the step, so any restore can be
    checked against it bit for bit (parameters, both AdamW moments, LR schedule, cursor)."""
    torch.manual_seed(step)
    model = torch.nn.Sequential(torch.nn.Linear(width, width), torch.nn.Linear(width, 4))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.9)
    model(torch.randn(8, width)).pow(2).mean().backward()
    optimizer.step()
    optimizer.zero_grad()
    for _ in range(step % 7):
        scheduler.step()
    return TrainState(
        model=model,
        optimizer=optimizer,
        scheduler=scheduler,
        data_loader=Cursor(step * 8),
        counters={"tokens_seen": step * 8 * width},
    )


def differences(state: TrainState, step: int) -> list[str]:
    """Every piece of `state` that differs from `state_at(step)`; empty when bit-identical."""
    expected = state_at(step)
    found = []
    for name, tensor in expected.model.state_dict().items():
        if not torch.equal(state.model.state_dict()[name], tensor):
            found.append(f"parameter {name}")
    got_opt, want_opt = state.optimizer.state_dict()["state"], expected.optimizer.state_dict()
    for index, moments in want_opt["state"].items():
        for key, value in moments.items():
            if not torch.equal(torch.as_tensor(got_opt[index][key]), torch.as_tensor(value)):
                found.append(f"optimizer {index}.{key}")
    if state.scheduler.state_dict()["last_epoch"] != expected.scheduler.state_dict()["last_epoch"]:
        found.append("scheduler")
    if state.data_loader.position != expected.data_loader.position:
        found.append("data cursor")
    if state.counters != expected.counters:
        found.append("counters")
    return found


def append_line(path: str | Path, record: dict[str, Any]) -> None:
    """Append one JSON line durably: what a life acknowledged must survive its SIGKILL."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        os.write(fd, (json.dumps(record) + "\n").encode())
        os.fsync(fd)
    finally:
        os.close(fd)


def read_lines(path: str | Path) -> list[dict[str, Any]]:
    if not os.path.exists(path):
        return []
    return [json.loads(line) for line in Path(path).read_text().splitlines() if line.strip()]


class AckSink:
    """Acknowledges a step once its CHECKPOINT_COMMITTED event is emitted (after the publish)."""

    def __init__(self, acks: str) -> None:
        self.acks = acks

    def emit(self, event: CheckpointEvent) -> None:
        if event.type == EventType.CHECKPOINT_COMMITTED:
            append_line(self.acks, {"step": event.step, "pid": os.getpid()})


def saving_life(root: str, mode: str, saves: int, life: int, acked: list[int], **tags: Any) -> None:
    """Start a Checkpointer on the advanced fence (which runs GC), restore, record what the
    restore gave against what was acknowledged before this life, then save `saves` more steps
    with keep_last=2 (so retention deletes on every commit). `tags` go into the verdict."""
    folder = Path(root).parent
    policy = CheckpointSpec(
        mode=mode, keep_last=2, interval={"policy": "steps", "every_steps": 1}, max_inflight=2
    )
    saver = Checkpointer(
        root, policy=policy, fence=LocalFence(root), events=AckSink(str(folder / "acks.jsonl"))
    )
    state = state_at(0)
    restored = saver.restore(state)
    step = restored.step if restored is not None else 0
    append_line(
        folder / "verdicts.jsonl",
        {
            "life": life,
            **tags,
            "restored": step if restored is not None else None,
            "acked": max(acked, default=None),
            "differences": differences(state, step) if restored is not None else [],
        },
    )
    for next_step in range(step + 1, step + saves + 1):
        saver.save(next_step, state_at(next_step))
    saver.close()


def checkpoint_life(root: str, mode: str, saves: int, life: int) -> None:
    """One process: advance the fence's generation, then a saving life."""
    acked = [a["step"] for a in read_lines(Path(root).parent / "acks.jsonl")]
    LocalFence(root).advance_generation()
    saving_life(root, mode, saves, life, acked)


def build_life(recipe: str, root: str, life: int) -> None:
    """Build (or finish building) the dataset; a finished build records its id."""
    from runwright.data import build_dataset, verify_dataset

    result = build_dataset(recipe, root)
    report = verify_dataset(result.folder)
    append_line(
        Path(root).parent / "verdicts.jsonl",
        {"life": life, "dataset_id": result.dataset_id, "verified": report.ok},
    )
