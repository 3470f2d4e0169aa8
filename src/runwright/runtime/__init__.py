"""Inside each training process: run context, channel to the controller, heartbeats.

`runtime/` never opens the store; it reports through the file channel that the controller
ingests (ARCHITECTURE.md, "Rules of the house"), in the messages of `runwright.protocol`.
"""

from runwright.runtime.channel import ChannelWriter
from runwright.runtime.context import RunContext, init

__all__ = ["ChannelWriter", "RunContext", "init"]
