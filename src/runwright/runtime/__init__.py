"""Inside each training process: run context, channel to the controller, heartbeats.

`runtime/` never opens the store; it reports through the file channel that the controller
ingests (ARCHITECTURE.md, "Rules of the house"), in the messages of `runwright.protocol`.
"""

from runwright.runtime.channel import ChannelWriter
from runwright.runtime.collective_hooks import (
    allreduce_bucket,
    record_ddp,
    record_fsdp,
    recorded,
)
from runwright.runtime.context import RunContext, init
from runwright.runtime.steploop import LossSpikeError, NonFiniteError

__all__ = [
    "ChannelWriter",
    "LossSpikeError",
    "NonFiniteError",
    "RunContext",
    "allreduce_bucket",
    "init",
    "record_ddp",
    "record_fsdp",
    "recorded",
]
