"""Inside each training process: run context, channel to the controller, heartbeats.

`runtime/` never opens the store; it reports through the file channel that the controller
ingests (ARCHITECTURE.md, "Rules of the house"), in the messages of `runwright.protocol`.
The corruption checks (`IntegrityCheck`, runtime/integrity.py) and the loss by source
(`SourceLoss`, runtime/source_loss.py) need torch and are imported on first use
(runwright/lazy.py).
"""

from runwright.lazy import lazy_exports
from runwright.runtime.channel import ChannelWriter
from runwright.runtime.collective_hooks import (
    allreduce_bucket,
    record_ddp,
    record_fsdp,
    recorded,
)
from runwright.runtime.context import RunContext
from runwright.runtime.guard_capture import capture_guard_trip, input_summary
from runwright.runtime.startup import init
from runwright.runtime.steploop import LossSpikeError, NonFiniteError

_LAZY = {
    "IntegrityCheck": "integrity",
    "SilentDataCorruptionError": "integrity",
    "SourceLoss": "source_loss",
}
"""public name -> the submodule that defines it, imported on first use."""

__all__ = [
    "ChannelWriter",
    "IntegrityCheck",
    "LossSpikeError",
    "NonFiniteError",
    "RunContext",
    "SilentDataCorruptionError",
    "SourceLoss",
    "allreduce_bucket",
    "capture_guard_trip",
    "init",
    "input_summary",
    "record_ddp",
    "record_fsdp",
    "recorded",
]

__getattr__, __dir__ = lazy_exports(__name__, _LAZY)
