"""Silent-data-corruption checks (seed 003): ordinary checkpoints faithfully save a corrupted
state, so recovery is possible only when an independent check finds it inside the rollback window
and a known-good checkpoint is still kept (docs/trainer.md, "Silent data corruption checks")."""

from pydantic import Field, PositiveFloat, field_validator

from runwright.spec import limits
from runwright.spec.base import Section


class IntegritySpec(Section):
    """Every `every_steps` steps the data-parallel replicas compare digests of their parameters
    and optimizer state (they must be bitwise equal) and, at `reproducibility.level: bitwise`,
    one micro-batch is recomputed and compared bit for bit; every step the loss and the gradient
    norm are held to their bounds. A failed check stops the run (failure class `sdc`), marks the
    checkpoints since the last passing check suspect and rolls back to the known-good one."""

    every_steps: int = Field(default=100, le=limits.MAX_STEPS)
    """Steps between checks; 0 turns the replica and recomputation checks off. At 100 steps a
    check costs one read of the state and an 8-byte-per-rank all-gather (under 2 % of the step
    time: benchmarks/replica_digest.py)."""
    recompute: bool = True
    """At each check, at `reproducibility.level: bitwise`, recompute the step's first
    micro-batch forward and compare its loss with the training forward's, bit for bit."""
    max_loss: PositiveFloat | None = None
    """Every step: a (finite) global loss above this is a failed invariant; None: no bound."""
    max_grad_norm: PositiveFloat | None = None
    """Every step: a (finite) global gradient norm, before clipping, above this is a failed
    invariant; None: no bound (clipping is training.optimizer.grad_clip_norm's)."""

    @field_validator("every_steps")
    @classmethod
    def _off_or_positive(cls, every_steps: int) -> int:
        if every_steps < 0:
            raise ValueError(
                f"must be 0 (checks off) or a positive number of steps, e.g. 100; got {every_steps}"
            )
        return every_steps
