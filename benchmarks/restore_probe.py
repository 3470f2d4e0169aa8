"""Restore probe cost (issue 24): one `ModelProbe.measure` (a forward of the probe batch without
gradient, plus every parameter's norm) of the reference GPT, which every save and every restore
of the reference trainer pays once, inside the save's stall (docs/ckpt.md, "Restore
validation").

    .venv/bin/python benchmarks/restore_probe.py [--rounds 5] [--threads 1] [--device cpu]

For each model size below, the median of `--rounds` measurements after one warm-up, on 4 rows
(train/probe.py's PROBE_ROWS) of the model's sequence length. Prints JSON.
"""

import argparse
import json
import statistics
import time

import torch
import torch.nn.functional as F

from runwright.ckpt import ModelProbe
from runwright.spec.workload import ModelSpec
from runwright.train.model import GPT
from runwright.train.probe import PROBE_ROWS

SIZES = [(1, 32, 32), (4, 256, 256), (8, 512, 512)]
"""(layers, width, sequence length): the test trainer's GPT, then two larger ones."""


def measure(layers: int, width: int, seq: int, rounds: int, device: torch.device) -> dict:
    torch.manual_seed(0)
    spec = ModelSpec(n_layers=layers, d_model=width, n_heads=4, vocab_size=512)
    model = GPT(spec, max_positions=seq).to(device)
    rows = torch.randint(0, 512, (PROBE_ROWS, seq + 1), device=device)
    tokens, labels = rows[:, :-1], rows[:, 1:]
    positions = torch.arange(seq, device=device).expand_as(tokens)
    segments = torch.ones_like(tokens)

    def loss() -> torch.Tensor:
        logits = model(tokens, positions, segments)
        return F.cross_entropy(logits.flatten(0, 1).float(), labels.flatten())

    probe = ModelProbe(model, loss)
    probe.measure()  # warm-up
    seconds = []
    for _ in range(rounds):
        if device.type == "cuda":
            torch.cuda.synchronize()
        started = time.perf_counter()
        probe.measure()
        seconds.append(time.perf_counter() - started)
    return {
        "layers": layers,
        "d_model": width,
        "sequence_length": seq,
        "parameters": sum(p.numel() for p in model.parameters()),
        "probe_tokens": PROBE_ROWS * seq,
        "median_seconds": statistics.median(seconds),
        "max_seconds": max(seconds),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--device", default="cpu")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    results = [measure(*size, args.rounds, device) for size in SIZES]
    print(json.dumps({"device": str(device), "threads": args.threads, "sizes": results}, indent=1))


if __name__ == "__main__":
    main()
