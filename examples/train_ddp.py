"""A user's own DDP training script joined to runwright (the README's integration, whole).

runwright submit examples/train_ddp.yaml      # under the control plane
torchrun --nproc-per-node 2 examples/train_ddp.py --spec examples/train_ddp.yaml
"""

import argparse

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel

import runwright
from runwright.ckpt import TrainState
from runwright.data import DataLoader

parser = argparse.ArgumentParser()
parser.add_argument("--spec", help="the job spec under plain torchrun (the controller passes it)")
ctx = runwright.init(spec_path=parser.parse_args().spec)
spec, plan = ctx.spec, ctx.plan  # the submitted spec and what the platform derived from it
dist.init_process_group("gloo")
torch.manual_seed(spec.training.seed)
vocab = spec.model.vocab_size
model = torch.nn.Sequential(torch.nn.Embedding(vocab, 32), torch.nn.Linear(32, vocab))
ddp = DistributedDataParallel(model)
optimizer = torch.optim.AdamW(model.parameters(), lr=spec.training.optimizer.lr)
loader = DataLoader(  # reports the dataset it reads and the mixture it drew
    spec.data.dataset,
    spec.data,
    global_batch_samples=int(plan.global_batch_samples.value),
    dp_rank=ctx.rank,
    dp_size=ctx.world_size,
)
state = TrainState(model=model, optimizer=optimizer, data_loader=loader)
ckpt = ctx.checkpointer()  # fenced, verified checkpoints of this run
restored = ckpt.restore(state)  # the newest committed one, data cursor included (or a fresh start)
batches = iter(loader)
for step in range((restored.step if restored else 0) + 1, int(plan.total_steps.value) + 1):
    batch = next(batches)
    mask = batch.loss_mask.flatten().float()
    ce = F.cross_entropy(ddp(batch.tokens).flatten(0, 1), batch.labels.flatten(), reduction="none")
    loss = (ce * mask).sum() / mask.sum().clamp(min=1)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    try:
        ctx.step_healthy(step, loss=loss.item())  # reported; a stop asked for ends the run here
    except runwright.StopRun as stop:  # cancel, SIGTERM, Ctrl-C: every rank stops after `step`
        ckpt.maybe_save(step, state, stopping=stop.request.save)  # so it resumes from here
        ckpt.close()
        raise  # ends the process quietly (exit 0, or 128 + the signal)
    ckpt.maybe_save(step, state)
ckpt.close()
ctx.close()  # (also at exit) the final parameter digests, for `runwright compare`
dist.destroy_process_group()
