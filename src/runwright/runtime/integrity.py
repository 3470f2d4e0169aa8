"""Silent-data-corruption checks inside the training processes (`training.integrity`, seed 003:
recovery from silent corruption is possible only when an independent check finds it inside the
rollback window and a known-good checkpoint is still kept).

Three checks, each deciding the same way on every rank:

- replica digests, every `every_steps` steps after the optimizer step: each rank digests its
  parameters and optimizer state (runtime/digest.py) and one all-gather of 8 bytes per rank (plus
  two flags) brings every digest to every rank; within each replica group (the ranks that must
  hold the same state: every dp rank under DDP) the digests must be equal, and a strict majority
  names the disagreeing rank. Two replicas that differ cannot be told apart: both are named
  suspects, and the rollback to the last known-good checkpoint decides the state. With pure
  sharding (FSDP2 without a replica group, tensor parallel) no two ranks hold the same bytes:
  there is nothing to compare, and only the two checks below run.
- recomputation, at the same steps when `reproducibility.level: bitwise` (kernels are
  deterministic): the step's first micro-batch forward is recomputed before the optimizer step and
  its loss compared, bit for bit, with the training forward's: a transient fault in the compute
  itself. Its verdict travels in the same all-gather.
- invariants, every step: a finite loss or gradient norm above `max_loss` / `max_grad_norm` (the
  NaN guard already refuses non-finite ones, runtime/steploop.py), and every state tensor finite
  at each digest.

On a failure the group stops at this step boundary: queued saves finish, rank 0 marks every
checkpoint saved after the last passing check suspect (ckpt/suspect.py), reports SDC_DETECTED
with the suspect ranks and their hosts, and every rank raises `SilentDataCorruptionError` after a
barrier (so no rank's exit cuts rank 0's report short). Recovery classifies `sdc`, rolls back to
the known-good checkpoint, which retention kept (`Checkpointer.known_good_step`), and quarantines
the suspects' nodes (control/sdc.py).
"""

import math
import socket
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import torch
import torch.distributed as dist

from runwright.errors import RunwrightError
from runwright.events import EventType
from runwright.runtime.digest import Digest, digest, first_difference, state_tensors, vote

if TYPE_CHECKING:
    from runwright.ckpt import Checkpointer
    from runwright.runtime.context import RunContext
    from runwright.spec import IntegritySpec


class SilentDataCorruptionError(RunwrightError):
    """A corruption check failed; the step's state must not be trusted (failure class `sdc`)."""


def _bits_equal(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Bit for bit: -0.0 differs from 0.0 and a NaN equals only the same NaN payload."""
    a, b = a.detach().reshape(-1), b.detach().reshape(-1)
    if a.dtype != b.dtype or a.shape != b.shape:
        return False
    words = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}[a.element_size()]
    return torch.equal(a.view(words), b.view(words))


class IntegrityCheck:
    """The checks of one training process; call `recompute` before the optimizer step, then
    `bounds` and `check` after it, on every rank at every step."""

    def __init__(
        self,
        ctx: "RunContext",
        *,
        model: torch.nn.Module,
        optimizer: torch.optim.Optimizer | None,
        replica_ranks: tuple[int, ...],
        checkpointer: "Checkpointer | None" = None,
        start_step: int = 0,
        end_step: int | None = None,
        spec: "IntegritySpec | None" = None,
    ) -> None:
        """`replica_ranks`: the global ranks holding the same state as this one, this one
        included (every dp rank under DDP); () when no rank has a replica (pure sharding).
        `end_step`: the run's last step (a check due after it will never run)."""
        if spec is None:
            if ctx.spec is None:
                raise RunwrightError("IntegrityCheck needs a job spec (training.integrity)")
            spec = ctx.spec.training.integrity
        self.ctx, self.spec = ctx, spec
        self.model, self.optimizer = model, optimizer
        self.replica_ranks = tuple(replica_ranks)
        self.checkpointer = checkpointer
        self.bitwise = ctx.spec is not None and ctx.spec.reproducibility.level == "bitwise"
        self.distributed = dist.is_available() and dist.is_initialized()
        self.end_step = end_step
        self.known_good_step = start_step
        """The last step a check passed at; the restored state counts (every rank loaded the
        same verified bytes)."""
        self._keep_known_good(start_step)
        self.check_seconds_total = 0.0
        self.checks = 0
        self._recompute_failure: str | None = None
        hosts: list[str | None] = [None] * ctx.world_size
        if self.distributed and ctx.world_size > 1:
            dist.all_gather_object(hosts, socket.gethostname())
        else:
            hosts = [socket.gethostname()]
        self.hosts = hosts
        self.device = next((p.device for p in model.parameters()), torch.device("cpu"))
        alone = ctx.world_size > 1 and len(self.replica_ranks) < 2
        if spec.every_steps and alone and ctx.rank == 0:
            print(
                "training.integrity: no replica group (every rank holds its own shard): "
                "nothing to compare, so the checks are recomputation and invariants only"
            )

    def due(self, step: int) -> bool:
        return bool(self.spec.every_steps) and step % self.spec.every_steps == 0

    def recompute(
        self,
        step: int,
        forward: Callable[[Any], torch.Tensor],
        batch: Any,
        trained: torch.Tensor,
    ) -> None:
        """At a due step in bitwise mode: `forward(batch)` recomputes, without gradients and
        before the optimizer step, what the training forward returned as `trained`."""
        if not (self.due(step) and self.bitwise and self.spec.recompute):
            return
        with torch.no_grad():
            again = forward(batch)
        if not _bits_equal(again, trained):
            self._recompute_failure = (
                f"rank {self.ctx.rank} recomputed its first micro-batch's loss as "
                f"{float(again)!r}, the training forward gave {float(trained)!r}"
            )

    def bounds(self, step: int, loss: float, grad_norm: Any | None) -> None:
        """The invariants of every step, on the global (all-reduced) values: every rank decides
        the same. Non-finite values are the NaN guard's. `grad_norm` (a float or a scalar tensor)
        is read only when there is a bound on it."""
        for what, value, bound in (
            ("loss", loss, self.spec.max_loss),
            ("grad_norm", grad_norm, self.spec.max_grad_norm),
        ):
            if bound is None or value is None:
                continue
            number = float(value)
            if math.isfinite(number) and number > bound:
                self._detect(
                    step,
                    "invariant",
                    f"global {what} {number:.6g} is above training.integrity.max_{what} {bound:g}",
                    suspects=(),
                )

    def check(self, step: int) -> None:
        """At a due step, after the optimizer step: digest, gather, vote (a collective: call it
        on every rank)."""
        if not self.due(step):
            return
        started = time.perf_counter()
        mine = digest(state_tensors(self.model, self.optimizer))
        recomputed_ok = self._recompute_failure is None
        local = torch.tensor(
            [mine.value, int(recomputed_ok), int(not mine.nonfinite)],
            dtype=torch.int64,
            device=self.device,
        )
        rows = self._gather(local)
        digests = {rank: int(row[0]) for rank, row in enumerate(rows)}
        self.checks += 1
        self.check_seconds_total += time.perf_counter() - started
        bad_recompute = tuple(r for r, row in enumerate(rows) if not int(row[1]))
        nonfinite = tuple(r for r, row in enumerate(rows) if not int(row[2]))
        replica = vote({r: digests[r] for r in self.replica_ranks}) if self.replica_ranks else None
        if nonfinite:
            names = f" ({', '.join(mine.nonfinite[:3])})" if mine.nonfinite else ""
            self._detect(
                step,
                "invariant",
                f"ranks {','.join(map(str, nonfinite))} hold a non-finite parameter or optimizer "
                f"state{names}",
                suspects=nonfinite,
                tensors=mine.nonfinite[:3],
            )
        if bad_recompute:
            detail = self._recompute_failure or "its recomputation differed"
            self._detect(
                step,
                "recompute",
                f"ranks {','.join(map(str, bad_recompute))}: the same micro-batch recomputed "
                f"differs bit for bit (e.g. {detail})"
                if self.ctx.rank in bad_recompute
                else f"ranks {','.join(map(str, bad_recompute))}: the same micro-batch "
                "recomputed differs bit for bit",
                suspects=bad_recompute,
            )
        if replica is not None and not replica.agreed:
            tensors = self._differing_tensors(mine, replica.suspects, replica.majority)
            self._detect(
                step,
                "replica_digest",
                f"replica digests differ: {replica.words()}"
                + (f"; first differing tensor: {tensors[0]}" if tensors else ""),
                suspects=replica.suspects,
                tensors=tensors,
            )
        self.known_good_step = step
        self._keep_known_good(step)

    def _keep_known_good(self, step: int) -> None:
        """Have retention keep the newest checkpoint at or before `step`, the rollback target,
        while a check can still find something: not with the checks off, nor once the next
        due step lies past the run's end (retention then works as it would without checks)."""
        if self.checkpointer is None:
            return
        every = self.spec.every_steps
        coming = every and (self.end_step is None or (step // every + 1) * every <= self.end_step)
        self.checkpointer.known_good_step = step if coming else None

    def _gather(self, local: torch.Tensor) -> list[torch.Tensor]:
        if not self.distributed or self.ctx.world_size == 1:
            return [local.cpu()]
        out = [torch.empty_like(local) for _ in range(self.ctx.world_size)]
        dist.all_gather(out, local)
        return [row.cpu() for row in out]

    def _differing_tensors(
        self, mine: Digest, suspects: tuple[int, ...], majority: tuple[int, ...]
    ) -> tuple[str, ...]:
        """Only after a failed vote: every rank's lanes (16 bytes per tensor) to name, for each
        suspect, the first tensor that differs from a majority rank's (or, without a majority,
        from another replica's)."""
        if not self.distributed or self.ctx.world_size == 1:
            return ()
        local = mine.lanes.to(self.device)
        tables = [torch.empty_like(local) for _ in range(self.ctx.world_size)]
        dist.all_gather(tables, local)
        found = []
        for suspect in suspects:
            reference = next((r for r in majority or self.replica_ranks if r != suspect), None)
            if reference is None:
                continue
            other = Digest(0, tables[suspect].cpu(), mine.names, ())
            name = first_difference(other, tables[reference].cpu())
            if name is not None and name not in found:
                found.append(name)
        return tuple(found)

    def _detect(
        self,
        step: int,
        kind: str,
        detail: str,
        *,
        suspects: tuple[int, ...],
        tensors: tuple[str, ...] = (),
    ) -> None:
        """Stop the group at this boundary (see the module doc); every rank calls it."""
        reason = f"silent data corruption ({kind}) at step {step}: {detail}"
        marked = (
            self.checkpointer.mark_suspect(self.known_good_step, reason)
            if self.checkpointer is not None
            else []
        )
        hosts = sorted({h for r in suspects if r < len(self.hosts) and (h := self.hosts[r])})
        if self.ctx.rank == 0:
            self.ctx.report(
                EventType.SDC_DETECTED,
                key=f"sdc-{step}",
                step=step,
                kind=kind,
                detail=detail,
                ranks=list(suspects),
                hosts=hosts,
                tensors=list(tensors),
                known_good_step=self.known_good_step,
                suspect_checkpoints=marked,
            )
        if self.distributed and self.ctx.world_size > 1:
            dist.barrier()  # rank 0's report is out before any rank's exit ends the group
        raise SilentDataCorruptionError(
            f"{reason}; checkpoints after step {self.known_good_step} are suspect and the run "
            "rolls back to the newest one at or before it"
        )
