"""Immutable host copies of a state dict for async saves, from a bounded pool of buffers.

Step 2 of the commit protocol: the training step may continue only once nothing it will modify
is still being persisted. A snapshot copies every tensor into host buffers (pinned when CUDA is
present, so device-to-host copies run at full speed) and deep-copies every other value. Buffers
are reused once their snapshot is committed, so memory is bounded by `max_inflight` copies of the
state instead of growing with every save (a common complaint about async checkpointing).
The copy helpers are DCP's own (`torch.distributed._state_dict_utils`, used by DCP's stagers);
they handle DTensor and ShardedTensor leaves.
"""

import copy
import threading
from typing import Any

import torch
from torch.distributed._state_dict_utils import _copy_state_dict, _create_cpu_state_dict


def _signature(value: Any) -> Any:
    if isinstance(value, torch.Tensor):
        return (type(value).__name__, tuple(value.shape), value.dtype)
    if isinstance(value, dict):
        return tuple((k, _signature(v)) for k, v in value.items())
    if isinstance(value, list | tuple):
        return tuple(_signature(v) for v in value)
    return None


def _deepcopy_objects(value: Any) -> Any:
    if isinstance(value, torch.Tensor):
        return value
    if isinstance(value, dict):
        return {k: _deepcopy_objects(v) for k, v in value.items()}
    return copy.deepcopy(value)


class SnapshotPool:
    """At most `capacity` host copies exist at once; `take` blocks while all are in use."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self._free: list[tuple[Any, dict[str, Any]]] = []
        self._in_use = 0
        self._cond = threading.Condition()

    def take(self, state_dict: dict[str, Any]) -> dict[str, Any]:
        """An immutable host copy of `state_dict`."""
        with self._cond:
            while self._in_use >= self.capacity:
                self._cond.wait()
            self._in_use += 1
            signature = _signature(state_dict)
            buffers = next((b for s, b in self._free if s == signature), None)
            self._free = [(s, b) for s, b in self._free if b is not buffers]
        try:
            if buffers is None:
                buffers = _create_cpu_state_dict(state_dict, pin_memory=torch.cuda.is_available())
            staged = _copy_state_dict(state_dict, buffers)
            if torch.cuda.is_available():
                torch.cuda.synchronize()
            return _deepcopy_objects(staged)
        except BaseException:
            with self._cond:
                self._in_use -= 1
                self._cond.notify_all()
            raise

    def give_back(self, staged: dict[str, Any]) -> None:
        """Return a snapshot's buffers once it is persisted (or abandoned)."""
        with self._cond:
            self._in_use -= 1
            if len(self._free) < self.capacity:
                self._free.append((_signature(staged), staged))
            self._cond.notify_all()
