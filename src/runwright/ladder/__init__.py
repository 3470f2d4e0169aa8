"""The scale-up ladder (`runwright ladder`, docs/ladder.md): one spec run at one rank, one node,
two nodes and the target shape, each rung gated on the one before it."""
