"""Inside each training process: run context, channel to the controller, heartbeats.

`runtime/` never opens the store; it reports through the file channel that the controller
ingests (ARCHITECTURE.md, "Rules of the house").
"""

from runwright.runtime.channel import ChannelMessage, ChannelReader, ChannelWriter
from runwright.runtime.context import RunContext, init
from runwright.runtime.rank_manifest import RankEntry, build_rank_manifest

__all__ = [
    "ChannelMessage",
    "ChannelReader",
    "ChannelWriter",
    "RankEntry",
    "RunContext",
    "build_rank_manifest",
    "init",
]
