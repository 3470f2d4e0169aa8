"""A checkpoint's non-tensor values: how they are stored, and how restore reads them back without
running code.

DCP stores every non-tensor leaf of a state dict (bytes, numbers, strings, an optimizer's
`param_groups` entries) as an object entry: `torch.save` on write, and on read
`DefaultLoadPlanner.load_bytes` calls `torch.load(value, weights_only=False)`
(torch/distributed/checkpoint/default_planner.py), a full unpickle that runs whatever a crafted
shard asks for. Tensor entries are read with `torch.load(..., weights_only=True)`
(filesystem.py `read_data`) and are safe. `SafeLoadPlanner` is DCP's default planner with
`load_bytes` replaced: object entries go through torch's weights-only unpickler, which admits
primitives, containers, tensors and dtypes and refuses any other global (an explicit
`weights_only=True` is not overridden by `TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD`).

On top of that, the values runwright itself captures are stored as bytes in one of two forms:

- JSON (UTF-8) where JSON is exact: `progress` ({step, counters}: ints) and the data loader's
  cursor (JSON-serialisable by contract).
- A pickle where it is not (Python's `random.getstate()` tuple of ints, NumPy's `get_state()`
  tuple holding an ndarray, scheduler, grad scaler and user `Stateful` state dicts, which may hold
  tuples, floats that must stay bit-exact, and `None`), read back by `_Unpickler`: builtins
  containers and scalars, `collections.OrderedDict`, and NumPy's ndarray/scalar/dtype
  reconstruction, nothing else. Checkpoints written before this module (every value pickled) read
  through the same unpickler. A pickle starts with the PROTO opcode (0x80), which JSON text never
  does, so `decode` tells the two forms apart without a tag.

Every pickle written is decoded once at save time, so state restore would refuse (a scheduler
holding a custom object, say) fails the save that captures it, not the restore that needs it.
"""

import collections
import io
import json
import pickle
from typing import Any

import numpy as np
import torch
from torch.distributed.checkpoint import DefaultLoadPlanner
from torch.distributed.checkpoint._traverse import set_element
from torch.distributed.checkpoint.planner import ReadItem

from runwright.ckpt.errors import CheckpointCorruptError, CheckpointError

_PICKLE_PROTO = 0x80
"""First byte of every pickle of protocol 2 or later (pickle.PROTO)."""


def _numpy_reconstructors() -> dict[tuple[str, str], Any]:
    """NumPy's own pickle reconstructors, under every module path a NumPy 1.x or 2.x pickle
    names them by (`numpy.core` became `numpy._core` in 2.0). Taken from `__reduce_ex__` so the
    functions are the ones this NumPy uses; they build an array or scalar from a dtype and raw
    bytes and call nothing else."""
    reconstruct = np.ndarray(0).__reduce__()[0]
    frombuffer = np.zeros(1).__reduce_ex__(5)[0]
    scalar = np.float64(0).__reduce__()[0]
    found: dict[tuple[str, str], Any] = {
        ("numpy", "ndarray"): np.ndarray,
        ("numpy", "dtype"): np.dtype,
    }
    for package in ("numpy.core", "numpy._core"):
        found[(f"{package}.multiarray", "_reconstruct")] = reconstruct
        found[(f"{package}.multiarray", "scalar")] = scalar
        found[(f"{package}.numeric", "_frombuffer")] = frombuffer
    return found


_ALLOWED: dict[tuple[str, str], Any] = {
    ("builtins", "complex"): complex,
    ("builtins", "set"): set,
    ("builtins", "frozenset"): frozenset,
    ("builtins", "bytearray"): bytearray,
    ("collections", "OrderedDict"): collections.OrderedDict,
    **_numpy_reconstructors(),
}
"""Every global a checkpoint value's pickle may name. Lists, tuples, dicts, str, bytes, int,
float, bool and None need no global (they are pickle opcodes)."""


class _Refused(pickle.UnpicklingError):
    """A pickle named a global outside `_ALLOWED`."""


class _Unpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> Any:
        found = _ALLOWED.get((module, name))
        if found is None:
            raise _Refused(f"{module}.{name}")
        return found


def load_pickle(raw: bytes) -> Any:
    """Unpickle `raw` admitting only `_ALLOWED`; raises `_Refused` (a pickle.UnpicklingError)
    before a refused global is looked up, or what a malformed pickle raises."""
    return _Unpickler(io.BytesIO(raw)).load()


def encode_pickle(key: str, value: Any) -> bytes:
    """`value` pickled; raises CheckpointError naming `key` when restore could not read it back."""
    raw = pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)
    try:
        load_pickle(raw)
    except _Refused as exc:
        raise CheckpointError(
            f"checkpoint value {key!r} holds a {exc}, which restore does not load (it admits "
            "builtins containers and scalars and NumPy arrays). Make that object's state_dict() "
            "return plain values."
        ) from None
    return raw


def encode_json(value: Any) -> bytes:
    """`value` as UTF-8 JSON, keys sorted (for values JSON holds exactly)."""
    return json.dumps(value, sort_keys=True).encode()


def decode(key: str, raw: Any) -> Any:
    """A stored value back: JSON text, or a pickle read with the allow-list. Anything else that
    is not bytes (a nested state dict with tensors) is returned as DCP loaded it. Raises
    CheckpointCorruptError naming `key` for a pickle that names a refused global (code) or does
    not decode."""
    if not isinstance(raw, bytes | bytearray):
        return raw
    try:
        if raw[:1] == bytes([_PICKLE_PROTO]):
            return load_pickle(bytes(raw))
        return json.loads(raw)
    except _Refused as exc:
        raise CheckpointCorruptError(
            f"checkpoint value {key!r} holds code: its pickle names {exc}, which no runwright "
            "checkpoint holds. It was not loaded; the checkpoint was crafted or written by "
            "another program. Restore from an older checkpoint or move this one aside."
        ) from None
    except Exception as exc:  # a malformed pickle or JSON raises any of a dozen types
        raise CheckpointCorruptError(
            f"checkpoint value {key!r} does not decode ({type(exc).__name__}: {exc}); the "
            "checkpoint is damaged. Restore from an older checkpoint or move this one aside."
        ) from None


class SafeLoadPlanner(DefaultLoadPlanner):
    """DCP's default load planner, except that object entries are read with torch's weights-only
    unpickler instead of a full unpickle."""

    def load_bytes(self, read_item: ReadItem, value: io.BytesIO) -> None:
        fqn = read_item.dest_index.fqn
        try:
            loaded = torch.load(value, weights_only=True)
        except pickle.UnpicklingError as exc:
            raise CheckpointCorruptError(
                f"checkpoint entry {fqn!r} holds code: torch's weights-only loader refused it "
                f"({str(exc).splitlines()[0]}). It was not loaded; the checkpoint was crafted or "
                "written by another program. Restore from an older checkpoint or move this one "
                "aside."
            ) from None
        except Exception as exc:  # a damaged torch.save archive raises any of several types
            raise CheckpointCorruptError(
                f"checkpoint entry {fqn!r} does not load ({type(exc).__name__}: {exc}); the "
                "checkpoint is damaged. Restore from an older checkpoint or move this one aside."
            ) from None
        if self.flatten_state_dict:
            set_element(self.original_state_dict, self.mappings[fqn], loaded)
        else:
            self.state_dict[fqn] = loaded
