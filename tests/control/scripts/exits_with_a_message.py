"""A rank that refuses to train the way a script's own check does: it prints why and exits 1
(`sys.exit("...")`), with no traceback and no torchrun error file; what it printed is the cause."""

import sys

import runwright

ctx = runwright.init()
ctx.step_healthy(1)
sys.exit(
    "model.vocab_size=2048 is smaller than the tokenizer's 4096 ids; raise it "
    f"(rank {ctx.rank} of {ctx.world_size})"
)
