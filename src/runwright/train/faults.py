"""Fault injection for tests and drills: damage a train shard at a chosen step, as a failing disk
or a careless person might while the run trains; flip a bit of one replica's parameter, as a
failing memory cell or ALU might (silent data corruption).

    --damage-shard SHARD:HOW@STEP     e.g. prose-train-00000:overwrite@5
    --flip-bit PARAM:RANK@STEP        e.g. blocks.0.fc.weight:1@5

Before step STEP takes its batch, every rank damages the shard's files in the dataset folder the
loader reads (each rank its node's copy; on a shared folder the second rank's damage is the
same): `overwrite` rewrites the first bytes of `<SHARD>.bin` in place (the loader's memory map
sees them at once), `remove` deletes `<SHARD>.bin` and `<SHARD>.idx`. Every rank damages before
its own hand-out of that step, so the loader finds the damage at that step whichever rank's rows
read the shard, and a drill lands on the same step every time. What follows is
`data.on_corrupt_shard`'s (docs/data.md). Never used unless the flag is given.
"""

import argparse
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Literal

if TYPE_CHECKING:
    import torch

DAMAGE = re.compile(r"^(?P<shard>[\w.-]+):(?P<how>overwrite|remove)@(?P<step>\d+)$")


@dataclass(frozen=True)
class ShardDamage:
    shard: str
    how: Literal["overwrite", "remove"]
    step: int
    """The 1-based step (as STEP_HEALTHY numbers it) before whose batch the damage happens."""

    @classmethod
    def parse(cls, text: str) -> "ShardDamage":
        found = DAMAGE.match(text)
        if found is None:
            raise ValueError(
                f"--damage-shard {text!r}: expected SHARD:HOW@STEP with HOW overwrite or remove, "
                "e.g. prose-train-00000:overwrite@5"
            )
        how = "overwrite" if found["how"] == "overwrite" else "remove"
        return cls(found["shard"], how, int(found["step"]))

    def apply(self, folder: Path) -> None:
        """Damage the shard in `folder` (idempotent: a second rank's damage is the same)."""
        if self.how == "remove":
            for suffix in (".bin", ".idx"):
                (folder / f"{self.shard}{suffix}").unlink(missing_ok=True)
            return
        with open(folder / f"{self.shard}.bin", "r+b") as fh:
            fh.write(b"\xff" * 16)
            fh.flush()
            os.fsync(fh.fileno())


FLIP = re.compile(r"^(?P<param>[\w.]+):(?P<rank>\d+)@(?P<step>\d+)$")


@dataclass(frozen=True)
class BitFlip:
    """After step STEP's optimizer step, rank RANK flips the top mantissa bit of element 0 of
    parameter PARAM (a name of `model.named_parameters()`), in --fault-generation only: its
    replica now differs from the others' by one bit, the value by a factor between 2/3 and 3/2,
    and nothing but a corruption check (training.integrity, runtime/integrity.py) sees it."""

    param: str
    rank: int
    step: int

    @classmethod
    def parse(cls, text: str) -> "BitFlip":
        found = FLIP.match(text)
        if found is None:  # argparse shows an ArgumentTypeError's own words
            raise argparse.ArgumentTypeError(
                f"--flip-bit {text!r}: expected PARAM:RANK@STEP, e.g. blocks.0.fc.weight:1@5"
            )
        return cls(found["param"], int(found["rank"]), int(found["step"]))

    def apply(self, model: "torch.nn.Module") -> None:
        import torch

        params = dict(model.named_parameters())
        if self.param not in params:
            some = ", ".join(list(params)[:6])
            raise SystemExit(f"--flip-bit: no parameter {self.param!r}; the model has {some}, ...")
        flat = params[self.param].detach().reshape(-1)
        words = {2: torch.int16, 4: torch.int32, 8: torch.int64}[flat.element_size()]
        # The highest of the mantissa's bits: bf16 has 7, fp16 10, fp32 23, fp64 52.
        top_mantissa = {torch.bfloat16: 6, torch.float16: 9, torch.float32: 22}.get(flat.dtype, 51)
        flat.view(words)[0] ^= 1 << top_mantissa
