"""What a checkpoint captures, and how it is put back.

Layout of the state dict handed to DCP (flattened by DCP into dotted logical keys):

    model.*             model state (torch.distributed.checkpoint.state_dict.get_state_dict, so
                        FSDP/DTensor parameters stay sharded and DCP can reshard them)
    optim.*             optimizer state keyed by parameter name (same function)
    scheduler, scaler   LR scheduler / grad scaler state, pickled as one object each
    extra.<name>        user `Stateful` objects replicated on every rank
    progress            {"step", "counters"} as one JSON object
    ranks.r<k>.*        everything that differs by rank, under keys that contain the rank: RNG
                        streams (Python, NumPy, torch CPU, every CUDA device), the data loader's
                        state, and user `Stateful` objects in `TrainState.per_rank`

Why the per-rank keys: DCP treats a plain (non-DTensor) tensor or object saved under the same key
on every rank as replicated and keeps one copy (`_dedup_save_plans`), so per-rank RNG state saved
under a shared key silently comes back as rank 0's on every rank.

Non-tensor values are bytes in the forms values.py describes (JSON, or a pickle restore reads
with an allow-list); `apply` decodes every one of them before it sets anything, so a checkpoint
refused for holding code leaves the scheduler, scaler, counters and RNG streams as they were (DCP
has already loaded tensors in place; the next candidate restore tries overwrites them).
"""

import hashlib
import random
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from torch.distributed.checkpoint.state_dict import (
    StateDictOptions,
    get_model_state_dict,
    get_state_dict,
    set_model_state_dict,
    set_state_dict,
)
from torch.distributed.checkpoint.stateful import Stateful

from runwright.ckpt.errors import CheckpointError
from runwright.ckpt.values import decode, encode_json, encode_pickle


@dataclass
class TrainState:
    """The live objects a checkpoint captures; a handle, not a record (it holds tensors)."""

    model: torch.nn.Module
    """The model (plain, DDP, or FSDP2/DTensor-sharded)."""
    optimizer: torch.optim.Optimizer | None = None
    """Its optimizer."""
    scheduler: Any | None = None
    """LR scheduler (anything with state_dict/load_state_dict)."""
    scaler: Any | None = None
    """Grad scaler (torch.amp.GradScaler)."""
    data_loader: Stateful | None = None
    """The data loader; its state_dict() is the data cursor and must be JSON-serialisable."""
    extra: dict[str, Stateful] = field(default_factory=dict)
    """User objects whose state is the same on every rank."""
    per_rank: dict[str, Stateful] = field(default_factory=dict)
    """User objects whose state differs by rank (saved under per-rank keys)."""
    counters: dict[str, int] = field(default_factory=dict)
    """Progress counters (e.g. tokens_seen); restored in place."""

    def parameter_digests(self) -> dict[str, str]:
        """sha256 of every parameter's bytes, by name: equal digests mean bit-identical
        parameters. A sharded (DTensor) parameter is digested by this rank's shard, so compare
        digests of the same rank and layout."""
        digests = {}
        for name, parameter in self.model.named_parameters():
            tensor = parameter.detach()
            if hasattr(tensor, "to_local"):
                tensor = tensor.to_local()
            data = tensor.cpu().contiguous().reshape(-1).view(torch.uint8).numpy().tobytes()
            digests[name] = hashlib.sha256(data).hexdigest()
        return digests


def rank_key(rank: int) -> str:
    return f"r{rank}"


def capture_rng() -> dict[str, Any]:
    """Every RNG stream of this process: Python, NumPy, torch CPU, and each CUDA device."""
    streams: dict[str, Any] = {
        "python": encode_pickle("rng.python", random.getstate()),
        "numpy": encode_pickle("rng.numpy", np.random.get_state()),
        "torch_cpu": torch.get_rng_state(),
    }
    if torch.cuda.is_available():
        for index in range(torch.cuda.device_count()):
            streams[f"cuda{index}"] = torch.cuda.get_rng_state(index)
    return streams


def apply_rng(streams: dict[str, Any]) -> None:
    """Put back streams `capture_rng` (or `apply`'s decoding) produced."""
    random.setstate(decode("rng.python", streams["python"]))
    np.random.set_state(decode("rng.numpy", streams["numpy"]))
    torch.set_rng_state(streams["torch_cpu"])
    for key, value in streams.items():
        if key.startswith("cuda") and torch.cuda.is_available():
            torch.cuda.set_rng_state(value, int(key.removeprefix("cuda")))


def _has_tensor(value: Any) -> bool:
    if isinstance(value, torch.Tensor):
        return True
    if isinstance(value, dict):
        return any(_has_tensor(v) for v in value.values())
    if isinstance(value, list | tuple):
        return any(_has_tensor(v) for v in value)
    return False


def _stateful_value(key: str, obj: Stateful) -> Any:
    """Tensor-free state is pickled as one object so its key structure may change between saves;
    state with tensors stays a nested dict so DCP stores (and reshards) the tensors."""
    value = obj.state_dict()
    return value if _has_tensor(value) else encode_pickle(key, value)


def _model_and_optim(state: TrainState) -> dict[str, Any]:
    if state.optimizer is None:
        return {"model": get_model_state_dict(state.model)}
    model_sd, optim_sd = get_state_dict(state.model, state.optimizer)
    return {"model": model_sd, "optim": optim_sd}


def capture(state: TrainState, step: int, rank: int) -> dict[str, Any]:
    """The state dict to save at a step boundary (live references; see snapshot.py for the
    immutable copy async saves need)."""
    sd = _model_and_optim(state)
    if state.scheduler is not None:
        sd["scheduler"] = encode_pickle("scheduler", state.scheduler.state_dict())
    if state.scaler is not None:
        sd["scaler"] = encode_pickle("scaler", state.scaler.state_dict())
    if state.extra:
        sd["extra"] = {
            name: _stateful_value(f"extra.{name}", obj) for name, obj in state.extra.items()
        }
    sd["progress"] = encode_json({"step": step, "counters": dict(state.counters)})
    own: dict[str, Any] = {"rng": capture_rng()}
    if state.data_loader is not None:
        own["data_loader"] = encode_json(state.data_loader.state_dict())
    if state.per_rank:
        own["local"] = {
            name: _stateful_value(f"local.{name}", obj) for name, obj in state.per_rank.items()
        }
    sd["ranks"] = {rank_key(rank): own}
    return sd


def data_cursor_of(sd: dict[str, Any], rank: int) -> dict[str, Any] | None:
    raw = sd["ranks"][rank_key(rank)].get("data_loader")
    return None if raw is None else decode("data_loader", raw)


def skeleton(state: TrainState, rank: int, source_rank: int | None) -> dict[str, Any]:
    """A state dict shaped like what was saved, for DCP to load into. `source_rank` is the saved
    rank whose per-rank entries this rank takes back (None: none exist for it)."""
    sd = capture(state, step=0, rank=rank)
    own = sd.pop("ranks")[rank_key(rank)]
    if source_rank is not None:
        sd["ranks"] = {rank_key(source_rank): own}
    return sd


def _decoded(state: TrainState, sd: dict[str, Any], source_rank: int | None) -> dict[str, Any]:
    """Every non-tensor value `apply` needs, decoded (raises CheckpointCorruptError naming the
    first one that holds code or is damaged)."""
    values: dict[str, Any] = {}
    for key in ("scheduler", "scaler"):
        if getattr(state, key) is not None:
            values[key] = decode(key, sd[key])
    for name in state.extra:
        values[f"extra.{name}"] = decode(f"extra.{name}", sd["extra"][name])
    values["progress"] = decode("progress", sd["progress"])
    if source_rank is None:
        return values
    prefix = f"ranks.{rank_key(source_rank)}"
    own = sd["ranks"][rank_key(source_rank)]
    rng = dict(own["rng"])
    for stream in ("python", "numpy"):
        rng[stream] = decode(f"{prefix}.rng.{stream}", rng[stream])
    values["rng"] = rng
    if state.data_loader is not None and "data_loader" in own:
        values["data_loader"] = decode(f"{prefix}.data_loader", own["data_loader"])
    for name in state.per_rank:
        if name not in own.get("local", {}):
            raise CheckpointError(
                f"per-rank object {name!r} is not in the checkpoint; it was added after the "
                "save. Remove it from TrainState.per_rank for this restore."
            )
        values[f"local.{name}"] = decode(f"{prefix}.local.{name}", own["local"][name])
    return values


def apply(state: TrainState, sd: dict[str, Any], source_rank: int | None) -> dict[str, Any]:
    """Put a loaded state dict back into the live objects; returns the progress record."""
    values = _decoded(state, sd, source_rank)
    if "optim" in sd and state.optimizer is not None:
        set_state_dict(
            state.model,
            state.optimizer,
            model_state_dict=sd["model"],
            optim_state_dict=sd["optim"],
            options=StateDictOptions(strict=True),
        )
    else:
        set_model_state_dict(state.model, sd["model"], options=StateDictOptions(strict=True))
    if state.scheduler is not None:
        state.scheduler.load_state_dict(values["scheduler"])
    if state.scaler is not None:
        state.scaler.load_state_dict(values["scaler"])
    for name, obj in state.extra.items():
        obj.load_state_dict(values[f"extra.{name}"])
    progress = values["progress"]
    state.counters.clear()
    state.counters.update(progress["counters"])
    if source_rank is not None:
        apply_rng(values["rng"])
        if "data_loader" in values:
            state.data_loader.load_state_dict(values["data_loader"])
        for name, obj in state.per_rank.items():
            obj.load_state_dict(values[f"local.{name}"])
    return progress
