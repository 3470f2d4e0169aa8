"""Fault injection for tests and drills: damage a train shard at a chosen step, as a failing disk
or a careless person might while the run trains.

    --damage-shard SHARD:HOW@STEP     e.g. prose-train-00000:overwrite@5

Before step STEP takes its batch, every rank damages the shard's files in the dataset folder the
loader reads (each rank its node's copy; on a shared folder the second rank's damage is the
same): `overwrite` rewrites the first bytes of `<SHARD>.bin` in place (the loader's memory map
sees them at once), `remove` deletes `<SHARD>.bin` and `<SHARD>.idx`. Every rank damages before
its own hand-out of that step, so the loader finds the damage at that step whichever rank's rows
read the shard, and a drill lands on the same step every time. What follows is
`data.on_corrupt_shard`'s (docs/data.md). Never used unless the flag is given.
"""

import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

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
