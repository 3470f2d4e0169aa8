"""The reference training loop. Reads top to bottom like nanoGPT; uses only public runwright APIs:
the run context and step loop (runwright.runtime), the loader (runwright.data) and the
checkpointer (runwright.ckpt). The library reports what recovery and the report read (the loader
its dataset and mixture, the checkpointer the restored step, the context's close the final
parameter digests), exactly as for any script; the one event sent here is EVALUATED, the loss on
the dataset's eval split every `training.eval_every_steps` (train/evaluate.py).

    torchrun --nproc-per-node 2 -m runwright.train            # under runwright submit
    torchrun --nproc-per-node 2 -m runwright.train --spec S   # plain torchrun
"""

import argparse
import math
import sys
import time

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.distributed.elastic.multiprocessing.errors import record

import runwright
from runwright.ckpt import HealthVerdict, SaveStatus, TrainState
from runwright.data import DataLoader
from runwright.events import EventType
from runwright.runtime import IntegrityCheck, NonFiniteError, SourceLoss
from runwright.train.captures import capture_step
from runwright.train.evaluate import eval_rows, evaluate
from runwright.train.faults import BitFlip, ShardDamage
from runwright.train.layouts import apply_layout
from runwright.train.model import GPT
from runwright.train.precision import Precision, PrecisionRecord
from runwright.train.probe import restore_probe
from runwright.train.schedule import lr_multiplier
from runwright.train.spike import SpikeGuard, add_spike_arguments


@record
def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="runwright reference GPT trainer")
    parser.add_argument("--spec", help="job spec file (plain torchrun; the controller passes it)")
    parser.add_argument("--step-sleep", type=float, default=0.0, help="pause after each step")
    # Fault injection for tests and drills: a straggler, as a slow device or a throttled host.
    parser.add_argument(
        "--slow-rank",
        type=int,
        default=None,
        help="fault injection: this rank spends --slow-seconds more in each step's forward, so "
        "its peers wait for it in the gradient all-reduce (a straggler)",
    )
    parser.add_argument(
        "--slow-seconds", type=float, default=0.0, help="the slow rank's extra seconds per step"
    )
    parser.add_argument(
        "--damage-shard",
        type=ShardDamage.parse,
        metavar="SHARD:HOW@STEP",
        help="fault injection: before step STEP takes its batch, every rank damages train shard "
        "SHARD (HOW: overwrite its first bytes in place, or remove its files); "
        "data.on_corrupt_shard decides what follows (train/faults.py)",
    )
    parser.add_argument(
        "--flip-bit",
        type=BitFlip.parse,
        metavar="PARAM:RANK@STEP",
        help="fault injection: after step STEP's update, rank RANK flips one bit of parameter "
        "PARAM (silent data corruption, in --fault-generation only; train/faults.py)",
    )
    # Fault injection for drills (docs/drill.md), off by default: each fires once, in generation
    # --fault-generation only, so the restarted generation replays the step as a run that never
    # failed would have trained it.
    parser.add_argument(
        "--nan-at-step",
        type=int,
        default=None,
        help="fault injection: --nan-rank's loss is NaN at this step (the step guard refuses it)",
    )
    parser.add_argument("--nan-rank", type=int, default=0, help="the rank whose loss is NaN")
    parser.add_argument(
        "--block-at-step",
        type=int,
        default=None,
        help="fault injection: at this step --block-rank enters an all-reduce its peers never "
        "join, and blocks there with its process and heartbeat alive (a hung collective)",
    )
    parser.add_argument("--block-rank", type=int, default=1, help="the rank that blocks")
    parser.add_argument(
        "--fault-generation",
        type=int,
        default=1,
        help="the generation in which --nan-at-step and --block-at-step fire",
    )
    add_spike_arguments(parser)
    args = parser.parse_args(argv)

    # -- who am I ----------------------------------------------------------------------------
    ctx = runwright.init(spec_path=args.spec)
    spec, plan = ctx.spec, ctx.plan
    if spec is None or plan is None:
        raise SystemExit("no job spec: run under `runwright submit` or pass --spec FILE")
    cuda = spec.resources.device_type == "cuda"
    device = torch.device("cuda", ctx.local_rank) if cuda else torch.device("cpu")
    if cuda:
        torch.cuda.set_device(device)
    dist.init_process_group("nccl" if cuda else "gloo")
    # Before any data or model work: every rank reaches every other, or the ranks that cannot
    # are named (a preflight check, issue 17).
    ctx.check_collectives()
    faulty = ctx.generation == args.fault_generation
    # Every rank creates the side group (new_group is collective); only --block-rank uses it.
    side = dist.new_group(backend="gloo") if args.block_at_step is not None else None
    if spec.reproducibility.level == "bitwise":
        torch.use_deterministic_algorithms(True)
    dp, micro = int(plan.dp.value), int(plan.micro_batch_size.value)
    accumulation = int(plan.grad_accumulation_steps.value)
    total_steps = int(plan.total_steps.value)
    # e.g. 16 samples / (dp 2) = 8 rows per rank = 2 micro-batches of 4

    # -- model over the ranks: ddp, fsdp2, tp or fsdp2 x tp (train/layouts.py) ----------------
    torch.manual_seed(spec.training.seed)
    model = GPT(spec.model, max_positions=spec.data.sequence_length).to(device)
    layout = apply_layout(model, spec, device, dp)  # the plan of this size (elastic runs)
    precision = Precision(spec.training.precision, device)
    guard = SpikeGuard(spec.training.loss_spike)

    # -- data: by dp rank, so the tp ranks of one dp group read the same batch ------------------
    loader = DataLoader(
        spec.data.dataset,
        spec.data,
        global_batch_samples=int(plan.global_batch_samples.value),
        dp_rank=layout.dp_rank,
        dp_size=dp,
        tokenizer_sha256=spec.tokenizer.hash,
        # checkpoint.resume: exact continues the sample sequence; coverage/distribution accept
        # a changed dataset or algorithm and only keep what was already consumed.
        resume="exact" if spec.checkpoint.resume == "exact" else "coverage",
        drift_window_steps=spec.observability.drift_window_steps,
        loss_length_buckets=(
            spec.observability.loss_length_buckets if spec.observability.loss_by_source else None
        ),
    )
    # The loader opened the dataset (a URL such as s3://... through its verified local cache).
    manifest = loader.dataset.manifest
    if manifest.tokenizer.vocab_size > spec.model.vocab_size:
        raise SystemExit(
            f"model.vocab_size={spec.model.vocab_size} is smaller than the "
            f"tokenizer's {manifest.tokenizer.vocab_size} ids; raise it"
        )

    # -- optimizer ----------------------------------------------------------------------------
    opt = spec.training.optimizer
    optimizer = torch.optim.AdamW(
        model.parameters(), lr=opt.lr, betas=opt.betas, weight_decay=opt.weight_decay
    )
    scheduler = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda s: lr_multiplier(s, total_steps, spec.training.schedule)
    )
    counters = {"tokens_seen": 0, "loss_tokens_seen": 0}

    # -- resume from the newest committed, verified checkpoint --------------------------------
    # The restore probe (train/probe.py): a fixed batch's loss, recorded at every save and
    # checked after the restore below, before the first step.
    probe = restore_probe(model, str(loader.dataset.folder), spec.data.sequence_length, device)
    ckpt = ctx.checkpointer(
        data_manifest_id=manifest.dataset_id,
        tokenizer_hash=manifest.tokenizer.sha256,
        restore_probe=probe,
    )
    state = TrainState(
        model=model, optimizer=optimizer, scheduler=scheduler, scaler=precision.scaler,
        data_loader=loader, counters=counters,
        extra={"precision": PrecisionRecord(precision.name), "loss_spike": guard},
    )  # fmt: skip
    restored = ckpt.restore(state)
    step = restored.step if restored else 0
    # Silent-data-corruption checks (training.integrity): replica digests, recomputation, bounds.
    integrity = IntegrityCheck(ctx, model=model, optimizer=optimizer, checkpointer=ckpt,
                               replica_ranks=layout.replica_ranks, start_step=step,
                               end_step=total_steps)  # fmt: skip

    # The loss by source and by length bucket (runtime/source_loss.py): reduced on the device
    # each micro-batch, read once with the step's report.
    breakdown = SourceLoss(loader.loss_groups) if loader.loss_groups is not None else None
    fields = ("tokens", "labels", "loss_mask", "position_ids", "segment_ids")
    fields += ("loss_group",) if breakdown is not None else ()

    def micro_loss(
        part: dict[str, torch.Tensor], breakdown: SourceLoss | None = None
    ) -> torch.Tensor:
        """One micro-batch's share of the global loss (also the recomputation check's); with
        `breakdown`, its per-token loss is counted by source and length bucket too."""
        with precision.autocast():
            logits = layout.model(part["tokens"], part["position_ids"], part["segment_ids"])
            ce = F.cross_entropy(
                logits.flatten(0, 1).float(), part["labels"].flatten(), reduction="none"
            )
            masked = ce * part["loss_mask"].flatten()
            if breakdown is not None:
                breakdown.add(masked, part)
            # DDP and FSDP2 average gradients over dp ranks; multiply by dp to undo it.
            return masked.sum() * dp / global_loss_tokens

    # -- the eval set (train/evaluate.py): the same rows at every evaluation ------------------
    every = spec.training.eval_every_steps
    eval_set = (
        eval_rows(
            str(loader.dataset.folder),
            spec.data.sequence_length,
            spec.training.eval_sequences,
            layout.dp_rank,
            dp,
        )
        if every
        else None
    )
    if every and eval_set is None and ctx.rank == 0:
        print("training.eval_every_steps is set but the dataset has no eval split: no evaluation")

    # -- train ---------------------------------------------------------------------------------
    batches = iter(loader)
    saved_step = step
    loop = ctx.step_loop(step, total_steps)
    for step in loop:
        damage = args.damage_shard
        if damage is not None and step == damage.step:
            damage.apply(loader.dataset.folder)
            if ctx.rank == 0:
                ctx.report(EventType.FAULT_INJECTED, step=step, kind=f"shard_{damage.how}",
                           shard=damage.shard, rank=ctx.rank)  # fmt: skip
        before = loader.stats.input_wait_seconds_total
        with loop.marking("data_wait"):  # what a hang's dump says this rank is doing
            batch = next(batches)
        loop.add_phase_seconds("data_wait", loader.stats.input_wait_seconds_total - before)
        sample_range = [batch.first_sample, batch.end_sample]
        if ctx.should_skip(step):  # after a NaN: consume the batch, do not learn from it
            scheduler.step()
            loop.complete(step, skipped=True, samples=sample_range)
            continue
        blocked = faulty and step == args.block_at_step and ctx.rank == args.block_rank
        if side is not None and blocked:
            dist.all_reduce(torch.zeros(1), group=side)  # never joined: blocks for good
        with loop.phase("h2d"):
            rows = {k: getattr(batch, k).to(device) for k in fields}
        # Normalise by the loss tokens of the whole global batch, so the gradient is the same
        # whatever dp and the micro-batch split are: sum over ranks of (CE sum) / global count.
        local_loss_tokens = rows["loss_mask"].sum()
        global_loss_tokens = local_loss_tokens.clone()
        # Recorded (ctx.all_reduce): a hang in it names the rank that never entered it.
        ctx.all_reduce(global_loss_tokens, group=layout.dp_group, label="loss_tokens")
        layout.grad_sync_seconds = 0.0
        if ctx.rank == args.slow_rank:
            with loop.phase("forward"):  # its peers spend this in grad_sync, waiting for it
                time.sleep(args.slow_seconds)
        loss_sum = torch.zeros((), device=device)
        for i in range(accumulation):
            part = {k: v[i * micro : (i + 1) * micro] for k, v in rows.items()}
            # Gradients accumulate locally and sync once, on the last micro-batch.
            with layout.accumulating(last=i == accumulation - 1):
                with loop.phase("forward"):
                    loss = micro_loss(part, breakdown)
                    if i == 0:
                        first = (part, loss.detach())
                    if faulty and step == args.spike_at_step:
                        loss = loss * args.spike_factor  # fault injection: a loss spike
                with loop.phase("backward"):
                    precision.backward(loss)
            loss_sum += loss.detach() / dp
        loop.add_phase_seconds("grad_sync", layout.grad_sync_seconds)
        if breakdown is not None:
            breakdown.stage()  # queued before the loss is read, so the report's read is free
        integrity.recompute(step, micro_loss, *first)
        if faulty and step == args.nan_at_step and ctx.rank == args.nan_rank:
            loss_sum = loss_sum * float("nan")  # the all-reduce spreads it: every rank refuses
        ctx.all_reduce(loss_sum, label="loss")
        loss_sum /= layout.tp  # every tp rank of a dp group computed the same loss
        precision.unscale(optimizer)
        grad_norm = layout.clip_grad_norm(list(model.parameters()), opt.grad_clip_norm or math.inf)
        # An fp16 overflow is the scaler's to handle (it drops the step and lowers its scale).
        overflowed = precision.scaler is not None and not math.isfinite(float(grad_norm))
        trip = {"model": model, "batch": batch, "dataset_id": manifest.dataset_id,
                "dp_rank": layout.dp_rank, "lr": scheduler.get_last_lr()[0],
                "precision": precision.name, "loss": loss_sum, "grad_norm": grad_norm}  # fmt: skip
        try:
            loop.guard(step, loss=loss_sum, grad_norm=None if overflowed else grad_norm)
        except NonFiniteError:
            capture_step(ctx, step, "nan_inf", **trip)  # the step, for the bundle
            raise
        loss_value = float(loss_sum)
        integrity.bounds(step, loss_value, None if overflowed else grad_norm)
        mean = guard.spiked(loss_value)
        if mean is not None:  # the loss-spike guard: this step's update is not applied
            capture_step(ctx, step, "loss_spike", window_mean=mean, **trip)
            guard.refuse(ctx, step, loss_value, mean)
            optimizer.zero_grad(set_to_none=True)
            scheduler.step()
            loop.complete(step, skipped=True, loss=loss_value, samples=sample_range,
                          **(breakdown.flush() if breakdown is not None else {}))  # fmt: skip
            continue
        guard.accept(loss_value)
        with loop.phase("optimizer"):
            precision.step(optimizer)
            optimizer.zero_grad(set_to_none=True)
            scheduler.step()
        flip = args.flip_bit
        if faulty and flip is not None and step == flip.step and ctx.rank == flip.rank:
            flip.apply(model)  # fault injection: one replica's parameter silently differs
        integrity.check(step)  # a failure stops the group here, before the step is reported
        counters["tokens_seen"] += batch.device_tokens
        counters["loss_tokens_seen"] += batch.loss_tokens
        # Report the step before saving it: a kill between a save's commit and the report would
        # leave a checkpoint of step N whose sample range no event records, and the run resumes
        # after N (the evidence chain would lose step N). Reported first, a kill before the
        # commit only replays it. The save's stall is counted in the next step (steploop.py).
        loop.complete(
            step,
            loss=loss_sum,
            grad_norm=grad_norm,
            lr=scheduler.get_last_lr()[0],
            device_tokens=batch.device_tokens,
            padded_tokens=batch.padded_tokens,
            loss_tokens=batch.loss_tokens,
            samples=sample_range,
            **(breakdown.flush() if breakdown is not None else {}),
        )
        with loop.phase("checkpoint_stall"):
            # The guard passed for this step (finite loss and gradient norm): a healthy point.
            saved = ckpt.maybe_save(step, state, loss=float(loss_sum), health=HealthVerdict.HEALTHY)
            # A save the fence refused (a cancel handed over a new generation while it ran) is
            # no save: the stop below saves this step again under the generation handed over.
            if saved is not None and saved.status in (SaveStatus.COMMITTED, SaveStatus.QUEUED):
                saved_step = step
        if eval_set is not None and every and step % every == 0:
            eval_loss, predicted = evaluate(model, eval_set, micro, device, layout.dp_group)
            if ctx.rank == 0:
                bound = saved.checkpoint_id if saved is not None and saved_step == step else None
                ctx.report(
                    EventType.EVALUATED,
                    key=f"eval-{step}",
                    step=step,
                    checkpoint_id=bound,
                    eval_loss=eval_loss,
                    tokens=predicted,
                    sequences=spec.training.eval_sequences,
                )
        if args.step_sleep:
            time.sleep(args.step_sleep)

    # -- finish: save at the stop step (or the last one); the context's close reports the rest --
    if saved_step != step:
        if ctx.save_forced_at_stop:
            # An operator's stop asks for a save whatever checkpoint.save_on_stop says
            # (control/operator.py); every rank agreed on the same stop.
            ckpt.save(step, state)
        else:
            ckpt.maybe_save(step, state, stopping=True)
    ckpt.close()
    loop.close()
    loader.close()
    ctx.close()
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
