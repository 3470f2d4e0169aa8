"""What one life of each durable writer does: restore (or rebuild), check, then write more.

Every life starts on the state the previous, killed life left, exactly as a restarted training
process would. It appends what it observed to `verdicts.jsonl` and what it acknowledged to
`acks.jsonl` (one fsynced line each), and the harness judges the whole sweep from those files:
a restore must reach at least the newest acknowledged step and equal the state saved there.
"""

import ctypes
import json
import os
import signal
import sys
import time
import traceback
from pathlib import Path
from typing import Any

import torch

from runwright.ckpt import Checkpointer, LocalFence, TrainState
from runwright.ckpt.events import CheckpointEvent
from runwright.events import EventType
from runwright.spec.policies import CheckpointSpec

PR_SET_PDEATHSIG = 1  # prctl(2)
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
    """Acknowledges a step once its CHECKPOINT_COMMITTED event is emitted (after the publish).
    With a `timeline`, also notes when each save was staged and committed there."""

    def __init__(self, acks: str, timeline: str | None = None) -> None:
        self.acks, self.timeline = acks, timeline

    def emit(self, event: CheckpointEvent) -> None:
        if event.type == EventType.CHECKPOINT_COMMITTED:
            append_line(self.acks, {"step": event.step, "pid": os.getpid()})
        if self.timeline and event.type in (
            EventType.CHECKPOINT_STAGED,
            EventType.CHECKPOINT_COMMITTED,
        ):
            kind = "staged" if event.type == EventType.CHECKPOINT_STAGED else "committed"
            note(self.timeline, kind, event.step, id=event.checkpoint_id)


def note(timeline: str, kind: str, step: int | None, **more: Any) -> None:
    """One line of a life's save timeline (the sweep places its kills on it). Not fsynced: a
    SIGKILL leaves the page cache, and an fsync here would slow the saves it times."""
    line = json.dumps({"kind": kind, "step": step, "at": time.time(), **more}) + "\n"
    fd = os.open(timeline, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        os.write(fd, line.encode())
    finally:
        os.close(fd)


def timeline_of(root: str, life: int) -> str:
    """Where rank 0 of a group's life notes its saves: created at its first save call."""
    return str(Path(root).parent / f"timeline-{life}.jsonl")


def saving_life(root: str, mode: str, saves: int, life: int, acked: list[int], **tags: Any) -> None:
    """Start a Checkpointer on the advanced fence (which runs GC), restore, record what the
    restore gave against what was acknowledged before this life, then save `saves` more steps
    with keep_last=2 (so retention deletes on every commit). `tags` go into the verdict."""
    folder = Path(root).parent
    policy = CheckpointSpec(
        mode=mode, keep_last=2, interval={"policy": "steps", "every_steps": 1}, max_inflight=2
    )
    timeline = timeline_of(root, life) if tags.get("rank") == 0 else None
    saver = Checkpointer(
        root,
        policy=policy,
        fence=LocalFence(root),
        events=AckSink(str(folder / "acks.jsonl"), timeline),
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
        new = state_at(next_step)  # the training step: the state to save
        if timeline:
            note(timeline, "save", next_step)
        saver.save(next_step, new)
    saver.close()
    if timeline:
        note(timeline, "closed", None)


def checkpoint_life(root: str, mode: str, saves: int, life: int) -> None:
    """One process: advance the fence's generation, then a saving life."""
    acked = [a["step"] for a in read_lines(Path(root).parent / "acks.jsonl")]
    LocalFence(root).advance_generation()
    saving_life(root, mode, saves, life, acked)


def visible_checkpoints(root: str) -> dict[str, Any]:
    """What a reader of the checkpoint root sees after a kill (the sweep looks between lives):
    the latest pointer must name a committed checkpoint, and every committed checkpoint must
    verify in full (no torn or mixed checkpoint is visible: a commit record is only ever next
    to every file its manifest names, with the checksums it names)."""
    from runwright.ckpt import scan, verify_checkpoint
    from runwright.ckpt.storage import CheckpointStorage

    if not os.path.isdir(root):
        return {"latest": None, "latest_committed": True, "committed": 0, "torn": []}
    storage = CheckpointStorage(root)
    committed, _ = scan(storage)
    latest = LocalFence(root).latest()
    torn = [
        c.folder for c in committed if not verify_checkpoint(storage, c.path, c.manifest, "full").ok
    ]
    return {
        "latest": latest.step if latest is not None else None,
        "latest_committed": latest is None or latest.folder in {c.folder for c in committed},
        "committed": len(committed),
        "torn": torn,
    }


def group_rank(root: str, mode: str, saves: int, life: int, rank: int, store: str) -> None:
    """One rank of a forked 2-rank group (`forked_group_life`), over a FileStore rendezvous."""
    import torch.distributed as dist

    dist.init_process_group("gloo", store=dist.FileStore(store, 2), rank=rank, world_size=2)
    rank_life(root, mode, saves, life)


def rank_life(root: str, mode: str, saves: int, life: int) -> None:
    """One rank's life in an initialised gloo group (a forked group's, or dist_life.py's under
    torchrun): rank 0 advances the fence while the others wait at a barrier, every rank
    restores and checks its own state, then all save `saves` more steps."""
    import torch.distributed as dist

    rank = dist.get_rank()
    folder = Path(root).parent
    append_line(folder / "pids.jsonl", {"life": life, "rank": rank, "pid": os.getpid()})
    acked = [a["step"] for a in read_lines(folder / "acks.jsonl")]
    if rank == 0:
        LocalFence(root).advance_generation()
    dist.barrier()
    saving_life(root, mode, saves, life, acked, rank=rank)
    dist.barrier()
    dist.destroy_process_group()


def forked_group_life(root: str, mode: str, saves: int, life: int) -> None:
    """A 2-rank gloo group forked from the fork server, with this process as its agent: as
    torchrun does, it waits for both ranks and, when one dies, kills the other (a group whose
    rank is lost is torn down, never left blocked in a collective). A life costs two forks and a
    rendezvous instead of a torchrun, two interpreters and two torch imports, so the sweep can
    afford a thousand kills (docs/crash.md)."""
    store = str(Path(root).parent / f"rendezvous-{life}")
    ranks = []
    for rank in range(2):
        pid = os.fork()
        if pid == 0:
            code = 1
            try:
                # As a launcher's ranks do: die with the agent, even if it is killed before the
                # harness ever saw this process.
                ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
                if os.getppid() == 1:
                    raise SystemExit("the agent died before its rank started")
                group_rank(root, mode, saves, life, rank, store)
                code = 0
            except BaseException:  # a rank reports every failure by its exit code
                traceback.print_exc()
            finally:
                sys.stdout.flush()
                sys.stderr.flush()
                os._exit(code)
        ranks.append(pid)
    failed = False
    alive = set(ranks)
    while alive:
        pid, status = os.wait()
        alive.discard(pid)
        if os.waitstatus_to_exitcode(status) != 0 and not failed:
            failed = True
            for other in alive:
                os.kill(other, signal.SIGKILL)
    if failed:
        raise SystemExit(1)


def build_life(recipe: str, root: str, life: int) -> None:
    """Build (or finish building) the dataset; a finished build records its id."""
    from runwright.data import build_dataset, verify_dataset

    result = build_dataset(recipe, root)
    report = verify_dataset(result.folder)
    append_line(
        Path(root).parent / "verdicts.jsonl",
        {"life": life, "dataset_id": result.dataset_id, "verified": report.ok},
    )
